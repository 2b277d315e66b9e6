"""Copies started early: a buffer's bytes made current somewhere before they are needed.

``prefetch`` queues the copies that make a range current at a location on a stream and returns
without waiting for them (from page-locked host memory; a copy from or to pageable memory is
synchronous, as CUDA makes it). Work queued later on other streams is ordered after them (the
buffer's event, as after a launch). A download to the host leaves an *arrival* event on the
buffer, one per download in flight (downloads of different parts of one buffer may run side by
side): the next host access of the buffer waits for them (``Buffer.arrive``), so a host read waits
only there, not when the download starts. A download to a host copy the user holds (an ndarray
handed out, read without smartarray seeing it) is waited for at once. A prefetch to a device
with nothing to copy still allocates the device copy there: allocation ahead, outside a
pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._memory import devices as _devices
from .._memory import streams as _streams
from .._memory.devices import HOST
from . import device_work as _device_work

if TYPE_CHECKING:  # pragma: no cover
    from .buffer import Buffer

__all__ = ["prefetch"]

_REASON = "prefetch"


def prefetch(buf: Buffer, where: str, lo: int, hi: int, stream: Any) -> None:
    """Queue the copies that make bytes ``[lo, hi)`` current at ``where`` on ``stream``.

    ``stream`` ``None``: the buffer's unnamed stream (the stream of its latest device work, or
    smartarray's own copy stream), never the default stream unless the buffer's work is there.
    """
    with buf.lock:
        # (An earlier prefetch's download in flight: its bytes are current on the host in the
        # state already, so this plan does not copy them again.)
        if where not in buf.state.locations:
            buf.locate(where)
        plan = buf._plan_read(where, lo, hi, _REASON)
        copies = plan.copies
        if not copies:
            if where != HOST:
                # Nothing to copy (current there, or valid nowhere yet): the device copy is
                # allocated now, ahead of the work that needs it. An allocation is implicit
                # synchronisation on a GPU (two streams' work issued before and after it
                # does not overlap), so one made inside a pipeline costs its overlap.
                _devices.ensure_context()
                buf.ensure_device(where)
            return
        _devices.ensure_context()
        items = _device_work.footprint(copies)
        named = stream is not None
        if not named:
            stream = buf._unnamed_stream()
            if stream == 0:
                stream = _streams.copy_stream()
        pending = _streams.pending(stream)
        key = _device_work.key_of(pending)
        if named and buf.sole != key:
            # After the buffer's work on other streams that touches these bytes, on the device
            # (a download of one device's rows need not wait for another device's kernel).
            # Work recorded on this stream only (its entry the buffer's sole one) is ordered
            # before the copies by the stream itself.
            buf.order_before(stream, items)
        download = where == HOST
        # A held host array is read without smartarray: its download is waited for now.
        # (Decided once: a download left in flight is always recorded as arriving.)
        arriving = download and not buf.held
        buf._copy(plan, _REASON, stream, wait=not arriving)
        buf.state.apply(plan)
        # Later work on other streams (a kernel's write) orders after the copies: the buffer's
        # entry for this stream. A download's arrival event is that entry's event, recorded
        # once and never again (reused once arrive() and the entry let it go): one record.
        if arriving:
            event = _streams.launch_event()
            seq = _device_work.record(event, pending)
            buf.kernel_queued(pending, key, event, seq, items, touch=False)
            buf.arriving = [*(buf.arriving or ()), event]  # Buffer.arrive waits for them
        else:
            buf.queued(stream, items)
