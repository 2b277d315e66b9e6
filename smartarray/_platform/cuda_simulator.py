"""Every gap of the numba CUDA simulator, filled in one place so that the code above behaves alike.

Above the memory layer the simulator and a GPU must behave the same (same bytes moved, same
trace events, same errors). Where the simulator (``NUMBA_ENABLE_CUDASIM=1``) lacks something or
does it differently, the memory layer calls one of the helpers here; each says which gap it
fills. Strict mode (:mod:`smartarray.testing`) is the only other code that touches the
simulator's internals, and it closes some of these gaps itself (it adds ``cuda.mapped``, a
``mempin`` and numba's ``MappedNDArray``): the checks below test for the missing piece, not only
for the simulator.

The gaps, and where they are filled:

- no ``cuda.mapped``: :func:`lacks_mapping` / :func:`mapped` alias the host array instead
  (exactly what a mapping does, minus the hardware);
- ``pinned()`` takes one array and ``pinned_array`` is ordinary memory: page-locking is recorded
  but emulated (:func:`emulates_page_locking`);
- ``to_device(to=d)`` returns ``None`` and ``to_device(copy=False)`` copies anyway: the memory
  layer copies into ``d`` itself and allocates with ``device_array_like`` (no branch needed);
- ``mapped_array`` returns a fake device array, not an ``ndarray``: :func:`mapped_array` returns
  a :class:`SimMappedNDArray` (the counted class gives it the ``MappedNDArray`` methods);
- ``np.asarray`` of a simulated device array aliases device memory (a GPU copies), and the fake
  array forwards unknown attributes to the ndarray it wraps: :class:`DeviceArrayGaps`;
- ``ravel`` takes no ``stream``: :func:`ravel`;
- ``copy_to_device`` reads a device source through ``__array__``: :func:`numba_copy_source`;
- kernels run in Python and index device arrays like the host does: :func:`in_kernel`;
- a device record is allocated by copying a host record: :func:`device_record_like`;
- a device view is built from the ndarray the fake array wraps: :func:`device_view`;
- its ``Event`` takes no arguments: :func:`event`;
- its streams have no handle, and its ``external_stream`` raises: :func:`consumer_stream`;
- ``get_memory_info()`` is infinite and its context has no pending frees: :func:`free_device_memory`
  and :func:`give_back_freed` (the device-memory budget);
- ``split`` returns a list there and a generator on a GPU: the counted ``split`` returns a list
  on both (no branch needed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numba
import numpy as np
from numba import cuda

#: True when numba.cuda is the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
# (numba.core.config sets its options at run time from the environment: no type checker sees them)
SIMULATOR: bool = bool(numba.config.ENABLE_CUDASIM)  # type: ignore[attr-defined]


class DeviceArrayGaps:
    """Methods of the counted device classes that make a simulated device array act as a GPU's.

    Mixed into every counted class (on a GPU they do what numba's own methods do).
    """

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        # Gap: np.asarray of a simulated device array aliases device memory; a GPU copies to
        # the host here (through the counted copy_to_host, so the download is counted).
        if copy is False:
            # NumPy 2: copy=False never copies; device memory cannot be a host ndarray without
            # one. numba-cuda's device arrays refuse it too (before anything moves).
            raise ValueError(
                "copy=False is not supported for a device array: its data is in device memory, "
                "and NumPy needs a copy on the host; use np.asarray(d) or d.copy_to_host()"
            )
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype, copy=False)

    def __getattr__(self, name: str) -> Any:
        # Gap: the simulator's fake array forwards unknown attributes to the ndarray it wraps;
        # forwarding these two would let np.asarray alias device memory, which a GPU array
        # cannot do (it has neither attribute).
        if name in ("__array_interface__", "__array_struct__"):
            raise AttributeError(name)
        forward = getattr(super(), "__getattr__", None)
        if forward is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return forward(name)


def ravel(parent: Any, order: str, stream: Any) -> Any:
    """``parent.ravel(order, stream)``, numba's method reached through ``super()``."""
    if SIMULATOR:
        return parent.ravel(order=order)  # gap: the simulator's ravel takes no stream
    return parent.ravel(order=order, stream=stream)


def in_kernel() -> bool:
    """Whether the simulator is running a kernel (whose element accesses are no transfers).

    Gap: simulated kernels run in Python and index the same device array objects the host does;
    on a GPU a kernel's element accesses never reach the Python object.
    """
    if not SIMULATOR:
        return False
    from numba.cuda.simulator import kernel

    return kernel._get_kernel_context() is not None


def numba_copy_source(source: Any) -> Any:
    """The source to hand numba's own ``copy_to_device``.

    Gap: the simulator's ``copy_to_device`` reads a device source through ``__array__``, which
    for a counted array is a counted ``copy_to_host``: a d2d copy would also be counted as a
    d2h. There it gets the ndarray the fake device array wraps (the checks were done already).
    """
    # _checks.is_device_array's test, written here: _checks imports this module (no circle).
    device = getattr(source, "__cuda_ndarray__", False) and not isinstance(source, np.ndarray)
    if SIMULATOR and device and hasattr(source, "_ary"):
        return source._ary
    return source


def device_view(device_bytes: Any, offset: int, dims: tuple[int, ...], steps: Any, dt: Any) -> Any:
    """A simulated device array viewing ``device_bytes`` from byte ``offset`` on (not counted).

    Gap: a simulated device array has no device pointer to offset; it wraps an ndarray, so the
    view is an ndarray view of that one, wrapped again.
    """
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    host = np.ndarray(dims, dt, buffer=device_bytes._ary, offset=offset, strides=steps)
    return FakeCUDAArray(host)


class _Kept:
    """The base of a simulated device view that keeps ``token`` alive (see below)."""

    __slots__ = ("__array_interface__", "token")
    __array_interface__: dict[str, Any]
    token: Any


def keep_alive_ndarray(ary: np.ndarray, token: Any) -> np.ndarray:
    """An ndarray over ``ary``'s memory whose every derived view keeps ``token`` alive.

    Gap: a simulated device array wraps an ndarray, and NumPy collapses the base of every
    view of it to the first object that is not an ndarray: this holder, which holds ``token``.
    """
    holder = _Kept()
    holder.token = token
    holder.__array_interface__ = {
        "shape": ary.shape,
        "typestr": ary.dtype.str,
        "descr": ary.dtype.descr,
        "strides": ary.strides,
        "data": (ary.__array_interface__["data"][0], False),
        "version": 3,
    }
    out = np.asarray(holder)
    return out if out.dtype == ary.dtype else out.view(ary.dtype)


def fake_device_array(ary: np.ndarray, stream: Any = 0) -> Any:
    """A simulated device array wrapping ``ary`` (not counted)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(ary, stream=stream)


def is_fake_device_array(obj: object) -> bool:
    """Whether ``obj`` is a simulated device array (its class is private to the simulator)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return isinstance(obj, FakeCUDAArray)


def device_array_copy_methods() -> tuple[type, Any]:
    """The simulator's device array class and its ``devicearray`` module (the copy chokepoints).

    Gap: the simulator copies in ``FakeCUDAArray.copy_to_device``/``copy_to_host`` and its
    module's ``to_device``, where a GPU's numba-cuda copies in ``driver.host_to_device`` & co.
    """
    from numba.cuda.simulator.cudadrv import devicearray

    return devicearray.FakeCUDAArray, devicearray


def device_record_like(rec: np.void, stream: Any) -> Any:
    """An uninitialised simulated device record like ``rec`` (not counted).

    Gap: the simulator has no ``from_record_like``; it allocates by copying a host record (host
    memory, nothing crosses).
    """
    return cuda.to_device(np.zeros((), dtype=rec.dtype)[()], stream=stream)


def lacks_mapping() -> bool:
    """Whether numba.cuda has no ``cuda.mapped`` (the plain simulator; strict mode adds one)."""
    return SIMULATOR and not hasattr(cuda, "mapped")


@contextlib.contextmanager
def mapped(*arrays: np.ndarray, stream: Any = 0) -> Iterator[Any]:
    """``cuda.mapped`` for the plain simulator: one device array per host array (not counted).

    Gap: no ``cuda.mapped``. A fake device array wrapping the host array aliases its memory,
    which is what a mapping is; there is nothing to unmap.
    """
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    devarys = [FakeCUDAArray(ary, stream=stream) for ary in arrays]
    yield devarys[0] if len(devarys) == 1 else devarys


class SimMappedNDArray(np.ndarray):
    """The simulator's stand-in for ``MappedNDArray``: a host ndarray with its device methods.

    On a GPU a mapped array is host memory that kernels address directly. The simulator runs
    kernels on host memory anyway, so the ndarray itself is the mapping.
    """

    # alloc_size, copy_to_host, copy_to_device, split and is_c/f_contiguous: the counted
    # mapped class, as on a GPU.


def mapped_array(
    dims: tuple[int, ...], dt: np.dtype, strides: Sequence[int] | None, order: Literal["C", "F"]
) -> SimMappedNDArray:
    """A mapped array for the plain simulator (not counted, not tracked as page-locked).

    Gap: the simulator's ``mapped_array`` is a fake device array, not an ``ndarray`` (strict
    mode gives numba's ``MappedNDArray``, and the GPU path runs).
    """
    host = np.ndarray(dims, dtype=dt, strides=strides, order=order)
    return host.view(SimMappedNDArray)


def emulates_page_locking() -> bool:
    """Whether page-locking is emulated: the plain simulator's context has no ``mempin``.

    Gap: the simulator's ``pinned()`` takes one array and its ``pinned_array`` is ordinary
    memory; the registry still records what is page-locked (strict mode models ``mempin``).
    """
    return SIMULATOR and not hasattr(cuda.current_context(), "mempin")


def untimed_event() -> Any:
    """A new CUDA event without timing data (``cuda.event(timing=False)``): what ordering
    streams and host waits need, and cheaper to record than a timed one.

    Gap: the simulator's ``Event`` takes no arguments (its events carry no timing anyway).
    """
    if SIMULATOR:
        return cuda.event()
    # (the checker reads the simulator's event(), which takes no arguments)
    return cuda.event(timing=False)  # type: ignore[call-arg]


def consumer_stream(value: int) -> Any:
    """The stream a DLPack consumer names: 1 the legacy default stream, 2 the per-thread
    default stream, a larger value a stream handle (``cuda.external_stream``).

    Gap: the plain simulator's streams have no handle (its ``external_stream`` raises, and its
    default streams are new objects at each call). They complete their work at once, so the
    default stream (0) stands for any. Strict mode's streams have handles, as a GPU's do.
    """
    if SIMULATOR and getattr(cuda.default_stream(), "handle", None) is None:
        return 0
    if value == 1:
        return cuda.legacy_default_stream()
    if value == 2:
        return cuda.per_thread_default_stream()
    return cuda.external_stream(value)


# -- device memory (the budget of smartarray._engine.residency) -------------------------------

#: CUDA's out-of-memory result code (numba's ``CudaAPIError.code``; an enum on newer bindings).
CUDA_ERROR_OUT_OF_MEMORY = 2


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device is out of memory (eviction may make room).

    numba's own allocator raises ``CudaAPIError`` with CUDA_ERROR_OUT_OF_MEMORY from
    ``cuMemAlloc`` (strict mode raises the simulator's class with the same ``code`` past its
    ``device_memory``). An allocator plugin (numba's EMM interface) raises its own error: RMM's
    ``rmm::out_of_memory`` reaches Python as ``MemoryError("std::bad_alloc: out_of_memory:
    ...")``, CuPy's as ``OutOfMemoryError`` (a ``MemoryError``). A ``MemoryError`` that does
    not say so (a host allocation) is not taken for one, nor smartarray's own errors.
    """
    if isinstance(exc, MemoryError):
        from ..errors import SmartArrayError

        if isinstance(exc, SmartArrayError):
            return False
        text = str(exc).lower()
        return (
            type(exc).__name__ == "OutOfMemoryError"
            or "out_of_memory" in text
            or "out of memory" in text
        )
    code = getattr(exc, "code", None)
    if code is None or type(exc).__name__ != "CudaAPIError":
        return False
    try:
        return int(code) == CUDA_ERROR_OUT_OF_MEMORY
    except (TypeError, ValueError):
        return False


def free_device_memory() -> int | None:
    """Bytes of device memory free now, or None where it is unlimited.

    Gap: the simulator reports infinite memory (strict mode reports its finite
    ``device_memory``, but an allocation past it fails on its own: no budget is derived).
    """
    if SIMULATOR:
        return None
    return int(cuda.current_context().get_memory_info().free)


def device_memory() -> tuple[int, int] | None:
    """Bytes of device memory free now and in all, or None where it is unlimited (the same
    gap as :func:`free_device_memory`)."""
    if SIMULATOR:
        return None
    info = cuda.current_context().get_memory_info()
    return int(info.free), int(info.total)


def give_back_freed() -> None:
    """Free device memory whose last reference is gone now, not later.

    numba-cuda defers ``cuMemFree`` (``_PendingDeallocs``) until a count or size threshold: an
    eviction's memory would stay allocated and the retried allocation fail. Device
    allocations queue their frees on the memory manager's list (``_alloc_finalizer``), streams
    and modules on the context's: both are flushed. An External Memory Management plugin may
    have neither (it frees by its own rules). Gap: the simulator's context has no pending
    frees (memory goes with its last reference).
    """
    if SIMULATOR:
        return
    ctx = cuda.current_context()
    for owner in (getattr(ctx, "memory_manager", None), ctx):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()
