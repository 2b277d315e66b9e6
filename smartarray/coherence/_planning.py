"""A :class:`~smartarray.coherence.BufferState`'s planner: which copies make stale bytes
current, and which bring every location back within the cap.

The state holds one :class:`Planner` and asks it on its slow paths only (a read with stale
bytes, a location over the cap); the fast paths (an interval already current, every location
within the cap) stay the state's own. The planner holds what planning alone keeps (the cost
model, the scattered series' memory, the sources each target prefers) and the state's valid
sets, which it reads but never changes: the state installs a plan's sets itself
(:meth:`~smartarray.coherence.BufferState.apply`). Pure Python, standard library only.

Scattered series of reads (ski rental): when one copy of a span beats one copy per read. The
planner weighs a series first (:meth:`Planner.read`), whenever the transfer cost model allows
copying valid bytes; see "The transfer cost model" in :mod:`smartarray.coherence`.
"""

from __future__ import annotations

from bisect import bisect_right

from ._cost import TransferCost, _current
from ._intervals import IntervalSet, smallest_gaps, with_span
from ._plan import Copy, Plan, consolidated, merged_copies, new_copy, sourced

__all__ = ["SCATTER_RUNS", "Planner"]

SCATTER_RUNS = 3
"""Runs in a location's valid set from which any read counts as one of a scattered series.

Reads that leave a location with this many separate runs have each paid a copy's latency; from
here the planner weighs copying the whole span they touch (see :meth:`BufferState.plan_read`).
With one or two runs, a halo at each end or one window are common exact patterns: there only a
read that opens a new run strictly inside the buffer, away from every run, counts, and only the
whole location's copy is weighed.
"""


class Planner:
    """How one :class:`~smartarray.coherence.BufferState` plans its copies.

    Parameters
    ----------
    valid : dict of str to IntervalSet
        The state's valid sets, one per location in the state's order: the state's own dict,
        which it updates in place (the planner only reads it).
    nbytes : int
        The size of the base buffer.
    max_runs : int
        The cap on the number of runs of each location's valid set.
    cost : TransferCost or None
        The state's own cost model; ``None`` follows the process-wide one at each decision.

    Notes
    -----
    The plans it makes name the planner as their owner (one per state, compared by identity):
    the state applies only its own planner's plans. Each plan is stamped with the state's
    version, which the state passes in.
    """

    __slots__ = ("break_even", "cost", "max_runs", "nbytes", "prefer", "scatter", "valid")

    def __init__(
        self,
        valid: dict[str, IntervalSet],
        nbytes: int,
        max_runs: int,
        cost: TransferCost | None,
    ) -> None:
        self.valid = valid
        self.nbytes = nbytes
        self.max_runs = max_runs
        self.cost = cost
        # bytes worth one copy's latency under ``cost``; -1: the process's model's
        self.break_even = -1 if cost is None else cost.break_even_bytes
        # per location that was read scattered: (copies paid, span start, span stop) of the
        # span copy that ended the series; a hint for the next time it is stale, not validity
        self.scatter: dict[str, tuple[int, int, int]] = {}
        # target -> the sources it prefers, before the others (BufferState.prefer)
        self.prefer: dict[str, tuple[str, ...]] = {}

    def sources(self, locations: tuple[str, ...], where: str) -> tuple[str, ...]:
        """The locations reads at ``where`` take bytes from, in order of preference: those
        ``where`` prefers, then the others in ``locations`` order."""
        first = self.prefer.get(where)
        if not first:
            return locations
        return first + tuple(loc for loc in locations if loc not in first)

    # -- reads -----------------------------------------------------------------------------

    def read(
        self,
        locations: tuple[str, ...],
        version: int,
        where: str,
        valid: IntervalSet,
        start: int,
        stop: int,
        coalesce: bool,
    ) -> Plan:
        """The plan of :meth:`BufferState.plan_read` when ``[start, stop)`` (checked, not
        empty) is not all current at ``where``, whose valid set is ``valid``."""
        break_even = self.break_even  # bytes worth one copy's latency; 0: exact copies
        if break_even < 0:
            break_even = _current[1]
        if not coalesce:
            break_even = 0  # exact copies: nothing valid at ``where`` is rewritten
        if break_even:
            plan = self._series(locations, version, where, valid, start, stop, break_even)
            if plan is not None:
                return plan
        final = with_span(valid, start, stop)
        need = valid.gaps(start, stop)  # the stale bytes of the interval
        excess = len(final) - self.max_runs
        if excess > 0:  # also fill gaps of final: stale here, and disjoint from the interval
            fill = smallest_gaps(final, excess, None)
            final = final.union(fill)
            need = need.union(fill)
        copies = sourced(self.sources(locations, where), where, need, self.valid)
        nbytes = need.total
        if break_even and len(copies) > 1 and len(valid) >= SCATTER_RUNS:
            # only once reads scatter: a plain sync keeps moving exactly its stale bytes
            merged = merged_copies(copies, self.valid, break_even)
            if len(merged) < len(copies):
                copies = merged
                nbytes = sum(c.stop - c.start for c in copies)
        return Plan(tuple(copies), {where: final}, self, version, nbytes)

    def _series(
        self,
        locations: tuple[str, ...],
        version: int,
        where: str,
        valid: IntervalSet,
        start: int,
        stop: int,
        break_even: int,
    ) -> Plan | None:
        """The span copy of a scattered series of reads, if this read is one of a series and
        the cost model says the span is worth it; None otherwise (plan the read exactly).

        Ski rental: each read of the series so far paid one copy's latency; the span from the
        first to the last byte touched (this read included) is copied in one copy once its
        transfer takes no longer than the latencies paid, i.e. it spans at most
        ``paid * break_even`` bytes (then the span's copy costs at most the copies paid plus
        this read's own). Three ways a read belongs to a series:

        * ``where`` holds ``r >= SCATTER_RUNS`` runs: ``r`` copies paid;
        * ``where`` was read scattered before (:attr:`scatter`): the copies that series paid;
        * ``where`` holds one or two runs and this read opens another strictly inside the
          buffer (touching no run and neither end): then the whole location is copied if its
          transfer takes no longer than the ``r`` latencies paid. Below ``SCATTER_RUNS`` runs
          the span of two or three pieces says little about where the series goes next, so
          only the whole location is weighed; and the common exact patterns stay exact: a read
          next to a run or covering one (a growing window, a whole sync) touches a run, and a
          halo or boundary exchange touches an end.

        A chosen span is remembered in :attr:`scatter` as ``(paid, start, stop)``: a hint for
        the next time ``where`` is stale, not validity.
        """
        runs = len(valid)
        scatter = self.scatter
        plan = None
        if runs >= SCATTER_RUNS:
            paid = runs
            lo = valid._starts[0] if valid._starts[0] < start else start
            hi = valid._stops[-1] if valid._stops[-1] > stop else stop
            plan = self._span(locations, version, where, valid, paid, lo, hi, break_even)
        elif where in scatter:
            paid, lo, hi = scatter[where]
            lo = lo if lo < start else start
            hi = hi if hi > stop else stop
            plan = self._span(locations, version, where, valid, paid, lo, hi, break_even)
            if plan is not None:
                return plan  # remembered already
        if (
            plan is None
            and 0 < runs < SCATTER_RUNS
            and self._opens_interior_run(valid, start, stop)
        ):
            paid = runs
            if self.nbytes <= paid * break_even:
                plan = self._span(
                    locations, version, where, valid, paid, 0, self.nbytes, break_even
                )
        if plan is not None:
            copy = plan.copies[0]
            scatter[where] = (paid, copy.start, copy.stop)
        return plan

    def _opens_interior_run(self, valid: IntervalSet, start: int, stop: int) -> bool:
        """Whether ``[start, stop)`` and every run of ``valid`` lie strictly inside the buffer
        and the interval neither touches nor overlaps a run (it would become a run of its
        own)."""
        starts, stops = valid._starts, valid._stops
        n = self.nbytes
        if start == 0 or stop == n or starts[0] == 0 or stops[-1] == n:
            return False
        i = bisect_right(starts, start)  # runs starting at or before ``start``
        if i and stops[i - 1] >= start:
            return False
        return i == len(starts) or starts[i] > stop

    def _span(
        self,
        locations: tuple[str, ...],
        version: int,
        where: str,
        valid: IntervalSet,
        paid: int,
        lo: int,
        hi: int,
        break_even: int,
    ) -> Plan | None:
        """One copy of the span ``[lo, hi)`` widened within ``paid * break_even`` bytes, or
        None when it spans more, would leave ``where`` over the cap, or no single source holds
        it (plan the read exactly). The widening makes the series' next reads free."""
        n = self.nbytes
        budget = paid * break_even
        if hi - lo > budget:
            return None
        slack = budget - (hi - lo)
        grow_lo = min(lo, slack // 2)
        grow_hi = min(n - hi, slack - grow_lo)
        lo, hi = lo - grow_lo, hi + grow_hi
        lo = max(0, lo - (slack - grow_lo - grow_hi))
        final = with_span(valid, lo, hi)
        if len(final) > self.max_runs:
            return None
        for source in self.sources(locations, where):
            if source != where and self.valid[source].contains(lo, hi):
                break
        else:  # no single source holds the span: copy the pieces
            return None
        copy = new_copy(Copy, (source, where, lo, hi))
        return Plan((copy,), {where: final}, self, version, hi - lo)

    # -- consolidations --------------------------------------------------------------------

    def consolidate(self, locations: tuple[str, ...], version: int) -> Plan:
        """The plan of :meth:`BufferState.plan_consolidate` when some location holds more
        than :attr:`max_runs` runs."""
        before = self.valid
        after, need = consolidated(locations, before, self.max_runs)
        copies: list[Copy] = []
        for loc in locations:
            if loc in need:
                copies.extend(sourced(self.sources(locations, loc), loc, need[loc], before))
        changed = {loc: s for loc, s in after.items() if s != before[loc]}
        return Plan(tuple(copies), changed, self, version)
