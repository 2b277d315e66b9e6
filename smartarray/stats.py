"""Process-wide transfer counters and trace events.

Every byte that crosses between host and device goes through :mod:`smartarray.memory`,
which reports each copy here with :func:`record`. :func:`stats` reads the counters,
:func:`reset_stats` zeroes them, and :func:`trace` records the individual copies made
inside a ``with`` block. Counting is thread safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import guard
from ._observe import frames as _frames
from ._platform import environment as _environment

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

from ._observe.transfer_records import (  # the records users read; re-exported here
    _FIELDS,
    DIRECTIONS,
    EvictionEvent,
    Trace,
    TransferEvent,
    TransferStats,
)

_lock = threading.Lock()
_totals = dict.fromkeys(_FIELDS, 0)
_traces: list[Trace] = []


logger = logging.getLogger("smartarray")

# NVTX ranges around transfers: off unless switched on (enable_nvtx or SMARTARRAY_NVTX=1) and
# the ``nvtx`` package is importable.
_nvtx: Any = None
#: Whether numba.cuda's own copies are counted too (smartarray._numba.copy_counting switches it).
_all_numba = False
#: Per thread: how many of smartarray's own counted copies are under way (numba's copy
#: functions they call must not count them a second time).
_own = threading.local()


def count_numba_copies(enabled: bool) -> None:
    """Whether the copies numba.cuda makes itself count too (the one writer of the switch is
    :func:`smartarray.count_all_transfers`, in :mod:`smartarray._numba.copy_counting`, which
    wraps numba's copy functions)."""
    global _all_numba
    _all_numba = enabled


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
    (cuda.core's ``Stream`` of handle 0 is what a launch's copies go on, on a GPU), and
    smartarray's own streams by their names (``'smartarray upload'``)."""
    if isinstance(stream, int):
        return "0"
    own = getattr(stream, "smartarray_name", None)
    if own is not None:
        return str(own)
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
    modelled: tuple[float, float] = (0.0, 0.0),
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
    modelled : (float, float), optional
        The copy's modelled start and end on the fake driver's clock (see
        :attr:`TransferEvent.modelled_start_s`).
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
        *modelled,
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
    with contextlib.suppress(ImportError):  # (the switch names an optional extra)
        enable_nvtx(True)


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
