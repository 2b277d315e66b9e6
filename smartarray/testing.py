"""Strict mode: test data movement in CI without a GPU.

Strict mode makes numba's CUDA simulator behave like a GPU where data-movement bugs hide:
kernels and copies on a stream are queued and run only when the host waits for them, in a
seeded adversarial order; device arrays have a real ``DeviceNDArray``'s surface; device memory is
finite; a kernel's exception reaches the host only with ``debug=True``; and a kernel argument
that a GPU would crash on (misaligned, or outside every live allocation) is an error naming the
kernel and the argument. It covers numba's own objects too (``cuda.device_array``,
``cuda.stream()``, ``@cuda.jit`` launches). See the "Testing without a GPU" docs page.

Turn it on for a whole process with the environment variable ``SMARTARRAY_STRICT=1`` (read when
smartarray is imported, which then selects the simulator; ``SMARTARRAY_STRICT_SEED`` picks the
interleaving), or within a process with :func:`strict`.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from typing import Any

from ._platform import environment as _environment
from ._strict import disable as _disable
from ._strict import enable as _enable
from ._strict.launch import StrictModeError
from ._strict.state import StrictState
from ._strict.state import get as _get

__all__ = ["StrictModeError", "StrictState", "is_strict", "strict", "strict_state"]


def _env_seed() -> int:
    return _environment.integer("SMARTARRAY_STRICT_SEED", 0)


def _integer(name: str, value: Any, accepted: str) -> int:
    """``value`` as an int; a bool, a float or a string is refused (naming ``name``)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be {accepted}, got a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {accepted}, got {type(value).__name__}") from None


@contextlib.contextmanager
def strict(
    seed: int | None = None,
    device_memory: int | None = None,
    per_thread_default_stream: bool = False,
) -> Iterator[StrictState]:
    """Run the block in strict mode (on numba's CUDA simulator).

    Parameters
    ----------
    seed : int, optional
        Chooses the order in which work queued on different streams runs (among the orders CUDA
        allows). Default: ``SMARTARRAY_STRICT_SEED`` or 0. The same seed gives the same order.
    device_memory : int, optional
        Size of the simulated device in bytes (default 16 GiB): an allocation past it raises
        numba's ``CudaAPIError`` (``CUDA_ERROR_OUT_OF_MEMORY``).
    per_thread_default_stream : bool, optional
        Model stream 0 as the per-thread default stream (numba's
        ``CUDA_PER_THREAD_DEFAULT_STREAM=1``): the calling thread's own stream, one per host
        thread, not ordered with the others. Default: the legacy default stream, which waits
        for every blocking stream and they for it.

    Yields
    ------
    StrictState
        Counters of the session: ``host_syncs`` (times the host waited for device work),
        ``launches``, ``device_used``, ``log`` (device work in the order it ran), ``pending()``.

    Raises
    ------
    RuntimeError
        numba.cuda is the real CUDA target, not the simulator.
    TypeError
        ``seed`` or ``device_memory`` is not an int (or None), ``per_thread_default_stream`` not
        a bool (strict mode stays as it was).
    ValueError
        ``device_memory`` is negative.

    Notes
    -----
    On exit the work still queued runs, then the previous mode comes back. Device arrays and
    streams should be made inside the block: memory allocated before it is not a live device
    allocation for the crash checks.

    Examples
    --------
    >>> import numpy as np
    >>> from numba import cuda
    >>> from smartarray.testing import strict
    >>> with strict(seed=1) as state:
    ...     s = cuda.stream()
    ...     d = cuda.to_device(np.zeros(4), stream=s)   # queued, not run
    ...     pending = state.pending()
    ...     s.synchronize()                            # the host waits: it runs now
    >>> pending, state.pending(), state.host_syncs
    (1, 0, 1)
    """
    seed = _env_seed() if seed is None else _integer("seed", seed, "an int (or None)")
    if device_memory is not None:
        device_memory = _integer("device_memory", device_memory, "an int of bytes >= 0 (or None)")
        if device_memory < 0:
            raise ValueError(f"device_memory must be an int of bytes >= 0, got {device_memory}")
    if not isinstance(per_thread_default_stream, bool):
        raise TypeError(
            "per_thread_default_stream must be a bool, got "
            f"{type(per_thread_default_stream).__name__}"
        )
    st = _enable(seed, device_memory, per_thread_default_stream)
    try:
        yield st
    finally:
        _disable()


def is_strict() -> bool:
    """Whether strict mode is on.

    Examples
    --------
    >>> from smartarray.testing import is_strict, strict
    >>> with strict():
    ...     is_strict()
    True
    """
    return _get() is not None


def strict_state() -> StrictState | None:
    """The state of the strict mode that is on (its counters), or None when it is off."""
    return _get()


def _enable_from_environment() -> None:
    """``SMARTARRAY_STRICT=1``: strict mode for the whole process (never turned off)."""
    if _get() is None:
        _enable(_env_seed(), None)
