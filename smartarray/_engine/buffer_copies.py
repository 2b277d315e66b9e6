"""A buffer's copies: one per location, allocated on first need, and the copies that make
bytes current.

The operations of :class:`smartarray._engine.buffer.Buffer` that allocate, adopt and give back its
host and device copies (``host_bytes``; ``device_copies``, one per device), add a device's
location to its state, plan reads (:func:`_plan_read`: with several devices, bytes only a
device that cannot reach the target holds go through the host copy first) and perform them
(:func:`_copy`: ``h2d``, ``d2h``, and ``d2d`` between devices, peer to peer). They are bound
in ``Buffer``'s class body, kept here as one concept, as :mod:`smartarray._engine.device_work` keeps
the buffer's stream order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import guard, memory
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._memory.devices import GPU, HOST
from .._observe import performance as _perf
from ..coherence import Plan
from ..errors import TransferError
from . import auto_pin as _auto_pin
from . import residency as _residency

if TYPE_CHECKING:  # pragma: no cover
    from .buffer import Buffer

__all__ = [
    "adopt_device",
    "adopt_host",
    "copy",
    "device_copy",
    "device_locations",
    "direction",
    "drop_device",
    "ensure",
    "ensure_device",
    "ensure_host",
    "locate",
    "may_rewrite",
    "plan_read",
    "sync",
]


def direction(source: str, target: str) -> str:
    """``'h2d'``, ``'d2h'`` or ``'d2d'``: what a copy from ``source`` to ``target`` is."""
    if source == HOST:
        return "h2d"
    return "d2h" if target == HOST else "d2d"


def ensure_host(self: Buffer) -> np.ndarray:
    """The host copy, allocated on first need."""
    if self.host_bytes is None:
        if self.pinned:
            self.host_bytes = memory.portable_pinned_bytes(self.nbytes)
        else:
            self.host_bytes = np.empty(self.nbytes, np.uint8)
    return self.host_bytes


def device_copy(self: Buffer, where: str = GPU) -> Any:
    """The copy at the device location ``where``, or None if it is not allocated."""
    device = _devices.ordinal(where)
    copies = self.device_copies
    return copies[device] if device < len(copies) else None


def ensure_device(self: Buffer, where: str = GPU) -> Any:
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


def locate(self: Buffer, where: str | None = None) -> None:
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


def device_locations(self: Buffer) -> list[str]:
    """The device locations that hold a copy now."""
    return [_devices.location(d) for d, dev in enumerate(self.device_copies) if dev is not None]


def drop_device(self: Buffer, where: str = GPU) -> None:
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


def adopt_host(self: Buffer, raw: np.ndarray) -> None:
    """Make ``raw`` (1-D uint8 host memory the user owns) this new buffer's host copy."""
    if self.host_bytes is not None:
        raise RuntimeError(f"{self.name} already has a host copy")  # pragma: no cover
    self.host_bytes = raw


def adopt_device(self: Buffer, raw: Any, where: str = GPU) -> None:
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


# Device work and its order (smartarray/_engine/device_work.py).


def ensure(self: Buffer, where: str) -> None:
    """Allocate the copy at ``where`` if it is not yet."""
    if where == HOST:
        self.ensure_host()
    else:
        self.ensure_device(where)


def copy(self: Buffer, plan: Plan, reason: str, stream: Any, wait: bool = True) -> None:
    """Perform the copies of a plan on ``stream``; TransferError if one fails.

    ``wait=False`` leaves downloads on a stream other than the default in flight (the caller
    makes host accesses wait for them: smartarray._engine.prefetch, ``Buffer.arrive``).

    A copy between two devices goes peer to peer (counted ``d2d``); the plan has none
    between devices that cannot reach each other (see :meth:`_stage`).
    """
    if guard.armed():  # the whole plan, before its first copy: a refusal moves nothing
        for c in plan.copies:
            guard.check(direction(c.source, c.target), c.stop - c.start, reason, self.name)
    host = self.ensure_host()
    for c in plan.copies:
        if c.target != HOST:
            self.ensure_device(c.target)  # (DeviceMemoryError as it is, before any copy)
    if any(c.target != HOST for c in plan.copies):
        self._leave_host_only()  # (registers the njit calls still running as host writers)
    if _auto_pin._policy.budget is not None and not self.pinned:
        # Between transfers (issue 41): page-lock the host copy if its staged copies paid.
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
        raise TransferError(f"copying to the host or device copy failed ({reason}): {exc}") from exc
    if snaps:
        _perf.after_copy(self, snaps, host)


def sync(self: Buffer, where: str, lo: int, hi: int, reason: str, stream: Any = None) -> None:
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


def plan_read(self: Buffer, where: str, lo: int, hi: int, reason: str) -> Plan:
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


def may_rewrite(self: Buffer, where: str) -> bool:
    """Whether a copy into ``where`` may rewrite bytes already current there.

    Not while memory of that copy is in the user's hands (held host arrays; device arrays
    handed out or exported): writes through it are recorded only when announced, and a
    rewrite from another copy would bring the old values back.
    """
    if where == HOST:
        return not self.held
    rec = self.residency
    return rec is None or not (rec.handouts or rec.shared)
