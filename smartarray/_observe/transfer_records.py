"""What smartarray's transfer accounting hands users: counters (:class:`TransferStats`), one
record per copy (:class:`TransferEvent`) or eviction (:class:`EvictionEvent`), and the
:class:`Trace` of a ``with smartarray.trace()`` block.

The counting itself (process-wide counters, trace listeners, NVTX ranges, the transfer
guard's log) is :mod:`smartarray.stats`, which re-exports these names.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DIRECTIONS", "EvictionEvent", "Trace", "TransferEvent", "TransferStats"]

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
    evictions, evicted_bytes : int
        Device copies given back under the device-memory budget
        (:func:`~smartarray.set_device_budget`) and the device bytes they held. What an
        eviction downloaded first is counted in ``d2h_count`` / ``d2h_bytes`` (trace reason
        ``'eviction'``); :attr:`count` and :attr:`nbytes` count copies only.

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
    evictions: int = 0
    evicted_bytes: int = 0

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
        return TransferStats(*(getattr(self, f) - getattr(other, f) for f in _FIELDS))


_FIELDS = (
    *(f"{d}_{k}" for d in DIRECTIONS for k in ("count", "bytes")),
    "evictions",
    "evicted_bytes",
)


@dataclass(frozen=True)
class TransferEvent:
    """One copy between host and device.

    The first four fields are always filled in. The others are filled in while someone
    listens (a :func:`trace`, a DEBUG logger, NVTX, a transfer guard that logs): finding the
    source line walks the stack, which the coherent fast path must not pay for.

    Attributes
    ----------
    direction : str
        ``'h2d'``, ``'d2h'`` or ``'d2d'``.
    nbytes : int
        Bytes moved.
    reason : str
        Why the copy was made, e.g. ``'to_device'``, ``'copy_to_host'``, ``'host read'``,
        ``'device use'`` (a kernel argument made current).
    array : str
        The array's name (:attr:`SmartArray.name <smartarray.SmartArray.name>`, e.g.
        ``'a0'``), or a description such as ``'float64[10]'`` for a plain device array.
    start, stop : int
        The byte range copied, as offsets into the array's base buffer (``0`` to ``nbytes``
        for a whole device array).
    stream : str
        The stream the copy was enqueued on (``'0'`` for the default stream).
    time_ns : int
        When the copy was issued (``time.perf_counter_ns()``, a monotonic clock).
    duration_ns : int
        How long issuing it took on the host (an asynchronous copy may finish later).
    file : str
        The user's source file that caused the copy (the first frame outside smartarray,
        numba and NumPy), or ``''``.
    lineno : int
        The line in ``file``, or 0.
    thread : str
        The name of the thread that issued the copy.
    source, target : str
        Where a SmartArray's copy took the bytes from and put them: ``'host'`` or
        ``'gpu:N'`` (device N), so a copy between devices names both; ``''`` for copies of
        plain arrays (:mod:`smartarray.memory`'s functions).
    modelled_start_s, modelled_end_s : float
        On the fake driver with its clock on (``SMARTARRAY_FAKE_GPU_TIMING``), when the copy
        ran on its engine in modelled seconds (the clock's ``Clock.spans``); ``0.0`` otherwise.
    """

    direction: str
    nbytes: int
    reason: str
    array: str
    start: int = 0
    stop: int = 0
    stream: str = "0"
    time_ns: int = 0
    duration_ns: int = 0
    file: str = ""
    lineno: int = 0
    thread: str = ""
    source: str = ""
    target: str = ""
    modelled_start_s: float = 0.0
    modelled_end_s: float = 0.0

    @property
    def line(self) -> str:
        """str: ``'file.py:42'`` (base name of :attr:`file` and :attr:`lineno`), or ``''``."""
        return f"{os.path.basename(self.file)}:{self.lineno}" if self.file else ""

    def as_dict(self) -> dict[str, Any]:
        """The event's fields (and :attr:`line`) as a JSON-ready dict."""
        result = asdict(self)
        result["line"] = self.line
        return result


@dataclass(frozen=True)
class EvictionEvent:
    """One device copy given back under the device-memory budget.

    Attributes
    ----------
    array : str
        The array's name.
    nbytes : int
        Device bytes given back.
    downloaded : int
        Bytes downloaded first (current on the device only); the download itself is a
        ``'d2h'`` :class:`TransferEvent` with reason ``'eviction'``.
    reason : str
        Why: ``'budget'`` (an allocation would exceed the budget) or ``'out of memory'``
        (an allocation failed).
    """

    array: str
    nbytes: int
    downloaded: int
    reason: str


@dataclass
class Trace:
    """What :func:`trace` recorded: the events in order, and their totals in :attr:`stats`.

    ``events`` lists the copies (:class:`TransferEvent`); ``evictions`` lists the device
    copies given back under the device-memory budget (``EvictionEvent``: ``array``,
    ``nbytes``, ``downloaded``, ``reason``).
    """

    events: list[TransferEvent] = field(default_factory=list)
    evictions: list[EvictionEvent] = field(default_factory=list)

    @property
    def stats(self) -> TransferStats:
        """Counts and bytes of the recorded events, per direction."""
        totals = dict.fromkeys(_FIELDS, 0)
        for event in self.events:
            totals[f"{event.direction}_count"] += 1
            totals[f"{event.direction}_bytes"] += event.nbytes
        totals["evictions"] = len(self.evictions)
        totals["evicted_bytes"] = sum(e.nbytes for e in self.evictions)
        return TransferStats(**totals)

    def summary(self) -> str:
        """A table of the events grouped by array, reason and source line.

        Returns
        -------
        str
            One row per group, largest first, with the bytes and the number of copies per
            direction (``2.0 KiB in 4``: four copies moving 2.0 KiB in all).

        Examples
        --------
        >>> import numpy as np, smartarray as sa
        >>> x = sa.SmartArray(np.zeros(4), name="x")
        >>> with sa.trace() as t:
        ...     d = x.gpu()
        >>> print(t.summary())  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
        array  reason        line  h2d       d2h  d2d
        x      explicit get  ...   32 B in 1
        total                      32 B in 1
        """
        from .report import summary

        return summary(self.events)

    def to_json(self, **kwargs: Any) -> str:
        """The events and their totals as a JSON document.

        Parameters
        ----------
        **kwargs
            Passed to :func:`json.dumps` (e.g. ``indent=2``).

        Returns
        -------
        str
            ``{"events": [...], "stats": {...}}``; each event has the fields of
            :class:`TransferEvent` and ``line``.
        """
        import json

        document = {
            "events": [e.as_dict() for e in self.events],
            "stats": asdict(self.stats),
        }
        return json.dumps(document, **kwargs)

    def plot(self, path: str | os.PathLike[str] | None = None, title: str = "transfers") -> Any:
        """Draw the events as a timeline: a host lane and a device lane, one bar per copy.

        A copy is drawn in the lane of its destination (``d2h`` on the host lane, ``h2d``
        and ``d2d`` on the device lane), from when it was issued, coloured and labelled by
        array and reason. Needs matplotlib (``pip install matplotlib``).

        Parameters
        ----------
        path : str or path-like, optional
            Where to save the picture; the extension picks the format (``.png``, ``.svg``).
        title : str, optional
            The panel's title.

        Returns
        -------
        matplotlib.figure.Figure

        Raises
        ------
        ImportError
            matplotlib is not installed.
        """
        from .plot import plot_timelines

        return plot_timelines({title: self.events}, path)
