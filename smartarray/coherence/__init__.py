"""Byte-interval sets and the per-buffer validity state machine.

One private module per concept: ``_intervals.py`` (:class:`IntervalSet`), ``_plan.py``
(:class:`Plan`, :class:`Copy`), ``_cost.py`` (:class:`TransferCost`, the process-wide model),
``_state.py`` (:class:`BufferState`) and ``_planning.py`` (the planner a state holds: the copies
of a read with stale bytes, of a consolidation, of a scattered series of reads); the public
names are the ones exported here.

This package is the heart of smartarray's coherence model (see "The coherence model" in
``docs/user_guide.rst``). It is pure Python: it imports nothing from NumPy, Numba or the rest
of the package, and it never touches memory. It only decides *which* bytes must move and
records *where* bytes are current.

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

The transfer cost model
-----------------------
Each state plans with a :class:`TransferCost` (its own, or the process-wide one:
:func:`transfer_cost`, :func:`set_transfer_cost`): a copy costs ``latency_s + nbytes /
bandwidth_Bps``. It decides two things in :meth:`BufferState.plan_read`, both conservative
(only bytes copied become valid, every copy reads bytes valid at its source):

* merging: once the target holds ``SCATTER_RUNS`` runs or more, two copies of one plan from
  the same source become one when the bytes between them number fewer than
  :attr:`TransferCost.break_even_bytes` and are valid at both the source and the target. The
  merged copy rewrites those target bytes with the value they already hold, so no valid set
  changes (this and the span copy below are the only copies that land on valid bytes);
* scattered reads (ski rental): when the target already holds ``r >= SCATTER_RUNS`` runs (each
  paid a copy's latency), the read copies, in one copy from one source, the span from the first
  to the last byte touched, widened up to ``r * break_even_bytes``, if that span's transfer
  takes no longer than those ``r`` latencies. From the second read of a series on, with one or
  two runs (``r < SCATTER_RUNS``), a read that opens a new run strictly inside the buffer
  (touching no run and neither end) copies the whole location instead when its transfer takes
  no longer than those ``r`` latencies; a read next to or over a run (a growing window, a whole
  sync) and a read or run at an end (a halo) stay exact. The state remembers ``(r, span)`` for
  that location; the next time it is stale, its first read copies the span at once if that
  still costs at most ``r`` latencies. The span's one copy thus costs at most the ``r`` copies
  paid plus the read's own, and a scattered series costs at most about twice the better of
  "one exact copy per read" and "one whole copy", then once the whole copy per round.

With a model whose latency is worth no bytes (``break_even_bytes == 0``) every plan is exact, as
described above, up to the cap.

Bound on the extra bytes (exact model). A set in ``[0, n)`` with ``m + k`` runs has
``m + k - 1`` gaps between its runs, holding together at most ``n - |V|`` bytes that are stale
at that location. Filling the ``k`` cheapest of them copies at most
``k * (n - |V|) / (m + k - 1) < k * n / m`` extra bytes. When the cap holds before each
operation (the caller runs ``plan_consolidate`` right after every ``mark_changed``),
``k <= 1``, so:

* a ``plan_read`` copies at most ``n / max_runs`` bytes beyond the stale bytes it needs;
* a ``plan_consolidate`` copies at most ``n / max_runs`` bytes into each location that is over the
  cap, i.e. at most ``len(locations) * n / max_runs`` bytes in all.
"""

from ._cost import (
    DEFAULT_TRANSFER_COST,
    NVLINK_C2C,
    PCIE5_X16,
    TransferCost,
    set_transfer_cost,
    transfer_cost,
)
from ._intervals import IntervalSet
from ._plan import EMPTY_PLAN, Copy, Plan, StalePlanError
from ._state import DEFAULT_MAX_RUNS, SCATTER_RUNS, BufferState

__all__ = [
    "DEFAULT_MAX_RUNS",
    "DEFAULT_TRANSFER_COST",
    "EMPTY_PLAN",
    "NVLINK_C2C",
    "PCIE5_X16",
    "SCATTER_RUNS",
    "BufferState",
    "Copy",
    "IntervalSet",
    "Plan",
    "StalePlanError",
    "TransferCost",
    "set_transfer_cost",
    "transfer_cost",
]
