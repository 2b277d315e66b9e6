"""Explicit low-level transfers with pinned memory and a stream, counted by smartarray.

Run: python examples/explicit_transfers.py [--n N]
(with no GPU, set NUMBA_ENABLE_CUDASIM=1 first, or run it through the test suite)
"""

from __future__ import annotations

import argparse

import numpy as np
from numba import cuda

import smartarray as sa


@cuda.jit
def scale(x, factor):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= factor


def main(n: int = 1024) -> np.ndarray:
    host = sa.pinned_array(n, dtype=np.float32)  # page-locked: fast, asynchronous copies
    host[:] = np.arange(n, dtype=np.float32)
    s = sa.stream()
    with sa.trace() as t:
        with s.auto_synchronize():
            d = sa.to_device(host, stream=s)
            scale[(n + 127) // 128, 128, s](d, 2.0)
            d.copy_to_host(host, stream=s)
    assert np.array_equal(host, 2 * np.arange(n, dtype=np.float32))
    print(f"scaled {n} floats on the device; moved:")
    for event in t.events:
        print(f"  {event.direction} {event.nbytes:>8} bytes  ({event.reason})")
    return host


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 20)
    main(parser.parse_args().n)
