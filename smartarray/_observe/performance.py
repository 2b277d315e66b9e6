"""Performance warnings: patterns that move far more bytes than the program needs.

Each warning is a :class:`~smartarray.errors.PerformanceWarning` naming the array and the
fix, issued once per array and cause (not once per launch), after the pattern repeated
:data:`REPEATS` times, and only for arrays of at least :data:`MIN_BYTES` (a few wasted
bytes are not worth a warning). The causes:

``eager refresh``
    A host array handed out earlier (``host()``, ``get('host')``, ``np.asarray``, or a
    view NumPy derived from one) is still alive, so every device write downloads the array
    again at once to keep it current.
``whole upload``
    Each launch uploads all of the array because ``host_changed()`` /
    ``mark_changed('host')`` marked all of it changed, although the host may have written a
    small part.
``unneeded copy-back``
    A kernel that never wrote an argument (the bytes downloaded after it equal the host's
    previous bytes) still made it download: the argument should be ``In(x)``.

SmartArray calls the hooks below; each costs one attribute test when nothing is watched.
The hooks only queue a warning on the buffer; SmartArray issues queued warnings with
:func:`emit` where raising is safe (before a launch's copies, after a host read), never from
the dispatcher's post-launch callbacks: under ``-W error`` a warning raised there would stop
the callbacks of the other arguments and leave their kernel writes unrecorded.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from ..errors import PerformanceWarning

__all__ = ["MIN_BYTES", "REPEATS"]

#: How many times a pattern repeats before it is reported.
REPEATS = 3
#: The smallest array (bytes) worth a warning.
MIN_BYTES = 4096

_warned: set[tuple[str, str]] = set()
_lock = threading.Lock()


class Perf:
    """Per-buffer counters of the patterns (``_engine.Buffer.perf``, made on first need)."""

    __slots__ = ("refreshes", "marked", "whole_uploads", "watch", "checks", "unchanged", "pending")

    def __init__(self) -> None:
        self.refreshes = 0
        self.marked: tuple[int, int] | None = None  # last explicit host mark_changed range
        self.whole_uploads = 0
        self.watch: tuple[int, int] | None = None  # bytes a kernel may have left unchanged
        self.checks = REPEATS  # copy-back comparisons left
        self.unchanged = 0
        self.pending: list[str] = []  # warnings queued for emit()


def _perf(buf: Any) -> Perf:
    perf = buf.perf
    if perf is None:
        perf = buf.perf = Perf()
    return perf


def _warn(cause: str, buf: Any, message: str) -> None:
    """Queue a warning on ``buf``, once per array name and cause."""
    with _lock:
        if (cause, buf.name) in _warned:
            return
        _warned.add((cause, buf.name))
    buf.perf.pending.append(message)


def emit(buf: Any) -> None:
    """Issue the warnings queued on ``buf``, attributed to the user's line."""
    from . import frames as _frames

    pending, buf.perf.pending = buf.perf.pending, []
    filename, lineno = _frames.user_frame(1)
    for message in pending:
        if filename:
            warnings.warn_explicit(message, PerformanceWarning, filename, lineno)
        else:  # pragma: no cover - called from library code only
            warnings.warn(message, PerformanceWarning, stacklevel=3)


def reset() -> None:
    """Forget which warnings were issued (for tests)."""
    with _lock:
        _warned.clear()


def refreshed(buf: Any, nbytes: int) -> None:
    """A device write refreshed held host arrays of ``buf`` (``nbytes`` downloaded)."""
    if buf.nbytes < MIN_BYTES or nbytes == 0:
        return
    perf = _perf(buf)
    perf.refreshes += 1
    if perf.refreshes >= REPEATS:
        _warn(
            "eager refresh",
            buf,
            f"array {buf.name!r}: a host array handed out earlier (by host(), get('host'), "
            "np.asarray or a view of one) is still alive, so every device write downloads "
            f"it again at once ({nbytes} B each, {perf.refreshes} times so far). If you do "
            "not read it after every launch, drop that reference (del it) and call "
            "a.host() when you need the data.",
        )


def host_marked(buf: Any, lo: int, hi: int) -> None:
    """``mark_changed('host')`` declared bytes ``[lo, hi)`` written."""
    if hi - lo >= MIN_BYTES:
        _perf(buf).marked = (lo, hi)
    elif buf.perf is not None:
        buf.perf.marked = None


def host_written(buf: Any) -> None:
    """A host write recorded exactly what it wrote (item assignment, NumPy call)."""
    if buf.perf is not None:
        buf.perf.marked = None


def uploaded(buf: Any, nbytes: int, lo: int, hi: int) -> None:
    """A launch uploaded ``nbytes`` of the argument's bytes ``[lo, hi)``."""
    perf = buf.perf
    if perf is None:
        return
    if perf.marked is not None and perf.marked == (lo, hi) and nbytes >= hi - lo:
        perf.whole_uploads += 1
        if perf.whole_uploads >= REPEATS:
            _warn(
                "whole upload",
                buf,
                f"array {buf.name!r}: each launch uploads all {hi - lo} B because "
                "host_changed() / mark_changed('host') marks the whole array changed. If "
                "the host wrote only part of it, record only that part: write with item "
                "assignment (a[i:j] = ...), which records exactly what it writes, or call "
                "a[i:j].host_changed() on the part you wrote.",
            )
    else:
        perf.whole_uploads = 0
    perf.marked = None


def inout_launch(buf: Any, lo: int, hi: int, host_was_current: bool) -> None:
    """A kernel is about to take bytes ``[lo, hi)`` as ``InOut``; is the host current?"""
    if hi - lo < MIN_BYTES:
        return
    perf = _perf(buf)
    if perf.checks > 0 and host_was_current:
        perf.watch = (lo, hi)


def before_copy(buf: Any, plan: Any, host: np.ndarray) -> list[tuple[int, np.ndarray]] | None:
    """Snapshot the stale host bytes a download will overwrite, when they are watched."""
    perf = buf.perf
    if perf is None or perf.watch is None:
        return None
    lo, hi = perf.watch
    snaps = []
    for c in plan.copies:
        if c.target == "host" and c.start < hi and lo < c.stop:
            a, b = max(lo, c.start), min(hi, c.stop)
            snaps.append((a, host[a:b].copy()))
    return snaps or None


def after_copy(buf: Any, snaps: list[tuple[int, np.ndarray]], host: np.ndarray) -> None:
    """Compare the downloaded bytes with the snapshot: a kernel that never wrote them?"""
    perf = buf.perf
    perf.watch = None
    perf.checks -= 1
    if all(np.array_equal(host[a : a + len(old)], old) for a, old in snaps):
        perf.unchanged += 1
        if perf.unchanged >= REPEATS:
            _warn(
                "unneeded copy-back",
                buf,
                f"array {buf.name!r} was downloaded after {perf.unchanged} kernel launches "
                "that left it unchanged: a kernel that only reads an argument should get "
                "In(x) (or use smartarray.jit, which infers it), so nothing is copied back.",
            )
    else:
        perf.checks = 0  # kernels write this array: stop comparing
