"""Run numba-cuda's own test files (from its installed wheel) on smartarray's fake CUDA driver.

Issue 43's measure of the fake driver: numba-cuda's unmodified tests, many files in one
process (one kernel the interpreter cannot run must not fail the rest), on numba-cuda's real
target over the fake ``libcuda.so.1``. Needs the ``test`` extra (numba-cuda's tests import
``filecheck``). Usage, from the checkout's root::

    python tools/numba_cuda_suite.py                 # the 12 files of FILES, one process
    python tools/numba_cuda_suite.py --per-file      # each file in a process of its own
    python tools/numba_cuda_suite.py --files cudapy.test_sync cudadrv.test_events
    python tools/numba_cuda_suite.py --all           # every file of cudapy/ and cudadrv/
    python tools/numba_cuda_suite.py --simulator     # the same files on numba's simulator

It prints pytest's summary line per run and, last, ``passed N failed N skipped N`` in all;
``--min-passed N`` makes it exit 1 below that count. Files are module names under
``numba.cuda.tests``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The files this measures: arrays and carray/farray, atomics, warp-level primitives, captured
#: device arrays, syncthreads and friends, reductions, local, constant and managed memory, and
#: small whole programs. (test_transpose and test_matmul run too, slowly: the interpreter runs
#: each CUDA thread on a Python thread, and transpose's largest case has 524,800 of them.)
FILES = [
    "cudapy.test_array",
    "cudapy.test_atomics",
    "cudapy.test_warp_ops",
    "cudapy.test_device_array_capture",
    "cudapy.test_sync",
    "cudapy.test_reduction",
    "cudapy.test_idiv",
    "cudapy.test_localmem",
    "cudapy.test_montecarlo",
    "cudadrv.test_managed_alloc",
    "cudapy.test_constmem",
    "cudapy.test_blackscholes",
]

#: A quick subset for CI (tests/doubles/test_fakegpu_numba_suite.py): one to two minutes on two
#: loaded shared cores.
QUICK = [
    "cudapy.test_array",
    "cudapy.test_warp_ops",
    "cudapy.test_device_array_capture",
    "cudapy.test_sync",
    "cudapy.test_idiv",
]

_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)\b")


def _all_files() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("numba_cuda")
    if spec is None or spec.origin is None:
        raise SystemExit("numba-cuda is not installed")
    tests = Path(spec.origin).parent / "numba" / "cuda" / "tests"
    return [
        f"{sub}.{path.stem}"
        for sub in ("cudapy", "cudadrv")
        for path in sorted((tests / sub).glob("test_*.py"))
    ]


def run(
    files: list[str], *, simulator: bool = False, timeout: float | None = None, extra: list[str]
) -> tuple[dict[str, int], str]:
    """Run ``files`` in one pytest process; returns the counts of its summary and its output."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NUMBA_ENABLE_CUDASIM", "SMARTARRAY_FAKE_GPU", "SMARTARRAY_STRICT")
    }
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env["SMARTARRAY_FAKE_GPU"] = "1"
    paths = [str(ROOT / "tools"), str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with tempfile.TemporaryDirectory() as rootdir:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "_numba_cuda_plugin",
            # numba-cuda's tests outside its tree: no ini of this checkout (its addopts), and
            # modules imported by name (pytest's default would put numba/ on sys.path).
            "-c",
            os.devnull,
            "--rootdir",
            rootdir,
            "--import-mode=importlib",
            *extra,
            "--pyargs",
            *(f"numba.cuda.tests.{name}" for name in files),
        ]
        try:
            done = subprocess.run(
                cmd, env=env, cwd=rootdir, capture_output=True, text=True, timeout=timeout
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            output = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s"
            if isinstance(output, bytes):  # pragma: no cover (text=True gives str)
                output = output.decode()
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    summary = [line for line in output.splitlines() if " in " in line and _COUNTS.search(line)]
    if summary:
        for number, word in _COUNTS.findall(summary[-1]):
            key = "errors" if word.startswith("error") else word
            if key in counts:
                counts[key] += int(number)
    return counts, output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", help="modules under numba.cuda.tests")
    parser.add_argument("--quick", action="store_true", help="the quick subset CI runs")
    parser.add_argument("--all", action="store_true", help="every cudapy/ and cudadrv/ file")
    parser.add_argument("--per-file", action="store_true", help="a process per file")
    parser.add_argument("--simulator", action="store_true", help="numba's CUDA simulator")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per process")
    parser.add_argument("--min-passed", type=int, default=0, help="exit 1 below this count")
    parser.add_argument("--log", type=Path, help="write the whole output here")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    files = args.files or (_all_files() if args.all else QUICK if args.quick else FILES)
    groups = [[f] for f in files] if args.per_file else [files]
    total = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    logs = []
    for group in groups:
        start = time.monotonic()
        counts, output = run(
            group, simulator=args.simulator, timeout=args.timeout, extra=args.pytest_args
        )
        logs.append(output)
        for key, value in counts.items():
            total[key] += value
        label = group[0] if len(group) == 1 else f"{len(group)} files"
        took = time.monotonic() - start
        print(f"{label}: {' '.join(f'{k} {v}' for k, v in counts.items())} ({took:.0f} s)")
    if args.log:
        args.log.write_text("\n".join(logs))
    print(" ".join(f"{k} {v}" for k, v in total.items()))
    return 1 if total["passed"] < args.min_passed else 0


if __name__ == "__main__":
    sys.exit(main())
