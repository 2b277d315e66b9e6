"""DLPack export of a SmartArray: the host copy to NumPy, the device copy to CUDA consumers.

SmartArray's ``__dlpack__`` and ``__dlpack_device__`` are this module's (the class statement
binds them). ``__dlpack_device__`` is ``(kDLCPU, 0)``, and ``__dlpack__`` (``dl_device`` None or
the CPU) exports the host copy, made current, with a host write recorded (``copy=True``: a
snapshot, nothing recorded). What ``a.__dlpack__(dl_device=(2, id))`` and
``a.cuda_view().__dlpack__(...)`` return for a CUDA consumer (CuPy, PyTorch, JAX; see
``docs/interop.rst``):

- the device copy made current. ``stream`` is the consumer's stream (DLPack's convention: None
  or 1 the legacy default stream, 2 the per-thread default stream, a larger int a stream
  handle, -1 no synchronization): the buffer's pending device work is ordered before it with an
  event (the host does not wait) and stale bytes go up on it. Host access to the array then
  waits for the legacy default stream's work (a consumer there needs nothing more); a stream
  handle is not kept (the consumer may destroy its stream): the consumer synchronizes its own
  work before the host reads the array, as with ``__cuda_array_interface__``;
- the device copy is not evicted while the export lives: the capsule unconsumed, or the
  consumer's tensor alive (until it calls the ``DLManagedTensor``'s deleter);
- a device write recorded, as ``__cuda_array_interface__`` records it: the consumer may write,
  and DLPack's legacy form cannot even say read-only. ``cuda_view(intent='in')`` shares
  read-only (the versioned form's ``DLPACK_FLAG_BITMASK_READ_ONLY``) and records nothing;
- ``copy=True`` a fresh device copy (``d2d`` when the data is current on the device), flagged
  ``DLPACK_FLAG_BITMASK_IS_COPIED``; strides that are not a multiple of the item size need one
  (``copy=False`` then raises ``BufferError``);
- the capsule, and then the consumer's tensor, keep the array and its device memory alive.

The capsule is NumPy's: NumPy exports a host stand-in ndarray whose data pointer is the device
address (never read on the host) and whose base keeps the SmartArray alive; the device field
(and the versioned flags) are then set in the struct. NumPy's deleter and capsule destructor
are C code that keep Python's error indicator and release only the stand-in. A deleter written
in Python (a ctypes callback) would not do: run while an exception is pending (a capsule or the
consumer's tensor freed while an exception unwinds), it fails with ``SystemError`` and the
pending exception is lost.
"""

from __future__ import annotations

import ctypes
import operator
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import cuda

from .. import memory as _memory
from .._engine import array_classes as _array_classes
from .._engine import budget as _budget
from .._engine import interface as _engine
from .._engine import residency as _residency
from .._engine.buffer import GPU, HOST, INOUT
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._platform import cuda_simulator as _sim
from ..errors import DeviceMemoryError
from .device_objects import device_pointer, layout, order_before_default

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "KDL_CPU",
    "KDL_CUDA",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "FLAG_IS_COPIED",
    "FLAG_READ_ONLY",
    "__dlpack__",
    "__dlpack_device__",
    "check_dl_device",
    "device_id",
    "export",
]

#: ``DLDeviceType`` values.
KDL_CPU = 1
KDL_CUDA = 2
#: ``DLPACK_FLAG_BITMASK_READ_ONLY`` and ``DLPACK_FLAG_BITMASK_IS_COPIED`` (DLPack 1.0).
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
#: ``stream=-1``: the consumer asks the producer not to synchronize.
NO_SYNC = -1
#: ``stream=1``: the legacy default stream (also what ``stream=None`` means for CUDA).
LEGACY_DEFAULT = 1

# ``DLDataTypeCode`` by NumPy dtype kind: kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool.
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


class DLDevice(ctypes.Structure):
    """``DLDevice`` of ``dlpack.h``."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``DLDataType`` of ``dlpack.h``."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor`` of ``dlpack.h`` (shape and strides in elements)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """``DLManagedTensor`` of ``dlpack.h``: the legacy form (capsule ``"dltensor"``)."""

    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    """``DLPackVersion`` of ``dlpack.h``."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """``DLManagedTensorVersioned`` of ``dlpack.h`` 1.x (capsule ``"dltensor_versioned"``)."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def _capi(name: str, restype: Any, argtypes: list[Any]) -> Any:
    # Indexing makes a function object of our own: the shared ``ctypes.pythonapi.<name>``
    # other code may use keeps its argument types.
    fn = ctypes.pythonapi[name]
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_capsule_pointer = _capi(
    "PyCapsule_GetPointer", ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
)


class _Owner:
    """The base of the stand-in ndarray NumPy exports: keeps the shared memory alive."""

    __slots__ = ("__array_interface__", "__weakref__", "array", "memory")
    __array_interface__: dict[str, Any]
    array: SmartArray
    memory: Any


# -- checks (before anything moves) ---------------------------------------------------------


def check_stream(stream: Any) -> int:
    """The consumer's ``stream`` as DLPack spells it for CUDA (None: 1, the legacy default)."""
    if stream is None:
        return 1
    if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, (int, np.integer)):
        raise TypeError(
            "stream must be None or an int (1: legacy default stream, 2: per-thread default "
            f"stream, > 2: a CUDA stream handle, -1: no synchronization), got {stream!r}"
        )
    value = int(stream)
    if value == 0 or value < NO_SYNC:
        raise ValueError(
            f"stream must be None, -1, 1, 2 or a CUDA stream handle, got {value} (DLPack "
            "disallows 0, which could mean either default stream)"
        )
    return value


def check_max_version(max_version: Any) -> bool:
    """Whether the consumer takes the versioned form (``max_version`` of 1.0 or later)."""
    if max_version is None:
        return False
    try:
        if not isinstance(max_version, tuple):  # NumPy, which builds the capsule, needs one
            raise TypeError
        major, minor = max_version
        major = operator.index(major)
        operator.index(minor)
    except (TypeError, ValueError):
        raise TypeError(
            f"max_version must be None or a (major, minor) pair of ints, got {max_version!r}"
        ) from None
    return major >= 1


def check_copy(copy: Any) -> bool | None:
    """``copy`` as None, True or False."""
    if copy is None or isinstance(copy, (bool, np.bool_)):
        return None if copy is None else bool(copy)
    raise TypeError(f"copy must be None, True or False, got {copy!r}")


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.kind not in _CODES or dtype.fields is not None or dtype.subdtype is not None:
        raise BufferError(
            f"DLPack carries booleans, integers, floats and complex numbers, not dtype {dtype}"
        )
    if not dtype.isnative:
        raise BufferError(f"DLPack carries native byte order only, not dtype {dtype}")
    if dtype.itemsize > {"f": 8, "c": 16}.get(dtype.kind, 8):
        raise BufferError(f"DLPack (through NumPy) carries no extended precision: dtype {dtype}")


def device_id(device_bytes: Any = None) -> int:
    """The CUDA device of ``device_bytes`` (numba device memory), else the current device."""
    if _sim.SIMULATOR:
        return 0  # one simulated device
    context = getattr(getattr(device_bytes, "gpu_data", None), "context", None)
    device = getattr(context, "device", None) or cuda.get_current_device()
    return int(device.id)


# -- the SmartArray's protocol (the class statement binds these) ---------------------------


def __dlpack__(
    self: SmartArray,
    *,
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: bool | None = None,
) -> Any:
    """Export through DLPack: the host copy, or the device copy for ``dl_device=(2, id)``.

    Host consumers (``np.from_dlpack(a)``): the host copy is made current and shared; the
    consumer may write, so a host write is recorded (the device copy becomes stale),
    unless ``copy=True`` (a snapshot).

    CUDA consumers (``dl_device=(2, id)``; or ``cupy.from_dlpack(a.cuda_view())``): the
    device copy is made current and shared. ``stream`` is the consumer's stream (None or
    1: the legacy default stream, 2: the per-thread default stream, a larger int: a
    stream handle, -1: no synchronization): this array's pending device work is ordered
    before it with an event, without a host wait. The consumer may write, so a device
    write is recorded, as for ``__cuda_array_interface__``. ``copy=True``: a fresh device
    copy. ``max_version`` of (1, 0) or later gets the versioned capsule.

    Raises
    ------
    BufferError
        A device other than the CPU or this array's CUDA device; a dtype DLPack cannot
        carry; ``copy=False`` where a copy is needed.
    """
    kind = check_dl_device(dl_device)
    if kind is not None and kind[0] == KDL_CUDA:
        return export(self, stream, max_version, kind[1], copy)
    # The host export is NumPy's: its checks of ``copy``, ``dl_device`` and ``max_version`` run
    # on an empty stand-in first, so a bad request fails as NumPy's does, before anything moves.
    # ``stream`` is the consumer's stream. The host copy is current when this returns (its
    # downloads waited for), so there is nothing to order on it: any value is accepted, as
    # cuda.core passes one for host memory too.
    np.empty(0).__dlpack__(max_version=max_version, dl_device=kind, copy=copy)
    if copy:
        host = self.copy_to_host()  # a snapshot: nothing shared, nothing recorded
    else:
        buf = _engine.buffer(self)
        with buf.lock:
            buf.ensure_host()
            buf.acquire(HOST, *_engine.span(self), INOUT, "dlpack export")
            # Tracked: refreshed after device writes. The consumer may write through it at any
            # time and cannot say so: each refresh records a host write again.
            host = _engine.host_export(self, readonly=False, unannounced=True)
            self.mark_changed(HOST)
    return host.__dlpack__(max_version=max_version)


def __dlpack_device__(self: SmartArray) -> tuple[int, int]:
    """``(1, 0)`` (kDLCPU): ``__dlpack__`` exports the host copy unless asked for CUDA.

    A SmartArray is a host array with a device copy. ``np.from_dlpack(a)`` asks for no
    device and must get host memory; consumers that follow ``__dlpack_device__`` (CuPy,
    PyTorch) take the device copy from ``a.cuda_view()``, whose device is CUDA.
    """
    return (KDL_CPU, 0)


def check_dl_device(dl_device: Any) -> tuple[int, int] | None:
    """``dl_device`` as a (device type, id) pair of a device we serve (CPU or CUDA), or None."""
    if dl_device is None:
        return None
    try:
        kind, number = dl_device
        if any(isinstance(v, (bool, np.bool_)) for v in (kind, number)):
            raise TypeError  # (True is not device 1)
        kind, number = operator.index(kind), operator.index(number)
    except (TypeError, ValueError):
        raise ValueError(
            f"dl_device must be None or a (device_type, device_id) pair of ints, got {dl_device!r}"
        ) from None
    if kind not in (KDL_CPU, KDL_CUDA):
        raise BufferError(
            f"SmartArray.__dlpack__ exports to the CPU (1) or a CUDA device (2), not {kind}"
        )
    return kind, number


# -- export ---------------------------------------------------------------------------------


def export(
    a: SmartArray,
    stream: Any = None,
    max_version: Any = None,
    dl_device_id: int | None = None,
    copy: Any = None,
    readonly: bool = False,
) -> Any:
    """A DLPack capsule of ``a``'s device copy for a CUDA consumer (see the module's text).

    Every argument is checked before anything moves.

    Raises
    ------
    BufferError
        A dtype DLPack cannot carry; ``copy=False`` where a copy is needed; a read-only share
        asked for in the legacy form; a device other than the array's.
    TypeError, ValueError
        A malformed ``stream``, ``max_version`` or ``copy``.
    """
    value = check_stream(stream)
    versioned = check_max_version(max_version)
    copy = check_copy(copy)
    _check_dtype(a.dtype)
    if readonly and not versioned and not copy:
        raise BufferError(
            "a read-only share needs DLPack 1.0 (max_version=(1, 0)): the legacy form cannot "
            "say read-only"
        )
    itemsize = a.dtype.itemsize
    if a.size and any(s % itemsize for s in a.strides):
        if copy is False:
            raise BufferError(
                f"strides {a.strides} are not a multiple of the item size ({itemsize}): DLPack "
                "needs a copy, and copy=False refuses one"
            )
        copy = True
    on = device_id(_engine.buffer(a).device_copy(_devices.here()))
    if dl_device_id is not None and dl_device_id != on:
        raise BufferError(f"the array's device copy is on CUDA device {on}, not {dl_device_id}")
    consumer = None if value == NO_SYNC else _sim.consumer_stream(value)
    flags = FLAG_READ_ONLY if readonly else 0
    if copy:
        a, flags = _copied(a), FLAG_IS_COPIED  # a fresh array nobody else writes
        readonly = False
    with _engine.buffer(a).lock:  # no eviction between making the copy current and holding it
        pointer, memory = _share(a, consumer, value, readonly)
        return _capsule(a, pointer, memory, max_version, flags)


def _copied(a: SmartArray) -> SmartArray:
    """A new SmartArray with ``a``'s data: ``d2d`` where it is current on the device and
    there is room for a second device copy."""
    buf = _engine.buffer(a)
    here = _devices.here()
    with buf.lock:
        if (
            a.size
            and buf.device_copy(here) is not None
            and a.is_valid(GPU)
            and all(s >= 0 for s in a.strides)
        ):
            # A view of the copy (no hand-out: nothing the user holds keeps the source after).
            start = _engine.offset(a)
            dev = _memory.device_view(buf.device_copy(here), start, a.shape, a.strides, a.dtype)
            if layout(dev) is not None:
                order_before_default(a)  # the copy runs on the default stream
                try:
                    with _budget.resident(a):  # the source stays while it is copied
                        copied = _array_classes.smartarray_class()(dev)  # device to device
                except DeviceMemoryError:
                    pass  # no room for two device copies: gathered on the host instead
                else:
                    buf.queued(0)  # the copy may still be queued: later writes of a wait
                    return copied
    # Strided or current on the host: gathered there, uploaded when shared.
    return _array_classes.smartarray_class()(np.ascontiguousarray(a.copy_to_host()))


def _share(a: SmartArray, consumer: Any, value: int, readonly: bool) -> tuple[int, Any]:
    """Make ``a``'s device copy current for work on ``consumer`` (the stream DLPack's
    ``value`` names); its device address and the device memory that holds it.

    The caller keeps the copy resident while the export lives (see :func:`_capsule`). Host
    access waits for the consumer's stream only where that stream outlives everything
    (``1``, the legacy default stream); a stream handle is not kept (the consumer may
    destroy the stream): only the copies made here are ordered before later work, and the
    consumer synchronizes its own work before the host reads, as the CUDA Array Interface
    asks.
    """
    buf = _engine.buffer(a)
    lo, hi = _engine.span(a)
    with buf.lock:
        here = _devices.here()
        dev = buf.ensure_device(here)
        if consumer is None:  # stream=-1: the consumer orders its work itself
            buf.sync(here, lo, hi, "dlpack export")
        else:
            target = _streams.pending(consumer)
            # Pending device work on this buffer goes before the consumer's: events, the device
            # orders them, the host does not wait.
            buf.order_before(consumer)
            buf.sync(here, lo, hi, "dlpack export", stream=consumer)  # stale bytes go up
            if value == LEGACY_DEFAULT or target is _streams.DEFAULT:
                # The consumer works there, later: host access waits for that stream (which
                # is never destroyed), not for an event recorded now. Stream 1 is the legacy
                # default stream by name: with per-thread default streams, the default stream
                # (handle 0) is the calling thread's own, not the one the consumer named.
                buf.consumer_queued(_streams.LEGACY if value == LEGACY_DEFAULT else target)
            else:
                _streams.order(consumer, 0)  # what went up there, before the default stream
                buf.queued(0)
        if not readonly:
            # The consumer may write (as for __cuda_array_interface__): the host copy is stale
            # from now on; held host arrays are refreshed at the next host access.
            buf.exported(lo, hi, _devices.here())
    return (device_pointer(dev) + _engine.offset(a) if a.size else 0), dev


def _capsule(a: SmartArray, pointer: int, memory: Any, max_version: Any, flags: int) -> Any:
    """NumPy's DLPack capsule of a stand-in over ``pointer`` (in ``memory``), set to say CUDA."""
    owner = _Owner()
    owner.array = a  # keeps the buffer alive
    owner.memory = memory  # and the very device memory shared (the buffer's may change)
    owner.__array_interface__ = {
        "shape": tuple(a.shape),
        "typestr": a.dtype.str,
        "strides": tuple(a.strides),
        "data": (pointer, False),
        "version": 3,
    }
    stand_in = np.asarray(owner)  # never read: its data pointer is a device address
    # The copy stays resident while the export lives: the owner lives exactly as long as the
    # capsule is unconsumed or the consumer's tensor is (the DLManagedTensor's deleter
    # releases the stand-in, and with it the owner). Registered under the buffer's lock, held
    # since before the copy was made current (an eviction needs the lock).
    _residency.handed_out(_engine.buffer(a), owner, "a DLPack export of it is alive")
    capsule = stand_in.__dlpack__(max_version=max_version)
    versioned = check_max_version(max_version)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    address = _capsule_pointer(capsule, name)
    managed: Any
    if versioned:
        managed = DLManagedTensorVersioned.from_address(address)
        managed.flags |= flags
    else:
        managed = DLManagedTensor.from_address(address)
    tensor = managed.dl_tensor
    tensor.device.device_type = KDL_CUDA
    tensor.device.device_id = device_id(owner.memory)
    if not a.size:
        tensor.data = None  # NumPy's stand-in for no elements is a host address
    return capsule
