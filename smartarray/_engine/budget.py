"""The device-memory budget as users set and see it: :func:`set_device_budget`,
:func:`device_budget` and :func:`resident`.

What is resident, eviction and allocation within the budget: :mod:`smartarray._engine.residency`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from operator import index
from typing import Any

import numpy as np

from .._memory import devices as _devices
from .._memory.checks import check_byte_budget
from .._numba.kernels import ArrayArgument
from . import residency as _residency
from .residency import DeviceBudget, ResidentArray

__all__ = [
    "DeviceBudget",
    "ResidentArray",
    "device_budget",
    "empty_cache",
    "resident",
    "set_device_budget",
]


def set_device_budget(nbytes: int | None) -> None:
    """Set how many bytes of device memory SmartArrays' device copies may use together, on
    each device.

    When a device copy would exceed the budget, device copies are evicted to make room:
    first those whose bytes are all current on the host too (nothing moves), then the least
    recently used ones, after downloading the bytes only they hold. An evicted array comes
    back on its next device use, uploading only what that use needs. A budget below what is
    resident now takes effect at the next allocation (nothing is evicted before).

    Parameters
    ----------
    nbytes : int or None
        The budget in bytes (0 or more). ``None`` restores the default: on a GPU, the device
        memory free at the first allocation after this call, less a margin (a tenth of it, at
        least 128 MiB on a device of 2 GiB or more, a sixteenth of a smaller device's memory,
        never more than half of what is free); on the CUDA simulator, unlimited.

    Raises
    ------
    TypeError
        ``nbytes`` is not an integer or None.
    ValueError
        ``nbytes`` is negative.

    See Also
    --------
    device_budget : the budget, the bytes in use and what is resident.
    resident : keep arrays resident (never evicted) inside a ``with`` block.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> sa.set_device_budget(1 << 20)
    >>> sa.device_budget().budget
    1048576
    >>> sa.set_device_budget(None)
    """
    _residency.set_budget(check_byte_budget(nbytes))


def device_budget(device: int | None = None) -> DeviceBudget:
    """Return the device-memory budget, the bytes SmartArrays use of it, and what is resident.

    Parameters
    ----------
    device : int, optional
        The CUDA device (default: the current one). Each device has its own budget.

    Returns
    -------
    DeviceBudget
        A named tuple ``(budget, used, resident, cached)``: ``budget`` in bytes (None:
        unlimited), ``used`` the bytes of the resident device copies, ``resident`` one
        ``(name, nbytes, kept, device)`` per resident copy, least recently used first,
        ``kept`` saying why it may not be evicted now (``''`` if it may), and ``cached`` the
        bytes of dead arrays' device copies kept for reuse (see :func:`empty_cache`).

    Raises
    ------
    TypeError
        ``device`` is not an int (a bool is not a device).
    ValueError
        ``device`` is not a device this process sees.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.zeros(4), name="a")
    >>> d = a.gpu()  # resident, and kept while d lives (a device array handed out)
    >>> [(r.name, r.nbytes) for r in sa.device_budget().resident if r.name == "a"]
    [('a', 32)]
    """
    return _residency.budget_of(_device_number(device))


def empty_cache(device: int | None = None) -> int:
    """Give back the device memory smartarray keeps for reuse on ``device``.

    When a SmartArray dies, its device copy (once the work queued on it ran, and when all work
    on its memory was smartarray's own: never handed out by ``get('gpu')`` or DLPack, shared
    through ``__cuda_array_interface__`` or adopted) is kept for the next device copy of the same
    size on that device, as CuPy's memory pool and PyTorch's caching allocator keep theirs: a
    loop that makes temporaries allocates once, and no ``cuMemAlloc`` (which orders the work of
    every stream around it) falls between its kernels. What is kept counts in the budget (an
    allocation that needs the room gives it back before evicting anything) and is at most a
    quarter of the budget (256 MiB where no budget bounds it); :func:`device_budget` reports
    it as ``cached``. Call this before handing the memory to another library.

    Parameters
    ----------
    device : int, optional
        The CUDA device (default: the current one).

    Returns
    -------
    int
        The bytes given back.

    Raises
    ------
    TypeError
        ``device`` is not an int (a bool is not a device).
    ValueError
        ``device`` is not a device this process sees.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.zeros(1024))
    >>> _ = a.gpu()
    >>> del a, _
    >>> sa.empty_cache() >= 0
    True
    >>> sa.device_budget().cached
    0
    """
    return _residency.empty_cache(_device_number(device))


def _device_number(device: int | None) -> int:
    if device is None:
        return _devices.current()
    number = None
    if not isinstance(device, (bool, np.bool_)):  # (True is not device 1)
        with contextlib.suppress(TypeError):
            number = index(device)
    if number is None:
        raise TypeError(f"device must be an int (a CUDA device) or None, got {device!r}")
    return _devices.ordinal(_devices.resolve(f"gpu:{number}", "device"))


@contextlib.contextmanager
def resident(*arrays: Any) -> Iterator[None]:
    """Keep the device copies of ``arrays`` resident (never evicted) inside the block.

    Use it for arrays a loop touches on every step, so that making room for others never
    evicts them. Blocks nest; an array becomes evictable again when the last block keeping
    it exits. It does not upload anything: the copies are allocated when first used.

    Parameters
    ----------
    *arrays : SmartArray
        The arrays (views keep their whole base buffer resident).

    Raises
    ------
    TypeError
        An argument is not a SmartArray (nothing is kept).

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.zeros(4))
    >>> with sa.resident(a):
    ...     d = a.gpu()  # a kernel loop would go here
    """
    for i, a in enumerate(arrays):
        if not isinstance(a, ArrayArgument):  # (SmartArray: the one ArrayArgument)
            raise TypeError(f"arrays[{i}] must be a SmartArray, got {type(a).__name__}")
    recs = [_residency.of(a._buf) for a in arrays]
    with _residency._lock:
        for rec in recs:
            rec.keep += 1
    try:
        yield
    finally:
        with _residency._lock:
            for rec in recs:
                rec.keep -= 1
