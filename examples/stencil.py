"""An iterative stencil: 1-D heat diffusion, two SmartArrays swapped every step.

The kernel reads ``In(u)`` and overwrites every element of ``Out(v)``, so the initial
temperatures go up once, nothing comes back between steps, and the result comes down once.

Run: python examples/stencil.py [--n N] [--steps STEPS]
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

ALPHA = 0.25


@cuda.jit
def heat_step(u, v, alpha):
    """v = one explicit diffusion step of u; the two end cells are held fixed."""
    start, step = cuda.grid(1), cuda.gridsize(1)
    n = u.size
    for i in range(start, n, step):
        if i == 0 or i == n - 1:
            v[i] = u[i]
        else:
            v[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])


def reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The same computation with NumPy."""
    u = u0.copy()
    for _ in range(steps):
        v = u.copy()
        v[1:-1] = u[1:-1] + ALPHA * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u = v
    return u


def check(result: np.ndarray, expected: np.ndarray, u0: np.ndarray) -> None:
    """Assert that ``result`` is ``expected`` up to rounding, at the scale of the field ``u0``.

    A GPU contracts ``a * b + c`` into fused multiply-adds, which round otherwise than NumPy;
    where the field decays towards zero (subnormal numbers, at the GPU-sized defaults) one
    last bit is a large part of the value, so the absolute tolerance is a part of the largest
    initial temperature, not of each value. The scheme averages neighbours with positive
    weights (1/4, 1/2, 1/4), so a rounding difference never grows: after many steps the
    differences are at most their sum, a few units in the last place of the scale a step.
    """
    scale = float(np.abs(u0).max())
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12 * scale)


def main(n: int = 256, steps: int = 50) -> tuple[np.ndarray, sa.TransferStats]:
    """Diffuse a hot spot along ``n`` cells for ``steps`` steps; return the temperatures."""
    u0 = np.zeros(n)
    u0[n // 2] = 100.0
    u0[-1] = 10.0
    blocks = min((n + 127) // 128, 64)
    with sa.trace() as t:
        u = sa.SmartArray(u0)
        v = sa.SmartArray(shape=n, dtype=np.float64)  # uninitialised: never copied
        for _ in range(steps):
            heat_step[blocks, 128](sa.In(u), sa.Out(v), ALPHA)
            u, v = v, u
        result = np.array(u)  # one download of the result
    check(result, reference(u0, steps), u0)
    print(f"{steps} diffusion steps on {n} cells: peak {result.max():.4f}, sum {result.sum():.4f}")
    s = t.stats
    print(
        f"moved: {s.h2d_count} upload(s), {s.h2d_bytes} bytes up; "
        f"{s.d2h_count} download(s), {s.d2h_bytes} bytes down"
    )
    print(f"(numba's automatic copies would move {2 * 2 * steps * u0.nbytes} bytes)")
    return result, s


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of cells", gpu=1 << 20, simulator=256),
            Option("steps", "diffusion steps (kernel launches)", gpu=1000, simulator=10),
        ],
    )
    main(args.n, args.steps)
