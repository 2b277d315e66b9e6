"""How much of smartarray's GPU-only code the fake CUDA driver runs (issue 30's coverage figure).

Runs the test suite three times under ``coverage`` (the simulator, strict mode, the fake
driver), then compares the executed lines of ``smartarray/`` (without ``_fakegpu/``,
``_strict/`` and ``_platform/cuda_simulator.py``, which are test machinery):

- *observed GPU-only*: lines the fake driver run executes and neither simulator run does;
- *real-target branches*: lines no simulator run executes inside a branch taken only on the
  real target (``if _sim.SIMULATOR: ... else:``, ``if not ...SIMULATOR``, an early ``return``
  under ``if ...SIMULATOR``, ``USE_NV_BINDING``, ``__cuda_stream__``, ``ENABLE_CUDASIM``),
  found in the source; the figure is the share of them the fake driver run executes, and the
  ranges it misses are listed.

Usage (slow: three full suites; ``--report-only`` reuses the data files)::

    python tools/gpu_coverage.py [--data-dir DIR] [--report-only] [pytest args...]
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parent.parent
OMIT = ["smartarray/_fakegpu/*", "smartarray/_strict/*", "smartarray/_platform/cuda_simulator.py"]
RUNS = {
    "plain": {},
    "strict": {"SMARTARRAY_STRICT": "1"},
    "fake": {"SMARTARRAY_FAKE_GPU": "1"},
}
#: Words in an ``if`` test that make it a choice between the simulator and a real target.
TARGET_WORDS = ("SIMULATOR", "simulator", "ENABLE_CUDASIM", "USE_NV_BINDING", "__cuda_stream__")


def run_suites(data_dir: Path, pytest_args: list[str]) -> None:
    """Run the suite under coverage once per target, each into its own data file."""
    for name, extra in RUNS.items():
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",)}
        env.update(extra, COVERAGE_FILE=str(data_dir / f".cov.{name}"))
        cmd = [sys.executable, "-m", "coverage", "run", "--source=smartarray"]
        cmd += [f"--omit={','.join(OMIT)}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        # Strict mode's own tests (marked strict_mode) skip on the fake driver, as in .ci/run.
        subprocess.run(cmd + (pytest_args or ["tests"]), cwd=ROOT, env=env, check=False)


def executed(data_file: Path) -> dict[str, set[int]]:
    """Executed lines per file (relative path) in one coverage data file."""
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    out = {}
    for f in data.measured_files():
        rel = os.path.relpath(f, ROOT)
        out[rel] = set(data.lines(f) or ())
    return out


def _mentions_target(test: ast.expr) -> bool:
    return any(w in ast.unparse(test) for w in TARGET_WORDS)


def _negated(test: ast.expr) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)


def _span(stmts: list[ast.stmt]) -> set[int]:
    lines: set[int] = set()
    for s in stmts:
        lines.update(range(s.lineno, (s.end_lineno or s.lineno) + 1))
    return lines


def _ends_in_exit(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue))


def real_target_lines(path: Path) -> set[int]:
    """Source lines inside branches that only the real target takes (see module doc)."""
    tree = ast.parse(path.read_text())
    lines: set[int] = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if not isinstance(stmt, ast.If) or not _mentions_target(stmt.test):
                    continue
                real = stmt.body if _negated(stmt.test) else stmt.orelse
                lines |= _span(real)
                sim = stmt.orelse if _negated(stmt.test) else stmt.body
                if not real and _ends_in_exit(sim):  # `if SIMULATOR: return ...` then GPU code
                    lines |= _span(block[i + 1 :])
    return lines


def ranges(lines: set[int]) -> list[str]:
    """``[1, 2, 3, 7]`` as ``["1-3", "7"]``."""
    out, run = [], []
    for n in sorted(lines):
        if run and n != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(n)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return out


def report(data_dir: Path) -> None:
    """Print the figures and the real-target lines the fake driver run misses."""
    runs = {name: executed(data_dir / f".cov.{name}") for name in RUNS}
    cov = coverage.Coverage(data_file=None, source=["smartarray"], omit=OMIT)
    files = sorted(set().union(*runs.values()))
    totals = {"sim": 0, "fake": 0, "observed": 0, "branch": 0, "branch_fake": 0}
    misses = []
    for rel in files:
        if any(Path(rel).match(p) for p in OMIT) or not rel.startswith("smartarray"):
            continue
        statements = set(cov.analysis2(str(ROOT / rel))[1])
        sim = (runs["plain"].get(rel, set()) | runs["strict"].get(rel, set())) & statements
        fake = runs["fake"].get(rel, set()) & statements
        branch = (real_target_lines(ROOT / rel) & statements) - sim
        totals["sim"] += len(sim)
        totals["fake"] += len(fake)
        totals["observed"] += len(fake - sim)
        totals["branch"] += len(branch)
        totals["branch_fake"] += len(branch & fake)
        if branch - fake:
            misses.append(f"  {rel}: {', '.join(ranges(branch - fake))}")
    share = 100.0 * totals["branch_fake"] / max(totals["branch"], 1)
    print(f"lines executed on the simulator (plain | strict): {totals['sim']}")
    print(f"lines executed on the fake driver:                {totals['fake']}")
    print(f"observed GPU-only (fake - simulator):            {totals['observed']}")
    print(f"real-target branch lines not run on simulator:    {totals['branch']}")
    print(
        f"  of which the fake driver run executes:          {totals['branch_fake']} ({share:.1f}%)"
    )
    print("real-target branch lines the fake driver run misses:")
    print("\n".join(misses) or "  none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".gpu-coverage")
    parser.add_argument("--report-only", action="store_true")
    args, pytest_args = parser.parse_known_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_suites(args.data_dir.resolve(), pytest_args)
    report(args.data_dir)


if __name__ == "__main__":
    main()
