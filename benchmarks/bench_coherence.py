"""Micro-benchmarks of smartarray.coherence, in nanoseconds per call.

Run it as a script (``python benchmarks/bench_coherence.py [--quick]``) to print a table, or
import :func:`run` to get the figures as a dict (keys carry their unit). The statements run
interleaved in short batches timed in thread CPU time; each figure is the best batch's mean
time per call (see :mod:`bench_timing`). The cost of a plain Python attribute read is printed
next to them for scale. ``--spread N`` runs it in N fresh processes and prints each figure's
min / median / max.
"""

from __future__ import annotations

import argparse
import json

from bench_timing import format_spread, interleaved, spread

from smartarray.coherence import DEFAULT_MAX_RUNS, EMPTY_PLAN, BufferState, TransferCost

NBYTES = 1 << 20  # a 1 MiB buffer
STRIDE = 4096  # fragmented case: runs of 2 KiB every 4 KiB
# The fragmented states are built with exact copies (a latency worth no bytes): under a real
# cost model these reads would be coalesced, and the figures measure the planner at the cap.
EXACT = TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)


def _fragmented() -> BufferState:
    """A buffer valid on the host, with the gpu's valid set exactly at the cap."""
    state = BufferState(NBYTES, valid_at="host", cost=EXACT)
    for k in range(DEFAULT_MAX_RUNS):
        state.apply(state.plan_read("gpu", k * STRIDE, k * STRIDE + STRIDE // 2))
    assert state.run_counts()["gpu"] == DEFAULT_MAX_RUNS
    return state


class _Plain:
    __slots__ = ("attr",)

    def __init__(self) -> None:
        self.attr = 1


def run(quick: bool = False) -> dict[str, float]:
    """Measure the coherence state machine.

    Parameters
    ----------
    quick : bool, default False
        Fewer iterations and repeats (for smoke runs; figures are noisier).

    Returns
    -------
    dict of str to float
        Nanoseconds per call, keyed ``coherence_*_ns`` (plus ``python_attribute_read_ns`` for
        scale):

        - ``coherence_fast_path_ns``: ``plan_read`` of an already valid interval (fragmented
          valid set at the cap, so the bisection does real work);
        - ``coherence_fast_path_whole_ns``: ``plan_read(where)`` of the whole, valid buffer;
        - ``coherence_is_valid_ns``: ``is_valid`` of an already valid interval;
        - ``coherence_fragmented_read_ns``: ``plan_read`` of an interval spanning stale gaps of
          a valid set at the cap (plans copies and a cap fill; not applied);
        - ``coherence_cap_fill_read_ns``: ``plan_read`` of a small stale interval that would
          add a run beyond the cap, so the plan also fills the smallest gap;
        - ``coherence_mark_changed_ns``: ``mark_changed`` of a small interval (alternating
          between two locations so every call changes the state);
        - ``coherence_mark_changed_noop_ns``: ``mark_changed`` of the whole buffer by the one
          location where it is already valid (a kernel writing the same array again);
        - ``coherence_write_cycle_ns``: ``mark_changed`` followed by ``plan_consolidate`` and
          ``apply`` on the fragmented state (the SmartArray layer's write path).
    """
    fast_n, slow_n, rounds = (2_000, 200, 30) if quick else (5_000, 500, 150)
    frag = _fragmented()
    whole = BufferState(NBYTES, valid_at="host")
    assert frag.plan_read("gpu", 3 * STRIDE + 100, 3 * STRIDE + 900) is EMPTY_PLAN
    assert frag.plan_read("gpu", 0, 3 * STRIDE + 10)  # needs copies
    writer = _fragmented()
    gpu_only = BufferState(NBYTES, valid_at="gpu")
    cap_lo = DEFAULT_MAX_RUNS * STRIDE + 100
    assert len(frag.plan_read("gpu", cap_lo, cap_lo + 100).copies) == 2  # the read + a gap

    def write_cycle() -> None:
        writer.mark_changed("host", 5 * STRIDE + 100, 5 * STRIDE + 200)
        writer.apply(writer.plan_consolidate())
        writer.mark_changed("gpu", 5 * STRIDE + 100, 5 * STRIDE + 200)
        writer.apply(writer.plan_consolidate())

    ns = {
        "frag": frag,
        "changer": _fragmented(),  # its own state: the reads interleaved with it see frag's
        "whole": whole,
        "gpu_only": gpu_only,
        "plain": _Plain(),
        "write_cycle": write_cycle,
    }
    lo, hi = 3 * STRIDE + 100, 3 * STRIDE + 900
    # The statements run interleaved, in short batches (see bench_timing): each figure is its
    # best batch, so a load spike on a shared machine shifts none of them.
    fast = interleaved(
        {
            "python_attribute_read_ns": "plain.attr",
            "coherence_fast_path_ns": f"frag.plan_read('gpu', {lo}, {hi})",
            "coherence_fast_path_whole_ns": "whole.plan_read('host')",
            "coherence_is_valid_ns": f"frag.is_valid('gpu', {lo}, {hi})",
            "coherence_mark_changed_noop_ns": "gpu_only.mark_changed('gpu')",
        },
        fast_n,
        rounds,
        ns,
    )
    slow = interleaved(
        {
            "coherence_fragmented_read_ns": f"frag.plan_read('gpu', 0, {3 * STRIDE + 10})",
            "coherence_cap_fill_read_ns": f"frag.plan_read('gpu', {cap_lo}, {cap_lo + 100})",
            "coherence_mark_changed_ns": (
                f"changer.mark_changed('gpu', {lo}, {hi}); changer.mark_changed('host', {lo}, {hi})"
            ),
            "coherence_write_cycle_ns": "write_cycle()",
        },
        slow_n,
        rounds,
        ns,
    )
    slow["coherence_mark_changed_ns"] /= 2
    slow["coherence_write_cycle_ns"] /= 2
    figures = {**fast, **slow}
    return {key: figures[key] for key in _ORDER}


_ORDER = (
    "python_attribute_read_ns",
    "coherence_fast_path_ns",
    "coherence_fast_path_whole_ns",
    "coherence_is_valid_ns",
    "coherence_fragmented_read_ns",
    "coherence_cap_fill_read_ns",
    "coherence_mark_changed_noop_ns",
    "coherence_mark_changed_ns",
    "coherence_write_cycle_ns",
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    parser.add_argument("--spread", type=int, metavar="N", help="N runs in fresh processes")
    parser.add_argument("--json-figures", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spread:
        print(format_spread(spread(__file__, ["--quick"] if args.quick else [], args.spread)))
        return
    results = run(quick=args.quick)
    if args.json_figures:
        print(json.dumps(results))
        return
    scale = results["python_attribute_read_ns"]
    print(
        f"smartarray.coherence micro-benchmarks (max_runs={DEFAULT_MAX_RUNS}, "
        "best of interleaved batches)"
    )
    for key, value in results.items():
        print(f"  {key:34s} {value:10.1f} ns  ({value / scale:6.1f} x attribute read)")


if __name__ == "__main__":
    main()
