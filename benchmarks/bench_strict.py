"""Host synchronisations per iteration of a launch loop on a user stream (strict mode only).

A loop of kernel launches on one user stream needs no host wait inside the loop: hand-written
code uploads once, launches N times and downloads once after the loop. Every host wait inside
the loop stalls the CPU until the GPU drained the stream and serialises what should overlap.
Time on the simulator says nothing about that; strict mode (:mod:`smartarray.testing`) counts
the waits: ``host_syncs`` counts every ``synchronize()`` call and synchronous copy.

Figures (host synchronisations per launch, inside the loop; the goal is the hand-written 0):

- ``hand``: ``cuda.to_device`` on the stream, N launches, one ``copy_to_host`` after;
- ``smartarray``: a SmartArray passed to the same N launches on the stream;
- ``smartarray_in_input``: a SmartArray written plus an ``In(...)`` SmartArray input;
- ``smartarray_host_held``: a SmartArray whose host array the caller holds (``a.host()``), which
  smartarray refreshes after every launch, as its reference pages promise.

Run as a script (``python benchmarks/bench_strict.py [--quick]``) or call :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

__all__ = ["SCENARIOS", "run"]

SCENARIOS = ("hand", "smartarray", "smartarray_in_input", "smartarray_host_held")
N = 64
BLOCK = 32


def _kernels() -> tuple[Any, Any]:
    global cuda
    from numba import cuda  # the simulator swaps a kernel's global ``cuda``, not a local one

    @cuda.jit
    def step(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1.0

    @cuda.jit
    def step_from(x, y):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += y[i]

    return step, step_from


def _loop(scenario: str, launches: int, state: Any) -> tuple[float, np.ndarray]:
    """Host syncs per launch inside the loop, and the result (checked by the caller)."""
    from numba import cuda

    import smartarray as sa

    step, step_from = _kernels()
    grid = (N + BLOCK - 1) // BLOCK
    s = cuda.stream()
    host = np.zeros(N)
    if scenario == "hand":
        d = cuda.to_device(host, stream=s)
        before = state.host_syncs
        for _ in range(launches):
            step[grid, BLOCK, s](d)
        inside = state.host_syncs - before
        out = cuda.pinned_array(N)
        d.copy_to_host(out, stream=s)
        s.synchronize()
        return inside / launches, np.array(out)
    a = sa.SmartArray(host)
    held = a.host() if scenario == "smartarray_host_held" else None
    b = sa.SmartArray(np.ones(N)) if scenario == "smartarray_in_input" else None
    before = state.host_syncs
    for _ in range(launches):
        if b is None:
            step[grid, BLOCK, s](a)
        else:
            step_from[grid, BLOCK, s](a, sa.In(b))
    inside = state.host_syncs - before
    result = np.array(a.get("host"))
    del held
    return inside / launches, result


def run(quick: bool = False) -> dict[str, float] | None:
    """Host syncs per launch of each scenario; None on a real GPU (strict mode needs the simulator).

    Raises
    ------
    AssertionError
        A scenario computed a wrong result.
    """
    import numba

    if not numba.config.ENABLE_CUDASIM:
        return None
    from smartarray.testing import strict

    launches = 8 if quick else 32
    figures = {}
    for scenario in SCENARIOS:
        with strict(seed=0) as state:
            per_launch, result = _loop(scenario, launches, state)
        np.testing.assert_array_equal(result, np.full(N, float(launches)))
        figures[scenario] = per_launch
    return figures


def format_figures(figures: dict[str, float] | None) -> str:
    if figures is None:
        return "host synchronisations per launch: needs strict mode (the CUDA simulator)"
    lines = ["host synchronisations per launch, loop on a user stream (strict mode; goal: hand):"]
    lines += [f"  {name:28s} {value:6.2f}" for name, value in figures.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print(format_figures(run(args.quick)))


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
