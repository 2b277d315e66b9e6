"""The automatic page-lock policy (issue 41): pageable host copies that move often are
page-locked in place, within a page-locked byte budget.

Off by default (:func:`set_pinned_budget` turns it on). When on, each SmartArray whose host
copy the library allocated pageable (not ``pinned=True``, not the user's adopted ndarray)
counts the bytes its staged copies move (uploads and downloads). Once they reach
:func:`threshold` of its size, its host copy is registered (``cuMemHostRegister``, PORTABLE
like ``pinned=True`` host copies, so every device copies it page-locked) at its next copy,
before that copy is issued, if it fits the budget. That point is between transfers: a copy to
or from pageable memory returns once the host bytes were read (staged) or written, so no copy
still uses them, and the copy about to be issued is the first at the page-locked rate.

Unlocking is deferred: ``cuMemHostUnregister`` waits for the device, and a queued
asynchronous copy may still read or write page-locked memory. A registration whose array died
(its memory is kept alive here), or that the budget needs room from (least recently moved
first), goes on a list that is flushed, after one wait for every device, when the budget needs
room, at :func:`set_pinned_budget`, and at :func:`reset`. One process-wide :class:`_Policy`
owns all of this state.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple, Protocol

import numpy as np

from .._memory import pinning as _pinning
from .._memory.checks import check_byte_budget

__all__ = ["PinnedBudget", "pinned_budget", "reset", "set_pinned_budget", "threshold"]


class PinningBuffer(Protocol):
    """What the page-lock policy reads of a buffer whose host copy it may page-lock (the
    engine's :class:`~smartarray._engine.buffer.Buffer`, which calls it: the policy never
    names the class). It keys its records by the buffer (weakly) and takes its lock, without
    blocking, before it unpins a copy the buffer may be copying."""

    @property
    def pinned(self) -> bool:
        """Whether the buffer's host copy is page-locked already (``pinned=True``)."""

    @property
    def lock(self) -> threading.RLock:
        """The buffer's lock."""


class PinnedBudget(NamedTuple):
    """What :func:`pinned_budget` returns.

    Attributes
    ----------
    budget : int or None
        The page-locked byte budget of the automatic policy (``None``: off).
    used : int
        Bytes the policy keeps page-locked for live arrays now.
    arrays : int
        How many arrays' host copies it keeps page-locked now.
    pending_unlock : int
        Bytes still page-locked whose unlocking is deferred (dead or evicted registrations).
    registered_total : int
        How many host copies it page-locked since the last :func:`reset`.
    """

    budget: int | None
    used: int
    arrays: int
    pending_unlock: int
    registered_total: int


def threshold(nbytes: int) -> float:
    """The staged bytes after which an ``nbytes`` host copy is page-locked.

    Page-locking ``n`` bytes and unlocking them later cost the host
    ``pin_latency_s + n / pin_Bps + unlock_latency_s + n / unlock_Bps``; each byte copied
    page-locked instead of staged then saves ``1 / pageable_Bps - 1 / h2d_Bps`` seconds of
    copy time (the host-blocking of the staged copy saves more, not counted: the estimate
    is conservative). The threshold is the cost over that saving: about ``10.4 * n + 1 MB``
    with the constants of the fake driver clock's ``pcie5`` preset (below; a test checks
    that they are the preset's).

    Examples
    --------
    >>> from smartarray._engine.auto_pin import threshold
    >>> round(threshold(1 << 20) / (1 << 20), 1)  # a 1 MiB host copy, pcie5
    11.4
    """
    cost = PIN_LATENCY_S + UNLOCK_LATENCY_S + nbytes / PIN_BPS + nbytes / UNLOCK_BPS
    return cost / _SAVING_S_PER_BYTE


# The fake driver clock's pcie5 preset (smartarray/_fakegpu/_clock.py; the production code
# does not import the fake driver): page-locking, unlocking, and the copy rates.
PIN_LATENCY_S = 20e-6
PIN_BPS = 4e9
UNLOCK_LATENCY_S = 10e-6
UNLOCK_BPS = 16e9
PAGEABLE_BPS = 20e9  # staged copies (10-25 GB/s on PCIe 5)
PAGE_LOCKED_BPS = 50e9  # coherence/_cost.py PCIE5_X16
_SAVING_S_PER_BYTE = 1.0 / PAGEABLE_BPS - 1.0 / PAGE_LOCKED_BPS


class _Entry:
    """One registration: the host memory (kept alive while it is page-locked) and its pin."""

    __slots__ = ("host", "nbytes", "pin", "owner", "last")

    def __init__(self, host: np.ndarray, pin: Any, owner: PinningBuffer, last: int) -> None:
        self.host = host
        #: The policy's staged-traffic count at this registration's latest copy.
        self.last = last
        self.nbytes = int(host.nbytes)
        self.pin = pin
        self.owner: weakref.ref[PinningBuffer] = weakref.ref(owner)


class _Policy:
    """The process-wide state of the automatic page-lock policy."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: The budget in bytes, or None: off (read without the lock on the copy path).
        self.budget: int | None = None
        self.moved: weakref.WeakKeyDictionary[PinningBuffer, int] = weakref.WeakKeyDictionary()
        #: Live registrations, least recently moved first, by ``id`` of the buffer.
        self.live: OrderedDict[int, _Entry] = OrderedDict()
        #: Registrations whose unlock is deferred (their memory kept alive here).
        self.pending: list[_Entry] = []
        #: Buffers that died registered (appended by finalizers: an atomic append only).
        self.dead: list[int] = []
        self.registered_total = 0
        #: Bytes every counted array copied from or to the host (a clock of host traffic).
        self.traffic = 0

    # The copy path -------------------------------------------------------------------

    def before_copy(self, buf: PinningBuffer, host: np.ndarray, staged: int) -> None:
        """Called with ``buf``'s lock held before it copies ``staged`` bytes from or to
        ``host``: count them, and page-lock ``host`` now if they paid for it."""
        if staged <= 0 or buf.pinned or not _owned(host):
            return
        with self.lock:
            self.traffic += staged
            key = id(buf)
            entry = self.live.get(key)
            if entry is not None:
                if entry.host is host and entry.owner() is buf:
                    self.live.move_to_end(key)  # most recently moved
                    entry.last = self.traffic
                    return
                # (another host copy, or a dead buffer's id reused: unlock that one later)
                del self.live[key]
                self.pending.append(entry)
            moved = self.moved.get(buf, 0)
            budget = self.budget
            if budget is None or moved < threshold(host.nbytes) or host.nbytes > budget:
                self.moved[buf] = moved + staged
                return
            if not self._make_room(host.nbytes, budget, buf):
                self.moved[buf] = moved + staged
                return
            pin = _pinning.lock_portable(host)
            self.live[key] = _Entry(host, pin, buf, self.traffic)
            self.registered_total += 1
            self.moved.pop(buf, None)
            weakref.finalize(buf, self.dead.append, key)

    # Room, deferred unlocks ----------------------------------------------------------

    def _collect_dead(self) -> None:
        while self.dead:
            key = self.dead.pop()
            entry = self.live.get(key)
            if entry is not None and entry.owner() is None:
                del self.live[key]
                self.pending.append(entry)

    def used(self) -> int:
        return sum(e.nbytes for e in self.live.values())

    def _make_room(self, nbytes: int, budget: int, keep: PinningBuffer | None) -> bool:
        """Free registrations until ``nbytes`` more fit ``budget``; False if they cannot.

        Dead registrations go first, then the least recently moved live ones that went idle:
        that did not copy while the others copied as many bytes as would pay for their
        page-locking again (so two arrays in use that do not both fit do not take the
        budget from each other at each copy, paying a page-locking each time), and whose
        buffer lock is free now (a thread holding it may be issuing a copy from its memory).
        ``keep is None`` (a smaller budget set by the user): every live one may go.
        """
        self._collect_dead()
        used = self.used()
        if used + nbytes > budget:
            for key, entry in list(self.live.items()):
                if used + nbytes <= budget:
                    break
                owner = entry.owner()
                if owner is None or owner is keep:
                    continue
                if keep is not None and self.traffic - entry.last < threshold(entry.nbytes):
                    continue  # still in use
                if not owner.lock.acquire(blocking=False):
                    continue
                try:
                    del self.live[key]
                    self.pending.append(entry)
                    used -= entry.nbytes
                finally:
                    owner.lock.release()
        if self.pending:
            self.flush()
        return used + nbytes <= budget

    def _release_idle(self) -> None:
        """Move every live registration whose buffer lock is free now to the pending list
        (one held by another thread may be issuing a copy from its memory: it stays
        registered until the next flush point)."""
        for key, entry in list(self.live.items()):
            owner = entry.owner()
            if owner is not None and not owner.lock.acquire(blocking=False):
                continue
            try:
                del self.live[key]
                self.pending.append(entry)
            finally:
                if owner is not None:
                    owner.lock.release()

    def flush(self) -> None:
        """Unlock the deferred registrations, after waiting for every device (a queued copy
        may still read or write their memory)."""
        self._collect_dead()
        if not self.pending:
            return
        entries, self.pending = self.pending, []
        pins = [e.pin for e in entries]
        for entry in entries:
            entry.pin = None
        # numba's PinnedMemory unregisters when its last reference goes: ``pins`` holds it.
        _pinning.unlock_after_waiting(pins)
        del pins

    def set_budget(self, budget: int | None) -> None:
        with self.lock:
            self.budget = budget
            self._collect_dead()
            if budget is not None and self.used() > budget:
                self._make_room(0, budget, None)
            elif budget is None:
                self._release_idle()
            self.flush()

    def report(self) -> PinnedBudget:
        with self.lock:
            self._collect_dead()
            return PinnedBudget(
                self.budget,
                self.used(),
                len(self.live),
                sum(e.nbytes for e in self.pending),
                self.registered_total,
            )

    def is_locked(self, buf: PinningBuffer) -> bool:
        with self.lock:
            entry = self.live.get(id(buf))
            return entry is not None and entry.owner() is buf

    def reset(self) -> None:
        with self.lock:
            self.budget = None
            self._release_idle()
            self.flush()
            self.dead.clear()
            self.moved = weakref.WeakKeyDictionary()
            self.registered_total = 0
            self.traffic = 0


def _owned(host: np.ndarray) -> bool:
    """Whether ``host`` views memory NumPy allocated (not ``pinned_array``'s, not memory
    another library lent), whole, and not registered through :func:`smartarray.register`.

    Such memory is a fresh copy made at construction, ``ensure_host``'s allocation, or an
    ndarray the user handed over without a copy (page-locked in place as ``register`` would,
    its memory kept alive while it is).
    """
    owner = _pinning.memory_owner(host)
    return (
        isinstance(owner, np.ndarray)
        and owner.flags.owndata
        and host.nbytes == owner.nbytes
        and not _pinning.is_registered(host)
    )


_policy = _Policy()


def set_pinned_budget(nbytes: int | None) -> None:
    """Turn on the automatic page-lock policy with a page-locked byte budget, or off.

    When on, a SmartArray's pageable host copy whose staged copies (uploads and downloads)
    moved about as many bytes as page-locking it costs to recoup (:func:`pinned_budget`,
    ``docs/time.rst``) is page-locked in place, if it fits the budget: its later copies run at
    the page-locked rate and do not block the host. Registrations are unlocked, least recently
    moved first, when the budget needs room, and after their array dies (deferred: unlocking
    waits for every device). Off by default: page-locking costs time (about 17 ms for 64 MiB)
    and page-locked memory is a scarce system resource.

    Parameters
    ----------
    nbytes : int or None
        The budget in bytes (0 or more). ``None`` turns the policy off (the default) and
        unlocks what it page-locked (after waiting for every device).

    Raises
    ------
    TypeError
        ``nbytes`` is not an integer or None.
    ValueError
        ``nbytes`` is negative.

    See Also
    --------
    pinned_budget : the budget and what the policy keeps page-locked.
    SmartArray : ``pinned=True`` page-locks a host copy from its allocation.

    Examples
    --------
    >>> import smartarray as sa
    >>> sa.set_pinned_budget(256 << 20)
    >>> sa.pinned_budget().budget
    268435456
    >>> sa.set_pinned_budget(None)
    """
    _policy.set_budget(check_byte_budget(nbytes))


def pinned_budget() -> PinnedBudget:
    """Return the automatic page-lock policy's budget and what it keeps page-locked.

    Returns
    -------
    PinnedBudget
        ``budget`` (None: off), ``used`` bytes and ``arrays`` page-locked for live arrays,
        ``pending_unlock`` bytes whose unlocking is deferred, ``registered_total`` host
        copies page-locked since the last reset.

    Examples
    --------
    >>> import smartarray as sa
    >>> sa.pinned_budget().budget is None  # off by default
    True
    """
    return _policy.report()


def reset() -> None:
    """The policy as a fresh process has it, for tests: off, every registration unlocked
    (after waiting for every device), no bytes counted."""
    _policy.reset()
