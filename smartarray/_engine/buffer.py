"""The coherence engine of one base buffer: copies, writes, stream order, held host arrays.

A :class:`Buffer` owns what every view of one SmartArray shares: the validity state
(:class:`~smartarray.coherence.BufferState`), the lazily allocated host and device copies, the
host arrays handed out to the user (:mod:`smartarray._engine.held`), the work in flight on it
(device work per stream and host writers, :mod:`smartarray._engine.device_work`), and the armed
``njit`` fast paths. Every access goes through one pair of calls:

- :meth:`Buffer.acquire` ``(location, lo, hi, intent, reason)`` makes bytes ``[lo, hi)`` ready
  for an access at ``location`` (host reads and writes, ``get``, kernel launches, njit calls):
  only stale bytes move, and ``Out`` of a range it covers moves nothing;
- :meth:`Buffer.release` ``(location, lo, hi, intent)`` records what the access wrote (nothing
  for ``In``), making the other copy stale and refreshing held host arrays after a device
  write; :meth:`Buffer.abort` records what a failed access may have written.

Its copies are its own methods: one per location (``host_bytes``; ``device_copies``, one per
device), allocated, adopted and given back here; :meth:`Buffer._plan_read` plans a read (with
several devices, bytes only a device that cannot reach the target holds go through the host
copy first) and :meth:`Buffer._copy` performs it (``h2d``, ``d2h``, and ``d2d`` between
devices, peer to peer).

The ``njit`` fast path (a view's ``_njit_fast``, read by numba's unboxer in C) is armed by
:meth:`release` and disarmed by :meth:`_leave_host_only`, which every transition that makes
device bytes current or starts device work goes through (:meth:`_copy` before an upload,
:meth:`mark` for a device write, :meth:`acquire` for a launch that writes). Nothing outside
this module arms or disarms it. The launch fast path needs no disarming: a view caches the
state's ``version`` at which it was current on the device only, and any transition changes the
version.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Final, Protocol

import numpy as np

from .. import guard, memory
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._observe import performance as _perf
from ..coherence import EMPTY_PLAN, BufferState, IntervalSet, Plan
from ..errors import TransferError
from . import auto_pin as _auto_pin
from . import device_work as _device_work
from . import residency as _residency
from .held import HeldHostArrays

__all__ = ["GPU", "HOST", "IN", "INOUT", "LOCATIONS", "NO_KEY", "OUT", "ArmableView", "Buffer"]

#: Locations of a buffer's copies: the host copy (NumPy memory) and device 0's copy; another
#: device's copy is ``"gpu:N"`` (see smartarray._memory.devices), added on its first use.
HOST: Final = _devices.HOST
GPU: Final = _devices.GPU
LOCATIONS: Final = (HOST, GPU)

#: Intents of an access (a kernel or njit argument, a host read or write): ``IN`` only reads,
#: ``OUT`` overwrites every element (no copy needed first when it covers its byte range),
#: ``INOUT`` reads and writes.
IN: Final = "in"
OUT: Final = "out"
INOUT: Final = "inout"

#: A view's ``_host_key`` when no element write of it is known to need no record (see
#: :meth:`Buffer.open_host_key`): an object no key is (a key compared with it is another
#: object, of another class).
NO_KEY: Final[Any] = object()

_REFRESH = "eager refresh of an exported view"  # the reason of a held host array's refresh

#: What one host element write recorded the slow way (under the lock, in the state) costs
#: more than a fast one, in seconds: about 5 us (``benchmarks/bench_host.py``, a used array
#: written at distinct elements). :meth:`Buffer.host_wrote` weighs it against an upload.
_RECORDED_WRITE_S = 5e-6

# Automatic array names: a0, a1, ... (itertools.count is atomic under the GIL).
_names = itertools.count()

# Held while a new buffer's attributes are derived (see _LazyBuffer).
_DERIVING = threading.Lock()


def direction(source: str, target: str) -> str:
    """``'h2d'``, ``'d2h'`` or ``'d2d'``: what a copy from ``source`` to ``target`` is."""
    if source == HOST:
        return "h2d"
    return "d2h" if target == HOST else "d2d"


def _refused(plan: Plan) -> bool:
    """Whether the guard refuses one of ``plan``'s copies made for a consolidation."""
    return any(guard.refuses(direction(c.source, c.target), "consolidation") for c in plan.copies)


class LaunchWrites(Protocol):
    """What :meth:`Buffer.release` reads and sets of one launch's record of its writes to the
    buffer (:class:`smartarray._engine.launch.LaunchWrites`, which names the buffer: the launch
    object sits above it)."""

    pending: int  # writes still to record
    ranges: list[tuple[int, int]]  # the byte ranges recorded so far


class ArmableView(Protocol):
    """What the engine reads and sets of a view whose ``njit`` calls may skip it (the njit fast
    path), or whose repeated writes of one element may (the host write fast path's key):
    SmartArray implements it in its slots, its sides are ``smartarray/_array/arguments.py`` and
    ``smartarray/_array/views.py``. The engine never names the array class (the launch fast
    path's cache is the engine's own object, :class:`~smartarray._engine.residency.LaunchCache`)."""

    _njit_view: np.ndarray | None  # the host ndarray njit receives for the view, once made
    _njit_fast: Any  # that ndarray while the fast path is armed, else None (read by the unboxer)
    _host_key: Any  # the key whose element writes need no record (see open_host_key), or NO_KEY
    _lo: int  # the view's bytes in the buffer: [_lo, _hi)
    _hi: int


class Buffer:
    """The shared base buffer of a SmartArray and its views, and its coherence engine."""

    __slots__ = (
        "nbytes",
        "state",
        "lock",
        "host_bytes",
        "device_copies",
        "held",
        "pinned",
        "work",
        "sole",
        "host_writers",
        "fast_views",
        "home_stream",
        "home_device",
        "name",
        "perf",
        "residency",
        "held_stale",
        "arriving",
        "host_stamp",
        "host_writes",
        "adopted",
        "__weakref__",
    )

    def __init__(
        self, nbytes: int, valid_at: str | None, pinned: bool, name: str | None = None
    ) -> None:
        self.name = f"a{next(_names)}" if name is None else name
        self.perf: _perf.Perf | None = None  # performance-warning counters, on first need
        self.nbytes = nbytes
        if valid_at == HOST:  # (a new array of every NumPy result: made without re-checking)
            self.state = BufferState.host_only(nbytes, HOST, GPU)
        else:
            locations = LOCATIONS if valid_at in (None, GPU) else (*LOCATIONS, valid_at)
            self.state = BufferState(nbytes, locations, valid_at=valid_at)
            if len(locations) > 2:
                self.locate()
        self.lock = threading.RLock()
        self.host_bytes: np.ndarray | None = None
        # Device copies by device ordinal (None: not allocated): one entry until a second
        # device uses this buffer.
        self.device_copies: list[Any] = [None]
        self.held = HeldHostArrays()  # host arrays handed out, refreshed after device writes
        self.pinned = pinned
        # Device work still in flight on this buffer, one entry per stream (key: the stream's
        # identity, with the device when several are visible; see _engine/device_work.py):
        # the latest work queued on that stream, with an event recorded after it (the
        # buffer's own or a launch's), or none for a stream waited for by its handle (a
        # default stream, smartarray's copy stream, never destroyed). Host reads of device
        # data and host writes wait for every entry; device work on a stream is ordered after
        # every other stream's entry (events, no host wait). A stream object is kept only
        # where it is named again: on a GPU the user's stream may be destroyed (collected) long
        # before this buffer is read, and waiting on its handle then is undefined behaviour.
        self.work: dict[Any, _device_work.Work] = {}
        # The key of the only entry of ``work`` (None: none or several): the launch fast path
        # compares it with its launch's key.
        self.sole: Any = None
        # Views whose njit fast-path calls still ran when their fast path was disarmed: copies
        # of their bytes wait for them (see _leave_host_only).
        self.host_writers: list[Any] = []
        # The stream the array was made with (``SmartArray(x, stream=s)``) and its device:
        # copies that name no stream go on it while no device work is queued (``use_stream``).
        self.home_stream: Any = 0
        self.home_device = 0
        # Views whose njit fast path is armed (bytes current on the host only), or whose key of
        # repeated element writes is open (see open_host_key): any transition that makes device
        # bytes current, or starts device work, disarms and closes them. Keyed by id and
        # weak: an entry goes with its view, so fresh views in a loop do not grow it.
        # (Made on the first arming: a new buffer per NumPy result must stay cheap.)
        self.fast_views: weakref.WeakValueDictionary[int, ArmableView] | None = None
        # The device-memory budget's record of this buffer (LRU tick, claims, cached device
        # views), made on first need: see smartarray._engine.residency.
        self.residency: _residency.Residency | None = None
        # Held host arrays left stale by an export of the device copy (see :meth:`exported`):
        # refreshed at the next host access, once the consumer is done writing.
        self.held_stale = False
        # The events after the downloads prefetch() queued to the host copy (None: none in
        # flight): host accesses wait for them first (:meth:`arrive`).
        self.arriving: list[Any] | None = None
        # The host fast path's stamp (see :meth:`host_ready`): a view that found its bytes
        # ready for lock-free host access keeps the stamp it found; any transition that may
        # make host bytes stale or device bytes current moves it (:meth:`_leave_host_only`).
        self.host_stamp = 0
        # Host element writes recorded one at a time since the host stamp last moved:
        # ``(stamp, count)`` (see :meth:`host_wrote`).
        self.host_writes = (0, 0)
        # The ndarray a :meth:`host_only` buffer adopted, until ``host_bytes`` (derived) views it.
        self.adopted: np.ndarray | None = None

    @staticmethod  # (not a classmethod: one call per NumPy result, a static one costs less)
    def host_only(host: np.ndarray, name: str | None = None) -> Buffer:
        """A new buffer adopting ``host`` (a 1-D contiguous ndarray nobody else holds) as its
        host copy, current there only: what ``Buffer(nbytes, HOST, False, name)`` then
        :meth:`adopt_host` of its bytes make, for every NumPy result and
        ``SmartArray(ndarray)``.

        Only what the host fast path reads is set here (the size and the host stamp); the
        rest, the lock, the host copy's bytes and the validity state included, is derived on
        first use (see :class:`_LazyBuffer`): most results are read on the host and dropped,
        never asking.
        """
        self = _LazyBuffer()  # (its __init__ is object's: see _LazyBuffer)
        self.nbytes = host.nbytes
        self.adopted = host
        self.host_stamp = 0
        if name is not None:
            self.name = name
        return self

    # -- copies: one per location, allocated on first need, and the copies between them ----

    @property
    def device_bytes(self) -> Any:
        """Device 0's copy, or None (the device copy of a process that uses one device)."""
        return self.device_copies[0]

    def ensure_host(self) -> np.ndarray:
        """The host copy, allocated on first need."""
        if self.host_bytes is None:
            if self.pinned:
                self.host_bytes = memory.portable_pinned_bytes(self.nbytes)
            else:
                self.host_bytes = np.empty(self.nbytes, np.uint8)
        return self.host_bytes

    def device_copy(self, where: str = GPU) -> Any:
        """The copy at the device location ``where``, or None if it is not allocated."""
        device = _devices.ordinal(where)
        copies = self.device_copies
        return copies[device] if device < len(copies) else None

    def ensure_device(self, where: str = GPU) -> Any:
        """The copy at device location ``where``, allocated on first need (within that
        device's memory budget: other buffers' copies there may be evicted to make room, see
        :mod:`smartarray._engine.residency`). Call with that device current."""
        device = _devices.ordinal(where)
        copies = self.device_copies
        if device >= len(copies):
            copies.extend([None] * (device + 1 - len(copies)))
        dev = copies[device]
        if dev is None:
            if where not in self.state.locations:
                self.locate(where)
            dev = copies[device] = _residency.allocate(self, device)
        return dev

    def locate(self, where: str | None = None) -> None:
        """Add device location ``where`` to the state (current nowhere yet), and make every
        device read from the devices it reaches peer to peer before the host: the shortest
        path for bytes another device wrote (NVLink, or one PCIe hop instead of two)."""
        state = self.state
        if where is not None:
            state.add_location(where)
        devices = [loc for loc in state.locations if loc != HOST]
        for target in devices:
            to = _devices.ordinal(target)
            peers = [d for d in devices if d != target and _devices.peer(_devices.ordinal(d), to)]
            state.prefer(target, peers)

    def device_locations(self) -> list[str]:
        """The device locations that hold a copy now."""
        return [_devices.location(d) for d, dev in enumerate(self.device_copies) if dev is not None]

    def drop_device(self, where: str = GPU) -> None:
        """Give the copy at device location ``where`` back (an eviction): the one transition
        that frees it.

        Only when no byte is current there only (the state refuses otherwise) and no device
        work is queued on it. Every cache of a device copy goes here, with it: the views' launch
        caches (:class:`~smartarray._engine.residency.LaunchCache`) drop their device views (which
        also keep the memory alive; those of the other devices' copies are made again on their next
        launch) and close the launch fast path. The next access there
        allocates a new copy and uploads only what it needs.
        """
        self.state.drop(where)
        self.device_copies[_devices.ordinal(where)] = None
        rec = self.residency
        if rec is not None and rec.caches:
            for cache in list(rec.caches):
                cache.drop()
            rec.caches.clear()

    def adopt_host(self, raw: np.ndarray) -> None:
        """Make ``raw`` (1-D uint8 host memory the user owns) this new buffer's host copy."""
        if self.host_bytes is not None:
            raise RuntimeError(f"{self.name} already has a host copy")  # pragma: no cover
        self.host_bytes = raw

    def adopt_device(self, raw: Any, where: str = GPU) -> None:
        """Make ``raw`` (1-D uint8 device memory another library owns, on the device of
        location ``where``) this new buffer's copy there: counted in that device's memory
        budget, never evicted."""
        if self.device_copy(where) is not None:
            raise RuntimeError(f"{self.name} already has a device copy")  # pragma: no cover
        if where not in self.state.locations:
            self.locate(where)
        device = _devices.ordinal(where)
        self.device_copies.extend([None] * (device + 1 - len(self.device_copies)))
        self.device_copies[device] = raw
        _residency.adopt(self, device)

    def ensure(self, where: str) -> None:
        """Allocate the copy at ``where`` if it is not yet."""
        if where == HOST:
            self.ensure_host()
        else:
            self.ensure_device(where)

    def _upload_for_launch(
        self, plan: Plan, reason: str, launch: Any, items: list[_device_work.Item] | None
    ) -> None:
        """Perform ``plan``'s uploads (host to device only) for a launch on ``launch`` (the
        default stream, :func:`smartarray._memory.streams.pending`'s form) on smartarray's
        non-blocking upload stream: on the legacy default stream a pageable upload would first
        wait for every kernel queued before it, whichever arrays it uses; there it overlaps
        them.

        Ordered on the device with events (no host wait): the buffer's earlier work that
        touches ``items`` (on any stream, the launch's included) before the copies, and the
        launch's stream after them, so that the kernel, and whatever the launch's stream
        queues later, sees the uploaded bytes. The caller then records the buffer's event on
        the launch's stream (``queued``): that entry, recorded after the wait, stands for the
        upload, and host reads, hand-outs, other streams and frees wait for it. A copy that
        fails is recorded on the upload stream, for what of it was queued. Lock held.
        """
        up = _streams.upload_stream()
        device = _devices.current()
        for target in {c.target for c in plan.copies}:
            self.ensure_device(target)  # (allocated now, if it is new: counted below)
        fresh = _residency.fresh_since_upload_order(device)
        if fresh:
            # Memory fresh from the allocator (this copy's, or one kept for reuse since) may
            # still be used by its previous owner's work on the legacy default stream, which
            # would order this copy after it by itself: wait for that stream once.
            legacy = _streams.launch_event()
            legacy.record(_streams.native(_streams.LEGACY))
            legacy.wait(up)
            _residency.upload_ordered(device, fresh)
        self.order_before(up, items)
        try:
            self._copy(plan, reason, up)
        except BaseException:
            self.queued(up)  # (what was queued may still run: host reads and frees wait for it)
            raise
        event = _streams.launch_event()  # (reused: the wait queued now keeps what it captured)
        event.record(up)
        event.wait(_streams.native(launch))

    def _copy(self, plan: Plan, reason: str, stream: Any, wait: bool = True) -> None:
        """Perform the copies of a plan on ``stream``; TransferError if one fails.

        ``wait=False`` leaves downloads on a stream other than the default in flight (the caller
        makes host accesses wait for them: smartarray._engine.prefetch, ``Buffer.arrive``).

        A copy between two devices goes peer to peer (counted ``d2d``); the plan has none
        between devices that cannot reach each other (see :meth:`_plan_read`).
        """
        if guard.armed():  # the whole plan, before its first copy: a refusal moves nothing
            for c in plan.copies:
                guard.check(direction(c.source, c.target), c.stop - c.start, reason, self.name)
        host = self.ensure_host()
        to_device = False
        for c in plan.copies:
            if c.target != HOST:
                self.ensure_device(c.target)  # (DeviceMemoryError as it is, before any copy)
                to_device = True
        if to_device:
            self._leave_host_only()  # (registers the njit calls still running as host writers)
        if _auto_pin._policy.budget is not None and not self.pinned:
            # Between transfers: page-lock the host copy if its staged copies paid.
            staged = sum(c.stop - c.start for c in plan.copies if HOST in (c.source, c.target))
            _auto_pin._policy.before_copy(self, host, staged)
        if self.host_writers:
            # An njit call still writing some of these bytes without the GIL: copy after it.
            self.wait_for_host_writers(plan.copies)
        downloads = uploads = False
        # numba copies synchronously on stream 0 (the default stream), asynchronously on others.
        native = _streams.native(stream)
        snaps = _perf.before_copy(self, plan, host) if self.perf is not None else None
        try:
            for c in plan.copies:
                if c.target == HOST:
                    dev = self.device_copies[_devices.ordinal(c.source)]
                    if dev is None:
                        continue  # never written: garbage anywhere (as device to device, below)
                    downloads = True
                    memory.copy_range(
                        "d2h", host, dev, c.start, c.stop, native, reason, self.name, c.source
                    )
                    continue
                self._leave_host_only()
                uploads = True
                dev = self.device_copies[_devices.ordinal(c.target)]
                if c.source == HOST:
                    memory.copy_range(
                        "h2d", host, dev, c.start, c.stop, native, reason, self.name, c.target
                    )
                else:
                    source = self.device_copies[_devices.ordinal(c.source)]
                    if source is None:
                        # Bytes current at a device whose copy was never made were never written
                        # since the array was made uninitialised (a copy is freed only with its
                        # location's bytes, drop_device): garbage anywhere, nothing to copy.
                        continue
                    _devices.reach(_devices.ordinal(c.source), _devices.ordinal(c.target))
                    memory.copy_between_devices(
                        dev,
                        source,
                        c.start,
                        c.stop,
                        native,
                        reason,
                        self.name,
                        (c.source, c.target),
                    )
            if downloads and stream != 0 and wait:
                if native != 0:
                    _streams.synchronize(stream)  # the host reads these bytes next
                # (a synchronous download waited for the default stream's earlier work)
                self.copied_on(stream)  # that stream's work on this buffer is done
            if uploads and native != 0 and self.held:
                # From page-locked memory (pinned=True, or an adopted ndarray that may be) the
                # DMA reads the host bytes when it runs, after this call returns: an array the
                # user held since before and writes next would change what the device gets.
                # Wait for it here, before the launch returns.
                for c in plan.copies:
                    if c.source == HOST and self.held.any_writable(c.start, c.stop):
                        _streams.synchronize(stream)  # (the stream is alive: in use now)
                        break
            if uploads and native == 0:
                # A synchronous upload from pageable memory returns once the bytes are staged:
                # the DMA may still run on the default stream. Launches elsewhere order after it.
                self.queued(0)
        except Exception as exc:
            raise TransferError(
                f"copying to the host or device copy failed ({reason}): {exc}"
            ) from exc
        if snaps:
            _perf.after_copy(self, snaps, host)

    def sync(self, where: str, lo: int, hi: int, reason: str, stream: Any = None) -> None:
        """Make bytes ``[lo, hi)`` current at ``where``, copying only stale ones.

        Copies go on ``stream`` (default: the stream of the buffer's latest device work, so
        they are ordered after it); a download is waited for before returning.
        """
        with self.lock:
            if where == HOST:
                self.arrive()  # a prefetched download in flight lands first
            if where not in self.state.locations:
                self.locate(where)  # this device's first use (its copy: on need)
            plan = self._plan_read(where, lo, hi, reason)
            if not plan.copies:
                return
            _devices.ensure_context()  # (a host thread may have none: a new one, after a with)
            self._copy(plan, reason, self._unnamed_stream() if stream is None else stream)
            self.state.apply(plan)

    def _plan_read(self, where: str, lo: int, hi: int, reason: str) -> Plan:
        """Plan the copies that make ``[lo, hi)`` current at ``where``.

        With several devices, bytes current only on devices that cannot reach ``where``'s
        memory peer to peer are first downloaded to the host copy (which then holds them
        too), so the plan copies them from there: every device-to-device copy it holds is a
        peer copy. A transfer guard that refuses that download or the upload after it raises
        :class:`~smartarray.TransferGuardError` before anything moves.
        """
        state = self.state
        plan = state.plan_read(where, lo, hi, coalesce=self._may_rewrite(where))
        if where == HOST or len(state.locations) <= 2 or not plan.copies:
            return plan
        target = _devices.ordinal(where)
        for _ in range(3):  # (a plan's coalesced gaps may reach more such bytes: at most twice)
            far = [
                c
                for c in plan.copies
                if c.source != HOST and not _devices.peer(_devices.ordinal(c.source), target)
            ]
            if not far:
                break
            if guard.armed():
                # Staged bytes go down now and up in the plan: a guard that refuses either way
                # refuses before the staging moves anything (the plan's own check comes later).
                for c in far:
                    for way in ("d2h", "h2d"):
                        if guard.refuses(way, reason):
                            guard.check(way, c.stop - c.start, reason, self.name)
            for c in far:
                self.sync(HOST, c.start, c.stop, reason)
            # (a pair found unreachable since the preferences were derived: derive them again)
            self.locate()
            plan = state.plan_read(where, lo, hi, coalesce=self._may_rewrite(where))
        return plan

    def _may_rewrite(self, where: str) -> bool:
        """Whether a copy into ``where`` may rewrite bytes already current there.

        Not while memory of that copy is in the user's hands (held host arrays; device arrays
        handed out or exported): writes through it are recorded only when announced, and a
        rewrite from another copy would bring the old values back.
        """
        if where == HOST:
            return not self.held
        rec = self.residency
        return rec is None or not (rec.handouts or rec.shared)

    # Work in flight and its order (smartarray/_engine/device_work.py).
    in_flight = _device_work.in_flight
    wait_for_device = _device_work.wait_for_device
    finished = _device_work.finished
    queued = _device_work.queued
    kernel_queued = _device_work.kernel_queued
    consumer_queued = _device_work.consumer_queued
    order_before = _device_work.order_before
    join = _device_work.join
    works_on = _device_work.works_on
    copied_on = _device_work.copied_on
    wait_for_host_writers = _device_work.wait_for_host_writers
    _unnamed_stream = _device_work.unnamed_stream
    use_stream = _device_work.use_stream

    def arrive(self) -> None:
        """Wait for the downloads to the host copy that
        :func:`~smartarray._engine.prefetch.prefetch` started, if any is in flight.

        Called by every host access of the buffer (with its lock held) before it reads or
        writes the host copy.
        """
        events = self.arriving
        if events:
            for event in events:
                _streams.wait_for(event)
            self.arriving = None
            # A download's arrival event is its stream's entry (recorded after the work
            # before it there): that entry finished too, and is not waited for again.
            self.finished(events)

    # -- transitions --------------------------------------------------------------------------

    def _leave_host_only(self) -> None:
        """The one transition point towards device bytes: close the host fast paths (the stamp
        moves) and disarm every armed njit fast path.

        Called before an upload (before its copy reads the host bytes: a lock-free host write
        re-checks the stamp after writing, seqlock-style, see smartarray._array.views), before
        a device write is recorded (the host goes stale) and when a consolidation changes the
        valid sets: from then on the host may no longer be current, or the only current copy,
        so host accesses and njit calls must go through the engine again. A call already
        running on the njit fast path (``nogil=True``, in another thread) keeps writing its
        bytes unrecorded: it is registered as a host writer, and copies of its bytes wait for
        it (:meth:`wait_for_host_writers`). The views' keys of repeated element writes
        (:meth:`open_host_key`) close here too, before the stamp moves.
        """
        fast = self.fast_views
        views = list(fast.values()) if fast else ()
        for view in views:
            # Before the stamp moves: a lock-free write that reads the new stamp must find its
            # key closed too (it re-checks only the stamp after writing).
            view._host_key = NO_KEY
        self.host_stamp += 1
        for view in views:
            if view._njit_fast is not None:  # (armed; a view with only a key open is not)
                view._njit_fast = None  # first: a call starting from now takes the hooks
                if _device_work.writing(view):
                    self.host_writers.append(view)
        if fast:
            fast.clear()

    def _arm(self, view: ArmableView, lo: int, hi: int) -> None:
        """Arm ``view``'s njit fast path if its bytes are current on the host only."""
        if view._njit_view is not None and not self.work and self.state.is_exclusive(HOST, lo, hi):
            view._njit_fast = view._njit_view
            self._keep_view(view)

    def open_host_key(self, view: ArmableView, lo: int, hi: int) -> bool:
        """Whether bytes ``[lo, hi)``, one element ``view`` has just written and recorded, are
        current on the host only with nothing in flight: then its later writes need no record
        until the next transition, and ``view`` may keep its key (``_host_key``), which
        :meth:`_leave_host_only` closes, before the stamp moves. That key is the write fast
        path's one test for a view whose other bytes are current elsewhere too (a used
        array): no stamp kept with it to compare. Call with the lock held.
        """
        if self.host_ready(lo, hi, only=True) == -1:
            return False
        self._keep_view(view)
        return True

    def keep_host_key(self, view: ArmableView, stamp: int) -> bool:
        """Whether ``stamp`` is still the host stamp, at which ``view``'s bytes were current on
        the host only with nothing in flight (its ``_host_only_at``): then any write of it
        needs no record until the next transition, and ``view`` may keep the key of the write
        it has just made (``_host_key``), which :meth:`_leave_host_only` closes. A host-only
        view's repeated writes of one key (a boundary value, an accumulator) then test only
        that key, as a used view's do after :meth:`open_host_key`. Call with the lock held.
        """
        if stamp != self.host_stamp:
            return False
        self._keep_view(view)
        return True

    def _keep_view(self, view: ArmableView) -> None:
        """Keep ``view`` among those the next transition disarms and closes
        (:meth:`_leave_host_only`): weakly, so its entry goes with it."""
        if self.fast_views is None:
            self.fast_views = weakref.WeakValueDictionary()
        self.fast_views[id(view)] = view

    def host_ready(self, lo: int, hi: int, only: bool = False) -> int:
        """The stamp at which bytes ``[lo, hi)`` may be read on the host without the lock
        (``only``: written too, recorded by nothing: the host holds the only current copy),
        or -1. A view keeps it; its fast path holds while ``host_stamp`` equals it. Call with
        the lock held.
        """
        if self.host_bytes is None or self.held_stale or self.arriving:
            return -1  # (a prefetched download still arriving: host accesses wait for it)
        if only and self.in_flight():
            return -1  # device work in flight may still read these host bytes (pinned memory)
        state = self.state
        ready = state.is_exclusive(HOST, lo, hi) if only else state.is_valid(HOST, lo, hi)
        return self.host_stamp if ready else -1

    def mark(self, where: str, lo: int, hi: int) -> None:
        """Record a write of ``[lo, hi)`` at ``where`` in the state (other copies go stale)."""
        if where != HOST:
            self._leave_host_only()
        self.state.mark_changed(where, lo, hi)

    def _consolidate(self) -> None:
        plan = self.state.plan_consolidate()
        if plan is EMPTY_PLAN:
            return  # (every location within the run cap: the common case, after each write)
        if plan:
            self._leave_host_only()  # it may drop host runs (valid elsewhere too)
        if plan.copies and guard.armed() and _refused(plan):
            plan = self._consolidate_by_copying_out()
        if plan.copies and guard.armed() and _refused(plan):
            # Bookkeeping the user did not ask for, that no allowed way can do: never refused,
            # so that the run cap holds.
            with guard.bypassed():
                self._copy(plan, "consolidation", self._unnamed_stream())
        elif plan.copies:
            self._copy(plan, "consolidation", self._unnamed_stream())
        self.state.apply(plan)

    def _consolidate_by_copying_out(self) -> Plan:
        """Bring the valid sets within the cap copying only the ways the guard allows.

        A location over the cap whose gaps would be filled the refused way has instead its
        smallest runs current there only copied to the other location (the allowed way), which
        makes them droppable for free. Returns the consolidation plan left to perform.
        """
        state = self.state
        for loc in state.locations:
            runs = state.valid(loc)
            excess = len(runs) - state.max_runs
            other = HOST if loc != HOST else next(iter(self.device_locations()), None)
            if other is None:
                continue  # (the host alone: nothing to coalesce against)
            if excess <= 0 or guard.refuses(direction(loc, other), "consolidation"):
                continue
            elsewhere = state.valid(other)
            own = sorted((b - a, a, b) for a, b in runs if not elsewhere.contains(a, b))
            for _, a, b in own[: max(0, excess - (len(runs) - len(own)))]:
                plan = state.plan_read(other, a, b, coalesce=self._may_rewrite(other))
                self._copy(plan, "consolidation", self._unnamed_stream())
                state.apply(plan)
        return state.plan_consolidate()

    def changed(self, where: str, lo: int, hi: int) -> None:
        """Record a write of bytes ``[lo, hi)`` at ``where``; refresh held host arrays."""
        with self.lock:
            if where == HOST and self.perf is not None:
                self.perf.marked = None  # a write recorded as it is (mark_changed sets it again)
            if self.state.is_exclusive(where, lo, hi):
                # Current there only (a kernel writing the same array again): nothing else to
                # make stale. Held host arrays are current unless an export or a failed launch
                # left them stale: this write is the moment to refresh them.
                if where != HOST and self.held.any_stale(self.state.valid(HOST), lo, hi):
                    self.refresh_exports(lo, hi)
                return
            self.record_write(where, lo, hi)
            if where != HOST:
                self.refresh_exports(lo, hi)

    def host_wrote(self, lo: int, hi: int, span_lo: int, span_hi: int) -> bool:
        """Record a host write of one element, bytes ``[lo, hi)``, by a view over bytes
        ``[span_lo, span_hi)``; return whether the whole view is now current on the host only.

        Each element written where another copy is current too (a used array) is recorded
        one at a time, under the lock, in the state: about 100 times NumPy's write. Once the
        writes recorded so far since the host stamp last moved cost more than one upload of the
        view's bytes would (:data:`_RECORDED_WRITE_S` against the state's cost model: a
        ski-rental rule, at most twice the cost of the better choice made in hindsight), and
        the state's cap of runs is reached (fewer writes stay recorded exactly, as before),
        the write is recorded over the whole view instead: the host holds the only current
        copy of it, and every later write of it takes the host fast path with no record
        until a device access moves the stamp. That upload is then paid by the next device
        read of the view; nothing stale is ever marked current (the host is current over all
        of the view, checked). Call with the lock held.
        """
        state = self.state
        if state.is_exclusive(HOST, lo, hi):
            self.changed(HOST, lo, hi)  # (nothing to record: held arrays, perf warnings)
            return False
        stamp, count = self.host_writes
        count = count + 1 if stamp == self.host_stamp else 1
        self.host_writes = (self.host_stamp, count)
        widen = (
            count >= state.max_runs
            and count * _RECORDED_WRITE_S >= state.cost.seconds(1, span_hi - span_lo)
            and state.is_valid(HOST, span_lo, span_hi)
        )
        if widen:
            lo, hi = span_lo, span_hi
        self.changed(HOST, lo, hi)
        return widen

    def exported(self, lo: int, hi: int, where: str = GPU) -> None:
        """Record that bytes ``[lo, hi)`` of the device copy were shared with a consumer that
        may write them (``__cuda_array_interface__``, DLPack, ``cuda_view``).

        The host copy becomes stale now; held host arrays are not refreshed now (the consumer
        has written nothing yet: a refresh would mark old bytes current) but at the next host
        access, or when the write is recorded again (``mark_changed('gpu')``, the exit of
        ``with a.cuda_view()``).
        """
        with self.lock:
            if not self.state.is_exclusive(where, lo, hi):
                self.record_write(where, lo, hi)
            if self.held.shown(lo, hi):
                self.held_stale = True
                self._leave_host_only()  # the next host access (any bytes) refreshes them

    def record_write(self, where: str, lo: int, hi: int) -> None:
        """Mark bytes ``[lo, hi)`` written at ``where`` (state only, and consolidation).

        The write is recorded before the consolidation copies run: a failed copy leaves the
        write recorded (and the consolidation undone), never a stale byte marked valid.
        """
        self.mark(where, lo, hi)
        self._consolidate()

    def record_write_where_valid(self, where: str, lo: int, hi: int) -> None:
        """Record a write that may have touched any byte of ``[lo, hi)`` at ``where`` but
        could only be trusted where that copy was current: a failed kernel or NumPy call.

        Bytes current at ``where`` become current there only (the failed call may have
        changed them, and they were right before). Bytes stale at ``where`` stay stale (the
        other copy holds their value; a partial write into stale memory is dropped). Nothing
        is declared valid that may be stale, and nothing current is lost.
        """
        if lo < hi and self.state.is_valid(where, lo, hi):  # (the common case: one run)
            self.mark(where, lo, hi)
            self._consolidate()
            return
        runs = self.state.valid(where).intersection(IntervalSet.span(lo, hi))
        if not runs:
            return
        for a, b in runs:
            self.mark(where, a, b)
        self._consolidate()

    # -- held host arrays ---------------------------------------------------------------------

    def refresh_exports(self, lo: int, hi: int) -> None:
        """Download the bytes of ``[lo, hi)`` that host arrays handed out still show."""
        refreshed = 0
        for a, b in self.held.shown(lo, hi):
            self.sync(HOST, a, b, _REFRESH)
            refreshed += b - a
        if refreshed:
            # A consumer that writes without telling (np.from_dlpack) may write these bytes
            # on the host from now on: the device copy of them cannot be trusted.
            for a, b in self.held.unannounced(lo, hi):
                self.record_write(HOST, a, b)
        if refreshed:
            _perf.refreshed(self, refreshed)

    def refresh_held(self) -> None:
        """Refresh every held host array an export left stale (the consumer is done now)."""
        self.refresh_exports(0, self.nbytes)
        self.held_stale = False  # only once every refresh succeeded

    # -- acquire / release --------------------------------------------------------------------

    def acquire(
        self,
        where: str,
        lo: int,
        hi: int,
        intent: str,
        reason: str,
        *,
        covers: bool = True,
        launch: Any = None,
    ) -> bool:
        """Make bytes ``[lo, hi)`` ready for an access with ``intent`` at ``where``.

        The In/Out/InOut rules, once for every consumer: ``In`` and ``InOut`` make the bytes
        current (only stale bytes move); ``Out`` of a range it ``covers`` (its elements tile
        it) moves nothing, and ``Out`` of a strided range falls back to ``InOut`` (the gaps
        stay current). On the host, a write waits for the buffer's device work first (an
        upload from this memory may still be in flight).

        ``launch`` (the launch's stream; 0 for the simulator's) makes this a kernel launch's
        acquisition: device work on another stream is ordered before it, a device write
        (``intent`` not ``In``) is recorded before the launch (a launch that fails runs no
        callback; only bytes current on the device are claimed), and the buffer's stream
        becomes the launch's. Call with the lock held.

        Returns
        -------
        bool
            For a launch: whether the bytes were already current on the device only (the
            launch needs no post-launch record unless the state moves meanwhile).
        """
        if where == HOST:
            self.arrive()
            if self.held_stale:
                self.refresh_held()
            if intent == OUT and covers:
                self.wait_for_device()
                return False
            self.sync(HOST, lo, hi, reason)
            if intent != IN:
                self.wait_for_device()
            return False
        if where not in self.state.locations:
            self.locate(where)  # this device's first use (its copy: on need)
        _residency.touch(self)  # least recently used goes first
        if launch is None:
            self.sync(where, lo, hi, reason)
            return False
        return self._acquire_for_launch(where, lo, hi, intent, reason, covers, launch)

    def _acquire_for_launch(
        self, where: str, lo: int, hi: int, intent: str, reason: str, covers: bool, launch: Any
    ) -> bool:
        """:meth:`acquire` for a kernel launch on stream ``launch`` at device ``where``."""
        launch_stream = _streams.pending(launch)
        if intent != IN:
            self._leave_host_only()  # device work that writes these bytes starts
        if self.perf is not None and self.perf.pending:
            _perf.emit(self)  # before anything moves for this launch
        state = self.state
        record = intent != IN
        # (Held host arrays are stale only after a failure, a kernel that raised or a refresh
        # that failed: this launch must then refresh them, so it takes no fast path.)
        exclusive = state.is_exclusive(where, lo, hi) and not self.held.any_stale(
            state.valid(HOST), lo, hi
        )
        plan = None
        if not exclusive:
            if record and self.held and guard.armed():
                # Ask the guard about the refresh after the launch now, before anything moves:
                # in the post-launch callbacks a refusal would stop the other arguments'.
                for a, b in self.held.shown(lo, hi):
                    guard.check("d2h", b - a, _REFRESH, self.name)
            if intent != OUT or not covers:  # Out of a covering view: no upload
                plan = self._plan_read(where, lo, hi, reason)
        # What the launch touches: its copies' bytes, and the kernel's at ``where``.
        items = _device_work.footprint(
            plan.copies if plan is not None else (), where, lo, hi, record
        )
        if self.work and not self.works_on(launch_stream):
            # Work on this buffer is queued on other streams (the default stream, another
            # thread's stream included): order the work touching these bytes before this
            # launch on the device, with events. No host wait.
            self.join(launch_stream, items)  # (recorded again by the launch's callback)
        if exclusive:
            # Current on the device only (a loop of launches): nothing to upload, and a write
            # by the kernel changes nothing unless the host reads in between. Nothing queued
            # here: the launch's callback records the kernel (no event recorded before it).
            return True
        aside = False  # (uploads queued on smartarray's upload stream)
        if intent != OUT or not covers:
            if plan:
                aside = (
                    launch_stream is _streams.DEFAULT
                    and all(c.source == HOST for c in plan.copies)
                    and _residency.private(self)
                    and not _residency.others_launching()
                )
                if aside:
                    # Uploads on smartarray's non-blocking stream, the launch's stream made
                    # to wait for them: they overlap the default stream's earlier kernels.
                    # Only where smartarray knows all work on the memory (it orders the
                    # upload after that work): others' default-stream work, on adopted or
                    # handed-out memory, is ordered by the legacy stream's rules alone; and
                    # only while no other thread is inside a launch: its kernel, queued
                    # between the launch's preparation and the callback that records it, is
                    # in no buffer's work yet, and only the legacy stream orders after it.
                    self._upload_for_launch(plan, reason, launch_stream, items)
                else:
                    self._copy(plan, reason, launch)
                state.apply(plan)
            if self.perf is not None:
                _perf.uploaded(self, plan.nbytes if plan else 0, lo, hi)
        if intent == INOUT and hi - lo >= _perf.MIN_BYTES:  # may the kernel only read?
            _perf.inout_launch(self, lo, hi, state.is_valid(HOST, lo, hi))
        if record:
            # Record the device write now, before the launch: a launch that fails (a kernel
            # raising after it wrote, a later argument that cannot be prepared) runs no
            # callback, and nothing may stay marked valid on the host that the kernel may have
            # overwritten. Only bytes current on the device are claimed (Out skipped the
            # upload of the others: if the kernel never runs, the host holds their value).
            # The release after the launch records the whole write again and refreshes held
            # host arrays.
            self.record_write_where_valid(where, lo, hi)
        # The buffer's event is recorded on the launch's stream now if this preparation
        # queued uploads (it captures them; a launch that fails later runs no callback and
        # must leave nothing that waits on its stream's handle), and again by the launch's
        # callback, right after the kernel was queued (Buffer.kernel_queued): each replaces
        # only this stream's entry, so work another thread queued meanwhile on another stream
        # stays. Nothing uploaded: nothing to capture before the kernel (one record fewer).
        if plan is not None and plan.copies:
            # After uploads aside, the entry's marks are unknown, as after copies on the
            # launch's stream (recorded with none): a loop of launches then updates no marks.
            self.queued(launch_stream, None if aside else items)
        return False

    def release(
        self,
        where: str,
        lo: int,
        hi: int,
        intent: str,
        view: ArmableView | None = None,
        writes: LaunchWrites | None = None,
    ) -> None:
        """Record what an access with ``intent`` wrote at ``where`` (``In``: nothing).

        A host write (an njit call's ``view``) arms the view's njit fast path when its bytes
        are then current on the host only. A device write (a launch's post-launch callback)
        is recorded first; then held host arrays are refreshed: with ``writes`` (this
        launch's writes to the buffer), by the last argument's callback, over every range
        written, so an overlap downloads once. Call with the lock held.
        """
        if intent == IN:
            return
        if where == HOST:
            self.changed(HOST, lo, hi)
            if intent == INOUT and view is not None:
                self._arm(view, lo, hi)
            return
        try:
            if not self.state.is_exclusive(where, lo, hi):
                self.record_write(where, lo, hi)
        finally:
            if writes is not None:
                writes.ranges.append((lo, hi))
                writes.pending -= 1
        if writes is None:
            self.refresh_exports(lo, hi)
        elif writes.pending == 0:
            for a, b in writes.ranges:
                self.refresh_exports(a, b)  # only stale bytes move: overlaps once

    def abort(self, where: str, lo: int, hi: int, intent: str) -> None:
        """Record what a failed access with ``intent`` may have written at ``where``.

        Only bytes that were current there are recorded as written (conservative: they may
        have been written); an ``Out`` access whose copy was skipped keeps the current bytes
        where they are, so nothing valid is lost.
        """
        if intent == IN:
            return
        with self.lock:
            self.record_write_where_valid(where, lo, hi)


class _LazyBuffer(Buffer):
    """A :meth:`Buffer.host_only` buffer until anything but its size, host stamp and host
    ndarray is first read or set: then every attribute it lacks is derived at once, and it
    becomes a plain :class:`Buffer`.

    Each attribute it lacks is a property of this class (made below, from :data:`_DERIVED`)
    that shadows the slot: the slots it has are read as fast as a Buffer's (a ``__getattr__``
    would slow every attribute read: CPython does not specialise reads of such a class, and
    the host fast path reads ``host_stamp`` twice per access).
    """

    __slots__ = ()

    # Made by calling the class (:meth:`Buffer.host_only`), without Buffer's __init__: a
    # third cheaper than ``object.__new__(_LazyBuffer)``, once per NumPy result.
    __init__ = object.__init__  # (no arguments, nothing to set)

    def _derive(self) -> None:
        """Set every attribute not set yet, then become a Buffer.

        Under one lock of the module, which derivation holds for a microsecond and which
        takes no other lock: two threads asking first must not make two locks or two states
        (one would lose the other's records).
        """
        with _DERIVING:
            if self.__class__ is _LazyBuffer:
                for name, derive in _DERIVED.items():
                    slot = _SLOTS[name]
                    try:
                        slot.__get__(self, Buffer)
                    except AttributeError:
                        slot.__set__(self, derive(self))
                self.adopted = None  # (host_bytes views its memory now)
                self.__class__ = Buffer  # type: ignore[assignment]  # (same slots)


def _derived(name: str) -> property:
    """The property of :class:`_LazyBuffer` that stands for Buffer's slot ``name``."""
    slot = _SLOTS[name]

    # _LazyBuffer._derive, not self._derive: another thread may have made this buffer a
    # plain Buffer (which has none) since this read found the property.
    def get(self: _LazyBuffer) -> Any:
        _LazyBuffer._derive(self)
        return slot.__get__(self, Buffer)

    def set(self: _LazyBuffer, value: Any) -> None:
        _LazyBuffer._derive(self)
        slot.__set__(self, value)

    return property(get, set, doc=f"Buffer.{name}, derived on first use")


#: What :meth:`Buffer.host_only` leaves unset, derived on first use: each as
#: :meth:`Buffer.__init__` would have set it for a new buffer current on the host only.
_DERIVED: Final[dict[str, Any]] = {
    "lock": lambda buf: threading.RLock(),
    "host_bytes": lambda buf: buf.adopted.view(np.uint8),
    "state": lambda buf: BufferState.host_only(buf.nbytes, HOST, GPU),
    "name": lambda buf: f"a{next(_names)}",
    "perf": lambda buf: None,
    "device_copies": lambda buf: [None],
    "held": lambda buf: HeldHostArrays(),
    "pinned": lambda buf: False,
    "work": lambda buf: {},
    "sole": lambda buf: None,
    "host_writers": lambda buf: [],
    "home_stream": lambda buf: 0,
    "home_device": lambda buf: 0,
    "fast_views": lambda buf: None,
    "residency": lambda buf: None,
    "held_stale": lambda buf: False,
    "arriving": lambda buf: None,
    "host_writes": lambda buf: (0, 0),
}

# Buffer's slots (their descriptors), which _LazyBuffer's properties shadow.
_SLOTS: Final[dict[str, Any]] = {name: Buffer.__dict__[name] for name in _DERIVED}
for _name in _DERIVED:
    setattr(_LazyBuffer, _name, _derived(_name))
