"""Plans: the copies that take a buffer's validity state to a new state.

A :class:`Plan` is made by :class:`~smartarray.coherence.BufferState` (``plan_read``,
``plan_consolidate``), performed by the caller (its :class:`Copy` operations) and then applied.
The computations behind those plans live here too: :func:`sourced` (which location each stale
byte is copied from) and :func:`consolidated` (bringing valid sets back within the run cap).
Pure Python, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from ._intervals import EMPTY_SET, IntervalSet, covers, runs_set, smallest_gaps

__all__ = [
    "EMPTY_PLAN",
    "Copy",
    "Plan",
    "StalePlanError",
    "consolidated",
    "copy_start",
    "merged_copies",
    "new_copy",
    "sourced",
]


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
        owner: object = None,  # the planner of the BufferState that made it (by identity)
        version: int = -1,
        nbytes: int | None = None,
    ) -> None:
        self._copies = copies
        self._nbytes = sum(c.stop - c.start for c in copies) if nbytes is None else nbytes
        self._new_valid = new_valid if new_valid is not None else {}
        self._owner = owner
        self._version = version

    # Read on every coherence step: a C getter (``attrgetter``) makes no Python call.
    if TYPE_CHECKING:

        @property
        def copies(self) -> tuple[Copy, ...]: ...

    else:
        copies = property(
            attrgetter("_copies"),
            doc="tuple of Copy: the copies to perform before :meth:`BufferState.apply`.",
        )

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


new_copy = tuple.__new__  # Copy(...) without the NamedTuple's Python-level __new__


def copy_start(copy: Copy) -> int:
    return copy.start


def sourced(
    locations: tuple[str, ...], target: str, need: IntervalSet, valid: Mapping[str, IntervalSet]
) -> list[Copy]:
    """Split ``need`` (stale at ``target``) into copies from where each byte is ``valid``.

    Sources are taken in ``locations`` order (the order of preference); the copies come out
    ordered by offset.
    """
    copies: list[Copy] = []
    sources = 0
    for source in locations:
        if source == target:
            continue
        have = valid[source]
        if covers(have, need):  # always, with two locations
            take, need = need, EMPTY_SET
        else:
            take = need.intersection(have)
            need = need.difference(take)
        if take:
            sources += 1
            for a, b in zip(take._starts, take._stops, strict=True):
                copies.append(new_copy(Copy, (source, target, a, b)))
        if not need:
            break
    if need:  # pragma: no cover - only reachable if the invariant was broken
        raise RuntimeError(f"coherence invariant broken: bytes {need!r} are valid nowhere")
    if sources > 1:
        copies.sort(key=copy_start)
    return copies


def merged_copies(
    copies: list[Copy], valid: Mapping[str, IntervalSet], break_even_bytes: int
) -> list[Copy]:
    """Merge consecutive copies (ordered by offset, one target) across short gaps.

    Two copies from the same source become one when the bytes between them number fewer than
    ``break_even_bytes`` (moving them costs less than one more copy's latency) and are valid at
    both the source and the target: the merged copy rewrites those target bytes with the value
    they already hold, so no valid set changes and no copy overlaps another.
    """
    out = [copies[0]]
    for c in copies[1:]:
        last = out[-1]
        gap_a, gap_b = last.stop, c.start
        if (
            last.source == c.source
            and gap_b - gap_a < break_even_bytes
            and valid[c.target].contains(gap_a, gap_b)
            and valid[c.source].contains(gap_a, gap_b)
        ):
            out[-1] = new_copy(Copy, (last.source, last.target, last.start, c.stop))
        else:
            out.append(c)
    return out


def consolidated(
    locations: tuple[str, ...], before: Mapping[str, IntervalSet], max_runs: int
) -> tuple[dict[str, IntervalSet], dict[str, IntervalSet]]:
    """The valid sets ``before`` brought back within ``max_runs`` runs each, and the bytes that
    must be copied into each location for that: ``(after, need)``.

    For each location over the cap, its smallest runs whose bytes are also valid elsewhere are
    dropped first (free); if that is not enough, the gaps cheapest to copy are filled.
    """
    after = dict(before)
    need: dict[str, IntervalSet] = {}
    for loc in locations:
        current = after[loc]
        excess = len(current) - max_runs
        if excess <= 0:
            continue
        elsewhere = EMPTY_SET
        for other in locations:
            if other != loc:
                elsewhere = elsewhere.union(after[other])
        droppable = sorted(
            (b - a, a, b)
            for a, b in zip(current._starts, current._stops, strict=True)
            if elsewhere.contains(a, b)
        )[:excess]
        kept = current
        if droppable:
            kept = current.difference(runs_set(droppable))
        fills = excess - len(droppable)
        if fills > 0:
            kept = kept.union(smallest_gaps(kept, fills, current))
            stale = kept.difference(current)
            if stale:
                need[loc] = stale
        after[loc] = kept
    return after, need
