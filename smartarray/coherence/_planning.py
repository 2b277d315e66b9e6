"""How a :class:`~smartarray.coherence.BufferState` plans a read that has stale bytes, and a
consolidation.

Bound in ``BufferState``'s class body (the fast path of ``plan_read``, an already current
interval, stays there). Pure Python, standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._cost import _current
from ._intervals import IntervalSet, smallest_gaps, with_span
from ._plan import EMPTY_PLAN, Copy, Plan, consolidated, merged_copies, sourced
from ._series import SCATTER_RUNS, plan_series

if TYPE_CHECKING:  # pragma: no cover
    from ._state import BufferState

__all__ = ["plan_consolidate", "plan_read_slow"]


def plan_read_slow(
    self: BufferState, where: str, valid: IntervalSet, start: int, stop: int, coalesce: bool
) -> Plan:
    break_even = self._break_even  # bytes worth one copy's latency; 0: exact copies
    if break_even < 0:
        break_even = _current[1]
    if not coalesce:
        break_even = 0  # exact copies: nothing valid at ``where`` is rewritten
    if break_even:
        plan = plan_series(self, where, valid, start, stop, break_even)
        if plan is not None:
            return plan
    final = with_span(valid, start, stop)
    need = valid.gaps(start, stop)  # the stale bytes of the interval
    excess = len(final) - self._max_runs
    if excess > 0:  # also fill gaps of final: stale here, and disjoint from the interval
        fill = smallest_gaps(final, excess, None)
        final = final.union(fill)
        need = need.union(fill)
    copies = sourced(self.sources(where), where, need, self._valid)
    nbytes = need.total
    if break_even and len(copies) > 1 and len(valid) >= SCATTER_RUNS:
        # only once reads scatter: a plain sync keeps moving exactly its stale bytes
        merged = merged_copies(copies, self._valid, break_even)
        if len(merged) < len(copies):
            copies = merged
            nbytes = sum(c.stop - c.start for c in copies)
    return Plan(tuple(copies), {where: final}, self, self._version, nbytes)


def plan_consolidate(self: BufferState) -> Plan:
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
    after, need = consolidated(self._locations, before, m)
    copies: list[Copy] = []
    for loc in self._locations:
        if loc in need:
            copies.extend(sourced(self.sources(loc), loc, need[loc], before))
    changed = {loc: s for loc, s in after.items() if s != before[loc]}
    return Plan(tuple(copies), changed, self, self._version)
