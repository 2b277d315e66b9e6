"""Byte-interval sets: immutable, normalised sets of half-open byte ranges.

The vocabulary of the coherence model (see :mod:`smartarray.coherence`): each location's valid
bytes are an :class:`IntervalSet`. The span helpers below are what the state machine uses on its
fast paths (bisection and tuple slicing, no normalisation pass). Pure Python, standard library
only.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from operator import index

__all__ = [
    "EMPTY_SET",
    "IntervalSet",
    "bytes_within",
    "covers",
    "runs_set",
    "smallest_gaps",
    "with_span",
    "without_span",
]


def _check_offset(name: str, value: object) -> int:
    try:
        value = index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer byte offset, got {value!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative byte offset, got {value}")
    return value


class IntervalSet:
    """An immutable set of byte offsets stored as normalised half-open runs.

    The runs are sorted, disjoint and non-adjacent (touching runs are merged); empty runs are
    dropped. Two sets holding the same offsets are therefore equal and hash alike, whatever
    runs they were built from.

    Parameters
    ----------
    runs : iterable of (int, int), optional
        ``(start, stop)`` pairs, each the half-open interval ``[start, stop)``, in any order,
        possibly overlapping. Empty by default.

    Raises
    ------
    ValueError
        If a run has a negative offset or ``start > stop``.
    TypeError
        If an offset is not an integer.

    See Also
    --------
    IntervalSet.span : one run.
    IntervalSet.from_runs : same as the constructor.

    Examples
    --------
    >>> s = IntervalSet([(8, 12), (0, 4), (4, 6)])
    >>> s
    IntervalSet([(0, 6), (8, 12)])
    >>> s.total, len(s), s.contains(1, 5), 7 in s
    (10, 2, True, False)
    >>> s.gaps(0, 16)
    IntervalSet([(6, 8), (12, 16)])
    """

    __slots__ = ("_starts", "_stops", "_runs", "_total")

    _starts: tuple[int, ...]
    _stops: tuple[int, ...]
    _runs: tuple[tuple[int, int], ...] | None  # built on first use
    _total: int  # -1 until first use

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        pairs = []
        for run in runs:
            try:
                start, stop = run
            except (TypeError, ValueError):
                raise TypeError(
                    f"runs must hold (start, stop) pairs of byte offsets, got {run!r}"
                ) from None
            start = _check_offset("runs", start)
            stop = _check_offset("runs", stop)
            if start > stop:
                raise ValueError(f"runs must satisfy start <= stop, got ({start}, {stop})")
            if start < stop:
                pairs.append((start, stop))
        pairs.sort()
        starts: list[int] = []
        stops: list[int] = []
        for start, stop in pairs:
            if stops and start <= stops[-1]:
                if stop > stops[-1]:
                    stops[-1] = stop
            else:
                starts.append(start)
                stops.append(stop)
        self._starts = tuple(starts)
        self._stops = tuple(stops)
        self._runs = None
        self._total = -1

    @classmethod
    def _make(cls, starts: tuple[int, ...], stops: tuple[int, ...]) -> IntervalSet:
        """Build from the tuples of an already normalised set of runs (no checks)."""
        self = object.__new__(cls)
        self._starts = starts
        self._stops = stops
        self._runs = None
        self._total = -1
        return self

    @classmethod
    def span(cls, start: int, stop: int) -> IntervalSet:
        """Return the set holding the single run ``[start, stop)``.

        Parameters
        ----------
        start, stop : int
            Non-negative byte offsets. ``start >= stop`` gives the empty set.

        Returns
        -------
        IntervalSet

        Raises
        ------
        ValueError
            If ``start`` or ``stop`` is negative.
        """
        start = _check_offset("start", start)
        stop = _check_offset("stop", stop)
        if start >= stop:
            return EMPTY_SET
        return cls._make((start,), (stop,))

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, int]]) -> IntervalSet:
        """Return the set covering the union of arbitrary ``(start, stop)`` runs.

        Parameters
        ----------
        runs : iterable of (int, int)
            Half-open runs in any order, possibly overlapping, adjacent or empty.

        Returns
        -------
        IntervalSet

        Raises
        ------
        ValueError
            If a run has a negative offset or ``start > stop``.
        """
        return cls(runs)

    # -- views -----------------------------------------------------------------------------

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        """tuple of (int, int): the normalised ``(start, stop)`` runs, in increasing order."""
        runs = self._runs
        if runs is None:
            runs = self._runs = tuple(zip(self._starts, self._stops, strict=True))
        return runs

    @property
    def total(self) -> int:
        """int: the number of bytes covered."""
        total = self._total
        if total < 0:
            total = self._total = sum(self._stops) - sum(self._starts)
        return total

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """Iterate over the ``(start, stop)`` runs in increasing order."""
        return iter(self.runs)

    def __len__(self) -> int:
        """Return the number of runs (not bytes: see :attr:`total`)."""
        return len(self._starts)

    def __bool__(self) -> bool:
        """Return True if the set covers at least one byte."""
        return bool(self._starts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._starts == other._starts and self._stops == other._stops

    def __hash__(self) -> int:
        return hash((self._starts, self._stops))

    def __repr__(self) -> str:
        return f"IntervalSet({list(self.runs)!r})"

    # -- queries ---------------------------------------------------------------------------

    def contains(self, start: int, stop: int) -> bool:
        """Return True if every byte of ``[start, stop)`` is in the set.

        O(log k) for k runs. An empty interval (``start == stop``) is always contained.

        Parameters
        ----------
        start, stop : int
            Byte offsets with ``0 <= start <= stop``.

        Returns
        -------
        bool

        Raises
        ------
        ValueError
            If ``start`` is negative or ``start > stop``.
        """
        if start < 0 or start > stop:
            raise ValueError(f"start and stop must satisfy 0 <= start <= stop, got {start}, {stop}")
        if start == stop:
            return True
        i = bisect_right(self._starts, start) - 1
        return i >= 0 and self._stops[i] >= stop

    def __contains__(self, offset: object) -> bool:
        """Return True if the byte at integer ``offset`` is in the set."""
        try:
            offset = index(offset)  # type: ignore[arg-type]
        except TypeError:
            return False
        i = bisect_right(self._starts, offset) - 1
        return i >= 0 and self._stops[i] > offset

    def gaps(self, start: int, stop: int) -> IntervalSet:
        """Return the bytes of ``[start, stop)`` that are *not* in the set.

        Parameters
        ----------
        start, stop : int
            Byte offsets with ``0 <= start <= stop``.

        Returns
        -------
        IntervalSet
            The complement of the set, restricted to ``[start, stop)``.

        Raises
        ------
        ValueError
            If ``start`` is negative or ``start > stop``.
        """
        if start < 0 or start > stop:
            raise ValueError(f"start and stop must satisfy 0 <= start <= stop, got {start}, {stop}")
        starts, stops = self._starts, self._stops
        out_starts: list[int] = []
        out_stops: list[int] = []
        i = bisect_right(stops, start)  # first run ending after start
        cur = start
        n = len(starts)
        while i < n and starts[i] < stop:
            if starts[i] > cur:
                out_starts.append(cur)
                out_stops.append(starts[i])
            cur = stops[i]
            i += 1
        if cur < stop:
            out_starts.append(cur)
            out_stops.append(stop)
        return IntervalSet._make(tuple(out_starts), tuple(out_stops))

    # -- algebra ---------------------------------------------------------------------------

    def union(self, other: IntervalSet) -> IntervalSet:
        """Return the bytes in either set (O(k) merge).

        Parameters
        ----------
        other : IntervalSet

        Returns
        -------
        IntervalSet
        """
        if not other._starts:
            return self
        if not self._starts:
            return other
        if len(other._starts) == 1:
            return with_span(self, other._starts[0], other._stops[0])
        a_starts, a_stops = self._starts, self._stops
        b_starts, b_stops = other._starts, other._stops
        na, nb = len(a_starts), len(b_starts)
        out_starts: list[int] = []
        out_stops: list[int] = []
        i = j = 0
        while i < na or j < nb:
            if j >= nb or (i < na and a_starts[i] <= b_starts[j]):
                start, stop = a_starts[i], a_stops[i]
                i += 1
            else:
                start, stop = b_starts[j], b_stops[j]
                j += 1
            if out_stops and start <= out_stops[-1]:
                if stop > out_stops[-1]:
                    out_stops[-1] = stop
            else:
                out_starts.append(start)
                out_stops.append(stop)
        return IntervalSet._make(tuple(out_starts), tuple(out_stops))

    def difference(self, other: IntervalSet) -> IntervalSet:
        """Return the bytes in this set but not in ``other`` (O(k) merge).

        Parameters
        ----------
        other : IntervalSet

        Returns
        -------
        IntervalSet
        """
        if not other._starts or not self._starts:
            return self
        if len(other._starts) == 1:
            return without_span(self, other._starts[0], other._stops[0])
        b_starts, b_stops = other._starts, other._stops
        nb = len(b_starts)
        out_starts: list[int] = []
        out_stops: list[int] = []
        j = 0
        for start, stop in zip(self._starts, self._stops, strict=True):
            while j < nb and b_stops[j] <= start:
                j += 1
            cur = start
            k = j
            while k < nb and b_starts[k] < stop:
                if b_starts[k] > cur:
                    out_starts.append(cur)
                    out_stops.append(b_starts[k])
                cur = b_stops[k]  # > cur: b's runs are sorted, disjoint, and end after start
                if cur >= stop:
                    break
                k += 1
            if cur < stop:
                out_starts.append(cur)
                out_stops.append(stop)
        return IntervalSet._make(tuple(out_starts), tuple(out_stops))

    def intersection(self, other: IntervalSet) -> IntervalSet:
        """Return the bytes in both sets (O(k) merge).

        Parameters
        ----------
        other : IntervalSet

        Returns
        -------
        IntervalSet
        """
        a_starts, a_stops = self._starts, self._stops
        b_starts, b_stops = other._starts, other._stops
        na, nb = len(a_starts), len(b_starts)
        out_starts: list[int] = []
        out_stops: list[int] = []
        i = j = 0
        while i < na and j < nb:
            start = a_starts[i] if a_starts[i] > b_starts[j] else b_starts[j]
            stop = a_stops[i] if a_stops[i] < b_stops[j] else b_stops[j]
            if start < stop:
                out_starts.append(start)
                out_stops.append(stop)
            if a_stops[i] < b_stops[j]:
                i += 1
            else:
                j += 1
        return IntervalSet._make(tuple(out_starts), tuple(out_stops))

    def __or__(self, other: object) -> IntervalSet:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self.union(other)

    def __sub__(self, other: object) -> IntervalSet:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self.difference(other)

    def __and__(self, other: object) -> IntervalSet:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self.intersection(other)


EMPTY_SET = IntervalSet()


def with_span(s: IntervalSet, start: int, stop: int) -> IntervalSet:
    """``s | [start, stop)`` for ``start < stop``, by bisection and slicing."""
    starts, stops = s._starts, s._stops
    i = bisect_left(stops, start)  # first run ending at or after start: merges
    j = bisect_right(starts, stop)  # runs i..j-1 touch [start, stop)
    if i < j:
        if starts[i] < start:
            start = starts[i]
        if stops[j - 1] > stop:
            stop = stops[j - 1]
        if i + 1 == j and starts[i] == start and stops[i] == stop:
            return s
    return IntervalSet._make(
        starts[:i] + (start,) + starts[j:],
        stops[:i] + (stop,) + stops[j:],
    )


def without_span(s: IntervalSet, start: int, stop: int) -> IntervalSet:
    """``s - [start, stop)`` for ``start < stop``, by bisection and slicing."""
    starts, stops = s._starts, s._stops
    i = bisect_right(stops, start)  # first run ending after start
    j = bisect_left(starts, stop)  # runs i..j-1 overlap [start, stop)
    if i >= j:
        return s
    mid_starts: tuple[int, ...] = ()
    mid_stops: tuple[int, ...] = ()
    if starts[i] < start:
        mid_starts, mid_stops = (starts[i],), (start,)
    if stops[j - 1] > stop:
        mid_starts, mid_stops = mid_starts + (stop,), mid_stops + (stops[j - 1],)
    return IntervalSet._make(
        starts[:i] + mid_starts + starts[j:],
        stops[:i] + mid_stops + stops[j:],
    )


def _run_start(run: tuple[int, int, int]) -> int:
    return run[1]


def smallest_gaps(s: IntervalSet, count: int, held: IntervalSet | None) -> IntervalSet:
    """Return the ``count`` cheapest gaps between consecutive runs of ``s``.

    The cost of a gap is its number of bytes not in ``held`` (all of them if ``held`` is None);
    ties go to the leftmost gap.
    """
    starts, stops = s._starts, s._stops
    if count == 1 and held is None:  # the common case: one gap, costs are lengths
        best_a, best_b = 0, -1
        for a, b in zip(stops, starts[1:], strict=False):
            if best_b < 0 or b - a < best_b - best_a:
                best_a, best_b = a, b
        return IntervalSet._make((best_a,), (best_b,))
    gaps = []
    for i in range(len(starts) - 1):
        a, b = stops[i], starts[i + 1]
        cost = b - a
        if held is not None:
            cost -= bytes_within(held, a, b)
        gaps.append((cost, a, b))
    gaps.sort()
    return runs_set(gaps[:count])


def runs_set(runs: list[tuple[int, int, int]]) -> IntervalSet:
    """The set of disjoint, non-adjacent ``(key, start, stop)`` runs, in any order."""
    runs.sort(key=_run_start)
    return IntervalSet._make(tuple(r[1] for r in runs), tuple(r[2] for r in runs))


def covers(have: IntervalSet, need: IntervalSet) -> bool:
    """Whether every run of ``need`` lies within ``have`` (O(k log k))."""
    starts, stops = have._starts, have._stops
    for a, b in zip(need._starts, need._stops, strict=True):
        i = bisect_right(starts, a) - 1
        if i < 0 or stops[i] < b:
            return False
    return True


def bytes_within(s: IntervalSet, start: int, stop: int) -> int:
    """The number of bytes of ``s`` in ``[start, stop)`` (no allocation)."""
    starts, stops = s._starts, s._stops
    n = len(starts)
    i = bisect_right(stops, start)
    total = 0
    while i < n and starts[i] < stop:
        total += (stops[i] if stops[i] < stop else stop) - (
            starts[i] if starts[i] > start else start
        )
        i += 1
    return total
