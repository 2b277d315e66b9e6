"""What the interop modules share about device memory: its address, its layout, and ordering
a buffer's pending device work before a copy on the default stream.

The lowest module of the interop layer: :mod:`smartarray._interop.dlpack` (the DLPack export),
:mod:`smartarray._interop.exports` (the CUDA Array Interface, which calls the DLPack export) and
:mod:`smartarray._interop.foreign` (device objects coming in, which builds on both) import it, so
none of them imports another one that imports it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .. import memory
from .._engine import interface as _engine

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = ["device_pointer", "layout", "order_before_default"]


def device_pointer(dev: Any) -> int:
    """The device address of the device array ``dev``'s first byte (0 for no elements)."""
    if dev.size == 0:
        return 0
    if memory.SIMULATOR:  # simulated device memory is host memory
        return int(dev._ary.__array_interface__["data"][0])
    return int(dev.device_ctypes_pointer.value or 0)


def layout(dev: Any) -> Literal["C", "F"] | None:
    """'C' or 'F' when the device array ``dev`` is contiguous that way, else None."""
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, dev.dtype), dev.shape, dev.strides)
    if dev.size <= 1 or probe.flags.c_contiguous:
        return "C"
    if probe.flags.f_contiguous:
        return "F"
    return None


def order_before_default(a: SmartArray) -> None:
    """Order ``a``'s pending device work before work queued next on the default stream.

    A device-to-device copy of ``a`` runs on the default stream; with per-thread default
    streams or non-blocking streams nothing else orders it after a kernel still running on
    another stream. An event does, without a host wait.
    """
    buf = _engine.buffer(a)
    with buf.lock:
        buf.order_before(0)  # (work on the default stream itself is ordered already)
