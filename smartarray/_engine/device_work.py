"""A buffer's work in flight: device work per stream, host writers, host waits, stream order.

The operations of :class:`smartarray._engine.buffer.Buffer` that read and write what it knows
of work still in flight on it. They are bound in ``Buffer``'s class body (one class at run
time), kept here as one concept: nothing else writes that state. They name what they read of
the buffer in :class:`WorkingBuffer`, never the class.

- ``work``: every device work still queued on the buffer, whichever thread or stream queued it,
  as one :class:`Work` per stream identity (:func:`smartarray._memory.streams.identity`; with
  several devices the device too): the latest work queued there. Work queued on one stream
  replaces only that stream's entry; an entry goes once a host wait saw it finish, or when a
  query finds it finished (:func:`_prune`, only while the set holds several entries, so it
  stays small at no cost to the single-stream case). A host read waits for every entry; work
  on stream S is ordered after every other stream's entry, on the device (events, no host
  wait), and then stands for them (:func:`join`).
- ``sole``: the key of the only entry, ``None`` when there are none or several: the launch
  fast path compares it with the launch's key, O(1), and needs nothing else.
- ``host_writers``: views whose njit fast-path calls were still running when a transition
  disarmed their fast path (see ``Buffer._leave_host_only``): copies of their bytes wait for
  them (:func:`wait_for_host_writers`).

:func:`in_flight` is the one cheap predicate over both.

Marks: what an entry's work touches, where it is known: per (location, whether it writes,
the stream it was queued on) the hull of byte ranges and the event recorded after the latest
of that work (:class:`Mark`); ``None``: unknown, it may touch every byte anywhere. A launch and
a prefetch pass their marks (their copies' and their kernel's bytes): work on another stream
is ordered before them only where it touches bytes they touch at the same location and one of
the two writes, and then after the event of that work, not of all work queued there since
(:func:`order_before`). Every other caller orders after everything, as before. Two works that
share no byte of any copy, or only read the same bytes, need no order between them; a host
read still waits for every entry.

Several devices: an event can be recorded only on a stream of its own device, but any
device's stream may wait for it (CUDA's programming guide, "Stream and Event Behavior"). Work
recorded without an event (a default stream or smartarray's copy stream, waited for by its
handle) on another device than the current one is waited for on the host where a stream of
this device would have to wait for it: device switches are rare, and that wait is what a copy
between the devices needs anyway.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Hashable
from typing import Any, Protocol

from numba import cuda

from .._memory import devices as _devices
from .._memory import streams as _streams
from .._memory.devices import HOST
from . import residency as _residency

__all__ = [
    "Mark",
    "Work",
    "footprint",
    "consumer_queued",
    "finished",
    "in_flight",
    "join",
    "kernel_queued",
    "key_of",
    "order_before",
    "queued",
    "record",
    "unnamed_stream",
    "use_stream",
    "wait_for_device",
    "wait_for_host_writers",
    "works_on",
]


class WorkingBuffer(Protocol):
    """What the functions here read and set of the buffer they are bound into (the engine's
    :class:`~smartarray._engine.buffer.Buffer`; they never name the class): its work in flight,
    the stream and device it was made with, its lock, and its residency record (new work marks
    its device copy used)."""

    work: dict[Any, Work]
    sole: Any
    host_writers: list[Any]
    home_stream: Any
    home_device: int
    residency: _residency.Residency | None

    @property
    def lock(self) -> threading.RLock: ...


class Mark:
    """The bytes ``[lo, hi)`` that work of one stream touches at one location, and the event
    recorded after the latest such work (``seq``: when it was recorded, counted per process:
    of two marks of one stream the later covers the earlier)."""

    __slots__ = ("lo", "hi", "event", "seq")

    def __init__(self, lo: int, hi: int, event: Any, seq: int) -> None:
        self.lo, self.hi, self.event, self.seq = lo, hi, event, seq

    def __repr__(self) -> str:
        return f"<mark [{self.lo}, {self.hi}) seq={self.seq}>"


# An item of a footprint: (location: -1 the host, else a device ordinal; writes; lo; hi).
Item = tuple[int, bool, int, int]
Marks = dict[tuple[int, bool, Hashable], Mark]

# Events recorded on a buffer's streams, numbered in the order the driver took them.
_record_order = threading.Lock()
_records = itertools.count(1)


def record(event: Any, stream: Any) -> int:
    """Record ``event`` on ``stream`` (:func:`smartarray._memory.streams.pending`'s form) and
    return its number among all records made here.

    Of two events recorded on one stream, the one with the larger number covers the other's
    work. Registration order says nothing of that: two threads launching on one stream record
    their events without a buffer's lock (a launch records once for all its buffers), and
    the one that recorded later may register first. The lock is a leaf: nothing is acquired
    under it.
    """
    with _record_order:
        _streams.record(event, stream)
        return next(_records)


def footprint(
    copies: Any, where: str | None = None, lo: int = 0, hi: int = 0, write: bool = True
) -> list[Item]:
    """The items of ``copies`` (a plan's: each reads its source and writes its target) and,
    with ``where``, of a kernel touching bytes ``[lo, hi)`` there (writing them if
    ``write``)."""
    items: list[Item] = []
    for c in copies:
        items.append((_loc(c.source), False, c.start, c.stop))
        items.append((_loc(c.target), True, c.start, c.stop))
    if where is not None and hi > lo:
        items.append((_loc(where), write, lo, hi))
    return items


def _loc(where: str) -> int:
    return -1 if where == HOST else _devices.ordinal(where)


def _add(entry: Work, key: Hashable, items: list[Item] | None, event: Any, seq: int) -> None:
    """Add ``items``, queued on ``key``'s stream before ``event`` was recorded there (the
    ``seq``-th record, see :func:`record`), to ``entry``'s marks (``None``: unknown, the
    entry's marks become unknown)."""
    marks = entry.marks
    if marks is None:
        return
    if items is None:
        entry.marks = None
        return
    for loc, write, lo, hi in items:
        mkey = (loc, write, key)
        m = marks.get(mkey)
        if m is None:
            marks[mkey] = Mark(lo, hi, event, seq)
        else:
            m.lo, m.hi = min(m.lo, lo), max(m.hi, hi)
            if seq > m.seq:  # (the same stream: the later record covers the earlier work)
                m.event, m.seq = event, seq


def _absorb(entry: Work, other: Work) -> None:
    """``entry`` replaces ``other``, an entry of the same stream whose work may still run:
    its marks go on (``entry``'s event, recorded later there, covers that work too)."""
    marks = entry.marks
    if marks is None:
        return
    if other.marks is None:
        entry.marks = None
        return
    for mkey, m in other.marks.items():
        mine = marks.get(mkey)
        if mine is None:
            marks[mkey] = Mark(m.lo, m.hi, m.event, m.seq)
        else:
            mine.lo, mine.hi = min(mine.lo, m.lo), max(mine.hi, m.hi)
            if m.seq > mine.seq:
                mine.event, mine.seq = m.event, m.seq


def _conflicts(marks: Marks, items: list[Item], after: Hashable) -> list[Any]:
    """The events of the marks that touch bytes ``items`` touch at the same location, one of
    the two writing, except work of stream ``after`` (ordered before its later work already)."""
    events: list[Any] = []
    for (loc, write, origin), m in marks.items():
        if origin == after:
            continue
        for iloc, iwrite, lo, hi in items:
            if iloc == loc and (write or iwrite) and lo < m.hi and m.lo < hi:
                if not any(e is m.event for e in events):
                    events.append(m.event)
                break
    return events


class Work:
    """The latest device work queued on a buffer on one stream.

    ``stream``: what it was queued on (:func:`smartarray._memory.streams.pending`'s form),
    named again only where ``event`` is ``None``, for a stream that is never destroyed (a
    default stream, smartarray's copy stream). ``event``: recorded right after the work (the
    buffer's own, or a launch's), or ``None``: waited for by the stream itself. ``own``: the
    buffer's own event for this stream, recorded again by its next work here. ``device``: the
    device of the stream. ``thread``: for a per-thread default stream, the number of the
    thread whose stream it is (0 otherwise): only that thread can name it. ``seq``: the
    number of ``event``'s record (:func:`record`; 0 without one).
    """

    __slots__ = ("stream", "event", "own", "device", "thread", "marks", "seq")

    def __init__(
        self,
        stream: Any,
        event: Any,
        own: Any,
        device: int,
        thread: int,
        marks: Marks | None = None,
        seq: int = 0,
    ) -> None:
        self.stream = stream
        self.event = event
        self.own = own
        self.device = device
        self.thread = thread
        self.marks = marks
        self.seq = seq

    def __repr__(self) -> str:
        return f"<work on {self.stream!r} (device {self.device}) event={self.event!r}>"


def key_of(stream: Any, device: int | None = None) -> Hashable:
    """The key of ``stream``'s entry (queued by the calling thread on ``device``, default the
    current one): its identity, with the device when several are visible (handles 0 to 2
    name each device's own)."""
    ident = _streams.identity(stream)
    if _devices.several:
        return (_devices.current() if device is None else device, ident)
    return ident


def _thread_of(key: Hashable) -> int:
    """The thread whose per-thread default stream ``key`` names (0: none). A key is an
    identity or a (device, identity) pair: ``several`` may turn on after a key was made."""
    if key.__class__ is tuple:
        first, second = key  # (both forms are pairs)
        if first == "per-thread":
            return int(second)
        if second.__class__ is tuple:
            return int(second[1])
    return 0


def in_flight(self: WorkingBuffer) -> bool:
    """Whether any device work or host writer may still be in flight on this buffer.

    O(1) when nothing is in flight, lock-free (it only reads), conservative: device work
    counts until a host wait or a query saw it finish (the set is pruned then), never
    ``False`` while recorded work may still run. Host writers counted are the njit fast-path
    calls that were running when their fast path was disarmed, while they still run (a
    reference count each); an armed fast path's calls write bytes current on the host only,
    which no copy reads before that disarming registers them (see
    ``Buffer._leave_host_only``).
    """
    if self.work:
        return True
    writers = self.host_writers
    return bool(writers) and any(writing(view) for view in list(writers))


def _set(self: WorkingBuffer, key: Hashable, entry: Work) -> None:
    """Make ``entry`` the work of ``key``'s stream; drop the entries found finished."""
    work = self.work
    if key not in work:
        self.sole = None  # first: the lock-free launch fast path must not see a stale key
    work[key] = entry
    if len(work) > 1:
        _prune(self, key)
    self.sole = key if len(work) == 1 else None


def _prune(self: WorkingBuffer, keep: Hashable) -> None:
    """Drop entries whose event says their work finished (a query; no host wait)."""
    work = self.work
    for key in [k for k, w in work.items() if k != keep and w.event is not None]:
        if _streams.completed(work[key].event):
            del work[key]


def _own_event(entry: Work | None) -> Any:
    if entry is not None and entry.own is not None:
        return entry.own
    return _streams.launch_event()  # (reused once no entry or mark holds it)


def _marked(entry: Work) -> bool:
    """Whether a mark of ``entry`` holds its own event."""
    own, marks = entry.own, entry.marks
    return marks is not None and any(m.event is own for m in marks.values())


def queued(self: WorkingBuffer, stream: Any, items: list[Item] | None = None) -> None:
    """Device work on this buffer was just queued on ``stream`` (0: the default stream);
    ``items``: what it touches (:func:`footprint`), ``None``: unknown.

    Records the buffer's own event there, which host waits and cross-stream ordering use
    (the stream object may be gone by then); replaces only that stream's entry. Call with
    the lock held.
    """
    pending = _streams.pending(stream)
    device = _devices.current()
    key = key_of(pending, device)
    work = self.work
    old = work.get(key)
    if old is not None and old.event is None:
        old.marks = None
        return  # a stream waited for by its handle: that wait covers this work too
    if old is not None and len(work) == 1:
        event = _own_event(old)
        seq = record(event, pending)
        # (in place: no allocation)
        old.stream, old.event, old.own, old.seq = pending, event, event, seq
        _add(old, key, items, event, seq)
        return
    # Several streams: a mark keeps the event recorded after its own work (recording the
    # buffer's event again would make another stream wait for this later work too).
    event = _own_event(None if old is None or _marked(old) else old)
    seq = record(event, pending)
    entry = Work(pending, event, event, device, _thread_of(key), {}, seq)
    if old is not None:
        _absorb(entry, old)  # (the same stream: its earlier work is still in flight)
    _add(entry, key, items, event, seq)
    _set(self, key, entry)


def kernel_queued(
    self: WorkingBuffer,
    pending: Any,
    key: Hashable,
    event: Any,
    seq: int,
    items: list[Item] | None = None,
    touch: bool = True,
) -> None:
    """A kernel using this buffer was just queued on ``pending`` (see
    :func:`smartarray._memory.streams.pending`), whose entry key is ``key``, and ``event``
    recorded there after it, the ``seq``-th record (:func:`record`): the launch's own event
    (see :class:`smartarray._engine.launch.Launch`), never recorded again. Replaces only that
    stream's entry: work other threads queued meanwhile on other streams stays recorded; an
    entry whose event was recorded later there (another thread's, registered first) stays,
    and stands for this kernel too.
    ``items``: the bytes the kernel touches (:func:`footprint`), ``None``: unknown. Marks the
    device copy used now (LRU order) unless not ``touch`` (a prefetched download's arrival
    event, see smartarray/_engine/prefetch.py). Call with the lock held.
    """
    work = self.work
    entry = work.get(key)
    if entry is not None and entry.event is None:
        entry.marks = None  # a stream waited for by its handle (a consumer's): that wait
        # covers the kernel
    elif entry is not None and entry.seq > seq:
        _add(entry, key, items, entry.event, entry.seq)  # (its later event covers the kernel)
    elif entry is not None and len(work) == 1:
        # A loop of launches on one stream: the entry updated in place (no allocation).
        entry.stream = pending
        entry.event = event
        entry.seq = seq
        _add(entry, key, items, event, seq)
    else:
        own = entry.own if entry is not None else None
        new = Work(pending, event, own, _devices.current(), _thread_of(key), {}, seq)
        if entry is not None:
            _absorb(new, entry)
        _add(new, key, items, event, seq)
        _set(self, key, new)
    if touch:
        _residency.touch(self)


def consumer_queued(self: WorkingBuffer, stream: Any) -> None:
    """A consumer (a DLPack importer) works on this buffer on ``stream`` from now on, a stream
    that is never destroyed (:data:`~smartarray._memory.streams.DEFAULT` or
    :data:`~smartarray._memory.streams.LEGACY`): host access waits for that stream itself, not
    for an event recorded now. Call with the lock held, after :func:`order_before` ordered
    the other streams' work before ``stream``: its entry then stands for all of it."""
    device = _devices.current()
    key = key_of(stream, device)
    old = self.work.get(key)
    entry = Work(stream, None, old.own if old else None, device, _thread_of(key))
    self.work.clear()
    self.work[key] = entry
    self.sole = key


def works_on(self: WorkingBuffer, stream: Any) -> bool:
    """Whether all device work recorded on this buffer is on ``stream`` (of the current
    device), and there is some: work queued there next is ordered after it."""
    sole = self.sole
    return sole is not None and sole == key_of(_streams.pending(stream), _devices.current())


def _host_wait(entry: Work) -> None:
    """Block until ``entry``'s work finished."""
    if entry.event is not None:
        _streams.wait_for(entry.event)  # the buffer's or a launch's event: its stream may be gone
        return
    with _devices.on(entry.device):
        if entry.thread and entry.thread != _streams.this_thread():
            # Another thread's per-thread default stream: no handle names it from here.
            cuda.synchronize()
        else:
            _streams.synchronize(entry.stream)  # never destroyed: named by its handle


def wait_for_device(self: WorkingBuffer) -> None:
    """Block until every device work recorded on this buffer finished (whichever thread or
    stream queued it); then nothing of it is recorded in flight."""
    with self.lock:
        work = self.work
        if not work:
            return
        for entry in list(work.values()):
            _host_wait(entry)
        work.clear()
        self.sole = None


def finished(self: WorkingBuffer, events: list[Any]) -> None:
    """The host waited for ``events``: the entries recorded with one of them finished, and
    are dropped (a later wait for the buffer's work then waits for the rest only). Call with
    the lock held."""
    work = self.work
    if not work:
        return
    done = [k for k, entry in work.items() if entry.event in events]  # (no generator per entry)
    for k in done:
        del work[k]
    if done:
        self.sole = next(iter(work)) if len(work) == 1 else None


def order_before(
    self: WorkingBuffer, after: Any, items: list[Item] | None = None
) -> list[Hashable]:
    """Make work queued later on ``after`` wait for this buffer's device work on every other
    stream; with ``items`` (what that work touches: :func:`footprint`), only for the work
    that touches the same bytes at the same location, one of the two writing. Returns the
    keys of the entries ordered so (those still recorded).

    On the device, with events (the host does not wait): the entry's event once recorded
    (with ``items``, the events of the marks that conflict), or an event recorded now on a
    stream that is never destroyed. Work on another device without an event, or on another
    thread's per-thread default stream, is waited for on the host (nothing on this device
    can name it).
    """
    work = self.work
    if not work:
        return []
    after = _streams.pending(after)
    device = _devices.current()
    key = key_of(after, device)
    native = _streams.native(after)
    ordered: list[Hashable] = []
    for k, entry in list(work.items()):
        if k == key:
            continue  # the same stream: ordered already
        if items is not None and entry.marks is not None and entry.event is not None:
            events = _conflicts(entry.marks, items, key)
            if events:
                for event in events:
                    event.wait(native)  # (any device's stream may wait for it)
                ordered.append(k)
            continue  # (nothing of it touches these bytes: no order needed)
        if entry.event is not None:
            entry.event.wait(native)  # (any device's stream may wait for it)
            ordered.append(k)
        elif (_devices.several and entry.device != device) or (
            entry.thread and entry.thread != _streams.this_thread()
        ):
            _host_wait(entry)
            del work[k]
        else:
            _streams.order(entry.stream, after)
            ordered.append(k)
    self.sole = next(iter(work)) if len(work) == 1 else None
    return ordered


def join(self: WorkingBuffer, stream: Any, items: list[Item] | None = None) -> None:
    """Order every other stream's work on this buffer before work queued next on ``stream``,
    and record that: ``stream``'s entry then stands for all of it (the set shrinks to one).
    With ``items`` (what that work touches), only the work that touches its bytes is ordered,
    by the events of the marks it conflicts with, and every entry stays (``stream``'s event
    does not cover the other marks' work: host reads wait for each entry). Call with the
    lock held."""
    order_before(self, stream, items)
    queued(self, stream, items)
    if items is not None:
        return
    pending = _streams.pending(stream)
    key = key_of(pending, _devices.current())
    work = self.work
    entry = work[key]
    work.clear()
    work[key] = entry
    self.sole = key


def use_stream(self: WorkingBuffer, stream: Any) -> None:
    """Put copies that name no stream on ``stream`` (a checked stream, or 0: the default
    stream) while no device work is queued on this buffer; ``stream`` is the current device's.
    """
    self.home_stream = stream
    self.home_device = _devices.current() if stream != 0 else 0


def unnamed_stream(self: WorkingBuffer) -> Any:
    """The stream for copies that name none, ordered after all of the buffer's device work.

    The array's own stream (``SmartArray(x, stream=s)``), else ``0`` (the default stream),
    when nothing is recorded in flight; the stream of the only
    entry when it is waited for by its handle (never destroyed) or is the calling thread's
    default stream; otherwise smartarray's own
    copy stream, made to wait for every entry on the device (no host wait), which then stands
    for them all (recorded without an event: waited for by its handle).
    """
    work = self.work
    if not work:
        # Nothing queued: the array's own stream (its device's), else the default stream.
        if self.home_stream != 0 and (
            not _devices.several or self.home_device == _devices.current()
        ):
            return self.home_stream
        return 0
    device = _devices.current()
    if len(work) == 1:
        entry = next(iter(work.values()))
        if entry.device == device and (not entry.thread or entry.thread == _streams.this_thread()):
            if entry.event is None:
                return entry.stream  # never destroyed: named again
            if entry.stream is _streams.DEFAULT:
                # The default stream, never destroyed: the legacy one (thread 0: every thread's
                # handle 0 names it) or this thread's own. Either way the copy queued on it
                # comes after the work in stream order; no event wait is needed.
                return _streams.DEFAULT
    stream = _streams.copy_stream()
    order_before(self, stream)
    key = key_of(stream, device)
    work.clear()
    work[key] = Work(stream, None, None, device, 0)
    self.sole = key
    return stream


def copied_on(self: WorkingBuffer, stream: Any) -> None:
    """The host just waited for all work on ``stream`` (a download): its entry is done."""
    key = key_of(_streams.pending(stream), _devices.current())
    if self.work.pop(key, None) is not None:
        self.sole = next(iter(self.work)) if len(self.work) == 1 else None


# -- host writers ---------------------------------------------------------------------------

# References to a view's njit host ndarray when no call holds it, as sys.getrefcount counts
# them below: the view's slot and getrefcount's own argument. An njit call on the fast path
# holds one more from reading ``_njit_fast`` until its cleanup (smartarray._numba.njit).
_IDLE_REFS = 2
_POLL_S = 1e-5  # first pause while waiting for a host writer (doubled up to 1 ms)


def writing(view: Any) -> bool:
    """Whether an njit fast-path call on ``view`` is still running (reads a reference count:
    the call took its reference under the GIL, before any disarming could be seen)."""
    return sys.getrefcount(view._njit_view) > _IDLE_REFS


def wait_for_host_writers(self: WorkingBuffer, copies: Any) -> None:
    """Wait for the host writers whose bytes one of ``copies`` (a plan's) reads or writes;
    forget the writers found finished. The lock may stay held: the calls never take it."""
    writers = self.host_writers
    pause = _POLL_S
    for view in list(writers):
        lo, hi = view._lo, view._hi
        if any(c.start < hi and lo < c.stop for c in copies):
            while writing(view):
                time.sleep(pause)  # (releases the GIL: the call's cleanup needs it)
                pause = min(pause * 2, 1e-3)
    self.host_writers = [view for view in writers if writing(view)]
