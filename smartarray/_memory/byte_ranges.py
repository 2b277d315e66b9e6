"""Byte-range copies and device views for the layers above (SmartArray's base buffer).

A SmartArray's base buffer keeps each copy as a flat ``uint8`` buffer and moves byte ranges
between them (:func:`copy_range`), and hands out typed device views of its device buffer
(:func:`device_view`). Both are reached as :mod:`smartarray.memory` names.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._platform import cuda_simulator as _sim
from ..stats import abort as _abort
from ..stats import begin as _begin
from ..stats import record as _record
from . import driver_calls as _driver_calls
from .checks import _check_dtype, _check_shape, _check_strides
from .counted import _raw, adopt
from .devices import ensure_context as _ensure_context


def copy_range(
    direction: str,
    host_bytes: np.ndarray,
    device_bytes: Any,
    start: int,
    stop: int,
    stream: Any = 0,
    reason: str = "",
    array: str = "",
    location: str = "gpu",
) -> None:
    """Copy bytes ``[start, stop)`` between a host and a device byte buffer, and count it.

    Parameters
    ----------
    direction : {'h2d', 'd2h'}
    host_bytes : numpy.ndarray
        A 1-D contiguous ``uint8`` view of the host buffer.
    device_bytes : device array
        A 1-D contiguous ``uint8`` view of the device buffer.
    start, stop : int
        The byte range.
    stream : int or Stream
        Where the copy is enqueued.
    reason, array : str
        Shown in trace events.
    location : str
        The device copy's location (``'gpu'`` or ``'gpu:N'``), named in trace events.

    Raises
    ------
    ValueError
        ``start`` is negative, or a buffer is not a flat contiguous byte buffer holding
        ``[start, stop)`` (a ``d2h`` target must be writable); nothing was copied.
    TransferGuardError
        The transfer guard refuses the copy; nothing was copied.
    """
    if stop <= start:
        return
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    _check_byte_buffer("host_bytes", host_bytes, stop)
    _check_byte_buffer("device_bytes", device_bytes, stop)
    if direction == "d2h" and not host_bytes.flags.writeable:
        raise ValueError("host_bytes must be writable to receive a 'd2h' copy")
    between = ("host", location) if direction == "h2d" else (location, "host")
    copy = _copier(direction, host_bytes, device_bytes, start, stop, stream)
    _counted(direction, start, stop, stream, reason, array, between, copy)


def _check_byte_buffer(name: str, buffer: Any, stop: int) -> None:
    """ValueError unless ``buffer`` is a 1-D contiguous buffer of single bytes of at least
    ``stop`` bytes: a copy reads or writes ``[start, stop)`` of it by address."""
    shape = buffer.shape
    if (
        len(shape) != 1
        or buffer.dtype.itemsize != 1
        or (buffer.strides != (1,) and shape[0] > 1)
        or shape[0] < stop
    ):
        raise ValueError(
            f"{name} must be a 1-D contiguous uint8 buffer of at least {stop} bytes, got "
            f"shape {shape}, dtype {buffer.dtype}, strides {buffer.strides}"
        )


def _copier(
    direction: str, host_bytes: np.ndarray, device_bytes: Any, start: int, stop: int, stream: Any
) -> Callable[[], object]:
    """The copy of bytes ``[start, stop)`` in ``direction``, not yet run: one driver call on a
    GPU (and the fake driver), numba's copy of a part on the simulator."""
    if not _sim.SIMULATOR:
        return functools.partial(
            _driver_copy, direction, host_bytes, device_bytes, start, stop, stream
        )
    host_part = host_bytes[start:stop]
    device_part = _raw(device_bytes)
    if start or device_bytes.shape != (stop,):
        device_part = device_part[start:stop]
    if direction == "h2d":
        return functools.partial(device_part.copy_to_device, host_part, stream=stream)
    return functools.partial(device_part.copy_to_host, host_part, stream=stream)


def _driver_copy(
    direction: str, host_bytes: np.ndarray, device_bytes: Any, start: int, stop: int, stream: Any
) -> None:
    """Copy bytes ``[start, stop)`` with one driver call, as numba's ``copy_to_host`` and
    ``copy_to_device`` end by doing.

    Both buffers are flat contiguous ``uint8`` and the range lies in both (checked by
    :func:`copy_range`), so numba's checks
    (compatibility, contiguity, a device view of a part: two context queries) would only cost
    the host time on every copy. Its rules are kept: stream 0 means the device array's own
    stream, a copy on stream 0 is synchronous, and a context is made current first.
    """
    drv: Any = sys.modules.get("numba.cuda.cudadrv.driver")
    if drv is None:  # pragma: no cover - numba.cuda imports it (not on the simulator)
        from numba.cuda.cudadrv import driver as drv
    _ensure_context()
    stream = stream or getattr(device_bytes, "stream", 0)
    handle = drv._stream_handle(stream) if stream else 0
    # The device array's pointer as numba's device_pointer finds it, without its check (a
    # device array of numba's); the host pointer through numba's buffer-protocol helper
    # (measured: cheaper than building the ndarray's __array_interface__ dict).
    device = device_bytes.device_ctypes_pointer.value + start
    if direction == "h2d":
        host = drv.host_pointer(host_bytes, readonly=True) + start
        _driver_calls.memcpy_htod(device, host, stop - start, handle)
    else:
        _driver_calls.memcpy_dtoh(
            drv.host_pointer(host_bytes) + start, device, stop - start, handle
        )


def _counted(
    direction: str,
    start: int,
    stop: int,
    stream: Any,
    reason: str,
    array: str,
    between: tuple[str, str],
    copy: Callable[[], object],
) -> None:
    """Run ``copy`` of bytes ``[start, stop)`` and count it (the guard asked first)."""
    began = _begin(direction, stop - start, reason, array)  # the transfer guard may refuse
    clock = _clock()
    copies = clock.copies if clock is not None else 0
    try:
        copy()
    except BaseException:
        _abort(began)
        raise
    modelled = (0.0, 0.0)
    if clock is not None and clock.copies == copies + 1 and clock.last_copy is not None:
        modelled = (clock.last_copy.start, clock.last_copy.end)  # (this copy's span)
    _record(
        direction,
        stop - start,
        reason,
        array,
        start=start,
        stop=stop,
        stream=stream,
        began=began,
        between=(_absolute(between[0]), _absolute(between[1])),
        modelled=modelled,
    )


def _clock() -> Any:
    """The fake driver's clock when it is loaded with one on, else ``None``."""
    fake = sys.modules.get("smartarray._fakegpu")
    driver = fake.current() if fake is not None else None
    return getattr(driver, "clock", None)


def _absolute(location: str) -> str:
    """``'gpu:N'`` for a device location (device 0's is ``'gpu'`` in the coherence state)."""
    return "gpu:0" if location == "gpu" else location


def copy_between_devices(
    target: Any,
    source: Any,
    start: int,
    stop: int,
    stream: Any = 0,
    reason: str = "",
    array: str = "",
    between: tuple[str, str] = ("gpu", "gpu"),
) -> None:
    """Copy bytes ``[start, stop)`` from one device byte buffer to another's, and count it.

    The buffers may be on two devices (unified addressing: the driver copies peer to peer
    where the devices can reach each other). Counted ``d2d``; trace events name both
    locations (``between``: source, target).

    Raises
    ------
    TransferGuardError
        The transfer guard refuses the copy; nothing was copied.
    """
    if stop <= start:
        return
    part = _raw(source)[start:stop]._dev  # (a device array of the source's class)
    copy = functools.partial(
        _raw(target)[start:stop].copy_to_device, _sim.numba_copy_source(part), stream=stream
    )
    _counted("d2d", start, stop, stream, reason, array, between, copy)


def device_view(
    device_bytes: Any, offset: int, shape: Sequence[int], strides: Sequence[int], dtype: Any
) -> Any:
    """A counted device array viewing ``device_bytes`` from byte ``offset`` on.

    Used by SmartArray to hand out a view of its device buffer without copying.

    Parameters
    ----------
    device_bytes : device array
        A 1-D contiguous ``uint8`` device array (from :func:`device_array`).
    offset : int
        Byte offset of element 0 of the view.
    shape, strides : tuple of int
        The view's shape and byte strides (non-negative: numba kernels take no negative strides).
    dtype : dtype

    Returns
    -------
    DeviceNDArray
        A fake device array on the simulator.

    Raises
    ------
    ValueError
        A stride is negative, or the view reaches outside ``device_bytes``.
    """
    dims = _check_shape(tuple(shape))
    dt = _check_dtype(dtype)
    steps = _check_strides(tuple(strides), len(dims))
    assert steps is not None
    if any(s < 0 for s in steps):
        raise ValueError(
            f"device views take no negative strides, got {steps!r}; "
            "make a contiguous copy first (e.g. SmartArray(a))"
        )
    offset = operator.index(offset)
    size = int(np.prod(dims, dtype=np.int64)) if dims else 1
    extent = (
        0 if size == 0 else sum((d - 1) * s for d, s in zip(dims, steps, strict=True)) + dt.itemsize
    )
    if offset < 0 or offset + extent > device_bytes.shape[0]:
        raise ValueError(
            f"a view of {extent} bytes at offset {offset} does not fit in "
            f"{device_bytes.shape[0]} device bytes"
        )
    if _sim.SIMULATOR:
        return adopt(_sim.device_view(device_bytes, offset, dims, steps, dt))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    gpu_data = device_bytes.gpu_data.view(offset) if size else None  # numba: NULL when empty
    return adopt(DeviceNDArray(dims, steps, dt, gpu_data=gpu_data))


class HandOut:
    """What every view of a handed-out device array keeps alive (see :func:`handout_view`).

    Holds the device memory of the view, so the memory lives as long as any view of it.
    """

    __slots__ = ("memory", "__weakref__")

    def __init__(self, memory: Any) -> None:
        self.memory = memory


def handout_view(
    device_bytes: Any, offset: int, shape: Sequence[int], strides: Sequence[int], dtype: Any
) -> tuple[Any, HandOut]:
    """:func:`device_view` to hand to the user, and the :class:`HandOut` token it keeps alive.

    Every array derived from the view (a slice, a reshape, a transpose) keeps the token alive,
    as the view itself does: a weak reference to the token lives exactly as long as anything
    that shows these device bytes (a weak reference to the view alone dies when the user
    keeps only ``v = a.gpu()[2:4]``). On a GPU the view's memory pointer is owned by the
    token (numba's ``MemoryPointer.view`` hands an external owner on to every view); on the
    simulator the wrapped ndarray's base is the token (NumPy collapses a view's base to it).
    """
    view = device_view(device_bytes, offset, shape, strides, dtype)
    if _sim.SIMULATOR:
        token = HandOut(device_bytes)
        ary = view._ary
        token_ary = _sim.keep_alive_ndarray(ary, token)
        return adopt(_sim.fake_device_array(token_ary)), token
    gpu_data = view.gpu_data
    # No elements: numba-cuda hands a NULL pointer (device_pointer_value None), nothing to keep.
    if gpu_data is None or not gpu_data.device_pointer_value:
        return view, HandOut(None)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda.cudadrv.driver import MemoryPointer

    token = HandOut(gpu_data)  # keeps the device allocation alive
    owned = MemoryPointer(
        gpu_data.context,
        ctypes.c_void_p(int(gpu_data.device_pointer_value)),
        int(gpu_data.size),
        owner=token,
    )
    dev = DeviceNDArray(view.shape, view.strides, view.dtype, gpu_data=owned)
    return adopt(dev), token


def copy_device(dst: Any, src: Any, stream: Any = 0, reason: str = "", array: str = "") -> None:
    """Copy device array ``src`` into device array ``dst`` on the device, and count it ``d2d``.

    Both must be contiguous with the same dtype and shape (numba.cuda's checks apply).
    Used by :mod:`smartarray._interop.exports` for data that must not round-trip through the host.

    Raises
    ------
    TransferGuardError
        The transfer guard refuses the copy; nothing was copied.
    """
    nbytes = int(dst.size) * np.dtype(dst.dtype).itemsize
    if nbytes == 0:
        return
    began = _begin("d2d", nbytes, reason, array)  # the transfer guard may refuse
    try:
        _raw(dst).copy_to_device(_sim.numba_copy_source(src), stream=stream)
    except BaseException:
        _abort(began)
        raise
    _record("d2d", nbytes, reason, array, stream=stream, began=began)
