"""Host edits between kernels: only the bytes the host wrote go back up.

A kernel advances a large array every step; between steps the host overwrites a few
elements (a boundary condition, a source term, user input). smartarray tracks the edit as a
byte range, so the next launch uploads exactly those bytes, not the array.

Run: python examples/host_edits.py [--n N] [--steps STEPS] [--edit EDIT]
(no GPU: it restarts itself on the CUDA simulator, with small sizes, and says so;
--help lists the options)
"""

from __future__ import annotations

import numpy as np

# isort: off
import smartarray as sa  # first: SMARTARRAY_FAKE_GPU loads its driver before numba.cuda
from numba import cuda
from smartarray._cli import Option, parse_example_args

# isort: on


@cuda.jit
def decay(x, factor):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.size, step):
        x[i] *= factor


def main(
    n: int = 512, steps: int = 4, k: int = 4, factor: float = 0.5
) -> tuple[np.ndarray, list[sa.TransferStats]]:
    """Decay ``n`` floats ``steps`` times, setting ``k`` of them on the host before each step."""
    blocks = min((n + 127) // 128, 64)
    expected = np.ones(n)
    a = sa.SmartArray(expected)
    per_step = []
    for step in range(steps):
        with sa.trace() as t:
            lo = (step * k) % (n - k)
            a[lo : lo + k] = step + 1.0  # a host write: marks k * 8 bytes stale on the device
            decay[blocks, 128](a, factor)  # uploads only those bytes (the first step: all)
        expected[lo : lo + k] = step + 1.0
        expected *= factor
        per_step.append(t.stats)
        up = t.stats.h2d_bytes
        print(f"step {step}: edited a[{lo}:{lo + k}] on the host, uploaded {up} bytes")
    with sa.trace() as t:
        result = np.array(a)  # one download of the result
    np.testing.assert_allclose(result, expected)
    per_step.append(t.stats)
    print(f"result: sum {result.sum():.6f}; downloaded {t.stats.d2h_bytes} bytes once at the end")
    whole = steps * 2 * a.nbytes
    moved = sum(s.nbytes for s in per_step)
    print(f"moved {moved} bytes in all (whole-array copies around every launch: {whole})")
    return result, per_step


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float64 elements in the array", gpu=1 << 22, simulator=512),
            Option("steps", "kernel launches, each after one host edit", gpu=20, simulator=4),
            Option(
                "edit",
                "elements the host overwrites before each launch",
                gpu=16,
                simulator=4,
                aliases=("k",),
            ),
        ],
    )
    main(args.n, args.steps, args.edit)
