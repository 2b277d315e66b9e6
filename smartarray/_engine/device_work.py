"""A buffer's device work: which stream holds its latest work, host waits, cross-stream order.

The operations of :class:`smartarray._engine.buffer.Buffer` that read and write its stream state
(``stream``: the stream of the latest device work, ``0`` when none is queued; ``done``: the
event recorded after it; ``done_for``: the stream that event captured; ``own_event``: the
events only this buffer records, one per device; ``work_device``: the device of ``stream``).
They are bound in ``Buffer``'s class body (one class at run time), kept here as one concept:
nothing else writes that state.

Several devices: an event can be recorded only on a stream of its own device, but any
device's stream may wait for it (CUDA's programming guide, "Stream and Event Behavior").
Work queued on another device than the current one is waited for on the host where it would
otherwise take an event recorded on that device's stream (:func:`order_before` while a
launch is being prepared there, :func:`unnamed_stream`): device switches are rare, and that
wait is what a copy between the devices needs anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._memory import devices as _devices
from .._memory import streams as _streams
from . import residency as _residency

if TYPE_CHECKING:  # pragma: no cover
    from .buffer import Buffer

__all__ = [
    "works_on",
    "consumer_queued",
    "kernel_queued",
    "order_before",
    "queued",
    "unnamed_stream",
    "use_stream",
    "wait_for_device",
]


def consumer_queued(self: Buffer, stream: Any) -> None:
    """A consumer (a DLPack importer) works on this buffer on ``stream`` from now on, a
    stream that is never destroyed (the default stream): host access waits for that
    stream itself, not for an event recorded now. Call with the lock held."""
    self.stream = stream
    self.done_for = None
    self.work_device = _devices.current()


def wait_for_device(self: Buffer) -> None:
    """Block until the latest device work on this buffer (on its stream) finished."""
    if self.stream != 0:
        if self.done_for is self.stream:
            self.done.synchronize()  # the buffer's own event: its stream may be gone
        else:
            # Recorded nowhere yet: a launch being prepared or queued, whose stream is
            # alive (this thread is launching on it), or a launch that failed; or a
            # consumer's default stream, which is its device's (made current for it).
            with _devices.on(self.work_device):
                _streams.synchronize(self.stream)
        self.stream = 0  # nothing of this buffer is queued any more
        self.done_for = None


def queued(self: Buffer, stream: Any) -> None:
    """Device work on this buffer was just queued on ``stream`` (0: the default stream).

    Records the buffer's own event there, which host waits and cross-stream ordering use;
    the stream itself is kept only for same-stream comparisons. Call with the lock held.
    """
    pending = _streams.pending(stream)
    device = _devices.current()
    events = self.own_event
    if events is None:
        events = self.own_event = [None]
    if device >= len(events):
        events.extend([None] * (device + 1 - len(events)))
    event = events[device]
    if event is None:
        event = events[device] = _streams.new_event()
    event.record(_streams.native(pending))
    self.stream = pending
    self.done = event
    self.done_for = pending
    self.work_device = device


def kernel_queued(self: Buffer, pending: Any, event: Any) -> None:
    """A kernel using this buffer was just queued on ``pending`` (see
    :func:`smartarray._memory.streams.pending`), and ``event`` recorded there after it: the
    launch's own event (see :class:`smartarray._engine.launch.Launch`), never recorded again.
    Marks the device copy used now (LRU order). Call with the lock held.
    """
    self.stream = pending
    self.done = event
    self.done_for = pending
    if _devices.several:  # (0 otherwise, as it was made)
        self.work_device = _devices.current()
    _residency.touch(self)


def works_on(self: Buffer, stream: Any) -> bool:
    """Whether this buffer's latest device work is on ``stream`` (of the current device):
    then work queued there next is ordered after it. With several devices the default
    stream is each device's own."""
    return (
        self.stream != 0
        and _streams.same(self.stream, stream)
        and (not _devices.several or self.work_device == _devices.current())
    )


def order_before(self: Buffer, after: Any) -> None:
    """Make work queued later on ``after`` wait for this buffer's queued device work.

    On the device, with an event (the host does not wait); with the buffer's own event
    once recorded, so the stream of that work need not be alive any more.
    """
    if self.done_for is self.stream:
        self.done.wait(_streams.native(after))  # (any device's stream may wait for it)
    elif _devices.several and self.work_device != _devices.current():
        self.wait_for_device()  # an event recorded on that device's stream: not from here
    else:
        _streams.order(self.stream, after)


def use_stream(self: Buffer, stream: Any) -> None:
    """Put copies that name no stream on ``stream`` (a checked stream, or 0: the default
    stream) while no device work is queued on this buffer; ``stream`` is the current device's.
    """
    self.home_stream = stream
    self.home_device = _devices.current() if stream != 0 else 0


def unnamed_stream(self: Buffer) -> Any:
    """The stream for copies that name none, ordered after the buffer's device work.

    The stream of that work while it is known alive (a launch being prepared on it);
    once the buffer's event is recorded (that stream may be gone), smartarray's own copy
    stream, made to wait for the event on the device (no host wait), which then holds
    the buffer's latest work.
    """
    if _devices.several and self.stream != 0 and self.work_device != _devices.current():
        # Another device's stream: its copies and events are not this device's to queue.
        self.wait_for_device()
        return 0
    if self.stream == 0:
        # Nothing queued: the array's own stream (its device's), else the default stream.
        if self.home_stream != 0 and (
            not _devices.several or self.home_device == _devices.current()
        ):
            return self.home_stream
        return 0
    if self.done_for is not self.stream:
        return self.stream
    if self.stream is _streams.DEFAULT:
        # The default stream is never destroyed; but with per-thread default streams it
        # is the calling thread's own, and the work may be another thread's: this
        # thread's default stream waits for the buffer's event first.
        self.done.wait(0)
        return _streams.DEFAULT
    stream = _streams.copy_stream()
    self.done.wait(stream)
    self.stream = stream  # never destroyed: waited on by its handle
    self.done_for = None
    return stream
