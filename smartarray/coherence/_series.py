"""Scattered series of reads: when one copy of a span beats one copy per read (ski rental).

The planner of :class:`~smartarray.coherence.BufferState` asks :func:`plan_series` first, on
its slow path, whenever the transfer cost model allows copying valid bytes; ``None`` means
"plan the read exactly". See "The transfer cost model" in :mod:`smartarray.coherence`. Pure
Python, standard library only.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from ._intervals import IntervalSet, with_span
from ._plan import Copy, Plan, new_copy

if TYPE_CHECKING:
    from ._state import BufferState

__all__ = ["SCATTER_RUNS", "plan_series"]

SCATTER_RUNS = 3
"""Runs in a location's valid set from which any read counts as one of a scattered series.

Reads that leave a location with this many separate runs have each paid a copy's latency; from
here the planner weighs copying the whole span they touch (see :meth:`BufferState.plan_read`).
With one or two runs, a halo at each end or one window are common exact patterns: there only a
read that opens a new run strictly inside the buffer, away from every run, counts, and only the
whole location's copy is weighed.
"""


def plan_series(
    state: BufferState, where: str, valid: IntervalSet, start: int, stop: int, break_even: int
) -> Plan | None:
    """The span copy of a scattered series of reads, if this read is one of a series and the
    cost model says the span is worth it; None otherwise (plan the read exactly).

    Ski rental: each read of the series so far paid one copy's latency; the span from the first
    to the last byte touched (this read included) is copied in one copy once its transfer takes
    no longer than the latencies paid, i.e. it spans at most ``paid * break_even`` bytes (then
    the span's copy costs at most the copies paid plus this read's own). Three ways a read
    belongs to a series:

    * ``where`` holds ``r >= SCATTER_RUNS`` runs: ``r`` copies paid;
    * ``where`` was read scattered before (``state._scatter``): the copies that series paid;
    * ``where`` holds one or two runs and this read opens another strictly inside the buffer
      (touching no run and neither end): then the whole location is copied if its transfer
      takes no longer than the ``r`` latencies paid. Below ``SCATTER_RUNS`` runs the span of
      two or three pieces says little about where the series goes next, so only the whole
      location is weighed; and the common exact patterns stay exact: a read next to a run or
      covering one (a growing window, a whole sync) touches a run, and a halo or boundary
      exchange touches an end.

    A chosen span is remembered in ``state._scatter`` as ``(paid, start, stop)``: a hint for
    the next time ``where`` is stale, not validity.
    """
    runs = len(valid)
    scatter = state._scatter
    plan = None
    if runs >= SCATTER_RUNS:
        paid = runs
        lo = valid._starts[0] if valid._starts[0] < start else start
        hi = valid._stops[-1] if valid._stops[-1] > stop else stop
        plan = _plan_span(state, where, valid, paid, lo, hi, break_even)
    elif where in scatter:
        paid, lo, hi = scatter[where]
        lo = lo if lo < start else start
        hi = hi if hi > stop else stop
        plan = _plan_span(state, where, valid, paid, lo, hi, break_even)
        if plan is not None:
            return plan  # remembered already
    if plan is None and 0 < runs < SCATTER_RUNS and _opens_interior_run(state, valid, start, stop):
        paid = runs
        if state._nbytes <= paid * break_even:
            plan = _plan_span(state, where, valid, paid, 0, state._nbytes, break_even)
    if plan is not None:
        copy = plan.copies[0]
        scatter[where] = (paid, copy.start, copy.stop)
    return plan


def _opens_interior_run(state: BufferState, valid: IntervalSet, start: int, stop: int) -> bool:
    """Whether ``[start, stop)`` and every run of ``valid`` lie strictly inside the buffer and
    the interval neither touches nor overlaps a run (it would become a run of its own)."""
    starts, stops = valid._starts, valid._stops
    n = state._nbytes
    if start == 0 or stop == n or starts[0] == 0 or stops[-1] == n:
        return False
    i = bisect_right(starts, start)  # runs starting at or before ``start``
    if i and stops[i - 1] >= start:
        return False
    return i == len(starts) or starts[i] > stop


def _plan_span(
    state: BufferState,
    where: str,
    valid: IntervalSet,
    paid: int,
    lo: int,
    hi: int,
    break_even: int,
) -> Plan | None:
    """One copy of the span ``[lo, hi)`` widened within ``paid * break_even`` bytes, or None
    when it spans more, would leave ``where`` over the cap, or no single source holds it (plan
    the read exactly). The widening makes the series' next reads free."""
    n = state._nbytes
    budget = paid * break_even
    if hi - lo > budget:
        return None
    slack = budget - (hi - lo)
    grow_lo = min(lo, slack // 2)
    grow_hi = min(n - hi, slack - grow_lo)
    lo, hi = lo - grow_lo, hi + grow_hi
    lo = max(0, lo - (slack - grow_lo - grow_hi))
    final = with_span(valid, lo, hi)
    if len(final) > state._max_runs:
        return None
    for source in state.sources(where):
        if source != where and state._valid[source].contains(lo, hi):
            break
    else:  # no single source holds the span: copy the pieces
        return None
    copy = new_copy(Copy, (source, where, lo, hi))
    return Plan((copy,), {where: final}, state, state._version, hi - lo)
