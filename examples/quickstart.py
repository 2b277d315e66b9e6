"""Quickstart: one SmartArray used by a cuda.jit kernel, the host and an njit function.

Run: python examples/quickstart.py [--n N] [--launches K]
(with no GPU, set NUMBA_ENABLE_CUDASIM=1 first, or run it through the test suite)
"""

from __future__ import annotations

import argparse

import numba
import numpy as np
from numba import cuda

import smartarray as sa


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 20)
    parser.add_argument("--launches", type=int, default=100)
    args = parser.parse_args()
    main(args.n, args.launches)
