"""The low-level memory primitives, with the signatures of numba.cuda's reference pages.

The memory layer is the only code that allocates device or page-locked memory or copies bytes
between host and device, and every copy it makes is counted in :mod:`smartarray.stats`. This
module holds its public face; the rest lives in private modules, one concept each:

- :mod:`smartarray._memory.checks`: argument checks (shared with SmartArray), run before
  anything moves;
- :mod:`smartarray._memory.counted`: numba's device objects re-classed so that their copies
  are counted;
- :mod:`smartarray._memory.pinning`: the registry of page-locked host memory, and mapping;
- :mod:`smartarray._memory.byte_ranges`: byte-range copies and device views for SmartArray's
  buffers;
- :mod:`smartarray._platform.cuda_simulator`: every gap of the numba CUDA simulator, filled in
  one place, so that code above this layer behaves the same on the simulator and on a GPU.

The device objects returned are Numba's own (``DeviceNDArray``, ``DeviceRecord``,
``MappedNDArray``), re-classed into thin subclasses whose copying methods report to the
counters; views made from them stay counted. Every kernel takes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import cuda

from ._memory import devices as _devices

# SmartArray's byte ranges, the shared checks and the counted objects' internals are reached
# through this module by the layers above (and by tests): hence the re-exports (F401).
from ._memory.byte_ranges import (  # noqa: F401
    copy_between_devices,
    copy_device,
    copy_range,
    device_view,
    handout_view,
)
from ._memory.checks import (  # noqa: F401
    _byte_extent,
    _check_dtype,
    _check_host_array,
    _check_layout,
    _check_shape,
    _check_stream,
    _copy_source,
    _host_array_from,
    check_compatibility,
)
from ._memory.checks import (
    is_device_array as _is_device_array,
)
from ._memory.counted import _base_class, _raw, _Uncounted, describe  # noqa: F401
from ._memory.counted import adopt as _adopt  # noqa: F401
from ._memory.pinning import _mapping, _Registration, _registry
from ._platform import cuda_simulator as _sim
from ._platform.cuda_simulator import SIMULATOR
from .stats import abort as _abort
from .stats import begin as _begin
from .stats import record as _record

__all__ = [
    "SIMULATOR",
    "deregister",
    "device_array",
    "device_array_like",
    "mapped",
    "mapped_array",
    "peer_pairs",
    "pinned",
    "pinned_array",
    "register",
    "stream",
    "to_device",
]


def to_device(obj: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
    """Allocate and transfer a numpy ndarray or structured scalar to the device.

    Parameters
    ----------
    obj : array_like or numpy.void
        The host data: an ndarray (C- or F-contiguous), anything ``np.asarray`` turns into one,
        a structured scalar (``np.void``), or a device array (device-to-device with ``to``).
    stream : int or Stream, optional
        0 for the default stream, or a stream to enqueue the transfer on.
    copy : bool, optional
        With ``False``, allocate a device array like ``obj`` without copying its values.
    to : device array, optional
        An existing device array to copy into; it is returned. Its shape and dtype must
        match ``obj``'s.

    Returns
    -------
    DeviceNDArray or DeviceRecord
        Numba's own device object, which every kernel takes.

    Raises
    ------
    TypeError
        ``obj`` holds Python objects or strings; ``stream`` is not a stream; ``to`` has
        another dtype (as numba.cuda; the error is also a ``ValueError``).
    ValueError
        ``obj`` is not array-like, or not contiguous without ``to`` (into ``to`` a strided
        host ``obj`` is gathered first, as numba.cuda does); ``to`` has another shape.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> d_ary = sa.to_device(np.arange(10))
    >>> d_ary.copy_to_host()[:3]
    array([0, 1, 2])
    """
    stream = _check_stream(stream)
    if to is not None:
        if not _is_device_array(to):
            raise TypeError(f"to must be a device array, got {type(to).__name__}")
        to = _adopt(to)
        if copy:
            # numba: to.copy_to_device(obj, stream=stream), with the same checks.
            source = _copy_source(to, obj, "obj")
            if source is not None:
                direction = "d2d" if _is_device_array(source) else "h2d"
                began = _begin(direction, to.alloc_size, "to_device", describe(to))
                try:
                    _Uncounted(to).copy_to_device(_sim.numba_copy_source(source), stream=stream)
                except BaseException:
                    _abort(began)
                    raise
                _record(
                    direction, to.alloc_size, "to_device", describe(to), stream=stream, began=began
                )
        return to
    if _is_device_array(obj):
        return _adopt(obj)  # numba too returns device memory as it is
    host = _host_array_from(obj)
    if not copy:
        if isinstance(host, np.void):
            return _device_record_like(host, stream)
        return device_array_like(host, stream=stream)
    began = _begin("h2d", host.nbytes, "to_device", describe(host)) if host.nbytes else None
    try:
        devobj = _adopt(cuda.to_device(host, stream=stream))
    except BaseException:
        _abort(began)
        raise
    if host.nbytes:
        _record("h2d", host.nbytes, "to_device", describe(host), stream=stream, began=began)
    return devobj


def _device_record_like(rec: np.void, stream: Any) -> Any:
    """An uninitialised device record like ``rec``: allocated, nothing uploaded."""
    if _sim.SIMULATOR:
        return _adopt(_sim.device_record_like(rec, stream))
    from numba.cuda.cudadrv.devicearray import from_record_like

    return _adopt(from_record_like(rec, stream=stream))


def device_array(
    shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C", stream: Any = 0
) -> Any:
    """Allocate an empty device ndarray. Similar to :func:`numpy.empty`.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype, optional
    strides : tuple of int, optional
        Byte strides; default: contiguous in ``order``.
    order : {'C', 'F'}, optional
    stream : int or Stream, optional

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> import smartarray as sa
    >>> sa.device_array((2, 3), dtype='f4').shape
    (2, 3)
    """
    dims, dt, strides, order = _check_layout(shape, dtype, strides, order)
    stream = _check_stream(stream)
    return _adopt(cuda.device_array(dims, dtype=dt, strides=strides, order=order, stream=stream))


def device_array_like(ary: Any, stream: Any = 0) -> Any:
    """Allocate an empty device array with the shape, dtype and layout of ``ary``.

    Parameters
    ----------
    ary : numpy.ndarray or device array
    stream : int or Stream, optional

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> sa.device_array_like(np.zeros((4, 2), order='F')).is_f_contiguous()
    True
    """
    if not (isinstance(ary, np.ndarray) or _is_device_array(ary)):
        raise TypeError(f"ary must be an ndarray or a device array, got {type(ary).__name__}")
    _check_dtype(ary.dtype, "ary.dtype")
    stream = _check_stream(stream)
    return _adopt(cuda.device_array_like(ary, stream=stream))


def pinned_array(
    shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C"
) -> np.ndarray:
    """Allocate an ndarray whose buffer is pinned (page-locked). Similar to :func:`numpy.empty`.

    Page-locked host memory transfers faster and asynchronously. On the simulator the
    memory is ordinary (emulated pinning).

    Examples
    --------
    >>> import smartarray as sa
    >>> a = sa.pinned_array(4, dtype='i4')
    >>> type(a).__name__, a.shape
    ('ndarray', (4,))
    """
    dims, dt, strides, order = _check_layout(shape, dtype, strides, order)
    return _registry.track_allocation(
        cuda.pinned_array(dims, dtype=dt, strides=strides, order=order)
    )


def portable_pinned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` page-locked bytes (``uint8``) that every device copies as page-locked.

    A SmartArray's ``pinned=True`` host copy: ``cuMemHostAlloc`` without ``PORTABLE`` locks
    the memory for the allocating context only, and the driver may stage the other devices'
    copies of it as pageable ones (synchronous, at the staged rate). With unified addressing
    every allocation is portable anyway, so asking costs nothing.
    """
    if SIMULATOR or nbytes == 0:
        return pinned_array(nbytes, np.uint8)
    buffer = cuda.current_context().memhostalloc(nbytes, portable=True)
    return _registry.track_allocation(np.ndarray((nbytes,), np.uint8, buffer=buffer))


def mapped_array(
    shape: Any,
    dtype: Any = np.float64,
    strides: Any = None,
    order: str = "C",
    stream: Any = 0,
    portable: bool = False,
    wc: bool = False,
) -> np.ndarray:
    """Allocate a host ndarray, pinned and mapped onto the device, that kernels take directly.

    Kernel writes land in host memory with no copy. Similar to :func:`numpy.empty`.

    Parameters
    ----------
    shape, dtype, strides, order
        As for :func:`numpy.empty`.
    stream : int or Stream, optional
    portable : bool, optional
        Make the allocation usable from every device.
    wc : bool, optional
        Write-combined memory: faster for the host to write and the device to read, slower
        otherwise.

    Returns
    -------
    MappedNDArray
        An ``ndarray`` subclass with the device-array methods ``copy_to_host``,
        ``copy_to_device``, ``split`` and ``bind``. Its copies are made by the host (after
        waiting for the stream given, or the device): nothing crosses between host and device,
        so they are not counted as transfers. Views (slices, reshapes) reach kernels with the
        device address of their first element; an array derived by copying (``m + 1``,
        ``m.copy()``) is not mapped, and a kernel launch with it raises ``ValueError``.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> m = sa.mapped_array(4, dtype=np.int32)
    >>> m[:] = 7
    >>> isinstance(m, np.ndarray), m.copy_to_host().tolist()
    (True, [7, 7, 7, 7])
    """
    dims, dt, strides, order = _check_layout(shape, dtype, strides, order)
    stream = _check_stream(stream)
    if _sim.lacks_mapping():
        return _registry.track_allocation(_adopt(_sim.mapped_array(dims, dt, strides, order)))
    if portable or wc:
        # numba.cuda.mapped_array accepts these flags but does not pass them to the driver.
        ctx = cuda.current_context()
        nbytes = _extent_nbytes(dims, strides, dt, order)
        buffer = ctx.memhostalloc(nbytes, mapped=True, portable=portable, wc=wc)
        npary = np.ndarray(dims, dtype=dt, strides=strides, order=order, buffer=buffer)
        from numba.cuda.cudadrv.devicearray import MappedNDArray

        mappedview = np.ndarray.view(npary, type=MappedNDArray)
        mappedview.device_setup(buffer, stream=stream)
        return _registry.track_allocation(_adopt(mappedview))
    return _registry.track_allocation(_adopt(cuda.mapped_array(dims, dt, strides, order, stream)))


def _extent_nbytes(dims: tuple[int, ...], strides: Any, dt: np.dtype, order: str) -> int:
    if any(d == 0 for d in dims):
        return 0
    if strides is None:
        return int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    return sum((d - 1) * abs(s) for d, s in zip(dims, strides, strict=True)) + dt.itemsize


def register(*arrays: np.ndarray) -> _Registration:
    """Page-lock every given host array until :func:`deregister`; also a context manager.

    Registering an array that is already registered does nothing (it stays registered once,
    and one :func:`deregister` releases it). Nor does registering memory that was allocated
    page-locked (by :func:`pinned_array`, :func:`mapped_array`, or the host copy of a
    ``SmartArray(pinned=True)``): it stays page-locked until it is freed. Used in a ``with``
    block, the arrays this call registered are deregistered on exit.

    Parameters
    ----------
    *arrays : numpy.ndarray

    Raises
    ------
    TypeError
        An argument is not an ndarray.
    RegistrationError
        An array overlaps a registered one without covering the same bytes.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a, b = np.arange(10), np.arange(10)
    >>> with sa.register(a, b):
    ...     pass
    """
    for i, ary in enumerate(arrays):
        _check_host_array(ary, f"arrays[{i}]")
    return _Registration(arrays, _registry.register(arrays))


def deregister(*arrays: np.ndarray) -> None:
    """Release the page-locking of arrays registered with :func:`register`.

    Waits for the device first (an asynchronous copy from or to the memory may be queued).
    Memory allocated page-locked is left as it is.

    Raises
    ------
    RegistrationError
        An array is not registered; nothing is deregistered then.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = np.zeros(8)
    >>> _ = sa.register(a)
    >>> sa.deregister(a)
    """
    for i, ary in enumerate(arrays):
        _check_host_array(ary, f"arrays[{i}]")
    _registry.deregister(arrays)


def is_registered(ary: np.ndarray) -> bool:
    """Whether ``ary`` is page-locked: registered with :func:`register`, or allocated so."""
    return _registry.is_registered(_check_host_array(ary, "ary"))


@contextlib.contextmanager
def pinned(*arrays: np.ndarray) -> Iterator[None]:
    """A context manager page-locking a sequence of host ndarrays for its duration.

    Arrays already registered with :func:`register`, or allocated page-locked, stay so
    afterwards. On exit it waits for the device before unpinning: asynchronous copies issued
    in the block finish while the memory is still page-locked.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = np.zeros(1000)
    >>> with sa.pinned(a):
    ...     d = sa.to_device(a)
    """
    for i, ary in enumerate(arrays):
        _check_host_array(ary, f"arrays[{i}]")
    registered = _registry.register(arrays)
    try:
        yield
    finally:
        _registry.deregister(registered)


@contextlib.contextmanager
def mapped(*arrays: np.ndarray, stream: Any = 0) -> Iterator[Any]:
    """A context manager mapping host ndarrays into device memory for its duration.

    Yields one device array for one host array, a list of them for several. Kernel writes to
    the device arrays land directly in the host arrays, without a copy. On exit it waits for
    the device before unmapping, so the block's kernels have finished.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = np.zeros(4)
    >>> with sa.mapped(a) as d_a:
    ...     d_a.shape
    (4,)
    """
    for i, ary in enumerate(arrays):
        _check_host_array(ary, f"arrays[{i}]")
        _check_dtype(ary.dtype, f"arrays[{i}].dtype")
    stream = _check_stream(stream)
    with _mapping(arrays, stream) as devs:
        yield devs


def stream() -> Any:
    """Create and return a CUDA stream, a command queue for the device.

    The stream has ``synchronize()`` (wait for all its commands) and ``auto_synchronize()``
    (a context manager that synchronizes on exit).

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> s = sa.stream()
    >>> with s.auto_synchronize():
    ...     d = sa.to_device(np.arange(4), stream=s)
    """
    return cuda.stream()


def peer_pairs(devices: Any = None) -> list[tuple[int, int]]:
    """The pairs of devices that copy peer to peer: ``(source, target)`` where ``target`` can
    read ``source``'s memory directly.

    smartarray copies between such a pair directly (counted ``d2d``) and between any other pair
    through the host copy (``d2h`` then ``h2d``). The answer is the CUDA driver's
    (``cuDeviceCanAccessPeer``), asked once per pair; the fake CUDA driver answers as
    ``SMARTARRAY_FAKE_GPU_PEER`` says, the simulator (one device) has no pairs.

    Parameters
    ----------
    devices : iterable of int, optional
        The device ordinals to ask about (default: every visible device).

    Returns
    -------
    list of (int, int)
        The pairs, sorted; a list without ``(a, b)`` means ``a`` to ``b`` goes through the host.

    Raises
    ------
    TypeError, ValueError
        ``devices`` holds something other than the ordinal of a visible device.

    Examples
    --------
    >>> import smartarray as sa
    >>> sa.peer_pairs([0])
    []
    """
    n = _devices.count()
    if devices is None:
        chosen = list(range(n))
    else:
        try:
            chosen = list(devices)
        except TypeError:
            raise TypeError(
                f"devices must be an iterable of device ordinals, got {type(devices).__name__}"
            ) from None
        for d in chosen:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                raise TypeError(f"devices must hold device ordinals (int), got {d!r}")
            if not 0 <= d < n:
                raise ValueError(f"devices: no device {d}; this process sees {n} (0 to {n - 1})")
        chosen = sorted({int(d) for d in chosen})
    return [(a, b) for a in chosen for b in chosen if a != b and _devices.peer(a, b)]
