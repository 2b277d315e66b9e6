"""Quickstart: one SmartArray used by a cuda.jit kernel, the host and an njit function.

Run: python examples/quickstart.py [--n N] [--steps STEPS]
(no GPU: it restarts itself on the CUDA simulator, with small sizes, and says so;
--help lists the options)
"""

from __future__ import annotations

import numpy as np

# isort: off
import smartarray as sa  # first: SMARTARRAY_FAKE_GPU loads its driver before numba.cuda
import numba
from numba import cuda
from smartarray._cli import Option, parse_example_args

# isort: on


@cuda.jit
def add_one(x):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.size, step):
        x[i] += 1.0


@numba.njit
def total(x):
    return x.sum()


def main(n: int = 1000, launches: int = 10) -> tuple[float, sa.TransferStats]:
    """Increment ``n`` floats ``launches`` times on the device, then sum them on the host."""
    blocks = min((n + 127) // 128, 64)
    a = sa.SmartArray(np.arange(n, dtype=np.float64))
    with sa.trace() as t:
        for _ in range(launches):
            add_one[blocks, 128](a)  # uploads n * 8 bytes once; then the data stays there
        a[0] = 0.0  # a host write of one element: nothing downloads
        last = a[n - 1]  # a host read of one element: 8 bytes download
        result = total(a)  # njit: downloads the other stale bytes, then runs on the host
    expected = np.arange(n, dtype=np.float64) + launches
    expected[0] = 0.0
    assert last == expected[-1]
    assert result == expected.sum()
    print(f"sum of {n} floats after {launches} launches: {result}")
    print("moved:")
    for event in t.events:
        print(f"  {event.direction} {event.nbytes:>8} bytes  ({event.reason})")
    s = t.stats
    print(f"total: {s.h2d_bytes} bytes up, {s.d2h_bytes} bytes down")
    return result, s


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float64 elements", gpu=1 << 20, simulator=1000),
            Option(
                "steps",
                "kernel launches before the host reads the result",
                gpu=100,
                simulator=3,
                aliases=("launches",),
            ),
        ],
    )
    main(args.n, args.steps)
