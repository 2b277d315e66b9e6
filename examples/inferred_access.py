"""Optimal transfers without annotations: ``smartarray.jit`` infers what each kernel reads.

A simulation step reads two large coefficient arrays it never writes and updates a state
array; between steps the host inspects the coefficients. With a plain ``cuda.jit`` kernel and
no ``In`` hints, every launch records the coefficients as written on the device, so each host
look downloads them again. ``smartarray.jit`` reads the kernel's code, finds that ``coef`` and
``rhs`` are never written, and passes them as ``In``: they go up once and never come back.

Run: python examples/inferred_access.py [--n N] [--steps STEPS]
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


def step(state, coef, rhs):
    """state = coef * state + rhs, elementwise (a relaxation step)."""
    for i in range(cuda.grid(1), state.size, cuda.gridsize(1)):
        state[i] = coef[i] * state[i] + rhs[i]


plain_step = cuda.jit(step)
inferred_step = sa.jit(step)  # the same code, through smartarray.jit


def run(kernel, n: int, steps: int) -> tuple[np.ndarray, sa.TransferStats]:
    """Run ``steps`` steps with ``kernel``, looking at the coefficients on the host each step."""
    with sa.trace() as t:
        # Named, because with cuda.jit the PerformanceWarning about coef and rhs is the point:
        # it names the waste smartarray.jit removes.
        coef = sa.SmartArray(np.linspace(0.5, 0.9, n), name="coef")
        rhs = sa.SmartArray(np.cos(np.arange(n) * 0.01), name="rhs")
        state = sa.SmartArray(np.zeros(n), name="state")
        for _ in range(steps):
            kernel[4, 128](state, coef, rhs)
            assert coef.min() > 0.0 and rhs.max() <= 1.0  # a host-side check of the inputs
        result = np.array(state)
    return result, t.stats


def main(n: int = 4096, steps: int = 5) -> tuple[np.ndarray, sa.TransferStats, sa.TransferStats]:
    """Both kernels on the same data; return the result and what each moved."""
    print(sa.explain(inferred_step))
    plain, plain_moved = run(plain_step, n, steps)
    result, moved = run(inferred_step, n, steps)
    np.testing.assert_array_equal(result, plain)
    expected = np.zeros(n)
    coef, rhs = np.linspace(0.5, 0.9, n), np.cos(np.arange(n) * 0.01)
    for _ in range(steps):
        expected = coef * expected + rhs
    np.testing.assert_allclose(result, expected)
    for label, s in (("cuda.jit", plain_moved), ("smartarray.jit", moved)):
        print(
            f"{label:15s} {s.h2d_count} upload(s), {s.h2d_bytes} bytes up; "
            f"{s.d2h_count} download(s), {s.d2h_bytes} bytes down"
        )
    return result, plain_moved, moved


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float64 elements per array", gpu=1 << 20, simulator=4096),
            Option("steps", "simulation steps (kernel launches)", gpu=100, simulator=5),
        ],
    )
    main(args.n, args.steps)
