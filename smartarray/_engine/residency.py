"""The device-memory budget: which device copies are resident, and eviction when room runs out.

Every SmartArray device copy is allocated through :func:`allocate` (from
:meth:`Buffer.ensure_device <smartarray._engine.buffer.Buffer.ensure_device>`), which keeps the
bytes resident within the budget (:func:`~smartarray.set_device_budget`; by default, on a GPU, the
memory free at first use less a margin, and unlimited on the simulator). When an allocation
would exceed the budget, or fails with CUDA_ERROR_OUT_OF_MEMORY (a GPU, or strict mode's finite
device memory), device copies are evicted, then the allocation is tried once more:

1. first, device copies whose bytes are all current on the host too (given back, nothing
   moves), least recently used first;
2. then the least recently used device copies: their bytes current on the device only are
   downloaded (counted ``d2h``, reason ``'eviction'``), then the copy is given back.

Never evicted: a copy a launch being prepared or run uses (it claims its arguments from their
preparation until the launch's post-launch callbacks ran, so allocating the third argument never
evicts the first), a copy kept with :func:`~smartarray.resident`, a copy whose memory was handed
out (a device array from ``get('gpu')`` still referenced, ``__cuda_array_interface__``, adopted
device memory), and a copy whose lock another thread holds. Queued device work on a copy (its
buffer's stream) is waited for before it is evicted: stream order says the work uses it, and
waiting is what a host read does; skipping it instead would make a loop of launches that never
reads back unevictable. An evicted copy comes back lazily: the next device access allocates it
again and uploads only the bytes it needs (the state says the device holds nothing).

An array that dies while device work on it may still run keeps its device copies allocated
(and counted) until that work ran: CUDA documents no wait in ``cuMemFree``, a driver may wait
only for the freeing context's device, and numba-cuda frees from whichever context is current
when its deferred frees are cleared. The next allocation or budget query frees those whose
work finished (an event query); one that needs the room waits for their work first.

Several devices: each has its own budget (the same number for each, or each one's own default)
and its own registry of resident copies; an allocation on one device evicts copies on that
device only. Recency is a tick stored in the buffer's :class:`Residency` record, set on every
device access (the launch fast path included: O(1)); a buffer with copies on several devices has
one tick for all of them.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
from numba import cuda

from .. import memory
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._platform import cuda_simulator as _sim
from .._platform import sessions as _sessions
from ..errors import DeviceMemoryError, TransferError, TransferGuardError
from ..stats import evicted  # (not the module as an attribute: the package rebinds "stats")
from .deferred_lock import DeferringLock

if TYPE_CHECKING:  # pragma: no cover
    from ..coherence import BufferState

__all__ = [
    "DeviceBudget",
    "Residency",
    "ResidentArray",
    "allocate",
    "budget_of",
    "empty_cache",
    "keep_until_ran",
    "reset",
    "set_budget",
]

#: The margin left free below a GPU's free memory by the default budget (kernels' local
#: memory, other libraries, numba's own allocations): a tenth of the free memory, at least this
#: much on a device of 2 GiB or more (a sixteenth of a smaller device's memory), and never more
#: than half of what is free (see :func:`default_margin`).
DEFAULT_MARGIN = 128 << 20


def default_margin(free: int, total: int) -> int:
    """The bytes the default budget leaves free on a device with ``free`` of ``total`` bytes
    free: it scales with the device, and a device with free memory never gets a budget of 0."""
    return min(max(free // 10, min(DEFAULT_MARGIN, total // 16)), free // 2)


class Recorded(Protocol):
    """A buffer's residency record (:func:`of` makes it on first need)."""

    residency: Residency | None


class ResidentBuffer(Recorded, Protocol):
    """What the device-memory budget reads and calls of a buffer whose device copies it counts
    and evicts (the engine's :class:`~smartarray._engine.buffer.Buffer`, which calls the
    budget: the budget never names the class): its size and name, its validity state, its
    lock, its device copies and work in flight (kept by the release of a buffer gone), its
    held host arrays, and the calls that download, wait for and give back a device copy."""

    @property
    def nbytes(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> BufferState: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def device_copies(self) -> list[Any]: ...
    @property
    def work(self) -> Mapping[Any, Any]: ...
    @property
    def held(self) -> Any: ...  # its held host arrays: truthy while any is held

    def device_copy(self, where: str = ...) -> Any: ...
    def drop_device(self, where: str = ...) -> None: ...
    def sync(self, where: str, lo: int, hi: int, reason: str, stream: Any = ...) -> None: ...
    def wait_for_device(self) -> None: ...


class LaunchCache:
    """A view's launch cache: what the launch fast path reads (a view's one slot,
    ``_launch_cache``, holds it; ``None`` until its first slow-path preparation).

    The engine owns it: :func:`open_launch_cache` makes it (and registers it with the buffer's
    residency record, never the view), :meth:`open` opens the fast path at a state's version,
    :meth:`close` closes it (an eviction) and :meth:`drop` also forgets the device view (the
    copy went, ``Buffer.drop_device``). The array layer's side, the fast path itself, is
    ``smartarray/_array/arguments.py``: it reads these attributes and writes none.

    Attributes
    ----------
    view : device array or None
        The view of the device copy (``None``: made again on the next slow path).
    arg : object or None
        What a kernel receives for ``view``.
    gpu_only_at : int
        The state's version at which the view was current on the device only (-1: closed).
    device_at : int
        ... and current there (-1: closed).
    device : int
        The device of ``view`` (several devices: another device's launch makes a new cache).
    """

    __slots__ = ("view", "arg", "gpu_only_at", "device_at", "device", "__weakref__")

    def __init__(self, device: int) -> None:
        self.view: Any = None
        self.arg: Any = None
        self.gpu_only_at = self.device_at = -1
        self.device = device

    def open(self, version: int, exclusive: bool) -> None:
        """Open the fast path at the state's ``version``: the view is current on the device
        (``exclusive``: there only, so a write needs no record either)."""
        if exclusive:
            self.gpu_only_at = version
        self.device_at = version

    def close(self) -> None:
        """Make the next launch take the slow path (it re-checks the state)."""
        self.gpu_only_at = self.device_at = -1

    def drop(self) -> None:
        """Forget the device view too (its copy went): the slow path makes it again."""
        self.view = self.arg = None
        self.close()


def open_launch_cache(cache: LaunchCache | None, device: int) -> LaunchCache:
    """The launch cache for a view whose slot holds ``cache``, for a launch on ``device``: a
    new one (closed, no device view) if there was none or it was another device's."""
    if cache is None or cache.device != device:
        cache = LaunchCache(device)
    return cache


def fill_launch_cache(buf: ResidentBuffer, cache: LaunchCache, view: Any, arg: Any) -> None:
    """``cache`` holds ``view`` (of ``buf``'s device copy) and its kernel argument ``arg``: it
    is registered with ``buf``'s residency record, so that an eviction closes it and dropping
    the copy drops it."""
    cache.view, cache.arg = view, arg
    rec = of(buf)
    if rec.caches is None:
        rec.caches = weakref.WeakSet()
    rec.caches.add(cache)


class Residency:
    """The residency record of one buffer (``Buffer.residency``).

    Attributes
    ----------
    tick : int
        When its device copy was last used (a process-wide counter): least recent is evicted
        first.
    sizes : dict of int to int
        Device bytes it holds on each device where it is resident (counted in that device's
        budget).
    keep : int
        How many :func:`~smartarray.resident` blocks keep it resident.
    shared : str
        Why it stays resident for good ('' if it may be evicted): its device memory was shared.
    caches : WeakSet of LaunchCache or None
        The views' launch caches that hold a device view of the copy: an eviction closes them,
        dropping the copy drops them (see ``Buffer.drop_device``).
    handouts : list of (weakref, str)
        What holds the copy's memory outside (``get('gpu')`` tokens, see
        ``memory.handout_view``; live DLPack exports), and why: while one lives, it stays.
    """

    __slots__ = ("tick", "sizes", "keep", "shared", "caches", "handouts")

    def __init__(self) -> None:
        self.tick = 0
        self.sizes: dict[int, int] = {}
        self.keep = 0
        self.shared = ""
        self.caches: weakref.WeakSet[LaunchCache] | None = None
        self.handouts: list[tuple[weakref.ref[Any], str]] = []


class ResidentArray(NamedTuple):
    """One resident device copy, as :func:`~smartarray.device_budget` lists it."""

    name: str
    nbytes: int
    kept: str  # why it may not be evicted now ('' if it may)
    device: int = 0


class DeviceBudget(NamedTuple):
    """What :func:`~smartarray.device_budget` returns."""

    budget: int | None
    used: int
    resident: tuple[ResidentArray, ...]
    cached: int = 0


_lock = DeferringLock()  # the registry; held while making room (evictions serialise)
_budget: int | None = None  # set by the user
_budget_set = False  # whether the user set one (None then means: unlimited)
_default: dict[int, int | None] = {}  # each device's default on a GPU, computed at first use
_used: dict[int, int] = {}  # device -> bytes of the resident copies there
_resident: dict[tuple[int, int], weakref.ref[ResidentBuffer]] = {}  # (id(buffer), device) -> buffer
_ticks = itertools.count(1)
#: Whether an allocation may evict, so launches claim their arguments (see :func:`started`):
#: a budget is set, or allocations can fail (a GPU, strict mode's finite memory). Only the
#: plain simulator without a budget never evicts: its launch fast path pays nothing for the
#: budget. Derived by :func:`_derive_claiming` on the two transitions that change it.
claiming = True


def _derive_claiming() -> None:
    global claiming
    claiming = _budget_set or not _sim.SIMULATOR or _sessions.current() is not None


_sessions.on_change.append(_derive_claiming)
_derive_claiming()


_local = threading.local()
# Thread ident -> its latest launch (a weak reference to a smartarray._engine.launch.Launch:
# its ``claimed_buffers(stack)``).
_launches: dict[int, weakref.ref[Any]] = {}
# Device copies allocated from numba's allocator per device (not from the cache), and how many
# of them the upload stream was last ordered after (see fresh_since_upload_order).
_allocations: dict[int, int] = {}
_upload_ordered: dict[int, int] = {}
# Why the last eviction skipped a copy that may be evicted (id(buffer) -> why), for the error.
_skipped: dict[int, str] = {}
_HANDED_OUT = "a device array from get('gpu') over it is still referenced"  # handed_out's why


# -- records --------------------------------------------------------------------------------


def of(buf: Recorded) -> Residency:
    """The residency record of ``buf``, made on first need."""
    rec = buf.residency
    if rec is None:
        rec = buf.residency = Residency()
    return rec


def touch(buf: Recorded) -> None:
    """Mark ``buf``'s device copy used now (LRU order)."""
    rec = buf.residency
    if rec is not None:
        rec.tick = next(_ticks)


def started(launch: weakref.ref[Any]) -> None:
    """``launch`` (a weak reference to a :class:`smartarray._engine.launch.Launch`) is this
    thread's latest: its arguments are claimed while it is prepared or queued (see
    :func:`_claimed`). Weak: a launch that raised, or whose thread ended, keeps nothing alive
    from here."""
    _launches[threading.get_ident()] = launch


def others_launching() -> bool:
    """Whether a thread other than this one is inside a launch (its latest launch still
    alive: being prepared, or queued with its callbacks still to run). Such a launch's kernel
    is in no buffer's work until its callback records it."""
    me = threading.get_ident()
    return any(ident != me and ref() is not None for ident, ref in list(_launches.items()))


def handed_out(buf: ResidentBuffer, devary: Any, why: str = _HANDED_OUT) -> None:
    """``devary`` lives while the copy's memory is held outside: the copy stays (``why``)."""
    rec = of(buf)
    rec.handouts = [r for r in rec.handouts if r[0]() is not None]
    try:
        rec.handouts.append((weakref.ref(devary), why))
    except TypeError:  # pragma: no cover - numba's device arrays take weak references
        rec.shared = "its device memory was handed out"


def share(buf: ResidentBuffer, why: str) -> None:
    """``buf``'s device memory is shared for good (``why``): it is never evicted."""
    of(buf).shared = why


def adopt(buf: ResidentBuffer, device: int = 0) -> None:
    """``buf`` adopted device memory (``copy=False``) on ``device``: resident, counted, never
    evicted."""
    with _lock:
        share(buf, "it adopted device memory (copy=False)")
        _register(buf, buf.nbytes, device)


def _register(buf: ResidentBuffer, nbytes: int, device: int) -> None:
    rec = of(buf)
    key = (id(buf), device)
    # The release needs them after the buffer is gone; both are only ever changed in place.
    copies, work = buf.device_copies, buf.work
    session = _sessions.current()  # (the memory is that session's: reused only in it)

    def release() -> None:  # the buffer died: its device memory goes with it
        if _resident.get(key) is ref:
            del _resident[key]
            copy = copies[device] if device < len(copies) else None
            if copy is not None:
                _release_in_a_context()  # (freed here once its work ran, if not kept)
            reusable = _reusable(rec) and _sessions.current() is session
            _retire(copy, list(work.values()), nbytes, device, reusable)

    # The callback takes no lock: the next holder of the registry lock releases.
    ref = weakref.ref(buf, lambda _, defer=_lock.defer: defer(release))  # type: ignore[misc]  # (a default-argument lambda)
    with _lock:
        _resident[key] = ref
        rec.sizes[device] = nbytes
        rec.tick = next(_ticks)
        _used[device] = _used.get(device, 0) + nbytes


class _Retired(NamedTuple):
    """Device memory let go of while device work on it may still run: the copy of a buffer
    that died, or a temporary (:func:`keep_until_ran`)."""

    copy: Any
    events: list[Any]  # one per stream that had work on the buffer, completed when it ran
    nbytes: int  # counted in the device's budget (0: a temporary, not counted)
    device: int
    reusable: bool = False  # kept for the next allocation of its size once its work ran


def _reusable(rec: Residency) -> bool:
    """Whether a dead buffer's copies may serve later allocations: all work on their memory
    was smartarray's own (:func:`private`). Memory once handed out may still be read by a
    kernel of the user's that no buffer recorded (on a dropped ``get('gpu')`` array, on the
    legacy default stream): the next array's upload on a non-blocking stream would overtake
    it, where ``cuMemFree`` and a new allocation would not."""
    return not rec.shared and not rec.handouts


def private(buf: Recorded) -> bool:
    """Whether all device work on ``buf``'s memory is smartarray's own (recorded in its
    work): its device memory was never handed out (``get('gpu')``, DLPack), shared
    (``__cuda_array_interface__``) or adopted (``copy=False``). Work of others on it, on the
    legacy default stream say, is ordered only by that stream's implicit rules."""
    rec = buf.residency
    return rec is None or _reusable(rec)


# Copies kept allocated after their buffer died, until the work queued on them ran: a free
# may wait only for the freeing context's device (CUDA documents no wait at all), and numba
# frees from whatever context is current when its deferred frees are cleared.
_retired: list[_Retired] = []


def _pending_event(entry: Any) -> Any:
    """An event that completes when the work of ``entry`` (a buffer's work record, see
    smartarray/_engine/device_work.py) finished, or None if it has."""
    event = entry.event
    if event is None:  # work waited for by its stream's handle: an event recorded there now
        with _devices.on(entry.device):
            if entry.thread and entry.thread != _streams.this_thread():
                cuda.synchronize()  # another thread's per-thread default stream: not named here
                return None
            event = _streams.new_event()
            event.record(_streams.native(entry.stream))
    return None if _streams.completed(event) else event


def _retire(copy: Any, work: list[Any], nbytes: int, device: int, reusable: bool) -> None:
    """The buffer holding ``copy`` on ``device`` died with ``work`` recorded: free the copy
    now if that work ran, else keep it (still counted) until it has; a ``reusable`` copy is
    cached for reuse instead of freed. Registry lock held."""
    events = [] if copy is None else [e for e in map(_pending_event, work) if e is not None]
    if events:
        _retired.append(_Retired(copy, events, nbytes, device, reusable))
    else:
        _used[device] -= nbytes
        if reusable and copy is not None:
            _keep(copy, nbytes, device)


def keep_until_ran(held: Any, stream: Any) -> None:
    """Keep ``held`` (device memory its owner lets go of now) alive until the work queued so
    far on ``stream`` (of the current device; 0: the default stream) ran, without waiting.

    For a temporary copy a kernel still reads (a plain ndarray in :class:`smartarray.In`):
    its free must not overtake that kernel, whichever context numba-cuda frees it from.
    """
    event = _streams.new_event()
    event.record(_streams.native(_streams.pending(stream)))
    with _lock:
        _free_retired()
        _retired.append(_Retired(held, [event], 0, _devices.current()))


def _free_retired(wait: bool = False) -> int:
    """Free the retired copies whose work ran (``wait``: wait for it); return the bytes freed.
    Registry lock held.

    Freed bytes leave the budget's count now, so they are given back to the device now too
    (numba-cuda defers its frees: an allocation the count allows could fail otherwise).
    """
    if not _retired:
        return 0  # (the common case: nothing retired, nothing to look at)
    freed = 0
    for old in list(_retired):
        if wait:
            for event in old.events:
                event.synchronize()
        elif not all(_streams.completed(e) for e in old.events):
            continue
        _release_in_a_context()
        _retired.remove(old)
        if old.nbytes:
            _used[old.device] -= old.nbytes
            if old.reusable:
                _keep(old.copy, old.nbytes, old.device)
        freed += old.nbytes
    if freed:
        _sim.give_back_freed()
    return freed


# -- reuse ----------------------------------------------------------------------------------

# The device copies of dead arrays, kept for the next allocation of the same size on the same
# device (a caching allocator, as CuPy's memory pool and PyTorch's): a loop that makes
# temporaries allocates once, and no cuMemAlloc (implicit synchronisation between streams, CUDA
# C++ Programming Guide) falls between its kernels. Only a copy whose work ran and whose memory
# only smartarray worked on (:func:`_reusable`) is kept. Counted in the budget beside ``_used``:
# an allocation that needs the room gives cached memory back before it evicts anything.
_cache: dict[tuple[int, int], list[Any]] = {}  # (device, nbytes) -> unused copies, oldest first
_cached: dict[int, int] = {}  # device -> bytes in _cache


#: The most a device's cache holds where no budget bounds it (the plain simulator); under a
#: budget, a quarter of it: a cache is for the temporaries of a loop, not a second budget.
CACHE_LIMIT = 256 << 20


def _keep(copy: Any, nbytes: int, device: int) -> None:
    budget = _budget if _budget_set else _default.get(device)
    limit = CACHE_LIMIT if budget is None else budget // 4
    if nbytes > limit:
        return  # (given back with its last reference)
    _cache.setdefault((device, nbytes), []).append(copy)
    _cached[device] = _cached.get(device, 0) + nbytes
    if _cached[device] > limit:
        _drop_cached(device, _cached[device] - limit, flush=False)


def _reuse(device: int, nbytes: int) -> Any:
    """A cached copy of ``nbytes`` on ``device`` (no longer counted as cached), or None."""
    copies = _cache.get((device, nbytes))
    if not copies:
        return None
    copy = copies.pop()  # (the most recent: its pages are the likeliest still mapped)
    if not copies:
        del _cache[(device, nbytes)]
    _cached[device] -= nbytes
    return copy


def _release_in_a_context() -> None:
    """Make a context current before dropping the last reference to device memory.

    numba-cuda defers ``cuMemFree`` and flushes its list in whichever thread fills it: a
    thread with no current context (a new one, or one whose ``with cuda.gpus[n]:`` ended)
    would have the free refused and the memory leaked, the error reported only by the
    finalizer. Budget queries, cache releases and evictions may run in such a thread.
    """
    _devices.ensure_context()


def _drop_cached(device: int, need: int | None = None, flush: bool = True) -> int:
    """Give back cached copies on ``device`` (the current one), a size at a time in the order
    the sizes were first kept, oldest first within one, until ``need`` bytes went (None: all);
    return the bytes given back. ``flush``: free them now (else at numba-cuda's next flush of
    its deferred frees). Registry lock held."""
    freed = 0
    if any(k[0] == device for k in _cache):
        _release_in_a_context()
    for key in [k for k in _cache if k[0] == device]:
        copies = _cache[key]
        while copies and (need is None or freed < need):
            copies.pop(0)
            freed += key[1]
        if not copies:
            del _cache[key]
    if freed:
        _cached[device] -= freed
        if flush:
            _sim.give_back_freed()  # numba defers frees: give the memory back now
    return freed


def _forget_cached() -> None:
    # A session began or ended: the copies made before belong to device memory it replaces
    # or ends (a dead buffer's copy is kept only in the session that allocated it).
    _cache.clear()
    _cached.clear()
    _upload_ordered.clear()  # (a new session's upload stream waited for nothing yet)
    _retired[:] = [old._replace(reusable=False) for old in _retired]


_sessions.on_change.append(_forget_cached)


def empty_cache(device: int) -> int:
    """Give back the device memory kept for reuse on ``device``; return its bytes (see
    smartarray._engine.budget.empty_cache)."""
    with _lock:
        _free_retired()
        with _devices.on(device):
            return _drop_cached(device)


def _unregister(buf: ResidentBuffer, device: int) -> None:
    rec = buf.residency
    with _lock:
        if _resident.pop((id(buf), device), None) is not None and rec is not None:
            _used[device] -= rec.sizes.pop(device, 0)


# -- budget ---------------------------------------------------------------------------------


def _effective_budget(device: int = 0) -> int | None:
    if _budget_set:
        return _budget
    if device not in _default:
        with _devices.on(device):
            memory_info = _sim.device_memory()
        budget = None
        if memory_info is not None:
            free, total = memory_info
            # What SmartArrays hold now is part of what they may use.
            budget = free + _used.get(device, 0) - default_margin(free, total)
        _default[device] = budget
    return _default[device]


def set_budget(nbytes: int | None) -> None:
    """The user's budget (``None``: the default), for every device (see :mod:`.budget`)."""
    global _budget, _budget_set
    with _lock:
        _budget, _budget_set = nbytes, nbytes is not None
        if nbytes is None:
            _default.clear()  # computed again at the next allocation
        _derive_claiming()


def reset() -> None:
    """The registry as a fresh process has it, for tests (between them: no launch in flight).

    No user budget (each device's default computed again at its next allocation), the copies
    retired with work still queued on them freed once that work ran (waited for), nothing
    kept for reuse, no skipped eviction remembered. The copies of live buffers stay registered
    and counted: their buffers own them (drop the arrays first for an empty registry).
    """
    global _budget, _budget_set
    with _lock:
        _budget, _budget_set = None, False
        _default.clear()
        _free_retired(wait=True)
        _forget_cached()
        _skipped.clear()
        _derive_claiming()


def budget_of(device: int) -> DeviceBudget:
    """The budget, the bytes used and the resident copies on ``device`` (see
    smartarray._engine.budget.device_budget)."""
    with _lock:
        _free_retired()
        budget = _effective_budget(device)
        claimed = _claimed()
        entries = []
        for buf in _buffers(device):
            rec = buf.residency
            size = rec.sizes[device]  # type: ignore[union-attr]
            entry = ResidentArray(buf.name, size, _kept(buf, claimed), device)
            entries.append((rec.tick, entry))  # type: ignore[union-attr]
        entries.sort(key=lambda e: e[0])
        resident = tuple(e[1] for e in entries)
        return DeviceBudget(budget, _used.get(device, 0), resident, _cached.get(device, 0))


# -- allocation and eviction ----------------------------------------------------------------


def _buffers(device: int) -> list[ResidentBuffer]:
    """The buffers with a copy resident on ``device``."""
    out = []
    for (_, on), ref in list(_resident.items()):
        buf = ref()
        if on == device and buf is not None and buf.residency is not None:
            out.append(buf)
    return out


def preparing(launch: Any) -> None:
    """This thread prepares (under a buffer's lock) an argument of ``launch`` (None: no
    more). Its own claims count only then: a launch that failed ran no callback, and its
    arguments must not stay claimed while the thread does something else."""
    _local.preparing = launch


def _claimed() -> set[Residency]:
    """The records claimed by launches being prepared or run: the latest launch of every other
    live thread while that thread is inside it (a launch that raised is not: see
    ``Launch.claimed_buffers``), and this thread's while it prepares that launch."""
    claimed: set[Residency] = set()
    me = threading.get_ident()
    current: Any = getattr(_local, "preparing", None)
    alive = {t.ident for t in threading.enumerate()}
    stacks: dict[int, Any] | None = None
    for ident, ref in list(_launches.items()):
        launch = ref()
        if launch is None or ident not in alive:  # (a weak reference: left, a few bytes)
            continue
        if ident == me:
            if launch is not current:
                continue
            buffers = launch.claimed_buffers()
        else:
            if stacks is None:
                stacks = sys._current_frames()
                # Not this thread's own frame: this frame would hold itself (a cycle keeping
                # every local of the stack alive, a device array handed out among them).
                stacks.pop(me, None)
            stack = stacks.get(ident)
            if stack is None:  # (it ended meanwhile)
                continue
            buffers = launch.claimed_buffers(stack)
        for buf in buffers:
            if buf.residency is not None:
                claimed.add(buf.residency)
    return claimed


def _kept(buf: ResidentBuffer, claimed: set[Residency]) -> str:
    """Why ``buf``'s device copy may not be evicted now ('' if it may)."""
    rec = buf.residency
    if rec is None:
        return ""
    if rec.keep:
        return "kept resident (smartarray.resident)"
    if rec.shared:
        return rec.shared
    if why := next((why for ref, why in rec.handouts if ref() is not None), ""):
        return why
    if rec in claimed:
        return "a launch being prepared or run uses it"
    return ""


def _only_there(buf: ResidentBuffer, where: str) -> Any:
    """The bytes current at ``where`` only (an eviction downloads them first)."""
    state = buf.state
    only = state.valid(where)
    for loc in state.locations:
        if loc != where and only:
            only = only.difference(state.valid(loc))
    return only


def _dirty(buf: ResidentBuffer, device: int) -> bool:
    """Whether some byte is current on ``device`` only (it must be downloaded first)."""
    return bool(_only_there(buf, _devices.location(device)))


def _evict_one(buf: ResidentBuffer, reason: str, device: int) -> int:
    """Give back ``buf``'s copy on ``device``; return the device bytes freed (0: it stays)."""
    if not buf.lock.acquire(blocking=False):  # in use by another thread now
        _skipped[id(buf)] = "another thread holds its lock"
        return 0
    where = _devices.location(device)
    try:
        rec = buf.residency
        if buf.device_copy(where) is None or rec is None:
            return 0
        # Close the lock-free launch fast path first, then read the claims: a launch in another
        # thread claims before it checks the fast path again, so either its claim is seen here or
        # it finds the fast path closed and takes the slow path (which waits for this lock).
        if rec.caches:
            for cache in list(rec.caches):
                cache.close()
        if _kept(buf, _claimed()):
            return 0
        # Queued device work uses it (stream order): wait for it, as a host read would.
        buf.wait_for_device()
        downloaded = 0
        # What must reach the host: the whole buffer's stale host bytes with one device (the
        # cost model may merge runs), the bytes current on this device only with several.
        if len(buf.state.locations) == 2:
            spans = [(0, buf.nbytes)]
        else:
            spans = list(_only_there(buf, where))
        for lo, hi in spans:
            plan = buf.state.plan_read("host", lo, hi, coalesce=not buf.held)
            if not plan.copies:
                continue
            try:
                buf.sync("host", lo, hi, "eviction", 0)
            except TransferGuardError:  # the guard refuses the download: this copy stays
                _skipped[id(buf)] = "the transfer guard refuses its download"
                return 0
            except TransferError as exc:  # the download failed: nothing changed, it stays
                _skipped[id(buf)] = f"downloading it failed: {exc}"
                return 0
            downloaded += plan.nbytes
        nbytes = rec.sizes.get(device, 0)
        buf.drop_device(where)
        _unregister(buf, device)
        evicted(buf.name, nbytes, downloaded, reason)
        return nbytes
    finally:
        buf.lock.release()


def _evict(need: int, exclude: ResidentBuffer, reason: str, device: int = 0) -> int:
    """Evict copies on ``device`` (clean ones first, then least recently used) until
    ``need`` bytes are freed or nothing more may go; return the bytes freed."""
    claimed = _claimed()
    _skipped.clear()
    candidates = [b for b in _buffers(device) if b is not exclude and not _kept(b, claimed)]
    candidates.sort(key=lambda b: (_dirty(b, device), b.residency.tick))  # type: ignore[union-attr]
    freed = 0
    if candidates:
        _release_in_a_context()
    try:
        for buf in candidates:
            if freed >= need:
                break
            freed += _evict_one(buf, reason, device)
    finally:
        if freed:
            _sim.give_back_freed()  # numba defers frees: give the memory back now
    return freed


def _no_room(buf: ResidentBuffer, budget: int | None, cause: str, device: int) -> DeviceMemoryError:
    claimed = _claimed()
    listed = [
        (
            b.name,
            b.residency.sizes.get(device, 0),  # type: ignore[union-attr]
            _kept(b, claimed) or _skipped.get(id(b), "may be evicted"),
        )
        for b in _buffers(device)
        if b is not buf
    ]
    shown = "; ".join(f"{n} ({size} B): {why}" for n, size, why in listed[:10]) or "nothing"
    if len(listed) > 10:
        shown += f"; and {len(listed) - 10} more"
    limit = "no budget set" if budget is None else f"budget {budget} B"
    on = f" on device {device}" if _devices.several else ""
    return DeviceMemoryError(
        f"the device copy of {buf.name} ({buf.nbytes} B) does not fit{on}: {cause} ({limit}, "
        f"{_used.get(device, 0)} B resident). Resident: {shown}. Raise the budget "
        "(smartarray.set_device_budget), release arrays kept with smartarray.resident or "
        "device arrays from get('gpu'), or use smaller arrays",
        buf.name,
        buf.nbytes,
        budget,
        listed,
    )


def _make_room(buf: ResidentBuffer, nbytes: int, budget: int | None, device: int) -> None:
    """Keep ``nbytes`` more on ``device`` within ``budget``: cached copies given back first,
    then retired ones freed, then copies evicted. Registry lock held."""
    if budget is None:
        return
    over = _used.get(device, 0) + _cached.get(device, 0) + nbytes - budget
    if over > 0:
        _drop_cached(device, over)
    used = _used.get(device, 0)
    if used + nbytes > budget and _retired:
        # Copies of dead arrays first: waiting for their work costs no transfer.
        _free_retired(wait=True)
        _drop_cached(device)  # (what that freed went to the cache)
        used = _used.get(device, 0)
    if used + nbytes > budget:
        if nbytes > budget:
            raise _no_room(buf, budget, "it is larger than the budget", device)
        _evict(used + nbytes - budget, buf, "budget", device)
        if _used.get(device, 0) + nbytes > budget:
            raise _no_room(buf, budget, "eviction cannot make room", device)


def allocate(buf: ResidentBuffer, device: int = 0) -> Any:
    """Allocate ``buf``'s copy on ``device`` (the current one) within that device's budget,
    evicting others there if needed.

    Called with ``buf``'s lock held. An allocation that fails with CUDA_ERROR_OUT_OF_MEMORY
    evicts (at least ``buf.nbytes``) and is tried once more.

    Raises
    ------
    DeviceMemoryError
        Even eviction cannot make room; ``buf`` and everything current are unchanged (evicted
        copies keep their data on the host).
    """
    nbytes = buf.nbytes
    with _lock:
        _free_retired()
        budget = _effective_budget(device)
        dev = _reuse(device, nbytes)
        try:
            _make_room(buf, nbytes, budget, device)
        except BaseException:
            if dev is not None:
                _keep(dev, nbytes, device)
            raise
        if dev is not None:
            _register(buf, nbytes, device)
            return dev
        try:
            dev = memory.device_array(nbytes, np.uint8)
        except Exception as exc:
            if not _sim.out_of_memory(exc):
                raise
            retired = _free_retired(wait=True) + _drop_cached(device)
            if not _evict(max(nbytes, 1), buf, "out of memory", device) and not retired:
                cause = f"the device is out of memory: {exc}"
                raise _no_room(buf, budget, cause, device) from exc
            try:
                dev = memory.device_array(nbytes, np.uint8)
            except Exception as again:
                if _sim.out_of_memory(again):
                    cause = f"the device is out of memory, even after eviction: {again}"
                    raise _no_room(buf, budget, cause, device) from again
                raise
        _allocations[device] = _allocations.get(device, 0) + 1
        _register(buf, nbytes, device)
    return dev


def fresh_since_upload_order(device: int) -> int:
    """How many device copies on ``device`` came from numba's allocator, if any came since
    the upload stream was last ordered after the legacy default stream (else 0).

    Memory fresh from an allocator may still be used by its previous owner's work on the
    legacy default stream: a stream-ordered pool hands a freed block on at once, and numba
    may free memory from another device's context, whose ``cuMemFree`` waits only for that
    device. The legacy stream orders a copy after that work by itself; smartarray's
    non-blocking upload stream must wait for the legacy stream once per such allocation
    (:func:`upload_ordered`). Memory kept for reuse came from the allocator too, earlier:
    counted then.
    """
    count = _allocations.get(device, 0)
    return count if count > _upload_ordered.get(device, 0) else 0


def upload_ordered(device: int, count: int) -> None:
    """The upload stream of ``device`` now waits for the legacy default stream as it stood
    after ``count`` allocations (:func:`fresh_since_upload_order`'s answer)."""
    with _lock:
        _upload_ordered[device] = max(_upload_ordered.get(device, 0), count)
