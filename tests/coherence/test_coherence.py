"""Tests for smartarray.coherence: interval algebra and the validity state machine.

The interval algebra is checked against Python sets of integers; the state machine against a
byte-level reference model that tracks, for every byte, the current version and the version
each location's copy holds, and simulates every copy a plan asks for.
"""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import tracemalloc

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from smartarray.coherence import (
    DEFAULT_MAX_RUNS,
    DEFAULT_TRANSFER_COST,
    EMPTY_PLAN,
    NVLINK_C2C,
    PCIE5_X16,
    SCATTER_RUNS,
    BufferState,
    Copy,
    IntervalSet,
    Plan,
    StalePlanError,
    TransferCost,
    set_transfer_cost,
    transfer_cost,
)

# ---------------------------------------------------------------------------------------------
# helpers


def as_set(s: IntervalSet) -> set[int]:
    return {b for a, e in s.runs for b in range(a, e)}


def runs_of(offsets: set[int]) -> list[tuple[int, int]]:
    """The maximal runs of a set of integers."""
    out: list[list[int]] = []
    for b in sorted(offsets):
        if out and out[-1][1] == b:
            out[-1][1] = b + 1
        else:
            out.append([b, b + 1])
    return [(a, e) for a, e in out]


def assert_normalised(s: IntervalSet) -> None:
    runs = s.runs
    assert isinstance(runs, tuple)
    for a, e in runs:
        assert type(a) is int and type(e) is int
        assert 0 <= a < e
    for (_, e1), (a2, _) in itertools.pairwise(runs):
        assert e1 < a2, f"runs not sorted/disjoint/merged: {runs}"
    assert len(s) == len(runs)
    assert s.total == sum(e - a for a, e in runs)
    assert bool(s) == bool(runs)
    assert list(s) == list(runs)


LIMIT = 40
run_st = st.tuples(st.integers(0, LIMIT), st.integers(0, LIMIT)).map(lambda t: (min(t), max(t)))
runs_st = st.lists(run_st, max_size=8)
interval_st = st.tuples(st.integers(0, LIMIT + 5), st.integers(0, LIMIT + 5)).map(
    lambda t: (min(t), max(t))
)


def snapshot(state: BufferState) -> tuple:
    return (
        {loc: state.valid(loc) for loc in state.locations},
        state.version,
        repr(state),
    )


# ---------------------------------------------------------------------------------------------
# the module


def test_module_is_pure_python_stdlib_only():
    """The coherence package loads on its own and pulls in nothing from NumPy, Numba or the
    rest of smartarray (loaded from its files as a top-level package, not through smartarray).
    """
    import smartarray.coherence as coherence

    package_dir = os.path.dirname(coherence.__file__)
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location(\n"
        f"    'coherence', {coherence.__file__!r}, submodule_search_locations=[{package_dir!r}])\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "sys.modules['coherence'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "assert mod.BufferState(8).plan_read('gpu') is mod.EMPTY_PLAN\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('numpy', 'numba', 'smartarray')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# IntervalSet


@given(runs_st)
def test_from_runs_normalises(runs):
    s = IntervalSet.from_runs(runs)
    assert_normalised(s)
    expected = {b for a, e in runs for b in range(a, e)}
    assert as_set(s) == expected
    assert list(s.runs) == runs_of(expected)
    assert s.total == len(expected)
    assert s == IntervalSet(runs) == IntervalSet(runs_of(expected))
    assert hash(s) == hash(IntervalSet(runs_of(expected)))
    assert eval(repr(s)) == s


@given(runs_st, runs_st)
def test_algebra_matches_python_sets(r1, r2):
    a, b = IntervalSet.from_runs(r1), IntervalSet.from_runs(r2)
    sa, sb = as_set(a), as_set(b)
    for result, expected in [
        (a | b, sa | sb),
        (a.union(b), sa | sb),
        (a - b, sa - sb),
        (a.difference(b), sa - sb),
        (a & b, sa & sb),
        (a.intersection(b), sa & sb),
    ]:
        assert_normalised(result)
        assert as_set(result) == expected
    assert (a == b) == (sa == sb)


@given(runs_st, run_st)
def test_algebra_with_one_run_matches_python_sets(runs, run):
    # union and difference with a single run take a bisection shortcut
    a, b = IntervalSet.from_runs(runs), IntervalSet.span(*run)
    sa, sb = as_set(a), as_set(b)
    cases = [(a | b, sa | sb), (b | a, sa | sb), (a - b, sa - sb), (a & b, sa & sb)]
    for result, expected in cases:
        assert_normalised(result)
        assert as_set(result) == expected
    if sb <= sa:
        assert a | b == a
    if not sa & sb:
        assert a - b == a


@given(runs_st, interval_st)
def test_contains_and_gaps_match_python_sets(runs, interval):
    s = IntervalSet.from_runs(runs)
    start, stop = interval
    covered = as_set(s)
    span = set(range(start, stop))
    assert s.contains(start, stop) == (span <= covered)
    gaps = s.gaps(start, stop)
    assert_normalised(gaps)
    assert as_set(gaps) == span - covered
    for b in range(LIMIT + 2):
        assert (b in s) == (b in covered)


@given(st.integers(0, LIMIT), st.integers(0, LIMIT))
def test_span(start, stop):
    s = IntervalSet.span(start, stop)
    assert_normalised(s)
    assert as_set(s) == set(range(start, stop))


def test_interval_set_basics():
    empty = IntervalSet()
    assert not empty and len(empty) == 0 and empty.total == 0 and empty.runs == ()
    assert empty == IntervalSet.span(3, 3) == IntervalSet.span(5, 2) == IntervalSet([(4, 4)])
    assert empty.contains(3, 3) and not empty.contains(3, 4)
    assert empty.gaps(2, 5) == IntervalSet.span(2, 5)
    s = IntervalSet([(0, 2), (2, 4), (6, 8)])
    assert s.runs == ((0, 4), (6, 8)) and len(s) == 2 and s.total == 6
    assert repr(s) == "IntervalSet([(0, 4), (6, 8)])"
    assert "x" not in s and 1.5 not in s and 3 in s and 4 not in s
    assert s != s.runs  # not equal to a plain tuple
    assert {s, IntervalSet([(6, 8), (0, 4)])} == {s}
    with pytest.raises(TypeError):
        s | s.runs  # noqa: B018


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: IntervalSet([(-1, 3)]), "runs"),
        (lambda: IntervalSet([(5, 3)]), "runs"),
        (lambda: IntervalSet.from_runs([(0, 2), (3, -4)]), "runs"),
        (lambda: IntervalSet.span(-1, 3), "start"),
        (lambda: IntervalSet.span(0, -3), "stop"),
        (lambda: IntervalSet.span(0, 4).contains(-1, 2), "start"),
        (lambda: IntervalSet.span(0, 4).contains(3, 2), "start"),
        (lambda: IntervalSet.span(0, 4).gaps(3, 2), "start"),
        (lambda: IntervalSet.span(0, 4).gaps(-2, 2), "start"),
    ],
)
def test_interval_set_errors(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_interval_set_type_errors():
    with pytest.raises(TypeError, match="runs"):
        IntervalSet([(0, 1.5)])
    with pytest.raises(TypeError, match="runs"):
        IntervalSet([3])
    with pytest.raises(TypeError, match="start"):
        IntervalSet.span("0", 3)


# ---------------------------------------------------------------------------------------------
# BufferState: construction, simple transitions, errors


def test_initial_states():
    s = BufferState(16)
    assert s.locations == ("host", "gpu") and s.nbytes == 16 and s.max_runs == DEFAULT_MAX_RUNS
    assert s.valid("host") == s.valid("gpu") == IntervalSet.span(0, 16)
    assert s.plan_read("gpu") is EMPTY_PLAN

    s = BufferState(16, valid_at="gpu")
    assert s.valid("host") == IntervalSet() and s.valid("gpu") == IntervalSet.span(0, 16)
    assert s.is_valid("gpu") and not s.is_valid("host") and s.is_valid("host", 3, 3)

    s = BufferState(16, locations=("host", "gpu0", "gpu1"), valid_at="gpu1")
    assert s.run_counts() == {"host": 0, "gpu0": 0, "gpu1": 1}
    plan = s.plan_read("gpu0", 2, 5)
    assert plan.copies == (Copy("gpu1", "gpu0", 2, 5),) and plan.nbytes == 3


# explicit ids: a bare "gpu" id would become a keyword and trip the conftest's gpu-marker skip
@pytest.mark.parametrize("valid_at", [None, "host", "gpu"], ids=["uninit", "at_host", "at_device"])
def test_zero_bytes(valid_at):
    s = BufferState(0, valid_at=valid_at)
    for loc in s.locations:
        assert s.is_valid(loc) and s.plan_read(loc) is EMPTY_PLAN
        s.mark_changed(loc)
    assert s.plan_consolidate() is EMPTY_PLAN
    with pytest.raises(ValueError, match="stop"):
        s.plan_read("host", 0, 1)


def test_read_write_cycle():
    s = BufferState(100, valid_at="host")
    plan = s.plan_read("gpu", 10, 20)
    assert plan and plan.copies == (Copy("host", "gpu", 10, 20),)
    assert plan.new_valid == {"gpu": IntervalSet.span(10, 20)}
    assert "Copy" in repr(plan) and repr(EMPTY_PLAN) == "Plan(<empty>)"
    s.apply(plan)
    assert s.valid("gpu") == IntervalSet.span(10, 20)
    s.mark_changed("gpu", 15, 30)
    assert s.valid("gpu") == IntervalSet.span(10, 30)
    assert s.valid("host") == IntervalSet([(0, 15), (30, 100)])
    assert s.plan_consolidate() is EMPTY_PLAN
    plan = s.plan_read("host")
    assert plan.copies == (Copy("gpu", "host", 15, 30),)
    s.apply(plan)
    assert s.is_valid("host") and "host" in repr(s)
    s.apply(EMPTY_PLAN)  # no-op


def test_sources_split_and_preferred_in_location_order():
    s = BufferState(30, locations=("a", "b", "c"), valid_at="c")
    s.apply(s.plan_read("b", 0, 20))
    s.apply(s.plan_read("a", 0, 5))
    s.mark_changed("b", 10, 15)  # c is stale on [10, 15)
    plan = s.plan_read("a", 0, 30)
    assert plan.copies == (
        Copy("b", "a", 5, 20),
        Copy("c", "a", 20, 30),
    )


def test_read_fills_smallest_gap_at_cap():
    s = BufferState(100, valid_at="host", max_runs=2)
    s.apply(s.plan_read("gpu", 0, 10))
    s.apply(s.plan_read("gpu", 20, 30))
    plan = s.plan_read("gpu", 33, 40)  # would make 3 runs: fill the smaller gap [30, 33)
    assert plan.copies == (Copy("host", "gpu", 30, 40),)
    s.apply(plan)
    assert s.valid("gpu") == IntervalSet([(0, 10), (20, 40)])


def test_consolidate_drops_before_filling():
    # uninitialised: the gpu holds everything, so the host's smallest run is dropped for free
    s = BufferState(100, valid_at=None, max_runs=2)
    s.mark_changed("gpu", 10, 20)
    s.mark_changed("gpu", 50, 60)
    assert s.run_counts() == {"host": 3, "gpu": 1}
    plan = s.plan_consolidate()
    assert plan and plan.copies == () and plan.nbytes == 0
    s.apply(plan)
    assert s.valid("host") == IntervalSet([(20, 50), (60, 100)])
    assert s.plan_consolidate() is EMPTY_PLAN

    # host-only start: every host run is valid only there, so fill the cheapest gap instead
    s = BufferState(100, valid_at="host", max_runs=2)
    s.mark_changed("gpu", 10, 20)
    s.mark_changed("gpu", 50, 60)
    plan = s.plan_consolidate()
    assert plan.copies == (Copy("gpu", "host", 10, 20),)
    s.apply(plan)
    assert s.valid("host") == IntervalSet([(0, 50), (60, 100)])
    assert s.plan_consolidate() is EMPTY_PLAN


def test_consolidate_never_drops_the_last_valid_copy():
    # [0, 10) and [20, 30) are valid on a and b only; both are over the cap of 1 run. Each may
    # drop a run held by the other, but not both the same one.
    s = BufferState(30, locations=("a", "b", "c"), valid_at="a", max_runs=1)
    s.apply(s.plan_read("b"))
    s.mark_changed("c", 10, 20)
    assert s.run_counts() == {"a": 2, "b": 2, "c": 1}
    plan = s.plan_consolidate()
    assert plan.copies == ()
    s.apply(plan)
    assert s.valid("a") == IntervalSet.span(20, 30)
    assert s.valid("b") == IntervalSet.span(0, 10)
    assert s.valid("c") == IntervalSet.span(10, 20)


def test_stale_and_foreign_plans():
    s = BufferState(64, valid_at="host")
    p1 = s.plan_read("gpu", 0, 8)
    p2 = s.plan_read("host", 0, 8)
    assert p2 is EMPTY_PLAN
    p3 = s.plan_read("gpu", 8, 16)
    s.apply(p1)
    before = snapshot(s)
    with pytest.raises(StalePlanError):
        s.apply(p1)  # twice
    with pytest.raises(StalePlanError, match="version"):
        s.apply(p3)
    assert isinstance(StalePlanError(), RuntimeError)
    assert snapshot(s) == before
    other = BufferState(64, valid_at="host")
    with pytest.raises(ValueError, match="another BufferState"):
        other.apply(s.plan_read("gpu", 8, 16))
    with pytest.raises(ValueError):
        s.apply(Plan((Copy("host", "gpu", 0, 64),), {"gpu": IntervalSet.span(0, 64)}))
    with pytest.raises(TypeError):
        s.apply(None)
    p4 = s.plan_read("gpu", 8, 16)
    s.mark_changed("host", 0, 1)
    with pytest.raises(StalePlanError):
        s.apply(p4)
    assert snapshot(s)[0]["gpu"] == IntervalSet.span(1, 8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nbytes": -1}, "nbytes"),
        ({"nbytes": 8, "valid_at": "cpu"}, "valid_at.*'host'"),
        ({"nbytes": 8, "locations": ()}, "locations"),
        ({"nbytes": 8, "locations": ("host", "host")}, "locations"),
        ({"nbytes": 8, "max_runs": 0}, "max_runs"),
    ],
)
def test_constructor_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BufferState(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nbytes": 8.0}, "nbytes"),
        ({"nbytes": 8, "locations": "host"}, "locations"),
        ({"nbytes": 8, "locations": ("host", 1)}, "locations"),
        ({"nbytes": 8, "max_runs": 2.5}, "max_runs"),
    ],
)
def test_constructor_type_errors(kwargs, match):
    with pytest.raises(TypeError, match=match):
        BufferState(**kwargs)


METHODS = ["is_valid", "plan_read", "mark_changed"]


@pytest.mark.parametrize("method", METHODS + ["valid"])
@pytest.mark.parametrize("where", ["cpu", None, 0, ["host"]])
def test_bad_where_changes_nothing(method, where):
    s = BufferState(32, valid_at="host")
    s.mark_changed("gpu", 4, 8)
    before = snapshot(s)
    with pytest.raises(ValueError, match="where.*'host', 'gpu'"):
        getattr(s, method)(where)
    assert snapshot(s) == before


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("interval", [(-1, 4), (0, 33), (5, 4), (33, None), (-3, -1)])
def test_bad_interval_changes_nothing(method, interval):
    s = BufferState(32, valid_at="host")
    s.mark_changed("gpu", 4, 8)
    before = snapshot(s)
    with pytest.raises(ValueError, match=r"start.*stop"):
        getattr(s, method)("gpu", *interval)
    assert snapshot(s) == before


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("interval", [("0", 4), (0, 2.5), (None, 3)])
def test_non_integer_interval_changes_nothing(method, interval):
    s = BufferState(32, valid_at="host")
    before = snapshot(s)
    with pytest.raises((TypeError, ValueError), match="start|stop"):
        getattr(s, method)("gpu", *interval)
    assert snapshot(s) == before


# ---------------------------------------------------------------------------------------------
# the fast path


# Copies planned exactly (no cost-based coalescing): a copy's latency is worth no bytes.
EXACT = TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)


def _fragmented_state() -> BufferState:
    s = BufferState(1 << 20, valid_at="host", cost=EXACT)
    for k in range(DEFAULT_MAX_RUNS):
        s.apply(s.plan_read("gpu", k * 1000, k * 1000 + 500))
    assert s.run_counts()["gpu"] == DEFAULT_MAX_RUNS
    return s


def test_fast_path_returns_the_shared_empty_plan():
    s = _fragmented_state()
    assert s.plan_read("gpu", 3100, 3400) is EMPTY_PLAN
    assert s.plan_read("gpu", 7000, 7500) is EMPTY_PLAN
    assert s.plan_read("host") is EMPTY_PLAN
    assert s.plan_read("gpu", 5, 5) is EMPTY_PLAN
    assert not EMPTY_PLAN and EMPTY_PLAN.copies == () and EMPTY_PLAN.nbytes == 0
    assert s.plan_read("gpu", 3100, 3600) is not EMPTY_PLAN


def _peak_bytes_allocated(call, n: int = 2000) -> int:
    """Peak traced memory above the baseline while running ``call()`` n times."""
    repeat = itertools.repeat
    was_enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        for _ in repeat(None, 50):  # warm up (specialisation, caches)
            call()
        calls = repeat(None, n)  # allocated before the baseline
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in calls:
            call()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
        if was_enabled:
            gc.enable()


def _blocks_leaked(call, n: int = 20000) -> int:
    repeat = itertools.repeat
    for _ in repeat(None, 100):
        call()
    before = sys.getallocatedblocks()
    for _ in repeat(None, n):
        call()
    return sys.getallocatedblocks() - before


def test_fast_path_does_not_allocate():
    s = _fragmented_state()
    plan_read, is_valid = s.plan_read, s.is_valid

    def fast():
        plan_read("gpu", 3100, 3400)
        plan_read("host", 17, 70000)
        is_valid("gpu", 6000, 6500)
        is_valid("host")

    def slow():  # the detector must see the slow path allocate
        plan_read("gpu", 3100, 3600)

    def nothing():
        pass

    # The peak of traced memory catches even an object freed at once. Compare with the same
    # harness around a function that does nothing, so a tracer (coverage) cannot fool us.
    baseline = _peak_bytes_allocated(nothing)
    assert _peak_bytes_allocated(slow, 20) > baseline + 100  # the detector works
    assert _peak_bytes_allocated(fast) <= baseline
    assert _blocks_leaked(fast) < 50


# ---------------------------------------------------------------------------------------------
# the state machine against a byte-level reference model


def copy_bytes(c: Copy) -> set[int]:
    return set(range(c.start, c.stop))


class CoherenceMachine(RuleBasedStateMachine):
    """Drive a BufferState with reads, writes and consolidations; simulate every byte."""

    @initialize(
        nbytes=st.integers(0, 64),
        nlocs=st.sampled_from([2, 3]),
        max_runs=st.one_of(st.integers(1, 4), st.just(DEFAULT_MAX_RUNS)),
        start=st.integers(-1, 2),
        # exact copies, or a latency worth 1 to 16 bytes (buffers here are tiny)
        break_even=st.one_of(st.just(0), st.integers(1, 16)),
    )
    def setup(self, nbytes, nlocs, max_runs, start, break_even):
        self.locs = ("host", "gpu", "gpu1")[:nlocs]
        valid_at = None if start < 0 or start >= nlocs else self.locs[start]
        cost = EXACT if break_even == 0 else TransferCost(break_even * 1e-9, 1e9)
        self.exact = break_even == 0
        self.state = BufferState(nbytes, self.locs, valid_at=valid_at, max_runs=max_runs, cost=cost)
        self.n, self.m = nbytes, max_runs
        self.clock = 0
        self.true = [0] * nbytes
        # garbage is version -1; uninitialised memory is "current" everywhere (version 0)
        self.held = {loc: [0 if valid_at in (None, loc) else -1] * nbytes for loc in self.locs}
        self.within_cap = True
        note(f"BufferState({nbytes}, {self.locs}, valid_at={valid_at!r}, max_runs={max_runs})")

    # -- helpers ---------------------------------------------------------------------------

    def draw_interval(self, data) -> tuple[int, int]:
        # mostly short intervals, which fragment the valid sets and exercise the cap
        start = data.draw(st.integers(0, self.n), label="start")
        length = data.draw(
            st.one_of(st.integers(0, 6), st.integers(0, self.n - start)), label="length"
        )
        return start, min(start + length, self.n)

    def check_copies(self, plan: Plan) -> dict[str, set[int]]:
        """Check a plan's copies against the state before applying; return bytes per target."""
        into: dict[str, set[int]] = {loc: set() for loc in self.locs}
        seen: set[tuple[str, int]] = set()
        for c in plan.copies:
            assert isinstance(c, Copy)
            assert c.source in self.locs and c.target in self.locs and c.source != c.target
            assert 0 <= c.start < c.stop <= self.n
            span = IntervalSet.span(c.start, c.stop)
            assert self.state.valid(c.source).contains(c.start, c.stop), (
                f"{c} copies from bytes not valid at the source"
            )
            if self.exact:  # a cost model may rewrite bytes valid at both ends (merged copies)
                assert not (span & self.state.valid(c.target)), f"{c} copies into valid bytes"
            for b in range(c.start, c.stop):
                assert (c.target, b) not in seen, f"{c} overlaps another copy"
                seen.add((c.target, b))
            into[c.target] |= copy_bytes(c)
        assert plan.nbytes == sum(c.stop - c.start for c in plan.copies)
        # adjacent copies from the same source into the same target are coalesced
        by_pair = sorted(plan.copies, key=lambda c: (c.source, c.target, c.start))
        for c1, c2 in itertools.pairwise(by_pair):
            if (c1.source, c1.target) == (c2.source, c2.target):
                assert c1.stop < c2.start, f"{c1} and {c2} should be one copy"
        return into

    def perform(self, plan: Plan) -> None:
        for c in plan.copies:
            for b in range(c.start, c.stop):
                assert self.held[c.source][b] == self.true[b], "copy from a stale source"
                self.held[c.target][b] = self.held[c.source][b]

    def do_read(self, where: str, start: int, stop: int) -> None:
        s = self.state
        valid_before = s.valid(where)
        others_before = {loc: s.valid(loc) for loc in self.locs if loc != where}
        stale = set(range(start, stop)) - as_set(valid_before)
        plan = s.plan_read(where, start, stop)
        note(f"plan_read({where!r}, {start}, {stop}) -> {plan!r}")
        if not stale:
            assert plan is EMPTY_PLAN
            return
        into = self.check_copies(plan)
        assert all(c.target == where for c in plan.copies)
        copied = into[where]
        assert stale <= copied, "a stale byte of the interval is not copied"
        wanted = valid_before | IntervalSet.span(start, stop)
        k = len(wanted) - self.m
        extra = len(copied) - len(stale)
        event(f"read: {'cap fill' if k > 0 else 'exact'}, sources={len(plan.copies)} copies")
        if not self.exact:
            pass  # coalesced by cost: bounded by the cost tests below, not by bytes
        elif k <= 0:
            assert extra == 0, "copies beyond the stale bytes while under the cap"
        else:
            # documented bound: k * (n - |V|) / (m + k - 1) extra bytes
            assert extra * (self.m + k - 1) <= k * (self.n - wanted.total)
        if plan.nbytes % 2:  # sometimes the copies "fail": drop the plan, nothing changes
            before = snapshot(s)
            del plan
            assert snapshot(s) == before
            plan = s.plan_read(where, start, stop)
        self.perform(plan)
        s.apply(plan)
        assert s.valid(where) == wanted | IntervalSet(runs_of(copied))
        assert len(s.valid(where)) <= self.m
        for loc, v in others_before.items():
            assert s.valid(loc) == v
        for b in range(start, stop):
            assert self.held[where][b] == self.true[b], "read sees a stale byte"

    # -- rules -----------------------------------------------------------------------------

    @rule(data=st.data())
    def read(self, data):
        where = data.draw(st.sampled_from(self.locs), label="where")
        start, stop = self.draw_interval(data)
        self.do_read(where, start, stop)

    @rule(data=st.data(), covering=st.booleans(), consolidate=st.integers(0, 9))
    def write(self, data, covering, consolidate):
        where = data.draw(st.sampled_from(self.locs), label="where")
        start, stop = self.draw_interval(data)
        if covering:
            written = set(range(start, stop))
        else:
            # a partial write (a strided view): sync the bounding interval first
            self.do_read(where, start, stop)
            written = set(data.draw(st.sets(st.integers(start, max(start, stop - 1)))))
            written &= set(range(start, stop))
        self.clock += 1
        for b in written:
            self.true[b] = self.held[where][b] = self.clock
        s = self.state
        probe = data.draw(st.sampled_from(self.locs), label="probe")
        pending = s.plan_read(probe)  # planned before the write: must not apply after it
        before = {loc: s.valid(loc) for loc in self.locs}
        s.mark_changed(where, start, stop)
        if pending and any(s.valid(loc) != v for loc, v in before.items()):
            with pytest.raises(StalePlanError):
                s.apply(pending)
        note(f"mark_changed({where!r}, {start}, {stop}) -> {s!r}")
        assert s.is_valid(where, start, stop)
        for loc in self.locs:
            if loc != where:
                assert not (s.valid(loc) & IntervalSet.span(start, stop))
            if self.within_cap:
                assert len(s.valid(loc)) <= self.m + 1
        if consolidate == 0:  # sometimes the caller does not consolidate
            self.within_cap = all(n <= self.m for n in s.run_counts().values())
            return
        self.do_consolidate()

    @rule()
    def consolidate(self):
        self.do_consolidate()

    def do_consolidate(self):
        s = self.state
        before = {loc: s.valid(loc) for loc in self.locs}
        plan = s.plan_consolidate()
        note(f"plan_consolidate() -> {plan!r}")
        if all(len(v) <= self.m for v in before.values()):
            assert plan is EMPTY_PLAN
        into = self.check_copies(plan)
        if plan:
            event(f"consolidate: {'copies' if plan.copies else 'drops only'}")
        self.perform(plan)
        s.apply(plan)
        for loc in self.locs:
            after = s.valid(loc)
            assert len(after) <= self.m
            # conservative: grows only by what was copied into it
            assert as_set(after) <= as_set(before[loc]) | into[loc]
            assert into[loc] <= as_set(after)
            k = len(before[loc]) - self.m
            if k <= 0:
                assert after == before[loc]
            else:
                # documented bound: k * (n - |V|) / (m + k - 1) bytes copied into loc
                assert len(into[loc]) * (self.m + k - 1) <= k * (self.n - before[loc].total)
        self.within_cap = True

    @rule(data=st.data())
    def stale_plan_is_refused(self, data):
        s = self.state
        where = data.draw(st.sampled_from(self.locs), label="where")
        if s.is_valid(where):
            assert s.plan_read(where) is EMPTY_PLAN
            return
        old = s.plan_read(where)
        self.do_read(where, 0, self.n)
        before = snapshot(s)
        with pytest.raises(StalePlanError):
            s.apply(old)
        assert snapshot(s) == before

    @rule(data=st.data())
    def drop(self, data):
        """A copy given back (an eviction): allowed only when no byte is current there only."""
        s = self.state
        where = data.draw(st.sampled_from(self.locs), label="where")
        mine = as_set(s.valid(where))
        elsewhere = set().union(*(as_set(s.valid(o)) for o in self.locs if o != where))
        before, version = snapshot(s), s.version
        if mine <= elsewhere:
            s.drop(where)
            event("drop: done" if mine else "drop: nothing current there")
            assert not s.valid(where)
            assert (s.version != version) == bool(mine)  # the launch fast path's cache goes
            self.held[where] = [-1] * self.n  # the memory is gone: garbage if reallocated
        else:
            event("drop: refused")
            with pytest.raises(ValueError, match="would lose bytes"):
                s.drop(where)
            assert snapshot(s) == before and s.version == version

    @precondition(lambda self: len(self.locs) < 5)
    @rule()
    def add_device(self):
        # a device's first use (several GPUs): a location current nowhere, holding garbage
        name = f"gpu{len(self.locs)}"
        version = self.state.version
        self.state.add_location(name)
        self.locs = (*self.locs, name)
        self.held[name] = [-1] * self.n
        assert self.state.locations == self.locs and not self.state.valid(name)
        assert self.state.version > version  # a view's cached fast path closes
        self.state.add_location(name)  # (again: nothing changes)
        assert self.state.locations == self.locs

    @rule(data=st.data())
    def prefer(self, data):
        # a device reads from its peers first (several GPUs): any order must stay coherent
        where = data.draw(st.sampled_from(self.locs), label="where")
        others = data.draw(st.permutations([x for x in self.locs if x != where]), label="order")
        first = others[: data.draw(st.integers(0, len(others)), label="first")]
        self.state.prefer(where, first)
        order = self.state.sources(where)
        assert order[: len(first)] == tuple(first) and sorted(order) == sorted(self.locs)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def every_byte_valid_somewhere_and_current_where_valid(self):
        s = self.state
        anywhere: set[int] = set()
        for loc in self.locs:
            valid = as_set(s.valid(loc))
            anywhere |= valid
            for b in valid:
                assert self.held[loc][b] == self.true[b], f"byte {b} marked valid at {loc} is stale"
        assert anywhere == set(range(self.n)), "a byte is valid nowhere"

    @invariant()
    def is_exclusive_matches_the_valid_sets(self):
        s = self.state
        for start, stop in [(0, self.n), (0, self.n // 2), (self.n // 3, self.n)]:
            span = set(range(start, stop))
            for loc in self.locs:
                others = set()
                for other in self.locs:
                    if other != loc:
                        others |= as_set(s.valid(other))
                expected = span <= as_set(s.valid(loc)) and not (span & others)
                assert s.is_exclusive(loc, start, stop) == expected, (loc, start, stop)

    @invariant()
    def run_counts_within_cap(self):
        counts = self.state.run_counts()
        assert set(counts) == set(self.locs)
        if self.within_cap:
            assert all(n <= self.m for n in counts.values()), counts


TestCoherenceMachine = CoherenceMachine.TestCase


# ---------------------------------------------------------------------------------------------
# the transfer cost model


def _per_byte(break_even: int) -> TransferCost:
    """A model whose latency is worth exactly ``break_even`` bytes (1 byte per second)."""
    return TransferCost(latency_s=float(break_even), bandwidth_Bps=1.0)


@pytest.mark.parametrize("gap", [1, 100, 4096])
def test_two_pieces_of_a_read_are_one_copy_when_the_gap_costs_less_than_a_latency(gap):
    # the gpu holds the gap and, far away, two more runs (so its reads count as scattered,
    # and the span of them all is far too large to copy whole)
    n = 1000 * gap + 1000
    lo, hi = gap + 100, 2 * gap + 100
    far = [(n - 40, n - 30), (n - 20, n - 10)]
    for break_even, copies in ((gap + 1, 1), (gap, 2)):
        s = BufferState(n, valid_at="host", cost=_per_byte(break_even))
        for a, b in [(lo, hi), *far]:
            s.apply(s.plan_read("gpu", a, b))
        assert len(s.valid("gpu")) == SCATTER_RUNS
        plan = s.plan_read("gpu", 0, 3 * gap + 200)
        assert len(plan.copies) == copies, (break_even, plan)
        assert plan.nbytes == (3 * gap + 200 if copies == 1 else 2 * gap + 200)
        assert all(c.source == "host" for c in plan.copies)
        s.apply(plan)
        assert s.valid("gpu") == IntervalSet([(0, 3 * gap + 200), *far])
        assert s.is_valid("host")


def test_a_plain_sync_copies_exactly_its_stale_bytes():
    """Fewer than SCATTER_RUNS runs: no merging across valid bytes, whatever the cost model."""
    s = BufferState(1000, valid_at="host", cost=PCIE5_X16)
    s.apply(s.plan_read("gpu", 100, 200))
    plan = s.plan_read("gpu")
    assert [(c.start, c.stop) for c in plan.copies] == [(0, 100), (200, 1000)]
    assert plan.nbytes == 900


def test_merged_copies_only_span_bytes_valid_at_source_and_target():
    # three locations: the gap is valid at the target but not at the source of the pieces
    n = 10_000
    s = BufferState(n, ("host", "gpu", "gpu1"), valid_at="host", cost=_per_byte(1000))
    s.apply(s.plan_read("gpu1", 100, 200))
    s.mark_changed("gpu1", 100, 200)  # now current at gpu1 only
    for a, b in ((n - 40, n - 30), (n - 20, n - 10)):  # scattered runs far away
        s.apply(s.plan_read("gpu", a, b))
    plan = s.plan_read("gpu", 0, 300)
    assert [(c.source, c.start, c.stop) for c in plan.copies] == [
        ("host", 0, 100),
        ("gpu1", 100, 200),
        ("host", 200, 300),
    ]


def _scattered_reads(s: BufferState, reads: list[tuple[int, int]]) -> tuple[int, int]:
    copies = nbytes = 0
    for a, b in reads:
        for plan in (s.plan_read("host", a, b), None):
            plan = plan if plan is not None else s.plan_consolidate()
            copies += len(plan.copies)
            nbytes += plan.nbytes
            s.apply(plan)
        assert s.is_valid("host", a, b)
    return copies, nbytes


@pytest.mark.parametrize(("cost", "paid"), [(PCIE5_X16, SCATTER_RUNS), (NVLINK_C2C, 1)])
def test_scattered_reads_copy_the_whole_span_once_the_latencies_paid_cover_it(cost, paid):
    n = 1 << 20  # transfer time below SCATTER_RUNS latencies under both presets
    assert cost.seconds(1, n) <= cost.seconds(SCATTER_RUNS + 1, 0)
    # ski rental, tight: the span is copied at the first read whose exact copy, added to the
    # ``paid`` copies so far, would cost at least what the span's one copy does
    assert cost.seconds(1, n) <= cost.seconds(paid + 1, 0)
    assert cost.seconds(1, n) > cost.seconds(paid, 0)
    s = BufferState(n, valid_at="gpu", cost=cost)
    reads = [(k * 100_003 % n // 8 * 8, k * 100_003 % n // 8 * 8 + 64) for k in range(1, 50)]
    first = reads[:paid]
    assert _scattered_reads(s, first) == (paid, 64 * paid)  # exact so far
    plan = s.plan_read("host", *reads[paid])
    assert [(c.source, c.start, c.stop) for c in plan.copies] == [("gpu", 0, n)]
    s.apply(plan)
    assert _scattered_reads(s, reads) == (0, 0)  # every later read is free
    # the next time the host goes stale, its first read copies the span at once
    s.mark_changed("gpu")
    assert _scattered_reads(s, reads) == (1, n)


@pytest.mark.parametrize("break_even", [1000, 1999, 2000, 3999, 4000, 5999])
def test_a_scattered_series_copies_the_location_once_its_copy_costs_no_more_than_one_more(
    break_even,
):
    """Before SCATTER_RUNS runs, the second and third scattered reads weigh one copy of the
    whole location against the copies paid plus their own: ski rental from the second read."""
    n = 4000
    paid = -(-n // break_even)  # the reads after which the whole copy costs no more
    reads = [(1000, 1008), (3000, 3016), (2000, 2004), (500, 508), (3500, 3508)]
    s = BufferState(n, valid_at="gpu", cost=_per_byte(break_even))
    if paid >= SCATTER_RUNS:  # the series rule from SCATTER_RUNS runs on (tested above)
        assert _scattered_reads(s, reads[:SCATTER_RUNS]) == (SCATTER_RUNS, 28)
        return
    assert _scattered_reads(s, reads[:paid]) == (paid, sum(b - a for a, b in reads[:paid]))
    plan = s.plan_read("host", *reads[paid])
    assert [(c.source, c.start, c.stop) for c in plan.copies] == [("gpu", 0, n)]
    s.apply(plan)
    assert _scattered_reads(s, reads) == (0, 0)
    s.mark_changed("gpu")  # remembered: the next series copies the location at its first read
    assert _scattered_reads(s, reads) == (1, n)


def test_the_second_scattered_read_of_a_1mib_state_copies_it_under_nvlink_c2c():
    n = 1 << 20
    cost = NVLINK_C2C
    # the whole copy costs less than the copy paid plus the second read's own
    assert cost.seconds(1, n) < cost.seconds(2, 16)
    s = BufferState(n, valid_at="gpu", cost=cost)
    assert _scattered_reads(s, [(300_000, 300_016)]) == (1, 16)
    plan = s.plan_read("host", 700_000, 700_008)
    assert [(c.source, c.start, c.stop) for c in plan.copies] == [("gpu", 0, n)]


@pytest.mark.parametrize("cost", [PCIE5_X16, NVLINK_C2C])
def test_two_scattered_reads_stay_exact_where_the_whole_copy_costs_more(cost):
    # 4 MiB: more than two latencies' worth of bytes under both presets
    n = 4 << 20
    assert cost.seconds(1, n) > cost.seconds(2, 0)
    s = BufferState(n, valid_at="gpu", cost=cost)
    assert _scattered_reads(s, [(1_000_000, 1_000_016), (3_000_000, 3_000_008)]) == (2, 24)


@pytest.mark.parametrize("cost", [PCIE5_X16, NVLINK_C2C])
def test_a_read_next_to_one_run_copies_exactly_its_stale_bytes(cost):
    """A window that grows (streaming, a second look at nearby elements) is not a series."""
    n = 1 << 16
    s = BufferState(n, valid_at="gpu", cost=cost)
    assert _scattered_reads(s, [(1000, 1064), (1064, 1128), (900, 1000)]) == (3, 228)
    assert s.valid("host") == IntervalSet([(900, 1128)])
    # overlapping the run: only the stale part
    assert _scattered_reads(s, [(1100, 1300)]) == (1, 172)


@pytest.mark.parametrize("cost", [PCIE5_X16, NVLINK_C2C])
def test_a_whole_sync_after_one_read_copies_exactly_its_stale_bytes(cost):
    n = 1 << 16
    s = BufferState(n, valid_at="gpu", cost=cost)
    s.apply(s.plan_read("host", 1000, 2000))
    plan = s.plan_read("host")
    assert [(c.start, c.stop) for c in plan.copies] == [(0, 1000), (2000, n)]
    assert plan.nbytes == n - 1000


@pytest.mark.parametrize("cost", [PCIE5_X16, NVLINK_C2C])
@pytest.mark.parametrize(
    "reads",
    [
        [(0, 512), (30_000, 30_512)],  # a halo at one end, then an interior piece
        [(30_000, 30_512), (65_024, 65_536)],  # an interior piece, then a halo
        [(0, 512), (65_024, 65_536), (30_000, 30_512)],  # halos at both ends, then interior
    ],
)
def test_reads_at_the_ends_of_a_buffer_stay_exact_below_scatter_runs(cost, reads):
    """A boundary piece (a halo, a ghost row) marks an exchange pattern, not a gather."""
    n = 1 << 16
    s = BufferState(n, valid_at="gpu", cost=cost)
    assert _scattered_reads(s, reads) == (len(reads), 512 * len(reads))


def test_scattered_reads_of_a_large_buffer_stay_exact():
    n = 64 << 20  # far more than SCATTER_RUNS latencies' worth of bytes: pieces stay cheaper
    s = BufferState(n, valid_at="gpu", cost=PCIE5_X16)
    reads = [(k << 20, (k << 20) + 64) for k in range(0, 64, 9)][:DEFAULT_MAX_RUNS]
    assert _scattered_reads(s, reads) == (len(reads), 64 * len(reads))


@pytest.mark.parametrize("cost", [PCIE5_X16, NVLINK_C2C])
def test_two_reads_of_a_buffer_stay_exact(cost):
    """A halo at each end (two runs) is not a scattered series: no extra bytes."""
    n = 1 << 16
    s = BufferState(n, valid_at="gpu", cost=cost)
    assert _scattered_reads(s, [(0, 512), (n - 512, n)]) == (2, 1024)


def test_a_state_follows_the_process_wide_cost_unless_given_its_own():
    own = BufferState(64, cost=NVLINK_C2C)
    follows = BufferState(64)
    assert transfer_cost() == DEFAULT_TRANSFER_COST == PCIE5_X16
    assert follows.cost == PCIE5_X16
    previous = set_transfer_cost(NVLINK_C2C)
    try:
        assert previous == PCIE5_X16
        assert follows.cost == NVLINK_C2C == transfer_cost()
        assert set_transfer_cost(_per_byte(3)) == NVLINK_C2C
        assert own.cost == NVLINK_C2C
    finally:
        set_transfer_cost(None)
    assert transfer_cost() == DEFAULT_TRANSFER_COST


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ((10e-6, 50e9), TypeError),  # a bare tuple
        ("pcie5", TypeError),
        (TransferCost("10us", 50e9), TypeError),
        (TransferCost(True, 50e9), TypeError),
        (TransferCost(0.0, 50e9), ValueError),
        (TransferCost(10e-6, -1.0), ValueError),
        (TransferCost(float("nan"), 50e9), ValueError),
        (TransferCost(10e-6, float("inf")), ValueError),
        (TransferCost(1e200, 1e200), ValueError),  # each finite, their product not
        (TransferCost(2.0, 1.7e308), ValueError),
    ],
)
def test_a_bad_cost_is_refused_and_changes_nothing(bad, error):
    with pytest.raises(error, match="TransferCost|cost must"):
        set_transfer_cost(bad)
    assert transfer_cost() == DEFAULT_TRANSFER_COST
    with pytest.raises(error, match="TransferCost|cost must"):
        BufferState(64, cost=bad)


def test_modelled_seconds():
    assert PCIE5_X16.seconds(2, 1_000_000) == pytest.approx(2 * 10e-6 + 1e6 / 50e9)
    assert PCIE5_X16.break_even_bytes == 500_000
    assert NVLINK_C2C.break_even_bytes == 1_200_000


# ---------------------------------------------------------------------------------------------
# several devices: locations added on first use, sources in a target's order of preference


def test_an_added_location_is_current_nowhere_and_reads_from_the_preferred_source():
    s = BufferState(16, valid_at="host")
    s.plan_read("gpu")  # (planned, not applied: nothing changes)
    s.apply(s.plan_read("gpu", 0, 16))
    s.add_location("gpu:1")
    assert s.locations == ("host", "gpu", "gpu:1") and not s.valid("gpu:1")
    # host first by default: the order locations were made in
    assert s.plan_read("gpu:1", 0, 8).copies == (Copy("host", "gpu:1", 0, 8),)
    s.prefer("gpu:1", ["gpu"])  # device 1 reaches device 0 peer to peer
    assert s.sources("gpu:1") == ("gpu", "host", "gpu:1")
    assert s.plan_read("gpu:1", 0, 8).copies == (Copy("gpu", "gpu:1", 0, 8),)
    s.mark_changed("host", 4, 8)  # bytes 4..8 now only on the host: split by source
    assert s.plan_read("gpu:1", 0, 8).copies == (
        Copy("gpu", "gpu:1", 0, 4),
        Copy("host", "gpu:1", 4, 8),
    )


@pytest.mark.parametrize(
    ("where", "sources", "match"),
    [
        ("gpu:9", [], "where must be one of"),
        ("gpu", ["gpu"], "other locations"),
        ("gpu", ["gpu:9"], "other locations"),
    ],
)
def test_prefer_refuses_unknown_locations_and_changes_nothing(where, sources, match):
    s = BufferState(8, valid_at="host")
    with pytest.raises(ValueError, match=match):
        s.prefer(where, sources)
    assert s.sources("gpu") == ("host", "gpu")


def test_add_location_refuses_a_name_that_is_not_a_str():
    s = BufferState(8)
    with pytest.raises(TypeError, match="str"):
        s.add_location(1)
    assert s.locations == ("host", "gpu")
