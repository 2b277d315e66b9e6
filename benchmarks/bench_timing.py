"""Timing for the overhead micro-benchmarks that survives a machine shared with other work.

Differences of a few tens of nanoseconds per call are what the overhead figures are about, on
machines where other processes take the CPU at random moments. Three things make the figures
repeatable:

- **interleaving**: the variants compared (a SmartArray and its floor, smartarray's launch
  preparation and numba's) run in the same rounds, one short batch each, in a rotating order,
  so a load spike or a slower phase of the machine hits all of them alike;
- **minimum of short batches**: each batch is short (about a millisecond), so many batches run
  undisturbed; a variant's figure is its best batch (interference only ever adds time);
- **thread CPU time** (``time.thread_time``, the default clock): the time the calling thread
  spent on a CPU, so a batch during which the scheduler ran another process is not charged
  for it. The code timed here never waits (no device, no sleep), so wall time and CPU time
  measure the same work; ``clock=time.perf_counter`` gives wall time.

:func:`spread` runs a benchmark script several times in fresh processes and summarises each
figure (min / median / max), to show how far a single run can be trusted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["format_spread", "interleaved", "spread"]

Stmt = str | Callable[[], object]


def interleaved(
    calls: Mapping[str, Stmt],
    number: int,
    rounds: int,
    namespace: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.thread_time,
) -> dict[str, float]:
    """Nanoseconds per call of each variant: the best of ``rounds`` interleaved batches.

    Parameters
    ----------
    calls : mapping of str to str or callable
        The variants: a ``timeit`` statement (run in ``namespace``; no extra Python call per
        iteration) or a callable taking no argument.
    number : int
        Calls per batch (choose about a millisecond's worth).
    rounds : int
        Batches per variant. Each round runs one batch of every variant, starting from the
        next variant each round.
    namespace : dict, optional
        Globals of the string statements.
    clock : callable, default ``time.thread_time``
        The timer, in seconds.

    Returns
    -------
    dict of str to float
        The minimum over the rounds of the mean time per call, in nanoseconds.
    """
    timers = [
        (key, timeit.Timer(stmt, timer=clock, globals=namespace)) for key, stmt in calls.items()
    ]
    best = dict.fromkeys(calls, float("inf"))
    for r in range(rounds):
        k = r % len(timers)
        for key, timer in timers[k:] + timers[:k]:
            best[key] = min(best[key], timer.timeit(number))
    return {key: seconds / number * 1e9 for key, seconds in best.items()}


def spread(script: str, args: list[str], runs: int) -> dict[str, list[float]]:
    """Run ``script --json-figures args`` ``runs`` times, each in a fresh process.

    Returns every figure's values, one per run (the script prints its figures as one JSON
    object on its last line of output).
    """
    values: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, script, "--json-figures", *args],
            check=True,
            capture_output=True,
            text=True,
        )
        last = (out.stdout.strip().splitlines() or ["(nothing)"])[-1]
        try:
            figures = json.loads(last)
        except json.JSONDecodeError:
            figures = None
        if not isinstance(figures, dict):
            # (no GPU and no simulator asked for, say: the script's own words)
            raise SystemExit(f"{os.path.basename(script)} printed no figures: {last}")
        for key, value in figures.items():
            values.setdefault(key, []).append(value)
    return values


def format_spread(values: dict[str, list[float]]) -> str:
    """One line per figure: min, median and max over the runs."""
    runs = len(next(iter(values.values()), []))
    lines = [f"  {'figure (' + str(runs) + ' runs)':40s} {'min':>10s} {'median':>10s} {'max':>10s}"]
    for key, vals in values.items():
        lines.append(
            f"  {key:40s} {min(vals):10.2f} {statistics.median(vals):10.2f} {max(vals):10.2f}"
        )
    return "\n".join(lines)
