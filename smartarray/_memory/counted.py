"""Counting by re-classing numba's device objects.

The device objects the memory primitives return are numba's own (``DeviceNDArray``,
``DeviceRecord``, ``MappedNDArray``; a fake device array on the simulator), so every kernel takes
them. :func:`adopt` re-classes them into thin subclasses whose copying methods report to
:mod:`smartarray.stats`; views made from them (indexing, ``reshape``, ``ravel``, ``split``, ...)
stay counted. :class:`_Uncounted` reaches numba's own methods underneath, for copies the memory
layer counts itself (a copy is counted once).

A mapped array (host memory the device addresses) is an ndarray: its counted class copies on
the host, and gives each view of it the device pointer of its first element.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from .._platform import cuda_simulator as _sim
from ..stats import abort as _abort
from ..stats import begin as _begin
from ..stats import own_copy as _own_copy
from ..stats import record as _record
from . import streams as _streams
from .checks import (
    _byte_extent,
    _check_host_array,
    _check_same_layout,
    _check_stream,
    _copy_source,
    _host_array_from,
    is_device_array,
)


def describe(ary: Any) -> str:
    """A short description of an array for trace events, e.g. ``'float64[10]'``."""
    dtype = getattr(ary, "dtype", None)
    shape = getattr(ary, "shape", ())
    dims = ",".join(str(d) for d in shape)
    return f"{dtype}[{dims}]"


class _Counted(_sim.DeviceArrayGaps):
    """Mixin that counts the copies a numba device object makes and keeps its views counted."""

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
        """Copy ``self`` to ``ary`` or to a new ndarray (returned), on ``stream`` if given."""
        stream = _check_stream(stream)
        if ary is not None:
            _check_host_array(ary, "ary")
        nbytes = self.alloc_size
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
        device_source = is_device_array(ary)
        source = _copy_source(self, ary, "ary")
        if source is None:
            return  # an empty source: numba copies nothing and checks nothing
        direction = "d2d" if device_source else "h2d"
        nbytes = self.alloc_size
        began = _begin(direction, nbytes, "copy_to_device", describe(self))
        try:
            super().copy_to_device(_sim.numba_copy_source(source), stream=stream)  # type: ignore[misc]
        except BaseException:
            _abort(began)
            raise
        _record(direction, nbytes, "copy_to_device", describe(self), stream=stream, began=began)

    def __getitem__(self, item: Any) -> Any:
        result = super().__getitem__(_without_ellipsis(item, self.ndim))  # type: ignore[misc]  # (a mixin: the device array class follows it in the MRO)
        if is_device_array(result):
            return adopt(result)
        if _sim.in_kernel():
            return result  # a kernel's own element access, not a transfer
        # A scalar element read from device memory is a device-to-host copy on a GPU. The guard
        # is asked once the read is known to be one (a refused read returns nothing).
        nbytes = self.dtype.itemsize
        began = _begin("d2h", nbytes, "element read", describe(self))
        _record("d2h", nbytes, "element read", describe(self), began=began)
        return result

    def __setitem__(self, key: Any, value: Any) -> None:
        began = None
        counted = not is_device_array(value) and not _sim.in_kernel()
        if counted:
            # numba uploads the value as it is (its own dtype, not broadcast), then a kernel
            # broadcasts it into place on the device.
            nbytes = np.asarray(value).nbytes
            began = _begin("h2d", nbytes, "element write", describe(self))
        try:
            super().__setitem__(_without_ellipsis(key, self.ndim), value)  # type: ignore[misc]  # (as in __getitem__)
        except BaseException:
            _abort(began)
            raise
        if counted:
            _record("h2d", nbytes, "element write", describe(self), began=began)

    def reshape(self, *newshape: Any, **kws: Any) -> Any:
        """Reshape without changing contents, like ``numpy.ndarray.reshape`` (``order=`` too)."""
        return adopt(super().reshape(*newshape, **kws))  # type: ignore[misc]

    def ravel(self, order: str = "C", stream: Any = 0) -> Any:
        """Flatten without changing contents, like ``numpy.ndarray.ravel``."""
        return adopt(_sim.ravel(super(), order, stream))

    def split(self, section: int, stream: Any = 0) -> list[Any]:
        """Split into parts of ``section`` elements (the last may be smaller), as a list."""
        return [adopt(part) for part in super().split(section, stream=stream)]  # type: ignore[misc]

    def bind(self, stream: Any = 0) -> Any:
        """A copy of this reference whose operations default to ``stream``."""
        return adopt(super().bind(stream))  # type: ignore[misc]

    def view(self, *args: Any, **kwargs: Any) -> Any:
        """The same memory seen with another dtype."""
        return adopt(super().view(*args, **kwargs))  # type: ignore[misc]

    def transpose(self, axes: Any = None) -> Any:
        """The transposed array."""
        return adopt(super().transpose(axes))  # type: ignore[misc]

    @property
    def T(self) -> Any:  # noqa: N802 - numpy's name
        """The transposed array."""
        return self.transpose()


#: The counted class of each numba class (and of each counted class: itself).
_COUNTED: dict[type, type] = {}
#: The numba class underneath each counted class.
_BASES: dict[type, type] = {}


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
        src = self.view(np.ndarray)
        if ary is None:
            return np.array(src, copy=True, order="K")
        np.copyto(ary, src.reshape(ary.shape))
        return ary

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        """Copy ``ary`` into ``self``: a host-side copy, or a download from a device array."""
        stream = _check_stream(stream)
        device_source = is_device_array(ary)
        if not device_source:
            ary = _host_array_from(ary)
        _check_same_layout(self, ary, "ary")
        dst = self.view(np.ndarray)
        if device_source:
            # numba writes device bytes straight into the page-locked host memory.
            with _own_copy():  # counted just below
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
        view = self.view(type(self))
        view.__dict__["stream"] = stream
        return view

    def split(self, section: int, stream: Any = 0) -> list[Any]:
        """Split a 1-d mapped array into views of ``section`` elements (the last may be smaller).

        (numba's ``split`` reads ``_dummy``, which a ``MappedNDArray`` does not have.)
        """
        if self.ndim != 1:
            raise ValueError("only support 1d array")
        size = self.size
        return [self[i : i + section] for i in range(0, size, section)]

    def is_c_contiguous(self) -> bool:
        """Whether the array is C-contiguous."""
        return bool(self.flags.c_contiguous)

    def is_f_contiguous(self) -> bool:
        """Whether the array is Fortran-contiguous."""
        return bool(self.flags.f_contiguous)


def _wait_for_mapped(ary: Any, stream: Any) -> None:
    """Wait, before the host touches mapped memory, for device work that may use it.

    A device array's ``copy_to_host(stream=s)`` is ordered after the work queued on ``s``; the
    host-side copy of mapped memory is ordered by waiting for ``s`` (the array's bound stream
    when none is given), or for the whole device where that is the default stream (a copy on
    the legacy default stream waits for every blocking stream).
    """
    stream = stream or getattr(ary, "stream", 0)
    if stream:
        _streams.synchronize(stream)  # numba's synchronize(), cuda.core's sync()
    else:
        cuda.synchronize()


# Views of a mapped array (slices, reshapes, fields: NumPy makes them) are created without the
# ``gpu_data`` that numba's MappedNDArray sets on the array it allocates, and numba's pointer
# then falls back to NULL (numba issue #2987). The counted class gives each view the device
# pointer of its first element, derived from the allocation's, when first asked; an array of
# the class that is not in mapped memory (a copy, a NumPy result) refuses to give one.


def _data_address(ary: np.ndarray) -> int:
    return int(np.ndarray.__array_interface__.__get__(ary)["data"][0])


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
            if base is not _sim.SimMappedNDArray:
                # (The plain simulator's kernels use host memory: no device pointer to give.)
                namespace.update(_MAPPED_DEVICE_POINTER)
        counted = type(base.__name__, (mixin, base), namespace)
        _COUNTED[base] = counted
        _COUNTED[counted] = counted
        _BASES[counted] = base
    return counted


def adopt(obj: Any) -> Any:
    """Re-class a numba device object so its copies are counted (returns ``obj``)."""
    if obj is None or isinstance(obj, _Counted):
        return obj
    # Device arrays, and mapped arrays (ndarrays with the device-array interface).
    if getattr(obj, "__cuda_ndarray__", False) or isinstance(obj, _sim.SimMappedNDArray):
        obj.__class__ = _counted_class(type(obj))
    return obj


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


def _base_class(dev: Any) -> Any:  # a numba device-array class
    """numba's class underneath ``dev``'s counted class (``type(dev)`` for an uncounted one)."""
    cls = type(dev)
    base = _BASES.get(cls)
    if base is None:
        base = cls
        if issubclass(cls, _Counted):  # a subclass of a counted class: its first numba class
            mixins = (_Counted, _sim.DeviceArrayGaps)
            base = next(c for c in cls.__mro__[1:] if not issubclass(c, mixins))
    return base


def _without_ellipsis(key: Any, ndim: int) -> Any:
    """``key`` with its ``...`` spelled out as full slices.

    numba-cuda's device arrays index through ``dummyarray``, which has no ``Ellipsis`` (on a GPU
    ``d[...] = 0`` raises ``TypeError``; the simulator indexes the ndarray it wraps).
    """
    if key is Ellipsis:
        return (slice(None),) * ndim if ndim else key  # 0-d: ``d[...]`` is a view, not a read
    if type(key) is not tuple or not any(k is Ellipsis for k in key):
        return key
    at = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(at) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = (slice(None),) * max(ndim - (len(key) - 1), 0)
    return key[: at[0]] + fill + key[at[0] + 1 :]
