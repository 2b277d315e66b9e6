"""The per-buffer validity state machine: which bytes of one base buffer are current where.

See :mod:`smartarray.coherence` for the contract (invariant, reading, writing, fragmentation
cap). The state holds its planner (``_planning.py``), which it asks on its slow paths. Pure
Python, standard library only.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from operator import attrgetter, index
from typing import TYPE_CHECKING

from ._cost import TransferCost, _checked, _current
from ._intervals import (
    EMPTY_SET,
    IntervalSet,
    with_span,
    without_span,
)
from ._plan import (
    EMPTY_PLAN,
    Plan,
    StalePlanError,
)
from ._planning import SCATTER_RUNS, Planner

__all__ = ["DEFAULT_MAX_RUNS", "SCATTER_RUNS", "BufferState"]

DEFAULT_MAX_RUNS = 8
"""Default cap on the number of runs in each location's valid set.

Eight runs cover the common access patterns without any coalescing (a whole-array sync is one
run; a few halo stripes or pipelined chunks are a handful) while bounding two costs: every
slow-path operation works on at most nine runs, and one sync issues at most nine separate copies
(each host-device copy has a fixed latency of several microseconds, so many tiny copies cost more
than one larger copy). The price, when the cap does coalesce, is at most ``nbytes / 8`` extra
bytes per location and operation (see the docstring of :mod:`smartarray.coherence`). The fast
path is a bisection, so the cap barely affects it.
"""


def _checked_arguments(
    nbytes: int, locations: Iterable[str], valid_at: str | None, max_runs: int
) -> tuple[int, tuple[str, ...], int]:
    """:class:`BufferState`'s arguments checked (see its Raises): nbytes, locations, max_runs."""
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
    return nbytes, locs, max_runs


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
    cost : TransferCost or None, default None
        The transfer cost model that decides when to coalesce copies; ``None`` follows the
        process-wide model (:func:`~smartarray.coherence.transfer_cost`) at each decision.

    Raises
    ------
    ValueError
        If ``nbytes`` is negative, ``locations`` is empty or repeats a name, ``valid_at`` is not
        one of ``locations``, or ``max_runs < 1``.
    TypeError
        If ``nbytes`` or ``max_runs`` is not an integer, a location is not a str, or ``cost``
        is not a :class:`~smartarray.coherence.TransferCost` or None.

    Notes
    -----
    Not thread safe: the caller holds one lock per buffer (see the docstring of
    :mod:`smartarray.coherence`).

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

    __slots__ = ("_nbytes", "_locations", "_valid", "_max_runs", "_version", "_planner")

    def __init__(
        self,
        nbytes: int,
        locations: Iterable[str] = ("host", "gpu"),
        valid_at: str | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
        cost: TransferCost | None = None,
    ) -> None:
        nbytes, locs, max_runs = _checked_arguments(nbytes, locations, valid_at, max_runs)
        if cost is not None:
            cost = _checked(cost)
        whole = IntervalSet.span(0, nbytes)
        self._nbytes = nbytes
        self._locations = locs
        self._max_runs = max_runs
        self._valid: dict[str, IntervalSet] = {
            loc: whole if valid_at is None or loc == valid_at else EMPTY_SET for loc in locs
        }
        self._version = 0
        # its cost model, the scattered series' memory and the preferred sources: planning's
        self._planner = Planner(self._valid, nbytes, max_runs, cost)

    @classmethod
    def host_only(cls, nbytes: int, host: str, device: str) -> BufferState:
        """The state of a new buffer of ``nbytes`` (a non-negative int) over the locations
        ``(host, device)``, current at ``host`` only, with the default cap and the process's
        cost model: what ``BufferState(nbytes, (host, device), valid_at=host)`` makes, without
        checking the arguments again (a new array of every NumPy result is made this way).
        """
        self = object.__new__(cls)
        self._nbytes = nbytes
        self._locations = (host, device)
        self._max_runs = DEFAULT_MAX_RUNS
        whole = IntervalSet._make((0,), (nbytes,)) if nbytes else EMPTY_SET
        self._valid = {host: whole, device: EMPTY_SET}
        self._version = 0
        self._planner = Planner(self._valid, nbytes, DEFAULT_MAX_RUNS, None)
        return self

    # -- properties ------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """int: size of the base buffer in bytes."""
        return self._nbytes

    # The engine reads ``locations`` and ``version`` on every launch and host access: their
    # getters are C code (``attrgetter``), so a read makes no Python call. Typed as the
    # properties they are for the checker.
    if TYPE_CHECKING:

        @property
        def locations(self) -> tuple[str, ...]: ...

        @property
        def version(self) -> int: ...

    else:
        locations = property(
            attrgetter("_locations"),
            doc="tuple of str: the location names, in order of preference as copy sources.",
        )
        version = property(
            attrgetter("_version"),
            doc="int: incremented by every transition that changes a valid set.",
        )

    @property
    def max_runs(self) -> int:
        """int: the cap on the number of runs of each location's valid set."""
        return self._max_runs

    @property
    def cost(self) -> TransferCost:
        """TransferCost: the cost model this state plans with (its own, or the process's)."""
        return self._planner.cost or _current[0]

    # -- locations -------------------------------------------------------------------------

    def add_location(self, where: str) -> None:
        """Add the location ``where``, current nowhere yet (a device's copy, made on first use).

        It comes last in the order of preference as a copy source. Bytes never written since
        the state was made uninitialised are not valid there: a read copies them (garbage, but
        never stale data). Adding a location that exists does nothing.

        Raises
        ------
        TypeError
            ``where`` is not a str.
        """
        if not isinstance(where, str):
            raise TypeError(f"a location must be a str, got {where!r}")
        if where in self._valid:
            return
        self._valid[where] = EMPTY_SET
        self._locations = (*self._locations, where)
        self._version += 1

    def prefer(self, where: str, sources: Iterable[str]) -> None:
        """Make reads at ``where`` take bytes from ``sources`` first, in that order.

        The other locations follow, in :attr:`locations` order. (Several devices: a device
        reads from the devices it reaches peer to peer before the host.)

        Raises
        ------
        ValueError
            ``where`` or one of ``sources`` is not a location, or ``sources`` names
            ``where``.
        """
        if where not in self._valid:
            raise self._bad_where(where)
        order = tuple(sources)
        for loc in order:
            if loc not in self._valid or loc == where:
                raise ValueError(
                    f"sources must name other locations than {where!r}: one of "
                    f"{self._locations!r}; got {loc!r}"
                )
        self._planner.prefer[where] = order

    def sources(self, where: str) -> tuple[str, ...]:
        """The locations reads at ``where`` take bytes from, in order of preference."""
        return self._planner.sources(self._locations, where)

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
            except TypeError:  # noqa: PERF203 - an error path: two rounds at most
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

    def plan_read(
        self, where: str, start: int = 0, stop: int | None = None, *, coalesce: bool = True
    ) -> Plan:
        """Plan the copies that make ``[start, stop)`` current at ``where``.

        The copies are exactly the bytes of the interval that are stale at ``where``, each
        sourced from a location where it is valid (the first such in :meth:`sources` order;
        a stale run valid in different places is split), adjacent bytes from one source in one
        copy. If installing the read would leave ``where`` with more than :attr:`max_runs` runs,
        the plan also copies the smallest gaps of ``where``'s valid set (stale there, valid
        elsewhere) until it is within the cap; see :mod:`smartarray.coherence` for the bound.
        The state's transfer cost model (:attr:`cost`) may merge copies across short gaps valid
        at both ends, and copy the whole span of a scattered series of reads in one copy (see
        "The transfer cost model" in :mod:`smartarray.coherence`).

        Fast path: when the interval is already valid this returns the shared
        :data:`EMPTY_PLAN` in O(log max_runs) time without allocating.

        Parameters
        ----------
        where : str
            The location that will read.
        start, stop : int
            The byte interval; ``stop=None`` means ``nbytes``.
        coalesce : bool, default True
            Whether the cost model may copy bytes that are already valid at ``where`` (merged
            copies, span copies). The caller says False while ``where``'s copy may hold writes
            not recorded yet (a host array the user holds and writes before announcing it):
            rewriting a byte "with the same value" would bring the old value back.

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
        return self._planner.read(
            self._locations, self._version, where, valid, start, stop, coalesce
        )

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
        for s in self._valid.values():
            if len(s._starts) > m:  # (its runs, without IntervalSet.__len__'s call: every write)
                return self._planner.consolidate(self._locations, self._version)
        return EMPTY_PLAN

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
        if plan._owner is not self._planner:
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
        covered = i >= 0 and mine._stops[i] >= stop
        if covered:
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
            if loc != where:
                new = without_span(s, start, stop)
            elif covered:
                continue  # (one run holds the interval already: the set stays)
            else:
                new = with_span(s, start, stop)
            # (Both return the set itself, and only then, when it does not change: sets are
            # normalised, so an identity test is an equality test without a Python call.)
            if new is not s:
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
        elsewhere = EMPTY_SET
        for loc, s in self._valid.items():
            if loc != where:
                elsewhere = elsewhere.union(s)
        lost = mine.difference(elsewhere)
        if lost:
            raise ValueError(
                f"dropping the copy at {where!r} would lose bytes {list(lost.runs)!r}, "
                "current there only; copy them to another location first"
            )
        self._valid[where] = EMPTY_SET
        self._version += 1
