"""Scattered small host reads after a kernel: copies, bytes and modelled transfer time.

The workload: a SmartArray of ``n`` float64 that a kernel rewrites entirely on the device each
round (declared ``sa.Out``), after which the host reads ``reads`` small ranges (1 to 16
elements, by fancy index, so each read is a fresh copy and not a held view) at random offsets,
in three variants: in random order, sorted by offset, and clustered (eight clusters of nearby
offsets). Each round is measured under each preset of the transfer cost model
(:data:`smartarray.PCIE5_X16`, :data:`smartarray.NVLINK_C2C`, set with
:func:`smartarray.set_transfer_cost` while it runs; bytes and copies counted with
:func:`smartarray.stats`), and compared with two references computed from the same reads:

- ``exact``: one copy per read, of exactly its bytes;
- ``whole``: one download of the whole array per round.

Modelled seconds are ``latency * copies + bytes / bandwidth`` of the preset (a model: it ranks
plans; the CUDA simulator's wall time says nothing about a GPU). ``first`` is the first round
(the planner learns the pattern during it), ``total`` all rounds.

Run as part of ``python -m smartarray bench`` or as a script
(``NUMBA_ENABLE_CUDASIM=1 python benchmarks/bench_fragmentation.py [--quick]``).
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

import smartarray as sa

__all__ = ["FULL", "QUICK", "FragParams", "format_figures", "reads_of", "run"]

PRESETS = {"pcie5_x16": sa.PCIE5_X16, "nvlink_c2c": sa.NVLINK_C2C}
VARIANTS = ("random", "sorted", "clustered")


@dataclass(frozen=True)
class FragParams:
    """``n`` float64, ``reads`` host reads per round, ``rounds`` rounds."""

    n: int
    reads: int
    rounds: int


FULL = FragParams(n=1 << 17, reads=200, rounds=10)  # 1 MiB
QUICK = FragParams(n=1 << 17, reads=200, rounds=3)


@cuda.jit
def stamp(a: Any, value: float) -> None:  # pragma: no cover - runs as a kernel
    """Write ``value`` at ``a[0]``; launched with ``sa.Out(a)``: the whole array is rewritten
    as far as coherence is concerned (the other elements keep the device's values)."""
    if cuda.grid(1) == 0:
        a[0] = value


def reads_of(variant: str, params: FragParams, seed: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` element slices one round reads, for a variant."""
    rng = random.Random(seed)
    n = params.n
    if variant == "clustered":
        centres = [rng.randrange(n) for _ in range(8)]
        starts = [
            min(max(rng.choice(centres) + rng.randrange(-256, 256), 0), n - 16)
            for _ in range(params.reads)
        ]
    else:
        starts = [rng.randrange(n - 16) for _ in range(params.reads)]
    reads = [(s, s + rng.randint(1, 16)) for s in starts]
    return sorted(reads) if variant == "sorted" else reads


def _modelled(cost: sa.TransferCost, copies: int, nbytes: int) -> float:
    return cost.seconds(copies, nbytes)


def _one(variant: str, preset: str, params: FragParams) -> dict[str, Any]:
    cost = PRESETS[preset]
    previous = sa.set_transfer_cost(cost)
    try:
        a = sa.SmartArray(np.zeros(params.n))
        agree = True
        rounds = []
        for r in range(params.rounds):
            stamp[1, 32](sa.Out(a), float(r + 1))
            reads = reads_of(variant, params, seed=1000 * r + 7)
            before = sa.stats()
            for lo, hi in reads:
                # a fancy index: a fresh copy, not a held host view (those are refreshed
                # eagerly after every kernel, which would hide the reads)
                got = a[np.arange(lo, hi)]
                agree &= got.shape == (hi - lo,)
            stats = sa.stats() - before
            agree &= a[np.arange(1)][0] == r + 1
            exact_bytes = 8 * sum(hi - lo for lo, hi in reads)
            rounds.append(
                {
                    "copies": stats.d2h_count,
                    "bytes": stats.d2h_bytes,
                    "exact": (len(reads), exact_bytes),
                    "whole": (1, 8 * params.n),
                }
            )
    finally:
        sa.set_transfer_cost(previous)

    def seconds(key: str, rows: list[dict[str, Any]]) -> float:
        if key == "smartarray":
            return sum(_modelled(cost, row["copies"], row["bytes"]) for row in rows)
        return sum(_modelled(cost, *row[key]) for row in rows)

    figures: dict[str, Any] = {"variant": variant, "preset": preset, "results_agree": bool(agree)}
    for span, rows in (("first", rounds[:1]), ("total", rounds)):
        figure = {
            key: {
                "copies": sum(
                    row[key][0] if key != "smartarray" else row["copies"] for row in rows
                ),
                "bytes": sum(row[key][1] if key != "smartarray" else row["bytes"] for row in rows),
                "seconds": seconds(key, rows),
            }
            for key in ("smartarray", "exact", "whole")
        }
        best = min(figure["exact"]["seconds"], figure["whole"]["seconds"])
        figure["smartarray_over_best"] = figure["smartarray"]["seconds"] / best
        figures[span] = figure
    return figures


def run(quick: bool = False) -> dict[str, Any]:
    """Run every variant under every preset.

    Returns
    -------
    dict
        ``{"params": {...}, "rows": [{"variant", "preset", "results_agree", "first": {...},
        "total": {...}}]}`` where ``first`` and ``total`` map ``smartarray``, ``exact`` and
        ``whole`` to ``{"copies", "bytes", "seconds"}`` (modelled) and hold
        ``smartarray_over_best`` (modelled seconds over the better reference).
    """
    params = QUICK if quick else FULL
    rows = [_one(v, p, params) for p in PRESETS for v in VARIANTS]
    return {"params": {"n": params.n, "reads": params.reads, "rounds": params.rounds}, "rows": rows}


def format_figures(report: dict[str, Any] | None) -> str:
    """The figures as a table (modelled microseconds)."""
    if not report:
        return ""
    p = report["params"]
    lines = [
        f"Scattered host reads: {p['reads']} reads of 1-16 float64 of {8 * p['n']} bytes after "
        f"a kernel, {p['rounds']} rounds (modelled us: latency*copies + bytes/bandwidth)",
        f"  {'preset / variant':24s} {'rounds':>6s} {'copies':>7s} {'bytes':>10s} "
        f"{'smartarray':>11s} {'exact':>9s} {'whole':>9s} {'/best':>6s}",
    ]
    for row in report["rows"]:
        for span in ("first", "total"):
            f = row[span]
            s = f["smartarray"]
            lines.append(
                f"  {row['preset'] + ' ' + row['variant']:24s} {span:>6s} {s['copies']:7d} "
                f"{s['bytes']:10d} {s['seconds'] * 1e6:11.1f} {f['exact']['seconds'] * 1e6:9.1f} "
                f"{f['whole']['seconds'] * 1e6:9.1f} {f['smartarray_over_best']:6.2f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    print(format_figures(run(quick=args.quick)))


if __name__ == "__main__":
    main()
