"""Process-wide transfer counters and trace events.

Every byte that crosses between host and device goes through :mod:`smartarray.memory`,
which reports each copy here with :func:`record`. :func:`stats` reads the counters,
:func:`reset_stats` zeroes them, and :func:`trace` records the individual copies made
inside a ``with`` block. Counting is thread safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Trace", "TransferEvent", "TransferStats", "record", "reset_stats", "stats", "trace"]

#: The three directions a copy can take.
DIRECTIONS = ("h2d", "d2h", "d2d")


@dataclass(frozen=True)
class TransferStats:
    """Counts and byte totals of the copies made, per direction.

    Attributes
    ----------
    h2d_count, h2d_bytes : int
        Host-to-device copies and the bytes they moved.
    d2h_count, d2h_bytes : int
        Device-to-host copies and the bytes they moved.
    d2d_count, d2d_bytes : int
        Device-to-device copies and the bytes they moved.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> sa.reset_stats()
    >>> d = sa.to_device(np.zeros(8))
    >>> sa.stats().h2d_bytes
    64
    """

    h2d_count: int = 0
    h2d_bytes: int = 0
    d2h_count: int = 0
    d2h_bytes: int = 0
    d2d_count: int = 0
    d2d_bytes: int = 0

    @property
    def count(self) -> int:
        """All copies, every direction."""
        return self.h2d_count + self.d2h_count + self.d2d_count

    @property
    def nbytes(self) -> int:
        """All bytes moved, every direction."""
        return self.h2d_bytes + self.d2h_bytes + self.d2d_bytes

    def __sub__(self, other: TransferStats) -> TransferStats:
        if not isinstance(other, TransferStats):
            return NotImplemented
        return TransferStats(
            *(getattr(self, f) - getattr(other, f) for f in _FIELDS)  # type: ignore[arg-type]
        )


_FIELDS = tuple(f"{d}_{k}" for d in DIRECTIONS for k in ("count", "bytes"))


@dataclass(frozen=True)
class TransferEvent:
    """One copy between host and device.

    Attributes
    ----------
    direction : str
        ``'h2d'``, ``'d2h'`` or ``'d2d'``.
    nbytes : int
        Bytes moved.
    reason : str
        Why the copy was made, e.g. ``'to_device'``, ``'copy_to_host'``, ``'host read'``.
    array : str
        A short description of the array the copy was made for.
    """

    direction: str
    nbytes: int
    reason: str
    array: str


@dataclass
class Trace:
    """What :func:`trace` recorded: the events in order, and their totals in :attr:`stats`."""

    events: list[TransferEvent] = field(default_factory=list)

    @property
    def stats(self) -> TransferStats:
        """Counts and bytes of the recorded events, per direction."""
        totals = dict.fromkeys(_FIELDS, 0)
        for event in self.events:
            totals[f"{event.direction}_count"] += 1
            totals[f"{event.direction}_bytes"] += event.nbytes
        return TransferStats(**totals)


_lock = threading.Lock()
_totals = dict.fromkeys(_FIELDS, 0)
_traces: list[Trace] = []


def record(direction: str, nbytes: int, reason: str, array: str = "") -> None:
    """Count one copy. Called by :mod:`smartarray.memory` after the copy was issued.

    Parameters
    ----------
    direction : {'h2d', 'd2h', 'd2d'}
        Where the bytes went.
    nbytes : int
        How many bytes moved.
    reason : str
        A short reason shown in trace events.
    array : str, optional
        A short description of the array concerned.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    with _lock:
        _totals[f"{direction}_count"] += 1
        _totals[f"{direction}_bytes"] += nbytes
        if _traces:
            event = TransferEvent(direction, int(nbytes), reason, array)
            for active in _traces:
                active.events.append(event)


def stats() -> TransferStats:
    """Return the transfers counted since the process started or :func:`reset_stats`.

    Returns
    -------
    TransferStats
        A frozen snapshot.
    """
    with _lock:
        return TransferStats(**_totals)


def reset_stats() -> None:
    """Zero the process-wide transfer counters (active traces are not affected)."""
    with _lock:
        for key in _totals:
            _totals[key] = 0


@contextmanager
def trace() -> Iterator[Trace]:
    """Record every copy made, by any thread, while the ``with`` block runs.

    Yields
    ------
    Trace
        ``t.events`` lists one :class:`TransferEvent` per copy; ``t.stats`` sums them.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> with sa.trace() as t:
    ...     d = sa.to_device(np.arange(4, dtype=np.int32))
    ...     h = d.copy_to_host()
    >>> [(e.direction, e.nbytes, e.reason) for e in t.events]
    [('h2d', 16, 'to_device'), ('d2h', 16, 'copy_to_host')]
    """
    active = Trace()
    with _lock:
        _traces.append(active)
    try:
        yield active
    finally:
        with _lock:
            _traces.remove(active)
