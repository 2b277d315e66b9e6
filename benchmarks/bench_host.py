"""Host operations on a SmartArray against the same operations on an ndarray (a drop-in).

Each operation of the table below runs on a SmartArray ``a`` and on an ndarray ``x`` holding
the same data, interleaved in one run (see :mod:`bench_timing`: short batches in a rotating
order, each figure the best batch's mean time per call in thread CPU time), at 8, 1,000 and
1,000,000 float64 elements, and the ratio SmartArray / ndarray is printed:

====================  =================================  ====================
operation             SmartArray                         ndarray
====================  =================================  ====================
``get``               ``a[i]``                           ``x[i]``
``set``               ``a[i] = 2.5``                     ``x[i] = 2.5``
``set_each``          ``a[j] = 2.5``, ``j`` the next     ``x[j] = 2.5``
                      element each call (cycling)
``view``              ``a[1:5]``                         ``x[1:5]``
``add``               ``a + 1``                          ``x + 1``
``sin``               ``np.sin(a)``                      ``np.sin(x)``
``sum``               ``a.sum()``                        ``x.sum()``
``mask``              ``a[mask]``                        ``x[mask]``
``construct``         ``sa.SmartArray(x)``               ``np.array(x)`` (both copy)
``iterate``           ``for v in a: pass``               ``for v in x: pass``
``tolist``            ``a.tolist()``                     ``x.tolist()``
``contains``          ``2.5 in a``                       ``2.5 in x``
``host``              ``a.host()``                       ``x.view()``
``asarray``           ``np.asarray(a)``                  ``np.asarray(x[:])``
====================  =================================  ====================

in two states of ``a``: ``fresh`` (just made from an ndarray: current on the host only) and
``used`` (a kernel wrote it, then the host read it back with ``a.host()``, an array the
benchmark keeps alive: both copies allocated and current, a held host array).

Run as a script (``python benchmarks/bench_host.py [--quick] [--spread N]``; the CUDA
simulator serves: ``NUMBA_ENABLE_CUDASIM=1``) or call :func:`run`. ``--spread N`` runs it in N
fresh processes and prints the median of each figure, then every figure's min / median / max.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import timeit
from typing import Any

import numpy as np
from bench_timing import format_spread, interleaved, spread

__all__ = ["OPERATIONS", "SIZES", "STATES", "format_figures", "run"]

SIZES = (8, 1_000, 1_000_000)
STATES = ("fresh", "used")

#: name -> (SmartArray statement, ndarray statement); run in one namespace with ``a``, ``x``,
#: ``i`` (an index in the middle), ``ja`` and ``jx`` (iterators cycling over every index),
#: ``mask`` (every other element), ``np`` and ``sa``.
OPERATIONS: dict[str, tuple[str, str]] = {
    "get": ("a[i]", "x[i]"),
    "set": ("a[i] = 2.5", "x[i] = 2.5"),
    "set_each": ("a[next(ja)] = 2.5", "x[next(jx)] = 2.5"),
    "view": ("a[1:5]", "x[1:5]"),
    "add": ("a + 1", "x + 1"),
    "sin": ("np.sin(a)", "np.sin(x)"),
    "sum": ("a.sum()", "x.sum()"),
    "mask": ("a[mask]", "x[mask]"),
    "construct": ("sa.SmartArray(x)", "np.array(x)"),
    "iterate": ("for v in a: pass", "for v in x: pass"),
    "tolist": ("a.tolist()", "x.tolist()"),
    "contains": ("2.5 in a", "2.5 in x"),
    # An ndarray of the current host data (a view each time, as for an ndarray's slice).
    "host": ("a.host()", "x.view()"),
    "asarray": ("np.asarray(a)", "np.asarray(x[:])"),
}

#: Operations not run at a million elements: a Python loop over them takes seconds per call
#: (minutes before the host fast path); their cost per element is what 1,000 shows.
PER_ELEMENT = ("iterate", "tolist")

_BATCH_S = 1e-3  # about a millisecond per batch (see bench_timing)


cuda: Any = None  # numba.cuda, imported by _kernel (the simulator swaps the kernel's global)


def _scale(a: Any) -> None:  # pragma: no cover - compiled (or simulated)
    k = cuda.grid(1)
    if k < a.size:
        a[k] = a[k] * 1.0


def _kernel() -> Any:
    global cuda
    from numba import cuda

    return cuda.jit(_scale)


def _array(state: str, n: int, kernel: Any) -> tuple[Any, list[Any]]:
    """A SmartArray of ``n`` float64 in ``state``, and what must stay alive with it."""
    import smartarray as sa

    a = sa.SmartArray(np.arange(n, dtype=np.float64))
    keep: list[Any] = []
    if state == "used":
        # One block: the simulator runs each thread in Python. The kernel's argument is the
        # whole array, so all of it is recorded as written on the device (then read back).
        kernel[1, 32](a)
        keep.append(a.host())  # read back on the host, held: both copies current
    return a, keep


def _number(stmt: str, namespace: dict[str, Any]) -> int:
    """Calls per batch for about :data:`_BATCH_S` of ``stmt`` (at least 1)."""
    timer = timeit.Timer(stmt, globals=namespace)
    once = min(timer.repeat(3, 1))
    return max(1, min(5_000, int(_BATCH_S / max(once, 1e-9))))


def measure(op: str, state: str, n: int, rounds: int, kernel: Any) -> dict[str, float]:
    """``{'sa': ns, 'np': ns}`` per call of ``op`` in ``state`` at ``n`` elements."""
    import smartarray as sa

    a, keep = _array(state, n, kernel)
    x = np.arange(n, dtype=np.float64)
    mask = np.zeros(n, bool)
    mask[::2] = True
    namespace = {"a": a, "x": x, "i": n // 2, "mask": mask, "np": np, "sa": sa, "keep": keep}
    namespace["ja"], namespace["jx"] = itertools.cycle(range(n)), itertools.cycle(range(n))
    smart, plain = OPERATIONS[op]
    number = _number(smart, namespace)  # the slower one sets the batch: both run as often
    return interleaved({"sa": smart, "np": plain}, number, rounds, namespace)


def run(quick: bool = False) -> dict[str, float]:
    """Every operation in both states at every size.

    Returns
    -------
    dict of str to float
        ``host_<state>_<op>_<n>_sa_ns``, ``..._np_ns`` (nanoseconds per call) and
        ``..._ratio`` (SmartArray / ndarray).
    """
    kernel = _kernel()
    rounds = 5 if quick else 15
    sizes = SIZES[:2] if quick else SIZES
    out: dict[str, float] = {}
    for state in STATES:
        for op in OPERATIONS:
            for n in sizes:
                if n > 1_000 and op in PER_ELEMENT:
                    continue
                fig = measure(op, state, n, rounds, kernel)
                key = f"host_{state}_{op}_{n}"
                out[f"{key}_sa_ns"] = fig["sa"]
                out[f"{key}_np_ns"] = fig["np"]
                out[f"{key}_ratio"] = fig["sa"] / fig["np"]
    return out


def _cell(figures: dict[str, float], key: str) -> str:
    if f"{key}_ratio" not in figures:
        return ""
    smart, plain = figures[f"{key}_sa_ns"], figures[f"{key}_np_ns"]
    return f"{smart / 1e3:.2f} vs {plain / 1e3:.2f} us: {figures[f'{key}_ratio']:.1f}x"


def format_figures(figures: dict[str, float] | None) -> str:
    """The figures as one table per state (SmartArray vs ndarray, microseconds, ratio)."""
    if not figures:
        return "host operations: not measured"
    lines = []
    for state in STATES:
        lines.append(
            f"host operations, {state} array (SmartArray vs ndarray per call; ratio):"
            if state == "fresh"
            else f"host operations, {state} array (a kernel wrote it, a.host() read it back and "
            "is held):"
        )
        lines.append(f"  {'operation':10s}" + "".join(f"{n:>32,}" for n in SIZES))
        for op in OPERATIONS:
            cells = [_cell(figures, f"host_{state}_{op}_{n}") for n in SIZES]
            lines.append(f"  {op:10s}" + "".join(f"{c:>32s}" for c in cells))
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> None:
    """Print the figures (``--quick``: fewer rounds, no million-element arrays)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller arrays")
    parser.add_argument("--spread", type=int, metavar="N", help="N runs in fresh processes")
    parser.add_argument("--json-figures", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spread:
        values = spread(__file__, ["--quick"] if args.quick else [], args.spread)
        medians = {key: statistics.median(v) for key, v in values.items()}
        for key in [k for k in medians if k.endswith("_ratio")]:
            base = key[: -len("_ratio")]
            medians[key] = medians[f"{base}_sa_ns"] / medians[f"{base}_np_ns"]
        print(f"medians of {args.spread} fresh runs:")
        print(format_figures(medians))
        print()
        print(format_spread({k: v for k, v in values.items() if k.endswith("_ratio")}))
        return
    if "NUMBA_ENABLE_CUDASIM" not in os.environ and "numba.cuda" not in sys.modules:
        from numba import cuda

        fake = os.environ.get("SMARTARRAY_FAKE_GPU", "") not in ("", "0")
        if not fake and not cuda.is_available():
            print("no CUDA GPU: run with NUMBA_ENABLE_CUDASIM=1 for simulator figures")
            return
    figures = run(args.quick)
    if args.json_figures:
        print(json.dumps(figures))
        return
    print(format_figures(figures))


if __name__ == "__main__":
    main()
