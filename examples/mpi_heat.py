"""2-D heat diffusion decomposed by rows over MPI ranks: only the halo rows move.

Each rank keeps its block of rows, plus one halo row above and below, in two SmartArrays
that a ``cuda.jit`` kernel swaps every step. Before each step
``smartarray.mpi.exchange_halos`` sends the block's first and last owned rows to the
neighbouring ranks and receives theirs into the halo rows: the two sent rows are the only
bytes downloaded, and the two received rows the only bytes the kernel uploads. The result
is identical whatever the number of ranks (each rank prints what it moved per step next to
what numba's automatic copies and whole-block transfers would move).

Run: mpiexec -n N python examples/mpi_heat.py [--n N] [--steps STEPS]
(also runs as a single process without mpiexec; no GPU: it restarts itself on the CUDA
simulator, with small sizes, and says so; --help lists the options; needs the ``mpi``
extra, from a clone: pip install ".[mpi]")
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

# isort: off
import smartarray as sa  # first: SMARTARRAY_FAKE_GPU loads its driver before numba.cuda
from numba import cuda
from smartarray._cli import Option, parse_example_args

# isort: on

try:
    import smartarray.mpi as sampi
except ImportError as exc:  # no mpi4py: its message names the extra to install
    sys.exit(f"mpi_heat.py: {exc}")

ALPHA = 0.2


@cuda.jit
def heat_step(u, v, first, total_rows, alpha):
    """v = one explicit diffusion step of u on a block whose row 1 is global row ``first``.

    Rows 0 and -1 are halos (copied through); the global boundary is held fixed.
    """
    i0, j0 = cuda.grid(2)
    si, sj = cuda.gridsize(2)
    rows, cols = u.shape
    for i in range(i0, rows, si):
        g = first + i - 1
        for j in range(j0, cols, sj):
            if i == 0 or i == rows - 1 or g == 0 or g == total_rows - 1 or j == 0 or j == cols - 1:
                v[i, j] = u[i, j]
            else:
                lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
                v[i, j] = u[i, j] + alpha * lap


def initial(n: int) -> np.ndarray:
    """The global ``n`` x ``n`` starting temperatures: a hot top edge and a hot spot."""
    u0 = np.zeros((n, n))
    u0[0, :] = 100.0
    u0[n // 2, n // 3] = 500.0
    return u0


def reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The same computation with NumPy, on one process."""
    u = u0.copy()
    for _ in range(steps):
        v = u.copy()
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        v[1:-1, 1:-1] = c + ALPHA * lap
        u = v
    return u


def split(n: int, size: int, rank: int) -> tuple[int, int]:
    """The first global row and the number of rows rank ``rank`` of ``size`` owns."""
    counts = [len(c) for c in np.array_split(np.arange(n), size)]
    return sum(counts[:rank]), counts[rank]


def main(n: int = 16, steps: int = 5) -> tuple[np.ndarray | None, list[sa.TransferStats]]:
    """Diffuse for ``steps`` steps on an ``n`` x ``n`` grid split by rows over the ranks.

    Returns the global result on rank 0 (None elsewhere) and this rank's bytes moved per step.
    """
    from mpi4py import MPI  # initialises MPI: after the CUDA target was chosen (it may restart)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if n < 3 * size:
        raise ValueError(f"--n {n} is too small for {size} ranks (at least {3 * size} rows)")
    first, m = split(n, size, rank)
    u0 = initial(n)
    block = np.zeros((m + 2, n))  # owned rows 1..m, halo rows 0 and m + 1
    lo, hi = max(first - 1, 0), min(first + m + 1, n)
    block[lo - (first - 1) : hi - (first - 1)] = u0[lo:hi]
    u = sa.SmartArray(block, name=f"u@{rank}")
    v = sa.SmartArray(shape=block.shape, dtype=np.float64, name=f"v@{rank}")  # never copied
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    threads = (4, 4) if simulator else (16, 16)
    blocks = tuple(
        min((d + t - 1) // t, 2 if simulator else 64)
        for d, t in zip(block.shape, threads, strict=True)
    )

    per_step = []
    for _ in range(steps):
        with sa.trace() as t:
            sampi.exchange_halos(comm, u, axis=0, width=1)
            heat_step[blocks, threads](sa.In(u), sa.Out(v), first, n, ALPHA)
        per_step.append(t.stats)
        u, v = v, u
    mine = np.array(u[1 : m + 1])  # the owned rows come down once, at the end
    parts = comm.gather(mine, root=0)

    row = n * 8
    neighbours = (rank > 0) + (rank < size - 1)
    later = per_step[1:] or per_step
    moved = max(s.h2d_bytes + s.d2h_bytes for s in later)
    line = (
        f"rank {rank}/{size}: rows {first}..{first + m - 1} ({m} + 2 halo) of {n}x{n}\n"
        f"  bytes per step after the first: smartarray {moved:,} "
        f"(halo rows {2 * neighbours * row:,})\n"
        f"  numba automatic copies {4 * block.nbytes:,}; whole-block {2 * block.nbytes:,}\n"
        f"rank {rank} step bytes: h2d {[s.h2d_bytes for s in per_step]} "
        f"d2h {[s.d2h_bytes for s in per_step]} d2d {[s.d2d_bytes for s in per_step]}"
    )
    lines = comm.gather(line, root=0)
    if rank != 0:
        return None, per_step
    result = np.concatenate(parts)
    np.testing.assert_allclose(result, reference(u0, steps), rtol=1e-12, atol=1e-12)
    print(f"{steps} steps on a {n}x{n} grid over {size} rank(s)")
    print("\n".join(lines))
    digest = hashlib.sha256(np.ascontiguousarray(result).tobytes()).hexdigest()[:16]
    print(f"result: peak {result.max():.6f}, sum {result.sum():.6f}, sha256 {digest}")
    return result, per_step


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "grid rows and columns", gpu=2048, simulator=16),
            Option(
                "steps",
                "diffusion steps (halo exchanges and kernel launches)",
                gpu=100,
                simulator=4,
            ),
        ],
    )
    main(args.n, args.steps)
