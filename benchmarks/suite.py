"""The benchmark suite behind ``python -m benchmarks`` (and ``python -m smartarray bench``).

Runs every workload of :mod:`workloads` under every strategy of :mod:`strategies`, counts
the bytes and copies each moved with :func:`smartarray.trace` (every strategy copies through
smartarray's counted primitives), times them, checks that the results agree, and adds
the overhead micro-benchmarks (:mod:`bench_coherence`, :mod:`bench_overhead`).

JSON layout (:func:`run` returns it; other tools read it)::

    {
      "target": "...", "simulator": bool, "quick": bool,
      "workloads": [
        {"name": str, "description": str, "results_agree": bool,
         "strategies": {"auto" | "hand" | "whole_array_flags" | "smartarray"
                        | "smartarray_no_hints" | "smartarray_jit":
                            {"bytes": int, "transfers": int, "seconds": float}},
         "ratios": {"smartarray_over_hand_bytes": float, ...}},
        ...
      ],
      "overhead": {"<name>_<unit>": float, ...},
      "strict_host_syncs_per_launch": {"hand" | "smartarray" | ...: float} or null,
      "over_budget": {"budget": int, "total": int, "results_agree": bool, "evictions": int,
                      "params": {...},
                      "bytes": {"smartarray" | "smartarray_model" | "least" | "unlimited"
                                | "managed": int}},
      "fragmentation": {"params": {"n", "reads", "rounds"},
                        "rows": [{"variant", "preset", "results_agree",
                                  "first" | "total": {"smartarray" | "exact" | "whole":
                                                          {"copies", "bytes", "seconds"},
                                                      "smartarray_over_best": float}}]},
      "devices": {"params": {"n", "steps"}, "same_result": bool,
                  "rows": [{"devices": 1 | 2 | 4, "peer": bool, "where": str, "target": str,
                            "digest": str,
                            "per_device": [{"device": int,
                                            "moved" | "hand" | "per_step":
                                                {"h2d" | "d2h" | "d2d_in" | "d2d_out": int}}]}]},
      "time": {"model": {...}, "targets": {...}, "measured": {...} or null}  (bench_time.run)
    if progress:
      "host": {"host_<state>_<op>_<n>_sa_ns" | ..._np_ns | ..._ratio: float}
    }

Run it through ``python -m benchmarks [--quick] [--json PATH] [--markdown]`` (``__main__.py``),
which picks the CUDA target first (this module imports numba.cuda).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

import bench_budget
import bench_coherence
import bench_devices
import bench_fragmentation
import bench_host
import bench_overhead
import bench_strict
import bench_time
import numpy as np
import workloads
from strategies import STRATEGIES

from smartarray import memory
from smartarray._demo import SIMULATOR_TIMES_NOTE, Progress, measure, table

__all__ = ["format_markdown", "format_report", "run"]


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def run_workloads(quick: bool = False, progress: bool = False) -> list[dict[str, Any]]:
    """Every workload under every strategy: bytes, transfers, seconds, ratios."""
    params = workloads.QUICK if quick else workloads.FULL
    rows = []
    for number, workload in enumerate(workloads.WORKLOADS, 1):
        figures: dict[str, dict[str, Any]] = {}
        results: dict[str, np.ndarray] = {}
        for strategy in STRATEGIES:
            workload.run(strategy, workloads.WARM)  # compile (on a GPU) outside the timing
            label = f"bench {number}/{len(workloads.WORKLOADS)} {workload.name} [{strategy}]"
            bar = Progress(label) if progress else None
            result, figure = measure(
                lambda w=workload, s=strategy, b=bar: w.run(s, params, b)  # type: ignore[misc]
            )
            if bar is not None:
                bar.close()
            results[strategy] = result
            figures[strategy] = asdict(figure)
        smart, hand, auto = figures["smartarray"], figures["hand"], figures["auto"]
        rows.append(
            {
                "name": workload.name,
                "description": workload.description,
                "results_agree": all(np.allclose(r, results["hand"]) for r in results.values()),
                "strategies": figures,
                "ratios": {
                    "smartarray_over_hand_bytes": _ratio(smart["bytes"], hand["bytes"]),
                    "smartarray_over_auto_bytes": _ratio(smart["bytes"], auto["bytes"]),
                    "smartarray_over_hand_seconds": _ratio(smart["seconds"], hand["seconds"]),
                    "smartarray_over_auto_seconds": _ratio(smart["seconds"], auto["seconds"]),
                    "smartarray_no_hints_over_hand_bytes": _ratio(
                        figures["smartarray_no_hints"]["bytes"], hand["bytes"]
                    ),
                    "smartarray_jit_over_hand_bytes": _ratio(
                        figures["smartarray_jit"]["bytes"], hand["bytes"]
                    ),
                },
            }
        )
    return rows


def run(quick: bool = False, target: str = "", progress: bool = False) -> dict[str, Any]:
    """Run the whole suite.

    Parameters
    ----------
    quick : bool
        CI-sized runs (under a minute on the CUDA simulator); figures are noisier.
    target : str
        A line saying which CUDA target runs (recorded in the report).
    progress : bool
        Progress lines on stderr for long runs.

    Returns
    -------
    dict
        The report, in the JSON layout of the module docstring.
    """
    rows = run_workloads(quick, progress)
    if progress:
        print("bench: overhead micro-benchmarks", file=sys.stderr, flush=True)
    overhead = {**bench_overhead.run(quick), **bench_coherence.run(quick)}
    if progress:
        print("bench: host synchronisations (strict mode)", file=sys.stderr, flush=True)
    syncs = bench_strict.run(quick)
    if progress:
        print("bench: arrays four times the device budget", file=sys.stderr, flush=True)
    over_budget = bench_budget.run(quick)
    if progress:
        print("bench: scattered host reads (transfer cost model)", file=sys.stderr, flush=True)
    fragmentation = bench_fragmentation.run(quick)
    if progress:
        print("bench: partitioned heat steps on 1, 2 and 4 devices", file=sys.stderr, flush=True)
    devices = bench_devices.run(quick)
    if progress:
        print("bench: modelled time on the fake driver's clock", file=sys.stderr, flush=True)
    from smartarray import _fakegpu

    on_gpu = not memory.SIMULATOR and _fakegpu.current() is None
    time_figures = bench_time.run(quick, measured=on_gpu)
    if progress:
        print("bench: host operations against ndarray's", file=sys.stderr, flush=True)
    host = bench_host.run(quick)
    return {
        "target": target or ("CUDA simulator" if memory.SIMULATOR else "CUDA GPU"),
        "simulator": memory.SIMULATOR,
        "quick": quick,
        "params": asdict(workloads.QUICK if quick else workloads.FULL),
        "workloads": rows,
        "overhead": overhead,
        "strict_host_syncs_per_launch": syncs,
        "over_budget": over_budget,
        "fragmentation": fragmentation,
        "devices": devices,
        "time": time_figures,
        "host": host,
    }


#: The real dispatcher's launch variants (``bench_overhead.real_launch``), as the report names
#: them.
_REAL_LAUNCHES = {
    "device_array": "device arrays",
    "smartarray": "bare SmartArrays",
    "annotated_smartarray": "sa.In(x), sa.In(y)",
    "inferred_smartarray": "smartarray.jit, bare SmartArrays",
    "budgeted_smartarray": "bare SmartArrays, budget set",
}
#: The figures the sections of :func:`_format_overhead` stand for, by prefix; a figure of any
#: other prefix is listed by name, so that a new kind of figure is printed on every target.
_SECTIONS = ("njit_", "launch_prep_", "jit_launch_", "real_launch_", "coherence", "python")


def _format_overhead(o: dict[str, float], sim: str) -> list[str]:
    """The overhead figures as terminal lines: the sections measured on this target (the njit
    call, launch preparation and the stand-in dispatcher on the simulator; numba-cuda's real
    dispatcher off it), the coherence state machine, then any other figure by name."""
    out: list[str] = []
    if "njit_noop_floor_ns" in o:
        floor = o["njit_noop_floor_ns"]
        out += [
            "",
            "njit call of a no-op, one argument (ns/call; ratio to the floor):",
            table(
                [
                    ("argument", "ns/call", "x floor"),
                    *(
                        (name, f"{o[key]:.0f}", f"{o[key] / floor:.2f}")
                        for name, key in (
                            ("ndarray", "njit_noop_ndarray_ns"),
                            ("SmartArray (coherent)", "njit_noop_smartarray_ns"),
                            ("floor (cached _numba_type_, attribute unbox)", "njit_noop_floor_ns"),
                        )
                    ),
                ]
            ),
        ]
    if "launch_prep_smartarray_ns" in o:
        out += [
            "",
            f"kernel launch preparation, data already current (ns/argument){sim}:",
            f"  SmartArray.to_device + callbacks   {o['launch_prep_smartarray_ns']:10.0f}",
            f"  numba In(devary).to_device         {o['launch_prep_device_array_ns']:10.0f}",
            f"  overhead                           {o['launch_prep_overhead_ns']:10.0f}",
        ]
    if "jit_launch_plain_smartarray_ns" in o:
        out += [
            "",
            f"smartarray.jit launch, k[1, 32](out, x, y), stand-in dispatcher (ns/launch){sim}:",
            f"  plain cuda.jit, bare SmartArrays   {o['jit_launch_plain_smartarray_ns']:10.0f}",
            f"  plain cuda.jit, sa.In(x), sa.In(y) {o['jit_launch_annotated_smartarray_ns']:10.0f}",
            f"  smartarray.jit, bare SmartArrays   {o['jit_launch_inferred_smartarray_ns']:10.0f}",
            f"  inference overhead (vs annotated)  {o['jit_launch_overhead_ns']:10.0f}",
            f"  device arrays: plain / jit / extra {o['jit_launch_plain_device_array_ns']:6.0f} /"
            f" {o['jit_launch_inferred_device_array_ns']:6.0f} /"
            f" {o['jit_launch_overhead_device_array_ns']:6.0f}",
        ]
    if "real_launch_device_array_ns" in o:
        out += ["", *_format_real_launch(o)]
    out += ["", "coherence state machine (ns/call):"]
    out += [f"  {k:36s} {v:10.1f}" for k, v in o.items() if k.startswith(("coherence", "python"))]
    rest = [k for k in o if not k.startswith(_SECTIONS)]
    if rest:
        out += ["", "other figures:", *(f"  {k:36s} {o[k]:10.1f}" for k in rest)]
    return out


def _format_real_launch(o: dict[str, float]) -> list[str]:
    """The launches through numba-cuda's real dispatcher (a GPU, or the fake driver, where the
    time above the driver and the driver calls per launch come too) as a table."""

    def cell(key: str, spec: str) -> str:
        return format(o[key], spec) if key in o else "-"

    fake = "real_launch_device_array_above_driver_ns" in o
    head = ("launch", "ns/launch", "x device arrays")
    head += ("above driver (ns)", "x", "driver calls") if fake else ()
    rows = [head]
    measured = [
        k[len("real_launch_") : -len("_ns")]
        for k in o
        if k.startswith("real_launch_") and k.endswith("_ns") and not k.endswith("driver_ns")
    ]
    known = list(_REAL_LAUNCHES)  # in this order, then any other variant measured
    for name in sorted(measured, key=lambda n: known.index(n) if n in known else len(known)):
        label, key = _REAL_LAUNCHES.get(name, name), f"real_launch_{name}"
        same = name == "device_array"
        row = (label, cell(f"{key}_ns", ",.0f"), "1.00" if same else cell(f"{key}_ratio", ".2f"))
        if fake:
            above = "1.00" if same else cell(f"{key}_above_driver_ratio", ".2f")
            row += (cell(f"{key}_above_driver_ns", ",.0f"), above)
            row += (cell(f"{key}_driver_calls", ".0f"),)
        rows.append(row)
    return [
        "kernel launch k[1, 32](out, x, y) through numba-cuda's dispatcher, arguments current:",
        table(rows),
    ]


def format_report(report: dict[str, Any]) -> str:
    """The report as terminal tables."""
    seconds = "seconds*" if report["simulator"] else "seconds"
    head = ("workload / strategy", "transfers", "bytes", seconds, "bytes/hand", "bytes/auto")
    rows: list[tuple[str, ...]] = [head]
    for w in report["workloads"]:
        agree = "" if w["results_agree"] else "  (RESULTS DIFFER)"
        rows.append((f"{w['name']}{agree}", "", "", "", "", ""))
        hand = w["strategies"]["hand"]["bytes"]
        auto = w["strategies"]["auto"]["bytes"]
        for key, fig in w["strategies"].items():
            rows.append(
                (
                    f"  {key}",
                    f"{fig['transfers']:,}",
                    f"{fig['bytes']:,}",
                    f"{fig['seconds']:.3f}",
                    f"{_ratio(fig['bytes'], hand):.2f}",
                    f"{_ratio(fig['bytes'], auto):.3f}",
                )
            )
    sim = " - CUDA simulator figures" if report["simulator"] else ""
    p = report["params"]
    out = [
        f"smartarray bench{' --quick' if report['quick'] else ''}: target {report['target']}",
        f"sizes: n={p['n']} float64, {p['steps']} launches, k={p['k']}, table={p['table']}",
        "",
        table(rows),
        *([SIMULATOR_TIMES_NOTE] if report["simulator"] else []),
        "",
        "smartarray / hand (bytes; target 1.00, below where byte ranges beat whole arrays):",
    ]
    for w in report["workloads"]:
        r = w["ratios"]
        out.append(
            f"  {w['name']:26s} bytes {r['smartarray_over_hand_bytes']:.2f}"
            f"   vs auto: bytes {r['smartarray_over_auto_bytes']:.3f}"
            f"   seconds/hand {r['smartarray_over_hand_seconds']:.2f}"
        )
    out += [
        "",
        f"bytes per step (total / {p['steps']} steps: first uploads and final downloads"
        " included; halo_exchange: 2 blocks, 1 halo row each way):",
    ]
    for w in report["workloads"]:
        per = {k: w["strategies"][k]["bytes"] / p["steps"] for k in ("smartarray", "hand", "auto")}
        out.append(
            f"  {w['name']:26s} smartarray {per['smartarray']:10,.0f}   hand {per['hand']:10,.0f}"
            f"   auto {per['auto']:10,.0f}"
        )
    out += [
        "",
        "without hints, bytes / hand: plain cuda.jit, then smartarray.jit (inferred In):",
    ]
    for w in report["workloads"]:
        r = w["ratios"]
        out.append(
            f"  {w['name']:26s} plain {r['smartarray_no_hints_over_hand_bytes']:.2f}"
            f"   smartarray.jit {r['smartarray_jit_over_hand_bytes']:.2f}"
        )
    out += _format_overhead(report["overhead"], sim)
    out += ["", bench_strict.format_figures(report.get("strict_host_syncs_per_launch"))]
    out += ["", bench_budget.format_figures(report.get("over_budget"))]
    out += ["", bench_fragmentation.format_figures(report.get("fragmentation"))]
    out += ["", bench_devices.format_figures(report.get("devices"))]
    if report.get("time"):
        out += ["", bench_time.format_figures(report["time"])]
    out += ["", bench_host.format_figures(report.get("host"))]
    return "\n".join(out)


def _md_table(rows: list[tuple[str, ...]], text_columns: int = 1) -> str:
    """Rows of cells as a GitHub Markdown table: the first row is the header, the first
    ``text_columns`` columns left-aligned, the numbers after them right-aligned."""
    align = "|:--" * text_columns + "|--:" * (len(rows[0]) - text_columns) + "|"
    lines = ["| " + " | ".join(rows[0]) + " |", align]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def format_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown, to paste into an issue: the workload table and the overheads."""
    p = report["params"]
    rows: list[tuple[str, ...]] = [
        (
            "workload",
            "strategy",
            "transfers",
            "bytes",
            "bytes / hand",
            "bytes / auto",
            "seconds (simulator)" if report["simulator"] else "seconds",
        )
    ]
    for w in report["workloads"]:
        hand = w["strategies"]["hand"]["bytes"]
        auto = w["strategies"]["auto"]["bytes"]
        name = w["name"] if w["results_agree"] else f"{w['name']} (**results differ**)"
        for key, fig in w["strategies"].items():
            rows.append(
                (
                    f"`{name}`" if key == "auto" else "",
                    key,
                    f"{fig['transfers']:,}",
                    f"{fig['bytes']:,}",
                    f"{_ratio(fig['bytes'], hand):.2f}",
                    f"{_ratio(fig['bytes'], auto):.3f}",
                    f"{fig['seconds']:.3f}",
                )
            )
    o = report["overhead"]
    overhead = [("measurement (name_unit)", "value")]
    overhead += [(f"`{k}`", f"{v:,.1f}") for k, v in o.items()]
    out = [
        f"### smartarray bench{' --quick' if report['quick'] else ''}",
        "",
        f"target: {report['target']}; sizes: n={p['n']} float64, {p['steps']} launches, "
        f"k={p['k']}, table={p['table']}",
        "",
        _md_table(rows, text_columns=2),
        "",
    ]
    if report["simulator"]:
        out += [
            "> " + SIMULATOR_TIMES_NOTE.replace("\n ", "").lstrip("* "),
            "",
        ]
    budget = report.get("over_budget")
    if budget:
        b = budget["bytes"]
        out += [
            f"SmartArrays totalling {budget['total']:,} bytes under a {budget['budget']:,}-byte "
            f"device budget ({budget['evictions']} evictions):",
            "",
            _md_table(
                [
                    ("bytes moved", "bytes", "/ smartarray"),
                    *(
                        (label, f"{b[key]:,}", f"{_ratio(b[key], b['smartarray']):.2f}")
                        for label, key in (
                            ("smartarray", "smartarray"),
                            ("least possible (offline, Belady)", "least"),
                            ("lower bound (unlimited memory)", "unlimited"),
                            ("managed memory model (64 KiB pages)", "managed"),
                        )
                    ),
                ]
            ),
            "",
        ]
    frag = report.get("fragmentation")
    if frag:
        p = frag["params"]
        out += [
            f"Scattered host reads ({p['reads']} reads of 1-16 float64 of a {8 * p['n']:,}-byte "
            f"array after a kernel, {p['rounds']} rounds), modelled transfer time "
            "(latency x copies + bytes / bandwidth):",
            "",
            _md_table(
                [
                    (
                        "preset",
                        "variant",
                        "copies",
                        "bytes",
                        "smartarray us",
                        "exact us",
                        "whole us",
                        "/ best",
                    ),
                    *(
                        (
                            r["preset"],
                            r["variant"],
                            f"{r['total']['smartarray']['copies']:,}",
                            f"{r['total']['smartarray']['bytes']:,}",
                            f"{r['total']['smartarray']['seconds'] * 1e6:.1f}",
                            f"{r['total']['exact']['seconds'] * 1e6:.1f}",
                            f"{r['total']['whole']['seconds'] * 1e6:.1f}",
                            f"{r['total']['smartarray_over_best']:.2f}",
                        )
                        for r in frag["rows"]
                    ),
                ],
                text_columns=2,
            ),
            "",
        ]
    devices = report.get("devices")
    if devices:
        out += [_devices_markdown(devices), ""]
    if report.get("time"):
        out += ["```text", bench_time.format_figures(report["time"]), "```", ""]
    out += [
        "<details><summary>overheads</summary>",
        "",
        _md_table(overhead),
        "",
        "</details>",
    ]
    return "\n".join(out)


def _devices_markdown(figures: dict[str, Any]) -> str:
    """The partitioned heat steps' bytes per device as a Markdown table (smartarray, then
    hand-written, per kind of copy)."""
    p = figures["params"]
    kinds = bench_devices.KINDS
    rows: list[tuple[str, ...]] = [
        ("devices", "device", *(f"{k} (hand)" for k in kinds)),
    ]
    for r in figures["rows"]:
        if "error" in r:
            rows.append((str(r["devices"]), "", *(["not measured"] * len(kinds))))
            continue
        label = f"{r['devices']} ({r['where'] or r['target']})"
        for d in r["per_device"]:
            cells = (f"{d['moved'][k]:,} ({d['hand'][k]:,})" for k in kinds)
            rows.append((label, str(d["device"]), *cells))
            label = ""
    return "\n".join(
        [
            f"Partitioned heat steps ({p['n']}x{p['n']} float64, {p['steps']} steps, one block "
            "per device): bytes per device over the run, hand-written in brackets:",
            "",
            _md_table(rows, text_columns=2),
        ]
    )
