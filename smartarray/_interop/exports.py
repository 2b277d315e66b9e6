"""Interoperability: the CUDA Array Interface, DLPack and foreign device arrays, coherence kept.

Built on SmartArray's public API (``get``, ``mark_changed``, ``is_valid``), without importing
the class: the interop layer sits below the array layer, whose class statement binds these
functions (``isinstance`` tests SmartArray's base class, ``ArrayArgument``). The engine facts
it needs (a view's buffer and bytes, its hand-outs) come through the engine's interface
(:mod:`smartarray._engine.interface`), never a SmartArray's private slots.

Export rules (see ``docs/interop.rst``):

- ``__cuda_array_interface__`` makes the device copy current and, since the consumer may write,
  records a device write (conservative). ``cuda_view(intent='in')`` shares read-only and records
  nothing; ``with a.cuda_view() as v:`` records the write again on exit, so held host arrays show
  what the consumer wrote.
- DLPack (SmartArray's ``__dlpack__``, ``__dlpack_device__``) is
  :mod:`smartarray._interop.dlpack`'s; a CUDA consumer may also take ``cuda_view()``, whose
  ``__dlpack_device__`` is CUDA: the device copy is made current on the consumer's stream and
  a device write recorded as for the CUDA Array Interface.

Import (device objects of other libraries, ``copy``, numba.cuda's primitives):
:mod:`smartarray._interop.foreign`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import memory
from .._engine import interface as _engine
from .._engine import residency as _residency
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._numba.kernels import ArrayArgument
from . import dlpack as _dlpack
from .device_objects import device_pointer

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "CudaView",
    "cuda_array_interface",
    "cuda_view",
]

_INTENTS = ("in", "inout")


# -- engine facts ---------------------------------------------------------------------------


def _wait_for_device(a: SmartArray) -> None:
    """Block until the device work queued on ``a``'s buffer finished."""
    _engine.buffer(a).wait_for_device()


def _adopt_device_bytes(a: SmartArray, raw: Any) -> str:
    """Make ``raw`` (1-D uint8 device memory) ``a``'s copy on the device that memory is on
    (``a`` owns a fresh buffer); return that device's name, ``'gpu:N'``."""
    device = _devices.owner(device_pointer(raw))
    # Counted in the budget, never evicted (the owner's memory).
    _engine.buffer(a).adopt_device(raw, _devices.location(device))
    return f"gpu:{device}"


# -- export ---------------------------------------------------------------------------------


def _interface_stream(a: SmartArray) -> int | None:
    """The ``stream`` entry: where a consumer must order its work after ours (None: nowhere)."""
    buf = _engine.buffer(a)
    if not buf.work:  # (nothing queued on the device)
        return None
    if memory.SIMULATOR:
        # The simulator's streams have no handle a consumer could wait for: wait here.
        _wait_for_device(a)
        return None
    # Never a handle nothing vouches for (a launch's stream may be destroyed by now, work may
    # be on several streams, and with per-thread default streams "the default stream" is
    # each thread's own): the legacy default stream, made to wait for all of the buffer's
    # work in flight (events; no host wait).
    with buf.lock:
        buf.order_before(_streams.LEGACY)
    return 1  # the legacy default stream, as the interface spells it


def cuda_array_interface(a: SmartArray, readonly: bool = False) -> dict[str, Any]:
    """The CUDA Array Interface (v3) of ``a``'s device copy, made current first.

    Unless ``readonly``, a device write is recorded (the consumer may write): the host copy
    becomes stale and is downloaded when next read.
    """
    # The device copy made current (only stale bytes move; negative strides refused), with
    # no host wait: the interface's stream entry orders the consumer after queued work.
    dev = _engine.device_handout(a, wait=False)
    buf = _engine.buffer(a)
    # The consumer keeps the pointer as long as it likes: this device copy is never evicted.
    _residency.share(buf, "it was shared through __cuda_array_interface__")
    if not readonly:
        buf.exported(*_engine.span(a), _devices.here())  # held host arrays: refreshed later
    contiguous = dev.size == 0 or dev.is_c_contiguous()
    return {
        "shape": tuple(int(d) for d in dev.shape),
        "strides": None if contiguous else tuple(int(s) for s in dev.strides),
        "typestr": np.dtype(dev.dtype).str,
        "data": (device_pointer(dev), bool(readonly)),
        "version": 3,
        "stream": _interface_stream(a),
    }


class CudaView:
    """A SmartArray's device data shared with a CUDA consumer (CuPy, PyTorch, numba).

    Created by :meth:`SmartArray.cuda_view`. It has ``__cuda_array_interface__`` (the device
    copy made current when the view was created) and keeps the array alive.

    - ``intent='in'``: read-only; nothing is recorded (the interface says ``readonly``).
    - ``intent='inout'``: a device write is recorded when the view is created and again when a
      ``with`` block around it exits, so host arrays held earlier show the consumer's writes.
    """

    __slots__ = ("array", "intent", "device", "__cuda_array_interface__")

    def __init__(self, array: SmartArray, intent: str = "inout") -> None:
        if intent not in _INTENTS:
            raise ValueError(f"intent must be 'in' or 'inout', got {intent!r}")
        self.array = array
        self.intent = intent
        # The device whose copy is shared (the current one): the exit records the consumer's
        # write there, whichever device is current then.
        self.device = _devices.current()
        self.__cuda_array_interface__ = cuda_array_interface(array, readonly=intent == "in")

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """Export the device copy through DLPack (``cupy.from_dlpack(v)``, ``torch.from_dlpack``).

        ``stream`` is the consumer's (DLPack's convention); the device copy is made current
        and ordered before it. ``intent='inout'`` records a device write; ``intent='in'``
        records nothing and needs the versioned form (``max_version=(1, 0)``), whose flags
        say read-only. ``copy=True``: a fresh device copy.
        """
        kind = _dlpack.check_dl_device(dl_device)
        if kind is not None and kind[0] != _dlpack.KDL_CUDA:
            raise BufferError(
                "a CudaView exports the device copy; host consumers take the SmartArray "
                "itself (np.from_dlpack(a))"
            )
        with _devices.on(self.device):  # the copy this view shares, whichever is current
            return _dlpack.export(
                self.array,
                stream,
                max_version,
                None if kind is None else kind[1],
                copy,
                readonly=self.intent == "in",
            )

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCUDA, device id)``: the device copy is what this view shares."""
        where = _devices.location(self.device)  # the copy this view shares
        return (_dlpack.KDL_CUDA, _dlpack.device_id(_engine.buffer(self.array).device_copy(where)))

    def __enter__(self) -> CudaView:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.intent != "in":
            # Also after an exception: the consumer may have written part of the bytes, and
            # the device copy (current when shared) holds them. The consumer's stream is not
            # known (it may be non-blocking): held host arrays are refreshed after all the
            # device's work.
            from numba import cuda

            with _devices.on(self.device):
                cuda.synchronize()
            self.array.mark_changed(f"gpu:{self.device}")

    def __repr__(self) -> str:
        return f"<CudaView of {self.array.name} intent={self.intent!r}>"


def cuda_view(a: SmartArray, intent: str = "inout") -> CudaView:
    """See :meth:`SmartArray.cuda_view`."""
    return CudaView(a, intent)


# -- numba-cuda's own In / Out / InOut ------------------------------------------------------


def _route_numba_hints() -> None:
    """Make numba-cuda's own ``In(a)`` / ``Out(a)`` / ``InOut(a)`` take the device copy.

    numba-cuda 0.30's hints hand the wrapped object to ``devicearray._to_strided_memory_view``,
    which tries ``__dlpack__`` first for any object that is not an ndarray; a SmartArray's
    ``__dlpack__`` answers a consumer that names no device with the host copy (what
    ``np.from_dlpack`` wants), and cuda.core asks exactly that way, also for a kernel: the
    kernel would get the host pointer (an illegal address on a GPU). numba-cuda skips DLPack
    for the types in ``_UNSUPPORTED_DLPACK_TYPES`` (read at each call) and then takes
    ``__cuda_array_interface__``: the device copy made current, a device write recorded (the
    conservative rule of the interface, right for every one of the three hints). The simulator
    prepares hints with its own ``auto_device`` and has no such module.
    """
    if memory.SIMULATOR:
        return
    try:
        from numba.cuda.cudadrv import devicearray
    except ImportError:  # pragma: no cover - a numba-cuda without it takes no DLPack path
        return
    skipped = getattr(devicearray, "_UNSUPPORTED_DLPACK_TYPES", None)
    # numba-cuda tests ``isinstance`` against the tuple: SmartArray's base class, whose only
    # instances are SmartArrays (the class statement sits above this layer), says the same.
    if isinstance(skipped, tuple) and ArrayArgument not in skipped:
        # (numba-cuda's private name, absent from numba's stub that the checker reads)
        devicearray._UNSUPPORTED_DLPACK_TYPES = (*skipped, ArrayArgument)  # type: ignore[attr-defined]


_route_numba_hints()
