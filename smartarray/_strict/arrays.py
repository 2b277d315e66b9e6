"""The device-array surface of a GPU, put on the simulator's ``FakeCUDAArray``.

Outside a kernel a device array has only what numba-cuda's ``DeviceNDArray`` has: no NumPy
methods or arithmetic, ``np.asarray`` copies to the host, element access is a synchronous copy,
and copies follow CUDA's rules for streams and page-locked memory. Inside a simulated kernel the
array behaves as the simulator made it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from numba.cuda.simulator.cudadrv import devicearray as _sim

from . import state as _state
from .devmem import byte_extent, in_kernel, is_page_locked, pointer

__all__ = ["PATCHES"]

_FakeCUDAArray = _sim.FakeCUDAArray
_ORIG: dict[str, Any] = {name: _FakeCUDAArray.__dict__.get(name) for name in dir(_FakeCUDAArray)}

#: What ``DeviceNDArray`` has beyond the class attributes of ``FakeCUDAArray``.
_FORWARDED = frozenset({"strides", "dtype", "size", "ndim", "flags"})


def _stream(self: Any, stream: Any) -> Any:
    # numba's DeviceNDArrayBase._default_stream: the array's own stream unless one is given.
    return stream if stream else self.stream


def _getattr(self: Any, name: str) -> Any:
    if in_kernel() or name in _FORWARDED:
        return _ORIG["__getattr__"](self, name)
    raise AttributeError(
        f"a device array has no attribute {name!r} on a GPU (strict mode: numba-cuda's "
        "DeviceNDArray has no NumPy methods); copy it to the host first (copy_to_host())"
    )


def _array(self: Any, dtype: Any = None, copy: Any = None) -> np.ndarray:
    host = copy_to_host(self)
    return host if dtype is None else host.astype(dtype, copy=False)


def copy_to_host(self: Any, ary: Any = None, stream: Any = 0) -> np.ndarray:
    """Device to host: asynchronous only on a stream, into page-locked memory."""
    sch = _state.current().scheduler
    stream = _stream(self, stream)
    if ary is None:
        host = np.empty_like(self._ary)  # pageable: the copy is synchronous
        synchronous = True
    else:
        _sim.check_array_compatibility(self, ary)
        host = ary
        # As numba-cuda: any stream object (even one of the default stream, as a launch's
        # cuda.core Stream) takes cuMemcpyDtoHAsync, asynchronous into page-locked memory.
        synchronous = not stream or not is_page_locked(ary)
    src = self._ary
    op = sch.enqueue(stream, lambda: np.copyto(host, src), "copy d2h")
    if not synchronous:
        op.host_range = byte_extent(host)
    if synchronous:
        sch.count_host_sync()
        sch.run_until([op])
    return host


def copy_to_device(self: Any, ary: Any, stream: Any = 0) -> None:
    """Host or device to device: the source is read when the copy runs (unless pageable)."""
    sch = _state.current().scheduler
    stream = _stream(self, stream)
    _sim.sentry_contiguous(self)
    self_core = _sim.array_core(self)
    dst = self_core._ary
    if isinstance(ary, _FakeCUDAArray):
        _sim.sentry_contiguous(ary)
        ary_core = _sim.array_core(ary)
        _sim.check_array_compatibility(self_core, ary_core)
        src = ary_core._ary
        # Device to device: no host synchronisation, even on the default stream.
        sch.enqueue(stream, lambda: np.copyto(dst, src), "copy d2d")
        return
    ary_core = np.array(
        _sim.array_core(ary),
        order="C" if dst.flags["C_CONTIGUOUS"] else "F",
        subok=True,
        copy=None,
    )
    _sim.check_array_compatibility(self_core, ary_core)
    if not stream:
        # cuMemcpyHtoD (numba-cuda takes it for stream 0 only): synchronous. Any stream object,
        # even one of the default stream (a launch's cuda.core Stream), takes the Async call.
        op = sch.enqueue(stream, lambda: np.copyto(dst, ary_core), "copy h2d")
        sch.count_host_sync()
        sch.run_until([op])
    elif is_page_locked(ary_core):
        # Page-locked source: the DMA reads it when the copy runs, not now.
        op = sch.enqueue(stream, lambda: np.copyto(dst, ary_core), "copy h2d")
        op.host_range = byte_extent(ary_core)
    else:
        # Pageable source: staged before the call returns, written to the device later.
        staged = np.array(ary_core, copy=True)
        sch.enqueue(stream, lambda: np.copyto(dst, staged), "copy h2d")


def _getitem(self: Any, idx: Any) -> Any:
    ret = self._ary.__getitem__(idx)
    if type(ret) in (np.ndarray, np.void):
        return _FakeCUDAArray(ret, stream=self.stream)
    if in_kernel():
        return ret
    # An element read is a synchronous device-to-host copy on the array's stream.
    st = _state.current()
    st.scheduler.host_wait_stream(self.stream)
    return self._ary.__getitem__(idx)


def _setitem(self: Any, idx: Any, val: Any) -> None:
    if in_kernel():
        self._ary.__setitem__(idx, val)
        return
    sch = _state.current().scheduler
    dst = self._ary
    if isinstance(val, _FakeCUDAArray):
        src = val._ary
        op = sch.enqueue(self.stream, lambda: dst.__setitem__(idx, src), "setitem")
    else:
        staged = np.array(val, copy=True)
        op = sch.enqueue(self.stream, lambda: dst.__setitem__(idx, staged), "setitem")
    if sch.is_default_key(sch.key(self.stream)):
        sch.count_host_sync()
        sch.run_until([op])


def squeeze(self: Any, axis: Any = None, stream: Any = 0) -> Any:
    """A view without the length-1 dimensions (a device array)."""
    return _FakeCUDAArray(self._ary.squeeze(axis), stream=_stream(self, stream))


def _cuda_array_interface(self: Any) -> dict[str, Any]:
    ary = self._ary
    return {
        "shape": tuple(ary.shape),
        "strides": None if ary.flags.c_contiguous else tuple(ary.strides),
        "data": (pointer(ary) if ary.size else 0, False),
        "typestr": ary.dtype.str,
        "stream": None if not self.stream else int(self.stream),
        "version": 3,
    }


def _device_ctypes_pointer(self: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(pointer(self._ary) if self._ary.size else 0)


def _repr(self: Any) -> str:
    # A real DeviceNDArray's repr does not read device memory.
    return f"<strict DeviceNDArray shape={tuple(self._ary.shape)} dtype={self._ary.dtype}>"


def _no_arithmetic(name: str) -> Any:
    original = _ORIG[name]

    def method(self: Any, other: Any) -> Any:
        if in_kernel():
            return original(self, other)
        raise TypeError(
            f"a device array has no {name} on a GPU (strict mode); "
            "copy it to the host first (copy_to_host())"
        )

    method.__name__ = name
    return method


def _identity(name: str) -> Any:
    original = _ORIG[name]
    fallback = getattr(object, name)

    def method(self: Any, other: Any) -> Any:
        if in_kernel():
            return original(self, other)
        return fallback(self, other)  # DeviceNDArray compares by identity

    method.__name__ = name
    return method


PATCHES: dict[str, Any] = {
    "__getattr__": _getattr,
    "__array__": _array,
    "copy_to_host": copy_to_host,
    "copy_to_device": copy_to_device,
    "__getitem__": _getitem,
    "__setitem__": _setitem,
    "squeeze": squeeze,
    "__cuda_array_interface__": property(_cuda_array_interface),
    "__cuda_memory__": True,
    "device_ctypes_pointer": property(_device_ctypes_pointer),
    "__repr__": _repr,
    "__str__": _repr,
    "__hash__": object.__hash__,
    "__eq__": _identity("__eq__"),
    "__ne__": _identity("__ne__"),
    **{
        name: _no_arithmetic(name)
        for name in (
            "__lt__",
            "__le__",
            "__gt__",
            "__ge__",
            "__add__",
            "__sub__",
            "__mul__",
            "__floordiv__",
            "__truediv__",
            "__mod__",
            "__pow__",
        )
    },
}
