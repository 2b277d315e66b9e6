"""Micro-benchmarks of smartarray.coherence, in nanoseconds per call.

Run it as a script (``python benchmarks/bench_coherence.py [--quick]``) to print a table, or
import :func:`run` to get the figures as a dict (keys carry their unit). Each figure is the
minimum over several ``timeit`` repeats of the mean time per call. The cost of a plain Python
attribute read is printed next to them for scale.
"""

from __future__ import annotations

import argparse
import timeit

from smartarray.coherence import DEFAULT_MAX_RUNS, EMPTY_PLAN, BufferState

NBYTES = 1 << 20  # a 1 MiB buffer
STRIDE = 4096  # fragmented case: runs of 2 KiB every 4 KiB


def _fragmented() -> BufferState:
    """A buffer valid on the host, with the gpu's valid set exactly at the cap."""
    state = BufferState(NBYTES, valid_at="host")
    for k in range(DEFAULT_MAX_RUNS):
        state.apply(state.plan_read("gpu", k * STRIDE, k * STRIDE + STRIDE // 2))
    assert state.run_counts()["gpu"] == DEFAULT_MAX_RUNS
    return state


class _Plain:
    __slots__ = ("attr",)

    def __init__(self) -> None:
        self.attr = 1


def _ns_per_call(stmt: str, namespace: dict, number: int, repeat: int) -> float:
    times = timeit.repeat(stmt, globals=namespace, number=number, repeat=repeat)
    return min(times) / number * 1e9


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
    fast_n, slow_n, repeat = (20_000, 2_000, 3) if quick else (200_000, 20_000, 7)
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
        "whole": whole,
        "gpu_only": gpu_only,
        "plain": _Plain(),
        "write_cycle": write_cycle,
    }
    lo, hi = 3 * STRIDE + 100, 3 * STRIDE + 900
    return {
        "python_attribute_read_ns": _ns_per_call("plain.attr", ns, fast_n, repeat),
        "coherence_fast_path_ns": _ns_per_call(
            f"frag.plan_read('gpu', {lo}, {hi})", ns, fast_n, repeat
        ),
        "coherence_fast_path_whole_ns": _ns_per_call("whole.plan_read('host')", ns, fast_n, repeat),
        "coherence_is_valid_ns": _ns_per_call(
            f"frag.is_valid('gpu', {lo}, {hi})", ns, fast_n, repeat
        ),
        "coherence_fragmented_read_ns": _ns_per_call(
            f"frag.plan_read('gpu', 0, {3 * STRIDE + 10})", ns, slow_n, repeat
        ),
        "coherence_cap_fill_read_ns": _ns_per_call(
            f"frag.plan_read('gpu', {cap_lo}, {cap_lo + 100})", ns, slow_n, repeat
        ),
        "coherence_mark_changed_noop_ns": _ns_per_call(
            "gpu_only.mark_changed('gpu')", ns, fast_n, repeat
        ),
        "coherence_mark_changed_ns": _ns_per_call(
            f"frag.mark_changed('gpu', {lo}, {hi}); frag.mark_changed('host', {lo}, {hi})",
            ns,
            slow_n,
            repeat,
        )
        / 2,
        "coherence_write_cycle_ns": _ns_per_call("write_cycle()", ns, slow_n, repeat) / 2,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    scale = results["python_attribute_read_ns"]
    print(f"smartarray.coherence micro-benchmarks (max_runs={DEFAULT_MAX_RUNS}, min of repeats)")
    for key, value in results.items():
        print(f"  {key:34s} {value:10.1f} ns  ({value / scale:6.1f} x attribute read)")


if __name__ == "__main__":
    main()
