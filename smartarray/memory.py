"""The low-level memory primitives, with the signatures of numba.cuda's reference pages.

This is the only module that allocates device or page-locked memory or copies bytes
between host and device, and every copy it makes is counted in :mod:`smartarray.stats`.

The device objects returned are Numba's own (``DeviceNDArray``, ``DeviceRecord``,
``MappedNDArray``; ``FakeCUDAArray`` on the simulator), so every kernel takes them. They
are re-classed into thin subclasses whose copying methods report to the counters; views
made from them (indexing, ``reshape``, ``ravel``, ``split``, ...) stay counted.

The numba CUDA simulator differs from a GPU in ways this module hides, so that code above
it behaves the same on both:

- it has no ``cuda.mapped``: :func:`mapped` aliases the host array instead (exactly what
  a mapping does, minus the hardware);
- its ``pinned()`` takes one array and its ``pinned_array`` is ordinary memory: page-locking
  is recorded but emulated;
- its ``to_device(to=d)`` returns ``None`` and its ``to_device(copy=False)`` copies anyway;
- its ``mapped_array`` returns a fake device array, not an ``ndarray``: :func:`mapped_array`
  returns an ``ndarray`` subclass with the ``MappedNDArray`` methods (on both targets the
  counted class copies mapped memory on the host: numba's own methods fail on a GPU);
- ``np.asarray`` of a simulated device array aliases device memory (a GPU copies): the
  counted subclass makes ``__array__`` copy, as on a GPU;
- ``split`` returns a list there and a generator on a GPU: :meth:`split` returns a list.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numba
import numpy as np
from numba import cuda

from .errors import RegistrationError, _DtypeMismatchError
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
    "pinned",
    "pinned_array",
    "register",
    "stream",
    "to_device",
]

#: True when numba.cuda is the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
SIMULATOR: bool = bool(numba.config.ENABLE_CUDASIM)

_ORDERS = ("C", "F")
_INTP_MAX = int(np.iinfo(np.intp).max)


# ---------------------------------------------------------------------------------------------
# Argument checking: every public function validates before it allocates or copies anything.


def _check_shape(shape: Any, name: str = "shape", itemsize: int = 1) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, checked with exact (Python int) arithmetic.

    As NumPy, the product of the nonzero dimensions times ``itemsize`` must fit in ``np.intp``
    (an int64 product would wrap around silently).
    """
    if isinstance(shape, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}")
    try:
        dims = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
        if any(isinstance(d, (bool, np.bool_)) for d in shape):
            raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{name} must not have negative dimensions, got {shape!r}")
    nbytes = itemsize
    for d in dims:
        nbytes *= d or 1
    if nbytes > _INTP_MAX:
        raise ValueError(
            f"{name} {shape!r} is too big: {nbytes} bytes exceed the largest addressable size "
            f"({_INTP_MAX} bytes)"
        )
    return dims


def _check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be a NumPy dtype or something np.dtype() accepts: {exc}"
        ) from None
    if dt.hasobject:
        raise TypeError(
            f"{name} {dt} holds Python objects, which device memory cannot hold; "
            "use a numeric, boolean or structured dtype"
        )
    return dt


def _check_order(order: Any) -> str:
    if order not in _ORDERS:
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    return order


def _check_strides(strides: Any, ndim: int) -> tuple[int, ...] | None:
    if strides is None:
        return None
    try:
        result = tuple(operator.index(s) for s in strides)
    except TypeError:
        raise TypeError(f"strides must be None or a tuple of ints, got {strides!r}") from None
    if len(result) != ndim:
        raise ValueError(f"strides must have one entry per dimension ({ndim}), got {strides!r}")
    return result


def _check_layout(
    shape: Any, dtype: Any, strides: Any, order: Any
) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...] | None, str]:
    """Check the arguments numpy.empty-like allocators share; return them normalised."""
    dims = _check_shape(shape)
    dt = _check_dtype(dtype)
    _check_shape(dims, itemsize=dt.itemsize)
    return dims, dt, _check_strides(strides, len(dims)), _check_order(order)


def _check_stream(stream: Any) -> Any:
    """Accept 0 (the default stream) or a stream object, as numba.cuda does."""
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        if stream != 0:
            raise ValueError(
                f"stream must be 0 (the default stream) or a stream object, got {stream!r}"
            )
        return 0
    if callable(getattr(stream, "synchronize", None)):
        return _foreign_stream(stream)
    raise TypeError(
        "stream must be 0 (the default stream) or a stream from smartarray.stream() "
        f"or numba.cuda.stream(), got {type(stream).__name__}"
    )


def _foreign_stream(stream: Any) -> Any:
    """CuPy's and PyTorch's streams as numba's ``external_stream`` (numba's copies need one).

    A stream with a ``handle`` (numba's) is taken as it is; one that names its CUstream
    through ``__cuda_stream__()`` (the CUDA stream protocol) or PyTorch's ``cuda_stream`` is
    wrapped. The simulator has no external streams: there it is taken as it is.
    """
    if SIMULATOR or getattr(stream, "handle", None) is not None:
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    handle = protocol()[1] if callable(protocol) else getattr(stream, "cuda_stream", None)
    if handle is None:
        return stream
    return cuda.external_stream(int(handle))


def _check_host_array(ary: Any, name: str) -> np.ndarray:
    if not isinstance(ary, np.ndarray):
        raise TypeError(f"{name} must be numpy.ndarray, got {type(ary).__name__}")
    return ary


def _host_array_from(obj: Any, gather: bool = False) -> np.ndarray | np.void:
    """Turn ``obj`` into something numba can upload, with errors that name ``obj``.

    ``gather=True``: a strided ``obj`` is accepted (the caller gathers it, as numba does).
    """
    if isinstance(obj, np.void):
        _check_dtype(obj.dtype, "obj.dtype")
        return obj
    try:
        ary = np.asarray(obj)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"obj cannot be turned into an array: {exc}") from None
    if ary.dtype.hasobject:
        raise TypeError(
            "obj has object dtype (ragged or Python objects), which device memory cannot "
            "hold; pass a numeric, boolean or structured array"
        )
    if ary.dtype.kind in "US":
        raise TypeError(f"obj has string dtype {ary.dtype}; device arrays hold numbers and records")
    if not gather and not _is_contiguous(ary):
        raise ValueError(
            "obj must be C- or F-contiguous to be copied in one transfer; "
            "pass np.ascontiguousarray(obj)"
        )
    return ary


def _is_contiguous(ary: np.ndarray) -> bool:
    # Broadcast (stride 0) and length-1 dimensions do not break contiguity for numba.
    if ary.size == 0:
        return True
    core = ary[tuple(0 if s == 0 else slice(None) for s in ary.strides)] if ary.ndim else ary
    return bool(core.flags.c_contiguous or core.flags.f_contiguous)


def describe(ary: Any) -> str:
    """A short description of an array for trace events, e.g. ``'float64[10]'``."""
    dtype = getattr(ary, "dtype", None)
    shape = getattr(ary, "shape", ())
    dims = ",".join(str(d) for d in shape)
    return f"{dtype}[{dims}]"


def _is_device_array(obj: Any) -> bool:
    return bool(getattr(obj, "__cuda_ndarray__", False)) and not isinstance(obj, np.ndarray)


# ---------------------------------------------------------------------------------------------
# Counted device objects.


class _Counted:
    """Mixin that counts the copies a numba device object makes and keeps its views counted."""

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
        """Copy ``self`` to ``ary`` or to a new ndarray (returned), on ``stream`` if given."""
        stream = _check_stream(stream)
        if ary is not None:
            _check_host_array(ary, "ary")
        nbytes = self.alloc_size  # type: ignore[attr-defined]
        began = _begin("d2h", nbytes, "copy_to_host", describe(self)) if nbytes else None
        try:
            result = super().copy_to_host(ary, stream=stream)  # type: ignore[misc]
        except BaseException:
            _abort(began)
            raise
        if nbytes:
            _record("d2h", nbytes, "copy_to_host", describe(self), stream=stream, began=began)
        return result

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        """Copy ``ary`` (host or device memory) into ``self``, on ``stream`` if given.

        Accepts what numba.cuda accepts, checked in its order (see :func:`_copy_source`): a
        strided host array is gathered into a contiguous host copy first.
        """
        stream = _check_stream(stream)
        device_source = _is_device_array(ary)
        source = _copy_source(self, ary, "ary")
        if source is None:
            return  # an empty source: numba copies nothing and checks nothing
        direction = "d2d" if device_source else "h2d"
        nbytes = self.alloc_size  # type: ignore[attr-defined]
        began = _begin(direction, nbytes, "copy_to_device", describe(self))
        try:
            super().copy_to_device(_as_numba_source(source), stream=stream)  # type: ignore[misc]
        except BaseException:
            _abort(began)
            raise
        _record(direction, nbytes, "copy_to_device", describe(self), stream=stream, began=began)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        # A GPU copies to the host here; the simulator would alias device memory.
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype, copy=False)

    def __getattr__(self, name: str) -> Any:
        # The simulator's fake array forwards unknown attributes to the ndarray it wraps;
        # forwarding these two would let np.asarray alias device memory, which a GPU array
        # cannot do (it has neither attribute).
        if name in ("__array_interface__", "__array_struct__"):
            raise AttributeError(name)
        forward = getattr(super(), "__getattr__", None)
        if forward is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return forward(name)

    def __getitem__(self, item: Any) -> Any:
        result = super().__getitem__(item)  # type: ignore[misc]
        if _is_device_array(result):
            return _adopt(result)
        if _in_simulated_kernel():
            return result  # a kernel's own element access, not a transfer
        # A scalar element read from device memory is a device-to-host copy on a GPU. The guard
        # is asked once the read is known to be one (a refused read returns nothing).
        nbytes = self.dtype.itemsize  # type: ignore[attr-defined]
        began = _begin("d2h", nbytes, "element read", describe(self))
        _record("d2h", nbytes, "element read", describe(self), began=began)
        return result

    def __setitem__(self, key: Any, value: Any) -> None:
        began = None
        counted = not _is_device_array(value) and not _in_simulated_kernel()
        if counted:
            # numba uploads the value as it is (its own dtype, not broadcast), then a kernel
            # broadcasts it into place on the device.
            nbytes = np.asarray(value).nbytes
            began = _begin("h2d", nbytes, "element write", describe(self))
        try:
            super().__setitem__(key, value)  # type: ignore[misc]
        except BaseException:
            _abort(began)
            raise
        if counted:
            _record("h2d", nbytes, "element write", describe(self), began=began)

    def reshape(self, *newshape: Any, **kws: Any) -> Any:
        """Reshape without changing contents, like ``numpy.ndarray.reshape`` (``order=`` too)."""
        return _adopt(super().reshape(*newshape, **kws))  # type: ignore[misc]

    def ravel(self, order: str = "C", stream: Any = 0) -> Any:
        """Flatten without changing contents, like ``numpy.ndarray.ravel``."""
        if SIMULATOR:
            return _adopt(super().ravel(order=order))  # type: ignore[misc]
        return _adopt(super().ravel(order=order, stream=stream))  # type: ignore[misc]

    def split(self, section: int, stream: Any = 0) -> list[Any]:
        """Split into parts of ``section`` elements (the last may be smaller), as a list."""
        return [_adopt(part) for part in super().split(section, stream=stream)]  # type: ignore[misc]

    def bind(self, stream: Any = 0) -> Any:
        """A copy of this reference whose operations default to ``stream``."""
        return _adopt(super().bind(stream))  # type: ignore[misc]

    def view(self, *args: Any, **kwargs: Any) -> Any:
        """The same memory seen with another dtype."""
        return _adopt(super().view(*args, **kwargs))  # type: ignore[misc]

    def transpose(self, axes: Any = None) -> Any:
        """The transposed array."""
        return _adopt(super().transpose(axes))  # type: ignore[misc]

    @property
    def T(self) -> Any:  # noqa: N802 - numpy's name
        """The transposed array."""
        return self.transpose()


def _in_simulated_kernel() -> bool:
    """Whether the simulator is running a kernel (whose element accesses are no transfers)."""
    if not SIMULATOR:
        return False
    from numba.cuda.simulator import kernel

    return kernel._get_kernel_context() is not None


# numba-cuda's own messages (cudadrv/devicearray.py), so code that matches them keeps working.
_NONCONTIGUOUS = (
    "Array contains non-contiguous buffer and cannot be transferred as a single memory region. "
    "Please ensure contiguous buffer with numpy .ascontiguousarray()"
)


def _core_probe(ary: Any) -> np.ndarray:
    """numba's ``array_core(ary)`` geometry (broadcast dimensions dropped), reading no memory."""
    kept = [(d, s) for d, s in zip(ary.shape, ary.strides, strict=True) if s != 0]
    return np.lib.stride_tricks.as_strided(
        np.zeros(1, np.dtype((np.void, max(ary.dtype.itemsize, 1)))),
        tuple(d for d, _ in kept),
        tuple(s for _, s in kept),
    )


def _squeezed(ary: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    kept = [(d, s) for d, s in zip(ary.shape, ary.strides, strict=True) if d != 1]
    return tuple(d for d, _ in kept), tuple(s for _, s in kept)


def _copy_source(dst: Any, src: Any, name: str) -> Any:
    """What ``dst.copy_to_device(src)`` copies, checked as numba-cuda checks it; None: nothing.

    numba-cuda's ``DeviceNDArrayBase.copy_to_device``, in its order and with its messages:
    an empty source copies nothing; the destination's core (broadcast dimensions dropped)
    must be contiguous; a device source's too, while a host source's core is gathered into a
    contiguous host copy in the destination's order (no transfer); then the cores' dtype
    (``TypeError``, also a ``ValueError``), shape and strides (``ValueError``), ignoring
    length-1 dimensions. A structured scalar into a device record is numba's record copy.
    """
    device_source = _is_device_array(src)
    if not device_source:
        src = _host_array_from(src, gather=True)
    if isinstance(src, np.void) or not hasattr(dst, "strides"):
        _check_same_layout(dst, src, name)
        return src
    if src.size == 0:
        return None
    dst_core = _core_probe(dst)
    if not (dst_core.flags.c_contiguous or dst_core.flags.f_contiguous):
        raise ValueError(_NONCONTIGUOUS)
    if device_source:
        src_core = _core_probe(src)
        if not (src_core.flags.c_contiguous or src_core.flags.f_contiguous):
            raise ValueError(_NONCONTIGUOUS)
    else:
        core = src[tuple(0 if st == 0 else slice(None) for st in src.strides)]
        src = src_core = np.array(
            core, order="C" if dst_core.flags.c_contiguous else "F", copy=None
        )
    if np.dtype(src.dtype) != np.dtype(dst.dtype):
        raise _DtypeMismatchError(f"incompatible dtype: {dst.dtype} vs. {src.dtype}")
    _check_geometry(dst_core, src_core)
    return src


def _as_numba_source(source: Any) -> Any:
    """The source to hand numba's own ``copy_to_device``.

    Simulator gap: its ``copy_to_device`` reads a device source through ``__array__``, which
    for a counted array is a counted ``copy_to_host``: a d2d copy would also be counted as a
    d2h. There it gets the ndarray the fake device array wraps (the checks were done already).
    """
    if SIMULATOR and _is_device_array(source) and hasattr(source, "_ary"):
        return source._ary
    return source


def check_compatibility(first: Any, second: Any) -> None:
    """numba-cuda's ``check_array_compatibility``: dtype, shape, strides, with its messages.

    Length-1 dimensions are ignored; strides only matter for a non-empty array.
    """
    if np.dtype(first.dtype) != np.dtype(second.dtype):
        raise _DtypeMismatchError(f"incompatible dtype: {first.dtype} vs. {second.dtype}")
    _check_geometry(first, second)


def _check_geometry(first: Any, second: Any) -> None:
    (shape1, strides1), (shape2, strides2) = _squeezed(first), _squeezed(second)
    if shape1 != shape2:
        raise ValueError(f"incompatible shape: {first.shape} vs. {second.shape}")
    size = int(np.prod(first.shape, dtype=np.int64))
    if size and strides1 != strides2:
        raise ValueError(f"incompatible strides: {first.strides} vs. {second.strides}")


def _check_same_layout(dst: Any, src: Any, name: str) -> None:
    if np.dtype(src.dtype) != np.dtype(dst.dtype):
        raise ValueError(f"{name} has dtype {src.dtype}, the destination has dtype {dst.dtype}")
    if tuple(s for s in src.shape if s != 1) != tuple(s for s in dst.shape if s != 1):
        raise ValueError(
            f"{name} has shape {tuple(src.shape)}, the destination has shape {tuple(dst.shape)}"
        )


_COUNTED: dict[type, type] = {}


# A mapped array is host memory: indexing, views and ``np.asarray`` are ndarray's own.
_NDARRAY_PASSTHROUGH = {
    name: getattr(np.ndarray, name)
    for name in (
        "__getitem__",
        "__setitem__",
        "__array__",
        "__array_interface__",
        "__array_struct__",
        "reshape",
        "ravel",
        "view",
        "transpose",
        "T",
        "squeeze",
    )
}


class _CountedMapped(_Counted):
    """What a mapped array (host memory the device addresses) adds to numba's MappedNDArray.

    numba builds ``MappedNDArray`` as an ndarray view without ``DeviceNDArrayBase.__init__``,
    so its device-array methods that read ``alloc_size`` or ``_dummy`` fail on a GPU. Mapped
    memory is host memory, so copies in and out of it are made by the host, after waiting for
    the device work that may use it. They move no bytes between host and device and are not
    counted as transfers (as kernels reading or writing mapped memory are not); a copy from
    a device array into a mapped array is a download and is counted.
    """

    @property
    def alloc_size(self) -> int:
        """Bytes spanned by the array's elements."""
        lo, hi = _byte_extent(self)  # type: ignore[arg-type]
        return hi - lo

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
        """Copy ``self`` to ``ary`` or to a new ndarray (returned): a host-side copy."""
        stream = _check_stream(stream)
        if ary is not None:
            _check_host_array(ary, "ary")
            _check_same_layout(self, ary, "ary")
        _wait_for_mapped(self, stream)
        src = self.view(np.ndarray)  # type: ignore[attr-defined]
        if ary is None:
            return np.array(src, copy=True, order="K")
        np.copyto(ary, src.reshape(ary.shape))
        return ary

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        """Copy ``ary`` into ``self``: a host-side copy, or a download from a device array."""
        stream = _check_stream(stream)
        device_source = _is_device_array(ary)
        if not device_source:
            ary = _host_array_from(ary)
        _check_same_layout(self, ary, "ary")
        dst = self.view(np.ndarray)  # type: ignore[attr-defined]
        if device_source:
            # numba writes device bytes straight into the page-locked host memory.
            _Uncounted(ary).copy_to_host(dst.reshape(ary.shape), stream=stream)
            if ary.size:
                _record("d2h", dst.nbytes, "copy_to_device", describe(self))
            return
        _wait_for_mapped(self, stream)
        np.copyto(dst, np.asarray(ary).reshape(dst.shape))

    def bind(self, stream: Any = 0) -> Any:
        """A view of this mapped memory whose operations default to ``stream``.

        (numba's ``bind`` copies a mapped array with ``copy.copy``, which for an ndarray copies
        the data into memory that is not mapped.)
        """
        stream = _check_stream(stream)
        view = self.view(type(self))  # type: ignore[attr-defined]
        view.__dict__["stream"] = stream
        return view

    def split(self, section: int, stream: Any = 0) -> list[Any]:
        """Split a 1-d mapped array into views of ``section`` elements (the last may be smaller).

        (numba's ``split`` reads ``_dummy``, which a ``MappedNDArray`` does not have.)
        """
        if self.ndim != 1:  # type: ignore[attr-defined]
            raise ValueError("only support 1d array")
        size = self.size  # type: ignore[attr-defined]
        return [self[i : i + section] for i in range(0, size, section)]  # type: ignore[index]

    def is_c_contiguous(self) -> bool:
        """Whether the array is C-contiguous."""
        return bool(self.flags.c_contiguous)  # type: ignore[attr-defined]

    def is_f_contiguous(self) -> bool:
        """Whether the array is Fortran-contiguous."""
        return bool(self.flags.f_contiguous)  # type: ignore[attr-defined]


def _wait_for_mapped(ary: Any, stream: Any) -> None:
    """Wait, before the host touches mapped memory, for device work that may use it.

    A device array's ``copy_to_host(stream=s)`` is ordered after the work queued on ``s``; the
    host-side copy of mapped memory is ordered by waiting for ``s`` (the array's bound stream
    when none is given), or for the whole device where that is the default stream (a copy on
    the legacy default stream waits for every blocking stream).
    """
    stream = stream or getattr(ary, "stream", 0)
    if stream:
        stream.synchronize()
    else:
        cuda.synchronize()


# Views of a mapped array (slices, reshapes, fields: NumPy makes them) are created without the
# ``gpu_data`` that numba's MappedNDArray sets on the array it allocates, and numba's pointer
# then falls back to NULL (numba issue #2987). The counted class gives each view the device
# pointer of its first element, derived from the allocation's, when first asked; an array of
# the class that is not in mapped memory (a copy, a NumPy result) refuses to give one.


def _data_address(ary: np.ndarray) -> int:
    return int(np.ndarray.__array_interface__.__get__(ary)["data"][0])  # type: ignore[attr-defined]


def _mapped_finalize(self: Any, obj: Any) -> None:
    # Called by NumPy for every array derived from a mapped one: remember the allocation.
    d = getattr(obj, "__dict__", None)
    if not d:
        return
    root = d.get("_mapped_root")
    if root is None:
        mem = d.get("gpu_data")
        if mem is None:
            return
        lo, hi = _byte_extent(obj)
        if _data_address(obj) != lo:
            return  # the allocation's pointer is that of its lowest byte
        root = d["_mapped_root"] = (mem, lo, hi)
    self.__dict__["_mapped_root"] = root
    if "stream" in d:
        self.__dict__["stream"] = d["stream"]


def _mapped_gpu_data_get(self: Any) -> Any:
    d = self.__dict__
    mem = d.get("gpu_data")
    if mem is None:
        root = d.get("_mapped_root")
        lo, hi = _byte_extent(self)
        if root is None or not (root[1] <= lo and hi <= root[2]):
            raise ValueError(
                f"this {type(self).__name__} does not lie in mapped memory (it is a copy, or the "
                "result of a NumPy operation on a mapped array), so the device cannot address "
                "it; pass the mapped array or a view of it, or an ordinary ndarray"
            )
        mem = d["gpu_data"] = root[0].view(_data_address(self) - root[1])
    return mem


def _mapped_gpu_data_set(self: Any, mem: Any) -> None:
    self.__dict__["gpu_data"] = mem  # numba's device_setup


def _mapped_device_ctypes_pointer(self: Any) -> Any:
    return self.gpu_data.device_ctypes_pointer


_MAPPED_DEVICE_POINTER = {
    "__array_finalize__": _mapped_finalize,
    "gpu_data": property(_mapped_gpu_data_get, _mapped_gpu_data_set),
    "device_ctypes_pointer": property(_mapped_device_ctypes_pointer),
}


def _counted_class(base: type) -> type:
    counted = _COUNTED.get(base)
    if counted is None:
        namespace: dict[str, Any] = {"__module__": __name__}
        mixin: type = _Counted
        if issubclass(base, np.ndarray):
            namespace.update(_NDARRAY_PASSTHROUGH)
            mixin = _CountedMapped
            if base is not _SimMappedNDArray:  # the plain simulator's kernels use host memory
                namespace.update(_MAPPED_DEVICE_POINTER)
        counted = type(base.__name__, (mixin, base), namespace)
        _COUNTED[base] = counted
        _COUNTED[counted] = counted
    return counted


def _adopt(obj: Any) -> Any:
    """Re-class a numba device object so its copies are counted (returns ``obj``)."""
    if obj is None or isinstance(obj, _Counted):
        return obj
    # Device arrays, and mapped arrays (ndarrays with the device-array interface).
    if getattr(obj, "__cuda_ndarray__", False) or isinstance(obj, _SimMappedNDArray):
        obj.__class__ = _counted_class(type(obj))
    return obj


class _SimMappedNDArray(np.ndarray):
    """The simulator's stand-in for ``MappedNDArray``: a host ndarray with its device methods.

    On a GPU a mapped array is host memory that kernels address directly. The simulator runs
    kernels on host memory anyway, so the ndarray itself is the mapping.
    """

    # alloc_size, copy_to_host, copy_to_device, split and is_c/f_contiguous: _CountedMapped,
    # as on a GPU.


# ---------------------------------------------------------------------------------------------
# The reference primitives.


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
                    _Uncounted(to).copy_to_device(_as_numba_source(source), stream=stream)
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
    if SIMULATOR:
        # The simulator allocates by copying a host record (host memory, nothing crosses).
        return _adopt(cuda.to_device(np.zeros((), dtype=rec.dtype)[()], stream=stream))
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
    if SIMULATOR and not hasattr(cuda, "mapped"):
        # The simulator's mapped_array is a fake device array, not an ndarray (strict mode
        # gives numba's MappedNDArray, so the GPU branch below runs).
        host = np.ndarray(dims, dtype=dt, strides=strides, order=order)
        return _registry.track_allocation(_adopt(host.view(_SimMappedNDArray)))
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


# ---------------------------------------------------------------------------------------------
# Page-locking and mapping of existing host arrays.


def _byte_extent(ary: np.ndarray) -> tuple[int, int]:
    low, high = (
        np.byte_bounds(ary) if hasattr(np, "byte_bounds") else np.lib.array_utils.byte_bounds(ary)
    )
    return int(low), int(high)


def _memory_owner(ary: np.ndarray) -> Any:
    """The object whose life is the life of ``ary``'s memory (the end of its base chain)."""
    owner: Any = ary
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner


class _Registry:
    """Host memory ranges page-locked through :func:`register`, keyed by byte extent.

    It also knows the memory that was allocated page-locked (:func:`pinned_array`,
    :func:`mapped_array`, so the host copy of ``SmartArray(pinned=True)`` too): page-locking it
    again fails on a GPU ("already registered"), so registering an array that lies in such an
    allocation does nothing, and deregistering it does nothing (it stays page-locked until it
    is freed). The simulator follows the same rules.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pins: dict[tuple[int, int], Any] = {}
        # Byte extents of live page-locked allocations (a count: freed memory can come back at
        # the same address before its finalizer's news is read).
        self._allocated: dict[tuple[int, int], int] = {}
        # Extents whose memory was freed. Finalizers run whenever the garbage collector does,
        # possibly inside a locked section of this thread: they only append here (atomic).
        self._freed: list[tuple[int, int]] = []

    def track_allocation(self, ary: Any) -> Any:
        """Remember that ``ary``'s memory was allocated page-locked (returns ``ary``)."""
        extent = _byte_extent(ary)
        if extent[0] == extent[1]:
            return ary
        with self._lock:
            self._allocated[extent] = self._allocated.get(extent, 0) + 1
        try:
            weakref.finalize(_memory_owner(ary), self._freed.append, extent)
        except TypeError:  # an owner without weak references: the array's own life, then
            weakref.finalize(ary, self._freed.append, extent)
        return ary

    def _page_locked_at_allocation(self, extent: tuple[int, int]) -> bool:
        """Whether ``extent`` lies in a live page-locked allocation (call with the lock held)."""
        while self._freed:
            gone = self._freed.pop()
            left = self._allocated.pop(gone, 1) - 1
            if left > 0:
                self._allocated[gone] = left
        # Linear in the live page-locked allocations: registration is not a fast path.
        return any(lo <= extent[0] and extent[1] <= hi for lo, hi in self._allocated)

    def is_registered(self, ary: np.ndarray) -> bool:
        with self._lock:
            extent = _byte_extent(ary)
            return extent in self._pins or (
                extent[0] != extent[1] and self._page_locked_at_allocation(extent)
            )

    def register(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Page-lock the arrays not registered yet; return those it registered."""
        with self._lock:
            todo: dict[tuple[int, int], np.ndarray] = {}
            for ary in arrays:
                extent = _byte_extent(ary)
                if extent in self._pins or extent in todo or extent[0] == extent[1]:
                    continue
                if self._page_locked_at_allocation(extent):
                    continue  # page-locked since its allocation: locking it again would fail
                for other in (*self._pins, *todo):
                    if extent[0] < other[1] and other[0] < extent[1]:
                        raise RegistrationError(
                            "the array overlaps a registered array without covering the same "
                            "bytes; register the base array once instead"
                        )
                todo[extent] = ary
            done = []
            try:
                for extent, ary in todo.items():
                    self._pins[extent] = _pin(ary, extent)
                    done.append(ary)
            except BaseException:
                for ary in done:
                    _unpin(self._pins.pop(_byte_extent(ary)))
                raise
            return done

    def deregister(self, arrays: Sequence[np.ndarray]) -> None:
        with self._lock:
            extents = []
            for ary in arrays:
                extent = _byte_extent(ary)
                if extent[0] == extent[1]:
                    continue
                if extent not in self._pins:
                    if self._page_locked_at_allocation(extent):
                        continue  # allocated page-locked: it stays so until it is freed
                    raise RegistrationError(
                        "cannot deregister an array that is not registered "
                        "(register it first, or check that it is the same array)"
                    )
                extents.append(extent)
            if extents:
                _wait_before_unpinning()
            for extent in dict.fromkeys(extents):
                _unpin(self._pins.pop(extent))


#: What :func:`_pin` returns for memory the driver reports as page-locked already.
_LOCKED_ELSEWHERE = object()


def _pin(ary: np.ndarray, extent: tuple[int, int], mapped: bool = False) -> Any:
    if SIMULATOR and not hasattr(cuda.current_context(), "mempin"):
        return None  # page-locking is emulated on the simulator (strict mode models mempin)
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        return cuda.current_context().mempin(ary, extent[0], extent[1] - extent[0], mapped=mapped)
    except CudaAPIError as exc:
        # Memory page-locked outside this registry (numba.cuda.pinned_array, another
        # library): registered in name only, its deregistration unpins nothing.
        if getattr(exc.code, "name", exc.code) in _ALREADY_REGISTERED:
            return _LOCKED_ELSEWHERE
        raise


_ALREADY_REGISTERED = ("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 712)


def _wait_before_unpinning() -> None:
    """Wait for the device before memory stops being page-locked.

    An asynchronous copy from or to the memory (``to_device(a, stream=s)``,
    ``copy_to_host(a, stream=s)``) may still be queued: the DMA engine reads page-locked memory
    directly, and unpinning under it is undefined. Which streams used the memory is not known
    here, so this waits for the whole device; deregistration is rare.
    """
    cuda.synchronize()


def _unpin(pin: Any) -> None:
    # numba's PinnedMemory has no free(): a weakref finalizer unregisters the memory when its
    # last reference goes, and the registry held the only one. Mapped pins do have free().
    free = getattr(pin, "free", None)
    if free is not None:
        free()


_registry = _Registry()


class _Registration:
    """What :func:`register` returns: usable as a context manager that deregisters on exit."""

    def __init__(self, arrays: tuple[np.ndarray, ...], registered: list[np.ndarray]) -> None:
        self.arrays = arrays
        self._registered = registered

    def __enter__(self) -> tuple[np.ndarray, ...]:
        return self.arrays

    def __exit__(self, *exc: object) -> None:
        # Only what this call registered (an array registered earlier stays registered), and
        # only what is still registered (the block may have deregistered some itself).
        _registry.deregister([a for a in self._registered if _registry.is_registered(a)])
        self._registered = []

    def __repr__(self) -> str:
        return f"<smartarray registration of {len(self.arrays)} array(s)>"


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
    if SIMULATOR and not hasattr(cuda, "mapped"):
        # No cuda.mapped on the simulator (strict mode adds one): a fake device array wrapping
        # the host array aliases its memory, which is what a mapping is.
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        devarys = [_adopt(FakeCUDAArray(ary, stream=stream)) for ary in arrays]
        try:
            yield devarys[0] if len(devarys) == 1 else devarys
        finally:
            _wait_before_unpinning()  # as on a GPU: the block's kernels are done at its end
        return
    with cuda.mapped(*arrays, stream=stream) as devs:
        try:
            if len(arrays) == 1:
                yield _adopt(devs)
            else:
                yield [_adopt(d) for d in devs]
        finally:
            # numba unmaps on leaving its block: kernels launched in ours may still be using
            # the mapping (launches are asynchronous), so wait for them first.
            _wait_before_unpinning()


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


# ---------------------------------------------------------------------------------------------
# Byte-range copies for the layers above (SmartArray).


def copy_range(
    direction: str,
    host_bytes: np.ndarray,
    device_bytes: Any,
    start: int,
    stop: int,
    stream: Any = 0,
    reason: str = "",
    array: str = "",
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

    Raises
    ------
    TransferGuardError
        The transfer guard refuses the copy; nothing was copied.
    """
    if stop <= start:
        return
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    began = _begin(direction, stop - start, reason, array)  # the transfer guard may refuse
    try:
        host_part = host_bytes[start:stop]
        device_part = _raw(device_bytes)[start:stop]
        if direction == "h2d":
            device_part.copy_to_device(host_part, stream=stream)
        else:
            device_part.copy_to_host(host_part, stream=stream)
    except BaseException:
        _abort(began)
        raise
    _record(
        direction, stop - start, reason, array, start=start, stop=stop, stream=stream, began=began
    )


def _raw(devary: Any) -> _Uncounted:
    """The numba object underneath a counted one, so internal copies are counted once."""
    return _Uncounted(devary)


class _Uncounted:
    """Calls numba's own copy methods on a counted device object, bypassing the counting."""

    __slots__ = ("_dev",)

    def __init__(self, dev: Any) -> None:
        self._dev = dev

    def __getitem__(self, item: Any) -> _Uncounted:
        base = _base_class(self._dev)
        return _Uncounted(base.__getitem__(self._dev, item))

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        _base_class(self._dev).copy_to_device(self._dev, ary, stream=stream)

    def copy_to_host(self, ary: Any = None, stream: Any = 0) -> Any:
        return _base_class(self._dev).copy_to_host(self._dev, ary, stream=stream)


def _base_class(dev: Any) -> type:
    cls = type(dev)
    if issubclass(cls, _Counted):
        return next(c for c in cls.__mro__[1:] if c is not _Counted and not issubclass(c, _Counted))
    return cls


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
        ``FakeCUDAArray`` on the simulator.

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
    if SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        host = np.ndarray(dims, dt, buffer=device_bytes._ary, offset=offset, strides=steps)
        return _adopt(FakeCUDAArray(host))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    gpu_data = device_bytes.gpu_data.view(offset) if size else None  # numba: NULL when empty
    return _adopt(DeviceNDArray(dims, steps, dt, gpu_data=gpu_data))


def copy_device(dst: Any, src: Any, stream: Any = 0, reason: str = "", array: str = "") -> None:
    """Copy device array ``src`` into device array ``dst`` on the device, and count it ``d2d``.

    Both must be contiguous with the same dtype and shape (numba.cuda's checks apply).
    Used by :mod:`smartarray._interop` for data that must not round-trip through the host.

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
        if SIMULATOR:
            # A plain fake array: the counted one's __array__ would count a d2h as well.
            from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

            src = FakeCUDAArray(src._ary, stream=src.stream)
        _raw(dst).copy_to_device(src, stream=stream)
    except BaseException:
        _abort(began)
        raise
    _record("d2d", nbytes, reason, array, stream=stream, began=began)
