"""Opt-in counting of every copy numba.cuda makes in the process: :func:`count_all_transfers`.

smartarray counts the copies it makes. A program also copies through numba.cuda directly:
``cuda.to_device``, a device array's ``copy_to_host`` / ``copy_to_device``, the automatic
copies of ndarray kernel arguments, helpers such as ``numba.cuda.random``'s
``create_xoroshiro128p_states`` (which uploads the states it made on the host). Switched on,
this module wraps numba-cuda's chokepoints so that those copies are counted and traced too
(reason ``'numba <function>'``, array ``'numba.cuda'``):

- on a GPU, the three functions of ``numba.cuda.cudadrv.driver`` every device-array copy goes
  through: ``host_to_device``, ``device_to_host``, ``device_to_device`` (``devicearray.py``
  calls them through the module, so wrapping the module's names reaches every caller);
- on the simulator, its fake device array's ``copy_to_host`` / ``copy_to_device`` and its
  module-level ``to_device`` (which copies without them).

A copy smartarray makes itself is counted once: its memory layer marks its own copies
(:func:`smartarray.stats.own_copies_under_way`) and the wrappers let them through uncounted.

Not seen: copies made by other libraries (CuPy, PyTorch, cuda.core / cuda.bindings calls of
the driver), copies numba makes below these functions (``cuMemcpy`` issued by a kernel's
runtime), and device reads of mapped or managed host memory, which are not copies.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from .. import stats as _stats
from .._platform import cuda_simulator as _sim

__all__ = ["count_all_transfers"]

_lock = threading.Lock()
_originals: list[tuple[Any, str, Any]] = []  # (owner, name, original) of each wrapper


def _nbytes(ary: Any) -> int:
    size = getattr(ary, "alloc_size", None)
    return int(size if size is not None else getattr(ary, "nbytes", 0))


#: What a measure says of one call: its direction, bytes and the stream the caller passed.
Measured = tuple[str, int, Any]


def _counting(
    original: Callable[..., Any], name: str, measure: Callable[..., Measured | None]
) -> Callable[..., Any]:
    """``original``, counting each call that is not one of smartarray's own copies."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _stats.own_copies_under_way():
            return original(*args, **kwargs)
        with _stats.own_copy():  # a wrapped function it calls (to_device) counts nothing more
            result = original(*args, **kwargs)
        what = measure(*args, **kwargs)
        if what is not None and what[1] > 0:
            direction, nbytes, stream = what
            _stats.record(direction, nbytes, f"numba {name}", "numba.cuda", stream=stream)
        return result

    return wrapper


def _driver_copy(direction: str) -> Callable[..., Measured]:
    def measure(dst: Any, src: Any, size: int, stream: Any = 0) -> Measured:
        return direction, int(size), stream

    return measure


def _sim_copy_to_device(self: Any, ary: Any, stream: Any = 0) -> Measured:
    return ("d2d" if _sim.is_fake_device_array(ary) else "h2d"), _nbytes(self), stream


def _sim_copy_to_host(self: Any, ary: Any = None, stream: Any = 0) -> Measured:
    return "d2h", _nbytes(self), stream


def _sim_to_device(ary: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
    # With ``to``, the simulator copies through ``to.copy_to_device`` (counted there).
    return None if to is not None else ("h2d", _nbytes(ary), stream)


def _targets() -> list[tuple[Any, str, Callable[..., Any]]]:
    """(owner, attribute, measure) of numba-cuda's copy chokepoints on the target in use."""
    from numba import cuda

    if _sim.SIMULATOR:  # strict mode's device surface, when on, is patched onto the same names
        fake_array, devicearray = _sim.device_array_copy_methods()
        return [
            (fake_array, "copy_to_device", _sim_copy_to_device),
            (fake_array, "copy_to_host", _sim_copy_to_host),
            (devicearray, "to_device", _sim_to_device),
            (cuda, "to_device", _sim_to_device),  # numba.cuda's name for it, bound at import
        ]
    from numba.cuda.cudadrv import driver

    return [
        (driver, "host_to_device", _driver_copy("h2d")),
        (driver, "device_to_host", _driver_copy("d2h")),
        (driver, "device_to_device", _driver_copy("d2d")),
    ]


def count_all_transfers(enabled: bool = True) -> bool:
    """Count and trace every copy numba.cuda makes in this process, not only smartarray's.

    With it on, :func:`~smartarray.stats` and :func:`~smartarray.trace` also see the copies a
    program makes through numba.cuda directly: ``cuda.to_device``, ``copy_to_host``,
    ``DeviceNDArray.copy_to_device``, numba's automatic copies of ndarray kernel arguments, and
    helpers such as ``numba.cuda.random.create_xoroshiro128p_states``. Their events have the
    reason ``'numba <function>'`` and the array ``'numba.cuda'``. smartarray's own copies are
    still counted once. Off by default: it wraps numba-cuda's copy functions.

    It cannot see copies made by other libraries (CuPy, PyTorch, cuda.core or cuda.bindings
    calls of the driver), nor device reads of mapped or managed memory (not copies).

    Parameters
    ----------
    enabled : bool, optional
        Switch counting of numba's copies on (default) or off.

    Returns
    -------
    bool
        Whether it was on before the call.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> from numba import cuda
    >>> was_on = sa.count_all_transfers()
    >>> with sa.trace() as t:
    ...     d = cuda.to_device(np.zeros(4))   # numba's own upload: counted now
    >>> [(e.direction, e.nbytes, e.array) for e in t.events]
    [('h2d', 32, 'numba.cuda')]
    >>> sa.count_all_transfers(was_on)
    True
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    with _lock:
        was_on = bool(_originals)
        if enabled and not was_on:
            for owner, name, measure in _targets():
                original = getattr(owner, name)
                setattr(owner, name, _counting(original, name, measure))
                _originals.append((owner, name, original))
        elif not enabled and was_on:
            while _originals:
                owner, name, original = _originals.pop()
                setattr(owner, name, original)
        _stats.count_numba_copies(enabled)
    return was_on
