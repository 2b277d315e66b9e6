"""Device and page-locked memory of strict mode, and the device-array surface of a GPU.

Device memory is finite (a size the test chooses) and every allocation is recorded, so a
kernel argument can be checked to lie inside a live allocation. Host memory is pageable unless
it was allocated page-locked (``pinned_array``, ``mapped_array``) or registered (``pinned``,
``mapped``, a context's ``mempin``); the rules of asynchronous copies depend on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba.cuda.simulator.cudadrv import devicearray as _sim
from numba.cuda.simulator.cudadrv import driver as _driver
from numba.cuda.simulator.kernel import _get_kernel_context

from . import state as _state
from .ranges import Ranges, byte_extent, pointer

__all__ = ["Ranges", "byte_extent", "pointer"]  # (from .ranges: their old home)

CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713


def api_error(code: int, name: str, call: str) -> Exception:
    """numba's ``CudaAPIError`` as a GPU raises it (the simulator's class, with ``code``)."""
    exc = _driver.CudaAPIError(code, f"[{name}] Call to {call} results in {name}")
    exc.code = code  # type: ignore[attr-defined]
    return exc


# -- allocations ---------------------------------------------------------------------------


def _garbage(buf: np.ndarray) -> None:
    # Fresh device memory holds whatever was there: a byte pattern, not zeros (0xFF: NaN and -1).
    buf.fill(0xFF)


def alloc_device(nbytes: int) -> np.ndarray:
    """A new device buffer of ``nbytes`` bytes; numba's out-of-memory error past the budget."""
    st = _state.current()
    size = max(int(nbytes), 1)
    if st.device_used + size > st.device_memory:
        raise api_error(CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc")
    buf = np.empty(size, dtype=np.uint8)
    _garbage(buf)
    start = pointer(buf)
    st.device_ranges.add(start, start + size, "device")
    st.device_used += size
    weakref.finalize(buf, _free_device, st, start, size)
    return buf


def _free_device(st: Any, start: int, size: int) -> None:
    st.device_ranges.remove(start)
    st.device_used -= size


def alloc_host(nbytes: int, kind: str) -> np.ndarray:
    """A new page-locked host buffer (``kind`` 'pinned' or 'mapped')."""
    st = _state.current()
    size = max(int(nbytes), 1)
    buf = np.empty(size, dtype=np.uint8)
    start = pointer(buf)
    st.host_ranges.add(start, start + size, kind)
    if kind == "mapped":
        st.device_ranges.add(start, start + size, "mapped")
    weakref.finalize(buf, _unlock, st, start, kind)
    return buf


def _unlock(st: Any, start: int, kind: str) -> None:
    st.host_ranges.remove(start)
    if kind == "mapped":
        st.device_ranges.remove(start)


def is_page_locked(ary: Any) -> bool:
    """Whether the host array ``ary`` lies in page-locked memory."""
    st = _state.current()
    if not isinstance(ary, np.ndarray):
        return False
    lo, hi = byte_extent(ary)
    return st.host_ranges.find(lo, hi) is not None


class PinnedMemory:
    """What a context's ``mempin`` returns: host memory page-locked until ``free()``."""

    def __init__(self, owner: Any, start: int, size: int, mapped: bool) -> None:
        st = _state.current()
        if size and st.host_ranges.overlaps(start, start + size):
            raise api_error(
                CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
                "cuMemHostRegister",
            )
        self.owner = owner
        self.handle = start
        self.size = size
        self.mapped = mapped
        self._freed = size == 0
        if size:
            st.host_ranges.add(start, start + size, "mapped" if mapped else "pinned")
            if mapped:
                st.device_ranges.add(start, start + size, "mapped")
        self._finalizer = weakref.finalize(self, _unlock_if, st, start, mapped, [self._freed])

    def free(self) -> None:
        """Unregister the memory (it is pageable again).

        Raises
        ------
        StrictModeError
            An asynchronous copy queued and not run yet still uses this memory (on a GPU the
            DMA would read or write memory that is no longer page-locked).
        """
        if not self._freed:
            op = _state.current().scheduler.pending_host_use(self.handle, self.handle + self.size)
            if op is not None:
                from .scheduler import StrictModeError

                raise StrictModeError(
                    f"host memory is unregistered while an asynchronous copy ({op.label}) "
                    "that uses it is still queued: wait for its stream first"
                )
            self._freed = True
            self._finalizer()


def _unlock_if(st: Any, start: int, mapped: bool, freed: list[bool]) -> None:
    if not freed[0]:
        st.host_ranges.remove(start)
        if mapped:
            st.device_ranges.remove(start)


def mempin(ctx: Any, owner: Any, pointer: int, size: int, mapped: bool = False) -> PinnedMemory:
    return PinnedMemory(owner, int(pointer), int(size), mapped)


def memalloc(ctx: Any, size: int) -> np.ndarray:
    return alloc_device(size)


def memhostalloc(
    ctx: Any, size: int, mapped: bool = False, portable: bool = False, wc: bool = False
) -> np.ndarray:
    return alloc_host(size, "mapped" if mapped else "pinned")


def get_memory_info(ctx: Any) -> Any:
    from numba.cuda.simulator.cudadrv.devices import _MemoryInfo

    st = _state.current()
    return _MemoryInfo(st.device_memory - st.device_used, st.device_memory)


# -- device arrays ---------------------------------------------------------------------------


def _extent_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    if any(d == 0 for d in shape):
        return 0
    return sum((d - 1) * abs(s) for d, s in zip(shape, strides, strict=True)) + itemsize


def layout(
    shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C"
) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...]]:
    """Shape, dtype and byte strides of an array ``numpy.empty`` would make."""
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    dt = np.dtype(dtype)
    if strides is not None:
        return dims, dt, tuple(int(s) for s in strides)
    steps = [0] * len(dims)
    step = dt.itemsize
    axes = range(len(dims) - 1, -1, -1) if order == "C" else range(len(dims))
    for ax in axes:
        steps[ax] = step
        step *= max(dims[ax], 1)
    return dims, dt, tuple(steps)


def device_array(
    shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C", stream: Any = 0
) -> Any:
    """``numba.cuda.device_array`` in strict mode: finite memory, garbage contents."""
    return on_device(*layout(shape, dtype, strides, order), stream)


def on_device(dims: tuple[int, ...], dt: np.dtype, steps: tuple[int, ...], stream: Any) -> Any:
    """A new device array of this layout."""
    buf = alloc_device(_extent_bytes(dims, steps, dt.itemsize))
    ary = np.ndarray(dims, dt, buffer=buf, strides=steps)
    return _sim.FakeCUDAArray(ary, stream=stream)


def on_host(dims: tuple[int, ...], dt: np.dtype, steps: tuple[int, ...], kind: str) -> np.ndarray:
    """A new page-locked host array of this layout."""
    buf = alloc_host(_extent_bytes(dims, steps, dt.itemsize), kind)
    return np.ndarray(dims, dt, buffer=buf, strides=steps)


def device_array_like(ary: Any, stream: Any = 0) -> Any:
    strides = _sim._contiguous_strides_like_array(ary)
    order = _sim._order_like_array(ary)
    return device_array(
        shape=ary.shape, dtype=ary.dtype, strides=strides, order=order, stream=stream
    )


def to_device(obj: Any, stream: Any = 0, copy: bool = True, to: Any = None) -> Any:
    """``numba.cuda.to_device`` as numba-cuda does it on a GPU (``to=`` returned, ``copy=``)."""
    if to is not None:
        if copy:
            to.copy_to_device(obj, stream=stream)
        return to
    devary, _ = auto_device(obj, stream=stream, copy=copy)
    return devary


def auto_device(obj: Any, stream: Any = 0, copy: bool = True, user_explicit: bool = False) -> Any:
    if isinstance(obj, _sim.FakeCUDAArray):
        return obj, False
    if isinstance(obj, np.ndarray) and getattr(obj, "__cuda_memory__", False):
        # A mapped array: the device addresses this host memory directly (a view of one has
        # no gpu_data, so numba passes a NULL pointer: the launch check reports it).
        # numba-cuda's dispatcher passes ``device_ctypes_pointer``: NULL for a view without
        # gpu_data; a pointer that is not the view's first element is a wrong address.
        devary = _sim.FakeCUDAArray(obj.view(np.ndarray), stream=stream)
        # (numba's MappedNDArray: an ndarray with a device array's attributes)
        address = obj.device_ctypes_pointer.value or 0  # type: ignore[attr-defined]
        if address == 0:
            devary.__dict__["_strict_null"] = True
        elif address != pointer(obj):
            devary.__dict__["_strict_wrong_address"] = address
        return devary, False
    if isinstance(obj, np.void):
        return _sim.FakeCUDAArray(np.copy(obj)), True
    ary = np.array(obj, copy=None, subok=True)
    _sim.sentry_contiguous(ary)
    devary = on_device(ary.shape, ary.dtype, _fit_strides(ary), stream)
    if copy:
        devary.copy_to_device(ary, stream=stream)
    return devary, True


def _fit_strides(ary: np.ndarray) -> tuple[int, ...]:
    # A device copy of ary with ary's strides (broadcast dimensions keep stride 0); a negative
    # stride only occurs in a contiguous array of at most one element.
    if all(st >= 0 for st in ary.strides):
        return ary.strides
    return layout(ary.shape, ary.dtype)[2]


def pinned_array(
    shape: Any, dtype: Any = np.float64, strides: Any = None, order: str = "C"
) -> np.ndarray:
    return on_host(*layout(shape, dtype, strides, order), "pinned")


def pinned_array_like(ary: Any) -> np.ndarray:
    strides = _sim._contiguous_strides_like_array(ary)
    order = _sim._order_like_array(ary)
    return pinned_array(ary.shape, ary.dtype, strides, order)


class MappedPointer:
    """numba's ``MemoryPointer`` of mapped memory, as far as arrays and views use it."""

    def __init__(self, owner: Any, address: int) -> None:
        self.owner = owner  # keeps the host memory alive
        self.address = address

    def view(self, start: int, stop: int | None = None) -> MappedPointer:
        """The pointer ``start`` bytes further on (numba's ``MemoryPointer.view``)."""
        return MappedPointer(self.owner, self.address + int(start))

    @property
    def device_ctypes_pointer(self) -> ctypes.c_void_p:
        """The device address, as numba's kernel launch reads it."""
        return ctypes.c_void_p(self.address)


class StrictMappedNDArray(np.ndarray):
    """numba-cuda's ``MappedNDArray`` in strict mode: page-locked host memory the device addresses.

    As numba builds it (``np.ndarray.view`` plus ``device_setup``, without
    ``DeviceNDArrayBase.__init__``), it has no ``alloc_size``: its ``copy_to_host``,
    ``copy_to_device`` and ``split`` raise ``AttributeError`` as on a GPU. Only the array
    ``mapped_array`` returned has a device pointer (``gpu_data``); its views (slices, reshapes)
    reach a kernel as a NULL pointer, as on a GPU.
    """

    __cuda_memory__ = True
    __cuda_ndarray__ = True

    def device_setup(self, gpu_data: Any, stream: Any = 0) -> None:
        if not isinstance(gpu_data, MappedPointer):  # memhostalloc's buffer (numba: MappedMemory)
            gpu_data = MappedPointer(gpu_data, pointer(gpu_data))
        self.gpu_data = gpu_data
        self.stream = stream

    @property
    def device_ctypes_pointer(self) -> Any:
        gpu_data = self.__dict__.get("gpu_data")
        return ctypes.c_void_p(gpu_data.address if gpu_data is not None else 0)

    def _missing(self, name: str) -> AttributeError:
        return AttributeError(f"'MappedNDArray' object has no attribute {name!r}")

    def copy_to_host(self, ary: Any = None, stream: Any = 0) -> np.ndarray:
        raise self._missing("alloc_size")

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        raise self._missing("alloc_size")

    def split(self, section: int, stream: Any = 0) -> list[Any]:
        raise self._missing("_dummy")

    def is_c_contiguous(self) -> bool:
        return bool(self.flags.c_contiguous)

    def is_f_contiguous(self) -> bool:
        return bool(self.flags.f_contiguous)


def mapped_array(
    shape: Any,
    dtype: Any = np.float64,
    strides: Any = None,
    order: str = "C",
    stream: Any = 0,
    portable: bool = False,
    wc: bool = False,
) -> np.ndarray:
    host = on_host(*layout(shape, dtype, strides, order), "mapped")
    mapped = host.view(StrictMappedNDArray)
    base = host.base  # the page-locked allocation on_host made
    assert isinstance(base, np.ndarray)
    mapped.device_setup(MappedPointer(base, pointer(base)), stream=stream)
    return mapped


def _host_size(ary: np.ndarray) -> tuple[int, int]:
    lo, hi = byte_extent(ary)
    return lo, hi - lo


@contextlib.contextmanager
def pinned(*arylist: np.ndarray) -> Iterator[None]:
    """``numba.cuda.pinned``: page-lock several host arrays for the block."""
    pms = [PinnedMemory(a, *_host_size(a), mapped=False) for a in arylist]
    try:
        yield
    finally:
        for pm in pms:
            pm.free()


@contextlib.contextmanager
def mapped(*arylist: np.ndarray, **kws: Any) -> Iterator[Any]:
    """``numba.cuda.mapped``: map several host arrays into the device for the block."""
    stream = kws.get("stream", 0)
    pms = []
    devs = []
    try:
        for a in arylist:
            pms.append(PinnedMemory(a, *_host_size(a), mapped=True))
            devs.append(_sim.FakeCUDAArray(a, stream=stream))
        yield devs[0] if len(devs) == 1 else devs
    finally:
        for pm in pms:
            pm.free()


def in_kernel() -> bool:
    return _get_kernel_context() is not None
