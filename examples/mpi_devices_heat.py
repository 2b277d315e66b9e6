"""2-D heat diffusion over MPI ranks, each rank on several GPUs: only halo rows move.

The grid is split by rows over the ranks (as ``mpi_heat.py``); each rank's block, with one halo
row above and below, is split again by rows over the rank's GPUs with ``smartarray.decompose``
(one kernel per device on its part, as ``heat_devices.py``). Before each step
``smartarray.mpi.exchange_halos`` sends the block's first and last owned rows to the
neighbouring ranks and receives theirs into the halo rows. Per step and rank, the bytes that
move are the rows sent (down from the device that wrote them), the rows received (up to the
device that reads them) and, between the rank's devices, the rows at their parts' edges (peer
to peer, else through the host). The result is identical whatever the ranks and devices.

Run: mpiexec -n N python examples/mpi_devices_heat.py [--n N] [--steps STEPS] [--devices D]
(also runs as a single process without mpiexec; no GPU: it restarts itself on the CUDA
simulator, with small sizes, and says so; on the fake CUDA driver
``SMARTARRAY_FAKE_GPU_DEVICES=2`` gives each rank two devices; needs the ``mpi`` extra, from a
clone: pip install ".[mpi]")
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
    sys.exit(f"mpi_devices_heat.py: {exc}")

ALPHA = 0.2


@cuda.jit
def heat_step(u, v, start, offset, block_rows, first, total_rows, alpha):
    """v = one diffusion step of u for the rows of a rank's block that one device owns.

    ``u`` is the part with its halo rows, ``v`` the owned rows: ``v[i]`` is block row
    ``start + i`` and ``u[offset + i]`` the same row of u. Block rows 0 and ``block_rows - 1``
    are the rank's halo rows (copied through: the next exchange overwrites them); block row 1
    is global row ``first``; the global boundary is held fixed.
    """
    i0, j0 = cuda.grid(2)
    si, sj = cuda.gridsize(2)
    rows, cols = v.shape
    for i in range(i0, rows, si):
        b = start + i
        g = first + b - 1
        k = offset + i
        for j in range(j0, cols, sj):
            edge = b == 0 or b == block_rows - 1 or g == 0 or g == total_rows - 1
            if edge or j == 0 or j == cols - 1:
                v[i, j] = u[k, j]
            else:
                lap = u[k - 1, j] + u[k + 1, j] + u[k, j - 1] + u[k, j + 1] - 4.0 * u[k, j]
                v[i, j] = u[k, j] + alpha * lap


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


def main(n: int = 16, steps: int = 4, devices: int = 0) -> np.ndarray | None:
    """Diffuse for ``steps`` steps on an ``n`` x ``n`` grid: rows split over the ranks, each
    rank's block split over its first ``devices`` devices (0: every visible one).

    Returns the global result on rank 0 (None elsewhere).
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
    chosen = range(devices) if devices else None
    pu = sa.decompose(u, halo=1, devices=chosen)
    pv = sa.decompose(v, halo=1, devices=chosen)
    if min(b.rows.stop - b.rows.start for b in pu) < 2:
        raise ValueError(f"--n {n} is too small for {len(pu)} devices per rank")
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    threads = (4, 4) if simulator else (16, 16)
    rows = max(b.rows.stop - b.rows.start for b in pu)
    grid = tuple(
        min(-(-d // t), 2 if simulator else 64) for d, t in zip((rows, n), threads, strict=True)
    )

    per_step = []
    read, write = (u, pu), (v, pv)
    for _ in range(steps):
        with sa.trace() as t:
            sampi.exchange_halos(comm, read[0], axis=0, width=1)
            for bu, bv in zip(read[1], write[1], strict=True):
                with cuda.gpus[bu.device]:
                    heat_step[grid, threads](
                        sa.In(bu.with_halos),
                        sa.Out(bv.owned),
                        bu.first,
                        bu.offset,
                        m + 2,
                        first,
                        n,
                        ALPHA,
                    )
        per_step.append(t.stats)
        read, write = write, read
    mine = np.array(read[0][1 : m + 1])  # the owned rows come down once, at the end
    parts = comm.gather(mine, root=0)

    used = sorted({b.device for b in pu})
    line = (
        f"rank {rank}/{size}: rows {first}..{first + m - 1} of {n}x{n} on device(s) {used}\n"
        f"rank {rank} step bytes: h2d {[s.h2d_bytes for s in per_step]} "
        f"d2h {[s.d2h_bytes for s in per_step]} d2d {[s.d2d_bytes for s in per_step]}"
    )
    lines = comm.gather(line, root=0)
    if rank != 0:
        return None
    result = np.concatenate(parts)
    np.testing.assert_allclose(result, reference(u0, steps), rtol=1e-12, atol=1e-12)
    print(f"{steps} steps on a {n}x{n} grid over {size} rank(s)")
    print("\n".join(lines))
    digest = hashlib.sha256(np.ascontiguousarray(result).tobytes()).hexdigest()[:16]
    print(f"result: peak {result.max():.6f}, sum {result.sum():.6f}, sha256 {digest}")
    return result


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "grid rows and columns", gpu=2048, simulator=16),
            Option(
                "steps",
                "diffusion steps (halo exchanges, a kernel per device)",
                gpu=100,
                simulator=4,
            ),
            Option("devices", "devices per rank (0: every visible one)", gpu=0, simulator=0),
        ],
    )
    main(args.n, args.steps, args.devices)
