"""Process-wide transfer counters and trace events.

Every byte that crosses between host and device goes through :mod:`smartarray.memory`,
which reports each copy here with :func:`record`. :func:`stats` reads the counters,
:func:`reset_stats` zeroes them, and :func:`trace` records the individual copies made
inside a ``with`` block. Counting is thread safe.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _environment, _frames, guard

__all__ = [
    "Trace",
    "TransferEvent",
    "TransferStats",
    "abort",
    "begin",
    "enable_nvtx",
    "evicted",
    "record",
    "reset_stats",
    "stats",
    "trace",
]

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
        return TransferStats(
            *(getattr(self, f) - getattr(other, f) for f in _FIELDS)  # type: ignore[arg-type]
        )


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
        from ._report import summary

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
        from ._plot import plot_timelines

        return plot_timelines({title: self.events}, path)


_lock = threading.Lock()
_totals = dict.fromkeys(_FIELDS, 0)
_traces: list[Trace] = []


logger = logging.getLogger("smartarray")

# NVTX ranges around transfers: off unless switched on (enable_nvtx or SMARTARRAY_NVTX=1) and
# the ``nvtx`` package is importable.
_nvtx: Any = None
#: Whether numba.cuda's own copies are counted too (smartarray._numba_transfers switches it).
_all_numba = False
#: Per thread: how many of smartarray's own counted copies are under way (numba's copy
#: functions they call must not count them a second time).
_own = threading.local()


def own_copies_under_way() -> bool:
    """Whether this thread is inside a copy smartarray counts itself (see :func:`own_copy`)."""
    return getattr(_own, "depth", 0) > 0


@contextmanager
def own_copy() -> Iterator[None]:
    """Mark a copy smartarray counts itself, for a copy made without :func:`begin`."""
    _own.depth = getattr(_own, "depth", 0) + 1
    try:
        yield
    finally:
        _own.depth -= 1


def _leave(began: _Began | None) -> None:
    if began is not None and began.own:
        _own.depth -= 1


class _Began:
    """What :func:`begin` hands :func:`record` for a copy someone listens to."""

    __slots__ = ("time_ns", "file", "lineno", "log", "nvtx", "own")

    def __init__(
        self, time_ns: int, file: str, lineno: int, log: bool, nvtx: bool, own: bool = False
    ) -> None:
        self.time_ns = time_ns
        self.file = file
        self.lineno = lineno
        self.log = log
        self.nvtx = nvtx
        self.own = own  # counted as one of smartarray's own copies (see own_copy)


def _label(direction: str, nbytes: int, array: str, reason: str, file: str, lineno: int) -> str:
    where = f" {os.path.basename(file)}:{lineno}" if file else ""
    return f"{direction} {nbytes} B {array or '?'} ({reason}){where}"


def begin(direction: str, nbytes: int, reason: str, array: str = "") -> _Began | None:
    """Prepare to issue one copy: apply the transfer guard, start listening if anyone does.

    Called by :mod:`smartarray.memory` right before it issues a copy; the result goes to
    :func:`record` (after the copy) or :func:`abort` (if the copy failed).

    Returns
    -------
    _Began or None
        None when nobody listens (the fast case: no stack walk, no clock read).

    Raises
    ------
    TransferGuardError
        The transfer guard refuses the copy; nothing was issued.
    """
    log = guard.armed() and guard.check(direction, nbytes, reason, array)
    if not (
        log or _traces or _nvtx is not None or _all_numba or logger.isEnabledFor(logging.DEBUG)
    ):
        return None
    file, lineno = _frames.user_frame(1)
    pushed = False
    if _nvtx is not None:
        _nvtx.push_range(_label(direction, nbytes, array, reason, file, lineno))
        pushed = True
    if _all_numba:
        _own.depth = getattr(_own, "depth", 0) + 1  # until record() or abort()
    return _Began(time.perf_counter_ns(), file, lineno, log, pushed, _all_numba)


def abort(began: _Began | None) -> None:
    """End what :func:`begin` started for a copy that failed (nothing is counted)."""
    _leave(began)
    if began is not None and began.nvtx and _nvtx is not None:
        _nvtx.pop_range()


def _stream_name(stream: Any) -> str:
    """A trace's name for ``stream``: ``'0'`` for the default stream, however it is spelt
    (cuda.core's ``Stream`` of handle 0 is what a launch's copies go on, on a GPU)."""
    if isinstance(stream, int):
        return "0"
    protocol = getattr(stream, "__cuda_stream__", None)
    if callable(protocol) and not protocol()[1]:
        return "0"
    return repr(stream)


def record(
    direction: str,
    nbytes: int,
    reason: str,
    array: str = "",
    *,
    start: int = 0,
    stop: int | None = None,
    stream: Any = 0,
    began: _Began | None = None,
    between: tuple[str, str] = ("", ""),
) -> None:
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
        The array's name or a short description of it.
    start, stop : int, optional
        The byte range copied (default ``0`` to ``nbytes``).
    stream : int or Stream, optional
        Where the copy was enqueued.
    began : optional
        What :func:`begin` returned before the copy.
    between : (str, str), optional
        The copy's source and target locations (see :attr:`TransferEvent.source`).
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    _leave(began)
    end = time.perf_counter_ns() if began is not None or _traces else 0
    with _lock:
        _totals[f"{direction}_count"] += 1
        _totals[f"{direction}_bytes"] += nbytes
    if began is None and not _traces:
        return  # nobody listens: the counters are all there is to update
    if began is None:
        began = _Began(end, "", 0, False, False)  # a trace opened after begin()
    event = TransferEvent(
        direction,
        int(nbytes),
        reason,
        array,
        int(start),
        int(start + nbytes if stop is None else stop),
        _stream_name(stream),
        began.time_ns,
        end - began.time_ns,
        began.file,
        began.lineno,
        threading.current_thread().name,
        *between,
    )
    if began.nvtx and _nvtx is not None:
        _nvtx.pop_range()
    with _lock:
        for active in _traces:
            active.events.append(event)
    if began.log:
        logger.warning("transfer guard: %s", _describe(event))
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("transfer: %s", _describe(event))


def evicted(array: str, nbytes: int, downloaded: int, reason: str) -> None:
    """Count one eviction (a device copy given back; its download was recorded already)."""
    with _lock:
        _totals["evictions"] += 1
        _totals["evicted_bytes"] += nbytes
        if not _traces:
            return
        event = EvictionEvent(array, int(nbytes), int(downloaded), reason)
        for active in _traces:
            active.evictions.append(event)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("eviction: %s %d B (%d B downloaded, %s)", array, nbytes, downloaded, reason)


def _describe(event: TransferEvent) -> str:
    text = _label(
        event.direction, event.nbytes, event.array, event.reason, event.file, event.lineno
    )
    return f"{text} bytes [{event.start}, {event.stop}) stream {event.stream}"


def enable_nvtx(enabled: bool = True) -> bool:
    """Switch NVTX ranges around transfers on or off; return whether they were on.

    With the ``nvtx`` package installed (``pip install nvtx``), each copy between
    host and device is wrapped in an NVTX range named like
    ``"h2d 2048 B x (device use) step.py:42"``, so Nsight Systems shows which array moved,
    why, and from which line. The environment variable ``SMARTARRAY_NVTX=1`` switches them
    on at import.

    Parameters
    ----------
    enabled : bool, optional

    Returns
    -------
    bool
        Whether NVTX ranges were on before the call.

    Raises
    ------
    ImportError
        ``enabled`` is true and the ``nvtx`` package is not installed.
    """
    global _nvtx
    was_on = _nvtx is not None
    if enabled:
        import nvtx

        _nvtx = nvtx
    else:
        _nvtx = None
    return was_on


if _environment.flag("SMARTARRAY_NVTX"):
    try:
        enable_nvtx(True)
    except ImportError:  # pragma: no cover - the switch names an optional extra
        pass


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
