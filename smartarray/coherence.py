"""Byte-interval sets and the per-buffer validity state machine.

This module is the heart of smartarray's coherence model (see ``DESIGN.md``, "The coherence
model"). It is pure Python: it imports nothing from NumPy, Numba or the rest of the package,
and it never touches memory. It only decides *which* bytes must move and records *where* bytes
are current.

Contract
--------
A :class:`BufferState` describes one base buffer of ``nbytes`` bytes that has a copy in each of
several *locations* (``"host"``, ``"gpu"``, or any other names, e.g. one per device). For every
location it keeps the :class:`IntervalSet` of byte offsets whose value at that location is the
buffer's current value.

* Invariant: every byte is valid in at least one location, and wherever a byte is marked valid,
  the copy at that location holds the current value.
* Reading: :meth:`BufferState.plan_read` returns a :class:`Plan`: the :class:`Copy` operations
  that make a byte interval current at one location, each sourced from a location where those
  bytes are valid. The caller performs the copies and then calls :meth:`BufferState.apply`. If
  a copy fails the caller simply drops the plan: the state is unchanged. A plan computed before
  another transition is refused with :class:`StalePlanError`.
* Writing: :meth:`BufferState.mark_changed` records that a location wrote an interval (the write
  already happened); the interval becomes valid there and stale everywhere else. A partial write
  (through a strided view, say) must first read the bounding interval, as the caller does.
* Uninitialised memory is valid everywhere: garbage is never copied.
* The fast path (``plan_read`` or ``is_valid`` of an interval that is already valid) costs one
  dictionary lookup and one :func:`bisect.bisect_right` over at most ``max_runs`` runs, and
  allocates nothing: ``plan_read`` returns the shared :data:`EMPTY_PLAN`.

Thread safety
-------------
None of these objects lock anything. :class:`IntervalSet` and :class:`Plan` are immutable, but a
:class:`BufferState` must be guarded by its caller: the SmartArray layer holds one lock per base
buffer around planning, copying and applying.

The fragmentation cap and the bytes it can cost
-----------------------------------------------
Each location's valid set is kept to at most ``max_runs`` runs (default
:data:`DEFAULT_MAX_RUNS` = 8), so every operation stays O(``max_runs``). Coalescing is
*conservative*: it may shrink a valid set (bytes are copied again later) or copy extra bytes now;
it never marks a byte valid that was not copied, and never leaves a byte valid nowhere.

* :meth:`BufferState.plan_read`: when the target's valid set ``V`` united with the read interval
  ``I`` would have ``m + k`` runs (``m = max_runs``, ``k > 0``), the plan also copies the ``k``
  smallest gaps between those runs. Those bytes are stale at the target and valid elsewhere, so
  they can be copied, and no byte is copied into a place where it is already valid.
* :meth:`BufferState.mark_changed` adds at most one run to each location (``V | I`` adds one,
  ``V - I`` splits one run in two), so afterwards a location may be one run over the cap.
  :meth:`BufferState.plan_consolidate` brings every location back: first it drops (for free) the
  location's smallest runs whose bytes are also valid in another location, then, if that is not
  enough, it fills the gaps that are cheapest to copy.

Bound on the extra bytes. A set in ``[0, n)`` with ``m + k`` runs has ``m + k - 1`` gaps between
its runs, holding together at most ``n - |V|`` bytes that are stale at that location. Filling
the ``k`` cheapest of them copies at most ``k * (n - |V|) / (m + k - 1) < k * n / m`` extra bytes.
When the cap holds before each operation (the caller runs ``plan_consolidate`` right after every
``mark_changed``), ``k <= 1``, so:

* a ``plan_read`` copies at most ``n / max_runs`` bytes beyond the stale bytes it needs;
* a ``plan_consolidate`` copies at most ``n / max_runs`` bytes into each location that is over the
  cap, i.e. at most ``len(locations) * n / max_runs`` bytes in all.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from operator import index
from types import MappingProxyType
from typing import NamedTuple

__all__ = [
    "DEFAULT_MAX_RUNS",
    "EMPTY_PLAN",
    "BufferState",
    "Copy",
    "IntervalSet",
    "Plan",
    "StalePlanError",
]

DEFAULT_MAX_RUNS = 8
"""Default cap on the number of runs in each location's valid set.

Eight runs cover the common access patterns without any coalescing (a whole-array sync is one
run; a few halo stripes or pipelined chunks are a handful) while bounding two costs: every
slow-path operation works on at most nine runs, and one sync issues at most nine separate copies
(each host-device copy has a fixed latency of several microseconds, so many tiny copies cost more
than one larger copy). The price, when the cap does coalesce, is at most ``nbytes / 8`` extra
bytes per location and operation (see the module docstring). The fast path is a bisection, so
the cap barely affects it.
"""


# ---------------------------------------------------------------------------------------------
# Interval sets


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
            return _EMPTY_SET
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
            return _with_span(self, other._starts[0], other._stops[0])
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
            return _without_span(self, other._starts[0], other._stops[0])
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


_EMPTY_SET = IntervalSet()


def _with_span(s: IntervalSet, start: int, stop: int) -> IntervalSet:
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


def _without_span(s: IntervalSet, start: int, stop: int) -> IntervalSet:
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


# ---------------------------------------------------------------------------------------------
# Plans


class Copy(NamedTuple):
    """One contiguous byte copy ``[start, stop)`` from location ``source`` to ``target``.

    Attributes
    ----------
    source : str
        The location the bytes are read from (they are valid there).
    target : str
        The location the bytes are written to (they are stale there).
    start, stop : int
        The half-open byte interval of the base buffer, the same offsets at both locations.
    """

    source: str
    target: str
    start: int
    stop: int

    @property
    def nbytes(self) -> int:
        """int: the number of bytes copied, ``stop - start``."""
        return self.stop - self.start


class StalePlanError(RuntimeError):
    """A :class:`Plan` was applied after another transition of its :class:`BufferState`.

    The plan's new valid sets were computed for an earlier state; installing them could mark
    stale bytes valid. Plan again, perform the new plan's copies, and apply that one.
    """


class Plan:
    """The copies that take a :class:`BufferState` to a new state, and that new state.

    Plans are made by :meth:`BufferState.plan_read` and :meth:`BufferState.plan_consolidate`;
    do not construct them. The caller performs :attr:`copies` (in any order: they never
    overlap) and then passes the plan to :meth:`BufferState.apply`, which installs
    :attr:`new_valid`. A plan whose copies failed is simply dropped.

    Attributes
    ----------
    copies : tuple of Copy
        The copies to perform, ordered by target location then offset. Adjacent bytes from the
        same source are coalesced into one copy.
    nbytes : int
        Total number of bytes the copies move.
    new_valid : Mapping[str, IntervalSet]
        The valid set to install for each location the plan changes.

    Notes
    -----
    ``bool(plan)`` is False only for a plan that does nothing (the shared :data:`EMPTY_PLAN`).
    Every plan from ``plan_read`` that is not empty has copies; a plan from
    ``plan_consolidate`` may have no copies and still change validity (it only drops runs),
    so test ``if plan:`` rather than ``if plan.copies:`` before applying.
    """

    __slots__ = ("_copies", "_nbytes", "_new_valid", "_owner", "_version")

    def __init__(
        self,
        copies: tuple[Copy, ...] = (),
        new_valid: dict[str, IntervalSet] | None = None,
        owner: BufferState | None = None,
        version: int = -1,
        nbytes: int | None = None,
    ) -> None:
        self._copies = copies
        self._nbytes = sum(c.stop - c.start for c in copies) if nbytes is None else nbytes
        self._new_valid = new_valid if new_valid is not None else {}
        self._owner = owner
        self._version = version

    @property
    def copies(self) -> tuple[Copy, ...]:
        """tuple of Copy: the copies to perform before :meth:`BufferState.apply`."""
        return self._copies

    @property
    def nbytes(self) -> int:
        """int: total number of bytes the copies move."""
        return self._nbytes

    @property
    def new_valid(self) -> Mapping[str, IntervalSet]:
        """Mapping[str, IntervalSet]: the valid set installed per changed location."""
        return MappingProxyType(self._new_valid)

    def __bool__(self) -> bool:
        """Return True unless the plan does nothing (no copies and no validity change)."""
        return bool(self._copies) or bool(self._new_valid)

    def __repr__(self) -> str:
        if not self:
            return "Plan(<empty>)"
        changes = {loc: list(s.runs) for loc, s in self._new_valid.items()}
        return f"Plan(copies={list(self._copies)!r}, nbytes={self._nbytes}, new_valid={changes!r})"


EMPTY_PLAN = Plan()
"""The shared plan that does nothing, returned whenever no copy and no change is needed."""


# ---------------------------------------------------------------------------------------------
# Buffer state


class BufferState:
    """Which bytes of one base buffer are current at each location.

    Parameters
    ----------
    nbytes : int
        Size of the base buffer in bytes; 0 is allowed (everything is trivially valid).
    locations : iterable of str, default ("host", "gpu")
        The distinct location names, in order of preference as copy sources.
    valid_at : str or None, default None
        ``None``: uninitialised memory, valid everywhere (garbage is never copied). A location
        name: the buffer is current only there.
    max_runs : int, default DEFAULT_MAX_RUNS
        Cap on the number of runs of each location's valid set (at least 1).

    Raises
    ------
    ValueError
        If ``nbytes`` is negative, ``locations`` is empty or repeats a name, ``valid_at`` is not
        one of ``locations``, or ``max_runs < 1``.
    TypeError
        If ``nbytes`` or ``max_runs`` is not an integer, or a location is not a str.

    Notes
    -----
    Not thread safe: the caller holds one lock per buffer (see the module docstring).

    Every method taking ``(where, start=0, stop=None)`` addresses the half-open byte interval
    ``[start, stop)`` of the base buffer (``stop=None`` means ``nbytes``) and raises
    ``ValueError`` for an unknown ``where`` or an interval outside ``[0, nbytes)``, changing
    nothing.

    Examples
    --------
    >>> s = BufferState(16, valid_at="host")
    >>> plan = s.plan_read("gpu", 4, 8)
    >>> plan.copies
    (Copy(source='host', target='gpu', start=4, stop=8),)
    >>> s.apply(plan)  # after performing the copies
    >>> s.plan_read("gpu", 4, 8) is EMPTY_PLAN
    True
    >>> s.mark_changed("gpu", 0, 16)
    >>> s.valid("host")
    IntervalSet([])
    """

    __slots__ = ("_nbytes", "_locations", "_valid", "_max_runs", "_version")

    def __init__(
        self,
        nbytes: int,
        locations: Iterable[str] = ("host", "gpu"),
        valid_at: str | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
    ) -> None:
        try:
            nbytes = index(nbytes)
        except TypeError:
            raise TypeError(f"nbytes must be an integer, got {nbytes!r}") from None
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if isinstance(locations, str):
            raise TypeError(f"locations must be an iterable of str, not the str {locations!r}")
        locs = tuple(locations)
        if not locs:
            raise ValueError("locations must name at least one location")
        for loc in locs:
            if not isinstance(loc, str):
                raise TypeError(f"locations must hold str names, got {loc!r}")
        if len(set(locs)) != len(locs):
            raise ValueError(f"locations must be distinct, got {locs!r}")
        if valid_at is not None and valid_at not in locs:
            raise ValueError(
                f"valid_at must be None (uninitialised) or one of {locs!r}, got {valid_at!r}"
            )
        try:
            max_runs = index(max_runs)
        except TypeError:
            raise TypeError(f"max_runs must be an integer, got {max_runs!r}") from None
        if max_runs < 1:
            raise ValueError(f"max_runs must be >= 1, got {max_runs}")
        whole = IntervalSet.span(0, nbytes)
        self._nbytes = nbytes
        self._locations = locs
        self._max_runs = max_runs
        self._valid: dict[str, IntervalSet] = {
            loc: whole if valid_at is None or loc == valid_at else _EMPTY_SET for loc in locs
        }
        self._version = 0

    # -- properties ------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """int: size of the base buffer in bytes."""
        return self._nbytes

    @property
    def locations(self) -> tuple[str, ...]:
        """tuple of str: the location names, in order of preference as copy sources."""
        return self._locations

    @property
    def max_runs(self) -> int:
        """int: the cap on the number of runs of each location's valid set."""
        return self._max_runs

    @property
    def version(self) -> int:
        """int: incremented by every transition that changes a valid set."""
        return self._version

    def run_counts(self) -> dict[str, int]:
        """Return the number of runs of each location's valid set.

        Returns
        -------
        dict of str to int
            ``{location: runs}``. Each is at most :attr:`max_runs`, except right after a
            :meth:`mark_changed` whose :meth:`plan_consolidate` plan has not been applied yet.
        """
        return {loc: len(s) for loc, s in self._valid.items()}

    def __repr__(self) -> str:
        valid = ", ".join(f"{loc!r}: {list(s.runs)!r}" for loc, s in self._valid.items())
        return f"BufferState(nbytes={self._nbytes}, max_runs={self._max_runs}, valid={{{valid}}})"

    # -- checks ----------------------------------------------------------------------------

    def _bad_where(self, where: object) -> ValueError:
        accepted = ", ".join(repr(loc) for loc in self._locations)
        return ValueError(f"where must be one of {accepted}; got {where!r}")

    def _bad_interval(self, start: object, stop: object) -> Exception:
        for name, value in (("start", start), ("stop", stop)):
            try:
                index(value)  # type: ignore[arg-type]
            except TypeError:
                return TypeError(f"{name} must be an integer byte offset, got {value!r}")
        return ValueError(
            f"start and stop must satisfy 0 <= start <= stop <= nbytes={self._nbytes}; "
            f"got start={start!r}, stop={stop!r}"
        )

    def _checked(self, where: str, start: int, stop: int | None) -> tuple[IntervalSet, int, int]:
        try:
            valid = self._valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None
        if stop is None:
            stop = self._nbytes
        if type(start) is not int or type(stop) is not int:
            try:
                start, stop = index(start), index(stop)
            except TypeError:
                raise self._bad_interval(start, stop) from None
        if start < 0 or start > stop or stop > self._nbytes:
            raise self._bad_interval(start, stop)
        return valid, start, stop

    # -- queries ---------------------------------------------------------------------------

    def valid(self, where: str) -> IntervalSet:
        """Return the set of bytes that are current at ``where``.

        Parameters
        ----------
        where : str
            A location name.

        Returns
        -------
        IntervalSet
        """
        try:
            return self._valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None

    def is_valid(self, where: str, start: int = 0, stop: int | None = None) -> bool:
        """Return True if every byte of ``[start, stop)`` is current at ``where``.

        O(log max_runs), allocates nothing.

        Parameters
        ----------
        where : str
            A location name.
        start, stop : int
            The byte interval; ``stop=None`` means ``nbytes``.

        Returns
        -------
        bool
        """
        try:
            valid = self._valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None
        if stop is None:
            stop = self._nbytes
        if not (type(start) is int and type(stop) is int and 0 <= start <= stop <= self._nbytes):
            valid, start, stop = self._checked(where, start, stop)
        if start == stop:
            return True
        i = bisect_right(valid._starts, start) - 1
        return i >= 0 and valid._stops[i] >= stop

    def is_exclusive(self, where: str, start: int = 0, stop: int | None = None) -> bool:
        """Return True if ``[start, stop)`` is current at ``where`` and stale everywhere else.

        Then a write of the interval at ``where`` changes nothing. O(locations x log max_runs),
        allocates nothing.

        Parameters
        ----------
        where : str
            A location name.
        start, stop : int
            The byte interval; ``stop=None`` means ``nbytes``.

        Returns
        -------
        bool
        """
        valid = self._valid
        try:
            mine = valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None
        if stop is None:
            stop = self._nbytes
        if not (type(start) is int and type(stop) is int and 0 <= start <= stop <= self._nbytes):
            mine, start, stop = self._checked(where, start, stop)
        if start == stop:
            return True
        i = bisect_right(mine._starts, start) - 1
        if i < 0 or mine._stops[i] < stop:
            return False
        for loc, other in valid.items():
            if loc != where:
                stops = other._stops
                i = bisect_right(stops, start)
                if i < len(stops) and other._starts[i] < stop:
                    return False
        return True

    def plan_read(self, where: str, start: int = 0, stop: int | None = None) -> Plan:
        """Plan the copies that make ``[start, stop)`` current at ``where``.

        The copies are exactly the bytes of the interval that are stale at ``where``, each
        sourced from a location where it is valid (the first such in :attr:`locations` order;
        a stale run valid in different places is split), adjacent bytes from one source in one
        copy. If installing the read would leave ``where`` with more than :attr:`max_runs` runs,
        the plan also copies the smallest gaps of ``where``'s valid set (stale there, valid
        elsewhere) until it is within the cap; see the module docstring for the bound.

        Fast path: when the interval is already valid this returns the shared
        :data:`EMPTY_PLAN` in O(log max_runs) time without allocating.

        Parameters
        ----------
        where : str
            The location that will read.
        start, stop : int
            The byte interval; ``stop=None`` means ``nbytes``.

        Returns
        -------
        Plan
            Perform its copies, then :meth:`apply` it.
        """
        try:
            valid = self._valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None
        if stop is None:
            stop = self._nbytes
        if not (type(start) is int and type(stop) is int and 0 <= start <= stop <= self._nbytes):
            valid, start, stop = self._checked(where, start, stop)
        if start == stop:
            return EMPTY_PLAN
        i = bisect_right(valid._starts, start) - 1
        if i >= 0 and valid._stops[i] >= stop:
            return EMPTY_PLAN
        return self._plan_read_slow(where, valid, start, stop)

    def _plan_read_slow(self, where: str, valid: IntervalSet, start: int, stop: int) -> Plan:
        final = _with_span(valid, start, stop)
        need = valid.gaps(start, stop)  # the stale bytes of the interval
        excess = len(final) - self._max_runs
        if excess > 0:  # also fill gaps of final: stale here, and disjoint from the interval
            fill = _smallest_gaps(final, excess, None)
            final = final.union(fill)
            need = need.union(fill)
        copies = self._sourced(where, need, self._valid)
        return Plan(tuple(copies), {where: final}, self, self._version, need.total)

    def _sourced(
        self, target: str, need: IntervalSet, valid: Mapping[str, IntervalSet]
    ) -> list[Copy]:
        """Split ``need`` (stale at ``target``) into copies from where each byte is valid."""
        copies: list[Copy] = []
        sources = 0
        for source in self._locations:
            if source == target:
                continue
            have = valid[source]
            if _covers(have, need):  # always, with two locations
                take, need = need, _EMPTY_SET
            else:
                take = need.intersection(have)
                need = need.difference(take)
            if take:
                sources += 1
                for a, b in zip(take._starts, take._stops, strict=True):
                    copies.append(_new_copy(Copy, (source, target, a, b)))
            if not need:
                break
        if need:  # pragma: no cover - only reachable if the invariant was broken
            raise RuntimeError(f"coherence invariant broken: bytes {need!r} are valid nowhere")
        if sources > 1:
            copies.sort(key=_copy_start)
        return copies

    def plan_consolidate(self) -> Plan:
        """Plan bringing every location's valid set back within :attr:`max_runs` runs.

        For each location over the cap (in :attr:`locations` order), first drop its smallest
        runs whose bytes are also valid in another location (free now; those bytes are copied
        again if they are read there later); if that is not enough, fill the gaps that are
        cheapest to copy, from locations where those bytes are valid. Call it right after
        :meth:`mark_changed`, perform its copies, and :meth:`apply` it.

        Returns
        -------
        Plan
            :data:`EMPTY_PLAN` when every location is already within the cap. The plan may have
            no copies and still change validity (drops only).
        """
        m = self._max_runs
        before = self._valid
        if all(len(s) <= m for s in before.values()):
            return EMPTY_PLAN
        after = dict(before)
        need: dict[str, IntervalSet] = {}
        for loc in self._locations:
            current = after[loc]
            excess = len(current) - m
            if excess <= 0:
                continue
            elsewhere = _EMPTY_SET
            for other in self._locations:
                if other != loc:
                    elsewhere = elsewhere.union(after[other])
            droppable = sorted(
                (b - a, a, b)
                for a, b in zip(current._starts, current._stops, strict=True)
                if elsewhere.contains(a, b)
            )[:excess]
            kept = current
            if droppable:
                kept = current.difference(_runs_set(droppable))
            fills = excess - len(droppable)
            if fills > 0:
                kept = kept.union(_smallest_gaps(kept, fills, current))
                stale = kept.difference(current)
                if stale:
                    need[loc] = stale
            after[loc] = kept
        copies: list[Copy] = []
        for loc in self._locations:
            if loc in need:
                copies.extend(self._sourced(loc, need[loc], before))
        changed = {loc: s for loc, s in after.items() if s != before[loc]}
        return Plan(tuple(copies), changed, self, self._version)

    # -- transitions -----------------------------------------------------------------------

    def apply(self, plan: Plan) -> None:
        """Install a plan's new valid sets, after its copies were performed.

        Parameters
        ----------
        plan : Plan
            A plan from this state's :meth:`plan_read` or :meth:`plan_consolidate`, computed
            since the last transition. :data:`EMPTY_PLAN` is a no-op.

        Raises
        ------
        StalePlanError
            If another transition (``apply`` or ``mark_changed``) happened since the plan was
            computed; the state is unchanged.
        ValueError
            If the plan was computed by another :class:`BufferState`.
        TypeError
            If ``plan`` is not a :class:`Plan`.
        """
        if plan is EMPTY_PLAN:
            return
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
        if plan._owner is not self:
            raise ValueError("plan was computed by another BufferState (or constructed by hand)")
        if plan._version != self._version:
            raise StalePlanError(
                f"plan was computed at version {plan._version} of this buffer's state, which is "
                f"now at version {self._version}; plan again after the latest transition"
            )
        if plan._new_valid:
            self._valid.update(plan._new_valid)
            self._version += 1

    def mark_changed(self, where: str, start: int = 0, stop: int | None = None) -> None:
        """Record that ``where`` wrote the bytes ``[start, stop)``.

        The interval becomes valid at ``where`` and stale at every other location. This only
        updates the state (the write already happened). It can leave a location one run over
        the cap: call :meth:`plan_consolidate` next.

        Parameters
        ----------
        where : str
            The location that wrote.
        start, stop : int
            The byte interval written; ``stop=None`` means ``nbytes``.
        """
        try:
            mine = self._valid[where]
        except (KeyError, TypeError):
            raise self._bad_where(where) from None
        if stop is None:
            stop = self._nbytes
        if not (type(start) is int and type(stop) is int and 0 <= start <= stop <= self._nbytes):
            mine, start, stop = self._checked(where, start, stop)
        if start == stop:
            return
        valid = self._valid
        # no-op fast path (a kernel writing the same array again): already valid here only
        i = bisect_right(mine._starts, start) - 1
        if i >= 0 and mine._stops[i] >= stop:
            for loc, s in valid.items():
                if loc != where:
                    stops = s._stops
                    i = bisect_right(stops, start)
                    if i < len(stops) and s._starts[i] < stop:
                        break
            else:
                return
        changed = {}
        for loc, s in valid.items():
            new = _with_span(s, start, stop) if loc == where else _without_span(s, start, stop)
            if new != s:
                changed[loc] = new
        if changed:
            valid.update(changed)
            self._version += 1

    def drop(self, where: str) -> None:
        """Record that the copy at ``where`` is gone (freed): nothing is current there.

        Allowed only when every byte current at ``where`` is also current at another
        location: dropping the only current copy of a byte would lose it. The bytes are
        copied again if ``where`` reads them later (as after :meth:`mark_changed` elsewhere).

        Parameters
        ----------
        where : str
            The location whose copy is given back.

        Raises
        ------
        ValueError
            If some byte is current at ``where`` only (download it first: :meth:`plan_read`
            at another location); the state is unchanged.
        """
        mine = self.valid(where)
        if not mine:
            return
        elsewhere = _EMPTY_SET
        for loc, s in self._valid.items():
            if loc != where:
                elsewhere = elsewhere.union(s)
        lost = mine.difference(elsewhere)
        if lost:
            raise ValueError(
                f"dropping the copy at {where!r} would lose bytes {list(lost.runs)!r}, "
                "current there only; copy them to another location first"
            )
        self._valid[where] = _EMPTY_SET
        self._version += 1


_new_copy = tuple.__new__  # Copy(...) without the NamedTuple's Python-level __new__


def _copy_start(copy: Copy) -> int:
    return copy.start


def _run_start(run: tuple[int, int, int]) -> int:
    return run[1]


def _smallest_gaps(s: IntervalSet, count: int, held: IntervalSet | None) -> IntervalSet:
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
            cost -= _bytes_within(held, a, b)
        gaps.append((cost, a, b))
    gaps.sort()
    return _runs_set(gaps[:count])


def _runs_set(runs: list[tuple[int, int, int]]) -> IntervalSet:
    """The set of disjoint, non-adjacent ``(key, start, stop)`` runs, in any order."""
    runs.sort(key=_run_start)
    return IntervalSet._make(tuple(r[1] for r in runs), tuple(r[2] for r in runs))


def _covers(have: IntervalSet, need: IntervalSet) -> bool:
    """Whether every run of ``need`` lies within ``have`` (O(k log k))."""
    starts, stops = have._starts, have._stops
    for a, b in zip(need._starts, need._stops, strict=True):
        i = bisect_right(starts, a) - 1
        if i < 0 or stops[i] < b:
            return False
    return True


def _bytes_within(s: IntervalSet, start: int, stop: int) -> int:
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
