"""Device objects of other libraries coming in, coherence kept: construction from the CUDA
Array Interface, numba device arrays or DLPack (copied device to device, counted ``d2d``, or
adopted as the device copy with ``copy=False``), ``SmartArray.copy`` device to device, and
numba.cuda's ``as_cuda_array`` / ``is_cuda_array``.

What SmartArray hands out (the CUDA Array Interface, DLPack, ``cuda_view``) is
:mod:`smartarray._interop.exports`'s; see ``docs/interop.rst``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .. import memory
from .._engine import array_classes as _array_classes
from .._engine import budget as _budget
from .._engine import interface as _engine
from .._engine.buffer import GPU, HOST
from .._memory import devices as _devices
from .._memory.checks import is_device_array
from .._memory.counted import adopt
from .._numba.kernels import ArrayArgument
from .._platform import cuda_simulator as _sim
from ..coherence import IntervalSet
from ..errors import DeviceMemoryError, TransferError
from .device_objects import layout as _layout
from .device_objects import order_before_default
from .dlpack import KDL_CUDA
from .exports import CudaView, _adopt_device_bytes

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "as_cuda_array",
    "copy",
    "device_source",
    "fill_from_device",
    "host_dlpack",
    "is_cuda_array",
    "is_device_object",
]


def _has_interface(obj: Any) -> bool:
    return getattr(obj, "__cuda_array_interface__", None) is not None


def is_device_object(obj: Any) -> bool:
    """Whether ``SmartArray(obj)`` takes ``obj`` as device memory (copied device to device)."""
    if obj is None or isinstance(obj, (np.ndarray, ArrayArgument)):
        return False
    return is_device_array(obj) or _has_interface(obj)


def host_dlpack(obj: Any) -> Any:
    """An ndarray over ``obj``'s host memory when ``obj`` speaks DLPack only, else ``obj``."""
    if (
        isinstance(obj, (np.ndarray, ArrayArgument))
        or getattr(obj, "__dlpack__", None) is None
        or hasattr(obj, "__array__")
        or hasattr(obj, "__array_interface__")
    ):
        return obj
    device = getattr(obj, "__dlpack_device__", None)
    if device is not None and int(device()[0]) == KDL_CUDA:
        raise TypeError(
            "obj is CUDA memory offered through DLPack only; SmartArray(obj) takes device "
            "objects with __cuda_array_interface__ (CuPy, PyTorch, numba device arrays)"
        )
    return np.from_dlpack(obj)


class _Foreign:
    """The base of a simulated device view of foreign memory: keeps the owner alive."""

    __slots__ = ("__array_interface__", "owner")
    __array_interface__: dict[str, Any]
    owner: Any


def _from_interface(desc: dict[str, Any], owner: Any, sync: bool) -> Any:
    """A counted device array viewing the memory ``desc`` describes (no copy)."""
    if not memory.SIMULATOR:
        from numba import cuda

        return adopt(cuda.from_cuda_array_interface(desc, owner=owner, sync=sync))
    if desc.get("mask") is not None:
        raise NotImplementedError("Masked arrays are not supported")
    shape = tuple(int(d) for d in desc["shape"])
    dtype = np.dtype(desc["typestr"])
    if 0 in shape:
        ary = np.empty(shape, dtype)
    else:
        holder = _Foreign()
        holder.owner = owner
        holder.__array_interface__ = {
            "shape": shape,
            "typestr": desc["typestr"],
            "descr": desc.get("descr", [("", desc["typestr"])]),
            "strides": desc.get("strides"),
            "data": (int(desc["data"][0]), bool(desc["data"][1])),
            "version": 3,
        }
        ary = np.asarray(holder)  # its base is the holder, which holds the owner
    # The simulator's streams complete at once: nothing to wait for.
    return adopt(_sim.fake_device_array(ary))


def _device_of(obj: Any, sync: bool = True) -> tuple[Any, bool]:
    """The device array behind ``obj`` (a view, no copy), and whether it is read-only."""
    if is_device_array(obj):
        return obj, False
    desc = obj.__cuda_array_interface__
    return _from_interface(desc, obj, sync), bool(desc["data"][1])


def _byte_view(dev: Any) -> Any:
    """A 1-D uint8 device array over the same (contiguous) memory as ``dev``."""
    nbytes = int(dev.size) * np.dtype(dev.dtype).itemsize
    if memory.SIMULATOR:
        raw = dev._ary.reshape(-1, order="A" if dev._ary.flags.f_contiguous else "C")
        return adopt(_sim.fake_device_array(raw.view(np.uint8)[:nbytes]))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return adopt(DeviceNDArray((nbytes,), (1,), np.uint8, gpu_data=dev.gpu_data))


def device_source(
    obj: Any,
    copy: bool,
    dims: tuple[int, ...] | None,
    dt: np.dtype | None,
    order: str | None,
    pinned: bool,
) -> tuple[Any, tuple[int, ...], np.dtype, Literal["C", "F"]]:
    """The device array behind ``obj`` for ``SmartArray(obj)``, with the new array's shape,
    dtype and layout: every check of the arguments against it, before anything moves.

    ``SmartArray.__init__`` then makes an empty array of that shape, dtype and layout and
    calls :func:`fill_from_device` (the class statement sits above this layer).
    """
    src, readonly = _device_of(obj)
    shape = tuple(int(d) for d in src.shape)
    dtype = np.dtype(src.dtype)
    if dt is not None and dt != dtype:
        raise TypeError(
            f"dtype {dt} differs from the device object's {dtype}: device memory is copied as "
            "it is; convert after (e.g. a.astype(...))"
        )
    if dims is not None and dims != shape:
        raise ValueError(f"shape {dims} conflicts with obj's shape {shape}")
    layout = _layout(src)
    if layout is None:
        raise ValueError(
            "obj must be C- or F-contiguous device memory to be copied device to device; "
            "make a contiguous copy of it first"
        )
    if order in ("C", "F") and order != layout and src.ndim > 1 and src.size > 1:
        raise ValueError(
            f"order={order!r} differs from the device object's layout ({layout!r}); a device "
            "to device copy keeps the layout"
        )
    if not copy and readonly:
        raise ValueError("copy=False cannot adopt read-only device memory; pass copy=True")
    if not copy and pinned:
        raise ValueError("copy=False adopts device memory; pinned=True is for a host copy")
    return src, shape, dtype, layout


def fill_from_device(self: SmartArray, src: Any, copy: bool) -> None:
    """Fill the new empty array ``self`` from the device array ``src`` (see
    :func:`device_source`): copied device to device, or adopted with ``copy=False``.

    The new array's data is current on the device only.
    """
    if not copy:
        self.mark_changed(_adopt_device_bytes(self, _byte_view(src)))
        return
    dst = self.get(GPU)  # allocated; nothing current yet, nothing moves
    try:
        memory.copy_device(dst, src, 0, "construction", self.name)
    except Exception as exc:
        if exc.__class__.__name__ == "TransferGuardError":
            raise
        raise TransferError(f"copying the device object failed: {exc}") from exc
    _engine.buffer(self).queued(0)  # a device-to-device copy may still run when it returns
    self.mark_changed(GPU)


def copy(a: SmartArray, host_copy: Any, order: str = "C") -> SmartArray:
    """``a.copy()``: each byte copied from where it is current, moving as few as possible.

    Device to device (``d2d``) when no byte of ``a`` is current on the host, and there is room
    for a second device copy; otherwise on the host (``host_copy``), after downloading only
    the bytes current on the device alone. The source is kept resident during a device copy
    (nothing the user holds is involved: no hand-out keeps it resident afterwards).
    """
    buf = _engine.buffer(a)
    here = _devices.here()
    with buf.lock:
        if (
            order in ("C", "K", "A")
            and a.size
            and buf.device_copy(here) is not None
            and all(s >= 0 for s in a.strides)
            and a.is_valid(GPU)
            and not buf.state.valid(HOST).intersection(IntervalSet.span(*_engine.span(a)))
        ):
            # Current on the device only: a view of the copy (no hand-out, nothing moves).
            start = _engine.offset(a)
            dev = memory.device_view(buf.device_copy(here), start, a.shape, a.strides, a.dtype)
            if _layout(dev) == "C" or (order != "C" and _layout(dev) == "F"):
                order_before_default(a)
                try:
                    with _budget.resident(a):  # the source stays while the copy is made
                        copied = _array_classes.smartarray_class()(dev)
                except DeviceMemoryError:
                    pass  # no room for two device copies: copy on the host instead
                else:
                    # The copy may still be queued on the default stream: a later write of
                    # the source (on any stream) must wait for it as well.
                    buf.queued(0)
                    return copied
    return host_copy(a, order=order)


# -- numba.cuda's primitives ----------------------------------------------------------------


def as_cuda_array(obj: Any, sync: bool = True) -> Any:
    """Create a device array viewing the memory of any object with the CUDA Array Interface.

    As ``numba.cuda.as_cuda_array``: no copy; the result keeps ``obj`` alive; with ``sync``
    the stream the interface names is synchronized. Its copies are counted. A SmartArray is
    shared as ``__cuda_array_interface__`` shares it (device copy current, write recorded).

    Parameters
    ----------
    obj : object
        A SmartArray, a numba device array, or any object with ``__cuda_array_interface__``
        (CuPy, PyTorch).
    sync : bool, optional
        Wait for the stream the interface names before returning.

    Returns
    -------
    DeviceNDArray
        the simulator's device array on the simulator.

    Raises
    ------
    TypeError
        ``obj`` does not implement the CUDA Array Interface.
    """
    if is_device_array(obj) and memory.SIMULATOR:
        # The plain simulator's device arrays have no interface: a view, as a GPU makes.
        return adopt(_sim.fake_device_array(obj._ary, stream=obj.stream))
    desc = getattr(obj, "__cuda_array_interface__", None)
    if desc is None:
        raise TypeError("*obj* doesn't implement the cuda array interface.")
    return _from_interface(desc, obj, sync)


def is_cuda_array(obj: Any) -> bool:
    """Test if the object has defined the ``__cuda_array_interface__`` attribute.

    As ``numba.cuda.is_cuda_array``: the interface is not validated. A SmartArray is one
    (without making anything current); so are numba device arrays, also on the simulator.
    """
    if isinstance(obj, (ArrayArgument, CudaView)) or is_device_array(obj):
        return True
    return hasattr(obj, "__cuda_array_interface__")
