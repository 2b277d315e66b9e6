"""Explicit low-level transfers with pinned memory and a stream, counted by smartarray.

Run: python examples/explicit_transfers.py [--n N] [--steps STEPS]
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
def scale(x, factor):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= factor


def main(n: int = 1024, steps: int = 1) -> np.ndarray:
    """Upload ``n`` floats once, scale them by 2 ``steps`` times on a stream, download once."""
    host = sa.pinned_array(n, dtype=np.float32)  # page-locked: fast, asynchronous copies
    host[:] = np.arange(n, dtype=np.float32)
    s = sa.stream()
    with sa.trace() as t, s.auto_synchronize():
        d = sa.to_device(host, stream=s)
        for _ in range(steps):
            scale[(n + 127) // 128, 128, s](d, 2.0)
        d.copy_to_host(host, stream=s)
    assert np.array_equal(host, 2.0**steps * np.arange(n, dtype=np.float32))
    print(f"scaled {n} floats {steps} time(s) on the device; moved:")
    for event in t.events:
        print(f"  {event.direction} {event.nbytes:>8} bytes  ({event.reason})")
    return host


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float32 elements copied", gpu=1 << 20, simulator=1024),
            Option("steps", "kernel launches between upload and download", gpu=10, simulator=2),
        ],
    )
    main(args.n, args.steps)
