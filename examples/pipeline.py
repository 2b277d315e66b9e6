"""An njit and cuda.jit pipeline: the host fills, the device transforms, the host reduces.

Each round an ``njit`` function writes ``x`` on the host, a ``cuda.jit`` kernel computes ``y``
from ``In(x)`` into ``Out(y)`` on the device, and an ``njit`` reduction reads ``In(y)`` on the
host. Each side finds its copy current: ``x`` goes up once a round, ``y`` comes down once a
round, and nothing else moves (``In`` records no write, ``Out`` uploads nothing first).

Run: python examples/pipeline.py [--n N] [--steps STEPS]
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


@numba.njit
def fill(x, r):
    for i in range(x.size):
        x[i] = (i % 7) + r


@cuda.jit
def square(x, y):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.size, step):
        y[i] = x[i] * x[i]


@numba.njit
def total(y):
    s = 0.0
    for i in range(y.size):
        s += y[i]
    return s


def reference(n: int, rounds: int) -> list[float]:
    """The same computation with NumPy."""
    return [float((((np.arange(n) % 7) + r) ** 2.0).sum()) for r in range(rounds)]


def main(n: int = 256, rounds: int = 3) -> tuple[list[float], sa.TransferStats]:
    """Run ``rounds`` rounds of fill (njit), square (cuda.jit), total (njit) on ``n`` floats."""
    blocks = min((n + 127) // 128, 64)
    x = sa.SmartArray(shape=n, dtype=np.float64)
    y = sa.SmartArray(shape=n, dtype=np.float64)
    totals = []
    with sa.trace() as t:
        for r in range(rounds):
            fill(sa.Out(x), r)  # host writes all of x: nothing downloads first
            square[blocks, 128](sa.In(x), sa.Out(y))  # x goes up; y is not uploaded
            totals.append(total(sa.In(y)))  # y comes down; the host reads it only
    assert totals == reference(n, rounds)
    print(f"totals of {rounds} rounds on {n} floats: {totals}")
    s = t.stats
    print(
        f"moved: {s.h2d_count} upload(s), {s.h2d_bytes} bytes up; "
        f"{s.d2h_count} download(s), {s.d2h_bytes} bytes down"
    )
    return totals, s


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float64 elements", gpu=1 << 20, simulator=256),
            Option(
                "steps",
                "rounds of fill (njit), square (cuda.jit) and total (njit)",
                gpu=10,
                simulator=3,
                aliases=("rounds",),
            ),
        ],
    )
    main(args.n, args.steps)
