"""Partitioned 2-D heat steps on 1, 2 and 4 devices: bytes per device against hand-written.

The workload is ``examples/heat_devices.py``: an ``n`` x ``n`` grid split by rows with
:func:`smartarray.decompose`, one block per device, a kernel per block on its device each
step, reading its block with one halo row each side and writing its owned rows. For each
device it reports the bytes moved over the whole run, ``h2d`` (in from the host), ``d2h`` (out
to it), ``d2d_in`` and ``d2d_out`` (from and to other devices), next to what hand-written
transfers move (the example's ``optimum``: each block with its halos up once, the halo rows
from the neighbours each later step, the owned rows down once).

A device count this process sees (a machine with that many GPUs) runs here. Any other runs in
a child process on the fake CUDA driver (``SMARTARRAY_FAKE_GPU=1``,
``SMARTARRAY_FAKE_GPU_DEVICES=N``, every pair with peer access): the bytes are the engine's,
only the devices are modelled, and each row of figures says where it ran.

Run as part of ``python -m smartarray bench`` or as a script
(``NUMBA_ENABLE_CUDASIM=1 python benchmarks/bench_devices.py [--quick]``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from smartarray._demo import table

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "heat_devices.py"
DEVICES = (1, 2, 4)
KINDS = ("h2d", "d2h", "d2d_in", "d2d_out")
FAKE = "fake CUDA driver, child process"

__all__ = ["DEVICES", "format_figures", "measure", "run"]


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("heat_devices", EXAMPLE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def measure(devices: int, n: int, steps: int) -> dict[str, Any]:
    """Run the example here on the first ``devices`` devices; the figures of one row."""
    from smartarray._memory import devices as _devices
    from smartarray.memory import SIMULATOR

    run = _example().main(n=n, steps=steps, devices=devices, quiet=True)
    per_device = []
    for d in sorted(run.optimum):
        moved: Counter = Counter()
        for counts in [*run.steps, run.last]:
            moved.update(counts.get(d, {}))
        opt = run.optimum[d]
        hand = Counter(opt["first"]) + Counter(opt["last"])
        for _ in range(steps - 1):
            hand.update(opt["step"])
        per_device.append(
            {
                "device": d,
                "moved": {k: int(moved[k]) for k in KINDS},
                "hand": {k: int(hand[k]) for k in KINDS},
                "per_step": {k: int(run.steps[-1].get(d, {}).get(k, 0)) for k in KINDS},
            }
        )
    peer = all(_devices.peer(a, b) for a in range(devices) for b in range(devices) if a != b)
    return {
        "devices": devices,
        "peer": peer,
        "digest": run.digest,
        "where": "",
        "per_device": per_device,
        "target": "CUDA simulator" if SIMULATOR else "CUDA",
    }


def _visible() -> int:
    from smartarray._memory import devices as _devices

    return _devices.count()


def _in_child(devices: int, n: int, steps: int) -> dict[str, Any]:
    """The figures of ``devices`` fake devices, measured in a child process."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",)}
    env.pop("SMARTARRAY_STRICT", None)
    env.update(
        SMARTARRAY_FAKE_GPU="1",
        SMARTARRAY_FAKE_GPU_DEVICES=str(devices),
        SMARTARRAY_FAKE_GPU_PEER="1",
        NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    argv = [sys.executable, __file__, "--json-figures", "--devices", str(devices)]
    argv += ["--n", str(n), "--steps", str(steps)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"devices": devices, "error": f"the fake-driver child failed: {tail[0]}"}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["where"] = FAKE
    return figures


def run(quick: bool = False) -> dict[str, Any]:
    """The figures for 1, 2 and 4 devices.

    Returns
    -------
    dict
        ``{"params": {"n", "steps"}, "same_result": bool, "rows": [{"devices", "peer",
        "where" ("" when run here), "digest", "target", "reference_digest" (a child's row: the
        one-device result on its target), "per_device": [{"device",
        "moved" | "hand" | "per_step": {"h2d" | "d2h" | "d2d_in" | "d2d_out": int}}]}]}``;
        a row that could not run has ``"error"`` instead.
    """
    n, steps = (32, 4) if quick else (64, 10)
    visible = _visible()
    rows = [measure(d, n, steps) if d <= visible else _in_child(d, n, steps) for d in DEVICES]
    # Each row against the one-device result on its own target (a child's: its own run).
    here = rows[0].get("digest")
    same = all(
        r["digest"] == r.get("reference_digest", here) for r in rows if "digest" in r
    ) and any("digest" in r for r in rows)
    return {"params": {"n": n, "steps": steps}, "same_result": same, "rows": rows}


def format_figures(figures: dict[str, Any] | None) -> str:
    """The figures as a terminal table: per device, the bytes smartarray moved over the run,
    and whether hand-written transfers move the same (else theirs)."""
    if not figures:
        return ""
    p = figures["params"]
    agree = "" if figures["same_result"] else "  (RESULTS DIFFER)"
    rows: list[tuple[str, ...]] = [("devices", "device", *KINDS, "hand-written")]
    notes = []
    for r in figures["rows"]:
        if "error" in r:
            notes.append(f"  {r['devices']} device(s): not measured ({r['error']})")
            continue
        peer = ", peer access" if r["peer"] and r["devices"] > 1 else ""
        label = f"{r['devices']} ({r['where'] or r['target']}{peer})"
        for d in r["per_device"]:
            same = d["moved"] == d["hand"]
            hand = "same" if same else " / ".join(f"{d['hand'][k]:,}" for k in KINDS)
            rows.append((label, str(d["device"]), *(f"{d['moved'][k]:,}" for k in KINDS), hand))
            label = ""
    head = (
        f"partitioned heat steps over devices ({p['n']}x{p['n']} float64, {p['steps']} steps, "
        f"one block per device, one halo row): bytes per device over the run{agree}"
    )
    return "\n".join([head, table(rows), *notes])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid, fewer steps")
    parser.add_argument("--json-figures", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json_figures:  # one row, in this process (a child of run())
        row = measure(args.devices, args.n, args.steps)
        # The one-device result on this target, to compare with: a GPU's fused multiply-adds
        # round otherwise than the fake driver's Python kernels.
        row["reference_digest"] = (
            _example().main(n=args.n, steps=args.steps, devices=1, quiet=True).digest
        )
        print(json.dumps(row))
        return
    print(format_figures(run(args.quick)))


if __name__ == "__main__":
    import smartarray  # noqa: F401 - loads the fake driver first when SMARTARRAY_FAKE_GPU=1

    main()
