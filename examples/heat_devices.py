"""2-D heat diffusion decomposed by rows over this process's GPUs: only halo rows move.

The grid is two SmartArrays, ``u`` and ``v``, split by rows with ``smartarray.decompose``
into one block per device, each with one halo row above and below. Each step launches one
kernel per block, on its device (``with cuda.gpus[block.device]:``), that reads its block of
``u`` with the halos (``sa.In``) and writes the owned rows of ``v`` (``sa.Out``); then ``u``
and ``v`` swap. No copy is written by hand: each block goes up once, the halo rows a
neighbour wrote come device to device (peer to peer where the devices allow it, else
through the host copy), and the owned rows come down once at the end. The script prints
what each device moved next to what hand-written transfers would move, and the result's
hash, which is the same on one device or several.

``--threads 1`` runs the same steps the way multi-GPU codes often do: one host thread per
device, each launching its own blocks, with a barrier between steps (the threads share the two
SmartArrays; every launch still goes through smartarray, whichever thread makes it). The
result is the same, bit for bit.

Run: python examples/heat_devices.py [--n N] [--steps STEPS] [--parts P] [--devices D]
[--threads 0|1]
(no GPU: it restarts itself on the CUDA simulator, one device, with small sizes, and says
so; on the fake CUDA driver, SMARTARRAY_FAKE_GPU=1 SMARTARRAY_FAKE_GPU_DEVICES=4 models four)
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import Counter
from typing import Any

import numpy as np

# isort: off
import smartarray as sa  # before numba.cuda: SMARTARRAY_FAKE_GPU loads its driver first
from numba import cuda
from smartarray._cli import Option, parse_example_args

# isort: on

ALPHA = 0.2
KINDS = ("h2d", "d2h", "d2d_in", "d2d_out")


@cuda.jit
def heat_step(u, v, first, offset, total_rows, alpha):
    """``v`` (owned rows from global row ``first``) = one diffusion step of ``u`` (the block
    with halos: ``u[offset + i]`` is ``v[i]``'s row). The grid's boundary is held fixed."""
    i0, j0 = cuda.grid(2)
    si, sj = cuda.gridsize(2)
    rows, cols = v.shape
    for i in range(i0, rows, si):
        g = first + i
        k = offset + i
        for j in range(j0, cols, sj):
            if g == 0 or g == total_rows - 1 or j == 0 or j == cols - 1:
                v[i, j] = u[k, j]
            else:
                lap = u[k - 1, j] + u[k + 1, j] + u[k, j - 1] + u[k, j + 1] - 4.0 * u[k, j]
                v[i, j] = u[k, j] + alpha * lap


def initial(n: int) -> np.ndarray:
    """The ``n`` x ``n`` starting temperatures: a hot top edge and a hot spot."""
    u0 = np.zeros((n, n))
    u0[0, :] = 100.0
    u0[n // 2, n // 3] = 500.0
    return u0


def reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The same computation with NumPy."""
    u = u0.copy()
    for _ in range(steps):
        v = u.copy()
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        v[1:-1, 1:-1] = c + ALPHA * lap
        u = v
    return u


def per_device(events: list[sa.TransferEvent]) -> dict[int, Counter]:
    """Bytes each device moved: ``h2d`` in from the host, ``d2h`` out to it, ``d2d_in`` and
    ``d2d_out`` from and to another device (trace events name both ends: ``'gpu:N'``)."""
    moved: dict[int, Counter] = {}
    for e in events:
        ends = {"h2d": [(e.target, "h2d")], "d2h": [(e.source, "d2h")]}.get(
            e.direction, [(e.source, "d2d_out"), (e.target, "d2d_in")]
        )
        for where, kind in ends:
            moved.setdefault(int(where.split(":")[1]), Counter())[kind] += e.nbytes
    return moved


def optimum(
    blocks: tuple[sa.DeviceBlock, ...], row: int, peer: bool
) -> dict[int, dict[str, Counter]]:
    """What hand-written transfers move per device, as :func:`per_device` counts it.

    ``first`` (step 1): each block with its halos goes up, except rows its device already
    holds; with peer access, rows another device received earlier in the step come from it
    (one upload per row over the host's bus). ``step`` (each later step): the halo rows other
    devices wrote, device to device, or without peer access down from their writer (once per
    row) and up again. ``last``: the owned rows, down once.
    """
    opt = {b.device: {"first": Counter(), "step": Counter(), "last": Counter()} for b in blocks}
    owner = {r: b.device for b in blocks for r in range(b.rows.start, b.rows.stop)}
    held: dict[int, set[int]] = {d: set() for d in opt}
    first_holder: dict[int, int] = {}
    sent: set[int] = set()
    for b in blocks:  # in launch order
        d, rows = b.device, range(b.halo_rows.start, b.halo_rows.stop)
        for r in (r for r in rows if r not in held[d]):
            if peer and r in first_holder:
                opt[d]["first"]["d2d_in"] += row
                opt[first_holder[r]]["first"]["d2d_out"] += row
            else:
                opt[d]["first"]["h2d"] += row
            first_holder.setdefault(r, d)
            held[d].add(r)
            if owner[r] != d:  # a halo row: the neighbour rewrites it every step
                if peer:
                    opt[d]["step"]["d2d_in"] += row
                    opt[owner[r]]["step"]["d2d_out"] += row
                else:
                    opt[d]["step"]["h2d"] += row
                    if r not in sent:  # the host copy then serves every device that reads it
                        opt[owner[r]]["step"]["d2h"] += row
                        sent.add(r)
        opt[d]["last"]["d2h"] += (b.rows.stop - b.rows.start) * row
    return opt


class Run:
    """What :func:`main` computed and moved: the result, and per device the bytes of each
    step and of the final download (``per_device`` counters), and the hand-written optimum."""

    def __init__(self, result: np.ndarray) -> None:
        self.result = result
        self.steps: list[dict[int, Counter]] = []
        self.last: dict[int, Counter] = {}
        self.optimum: dict[int, dict[str, Counter]] = {}
        self.digest = ""


def _peer(devices: list[int]) -> bool:
    """Whether every pair of the devices used can copy peer to peer (the engine's question)."""
    pairs = set(sa.peer_pairs(devices))
    return all((a, b) in pairs for a in devices for b in devices if a != b)


def _launch(bu: sa.DeviceBlock, bv: sa.DeviceBlock, grid: Any, threads: Any, n: int) -> None:
    """One block's step: read ``bu`` with its halos, write ``bv``'s owned rows, on its device."""
    with cuda.gpus[bu.device]:
        heat_step[grid, threads](
            sa.In(bu.with_halos), sa.Out(bv.owned), bu.first, bu.offset, n, ALPHA
        )


def _threaded_steps(
    pu: tuple[sa.DeviceBlock, ...],
    pv: tuple[sa.DeviceBlock, ...],
    steps: int,
    launch: Any,
    run: Run,
) -> None:
    """The steps with one host thread per device, each launching its own blocks, a barrier
    between steps; this thread records what each step moved (between two barriers)."""
    devices = sorted({b.device for b in pu})
    barrier = threading.Barrier(len(devices) + 1)  # the device threads, and this one
    errors: list[BaseException] = []

    def device_thread(device: int) -> None:
        mine = [(bu, bv) for bu, bv in zip(pu, pv, strict=True) if bu.device == device]
        try:
            for step in range(steps):
                barrier.wait()  # the step starts
                for bu, bv in mine:  # (u and v swap roles each step)
                    if step % 2 == 0:
                        launch(bu, bv)
                    else:
                        launch(bv, bu)
                barrier.wait()  # every device's blocks of this step were launched
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=device_thread, args=(d,)) for d in devices]
    for w in workers:
        w.start()
    try:
        for _ in range(steps):
            with sa.trace() as t:
                barrier.wait()
                barrier.wait()
            run.steps.append(per_device(t.events))
    except threading.BrokenBarrierError:
        pass  # a device thread failed: its error is raised below
    finally:
        for w in workers:
            w.join()
    if errors:
        raise errors[0]


def main(
    n: int = 16,
    steps: int = 4,
    parts: int = 0,
    devices: int = 0,
    quiet: bool = False,
    threaded: bool = False,
) -> Run:
    """Diffuse for ``steps`` steps on an ``n`` x ``n`` grid split into ``parts`` row blocks
    (0: one per device) over the first ``devices`` devices (0: every visible one), a kernel
    per block on its device; ``threaded``: one host thread per device launches its blocks,
    with a barrier between steps."""
    u0 = initial(n)
    u = sa.SmartArray(u0, name="u")
    v = sa.SmartArray(shape=u0.shape, dtype=np.float64, name="v")  # never copied
    chosen = range(devices) if devices else None
    pu = sa.decompose(u, parts or None, halo=1, devices=chosen)
    pv = sa.decompose(v, parts or None, halo=1, devices=chosen)
    if min(b.rows.stop - b.rows.start for b in pu) < 2:
        raise ValueError(f"--n {n} is too small for {len(pu)} blocks (at least 2 rows each)")
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    threads = (4, 4) if simulator else (16, 16)
    # Enough blocks to cover a part (grid-stride loops do the rest), few on the simulator.
    rows = max(b.rows.stop - b.rows.start for b in pu)
    grid = tuple(
        min(-(-size // t), 2 if simulator else 64)
        for size, t in zip((rows, n), threads, strict=True)
    )
    run = Run(result=u0)

    def launch(bu: sa.DeviceBlock, bv: sa.DeviceBlock) -> None:
        _launch(bu, bv, grid, threads, n)

    read, write = (u, pu), (v, pv)
    if threaded:
        _threaded_steps(pu, pv, steps, launch, run)
        if steps % 2:
            read, write = write, read
    else:
        for _ in range(steps):
            with sa.trace() as t:
                for bu, bv in zip(read[1], write[1], strict=True):
                    launch(bu, bv)
            run.steps.append(per_device(t.events))
            read, write = write, read
    with sa.trace() as t:
        run.result = np.array(read[0])  # each device's owned rows come down, once
    run.last = per_device(t.events)
    devices = sorted({b.device for b in pu})
    run.optimum = optimum(pu, n * 8, _peer(devices))
    np.testing.assert_allclose(run.result, reference(u0, steps), rtol=1e-12, atol=1e-12)
    run.digest = hashlib.sha256(np.ascontiguousarray(run.result).tobytes()).hexdigest()[:16]
    if not quiet:
        _report(run, n, steps, len(pu), devices)
    return run


def _report(run: Run, n: int, steps: int, parts: int, devices: list[int]) -> None:
    def show(counts: dict) -> str:
        return ", ".join(f"{k} {counts.get(k, 0):,}" for k in KINDS if counts.get(k)) or "nothing"

    print(f"{steps} steps on a {n}x{n} grid, {parts} block(s) on device(s) {devices}")
    print("bytes moved per device (hand-written optimum in brackets):")
    for d in devices:
        opt = run.optimum[d]
        first, last = run.steps[0].get(d, {}), run.steps[-1].get(d, {})
        print(f"device {d}: step 1            {show(first)}  ({show(opt['first'])})")
        print(f"device {d}: each later step   {show(last)}  ({show(opt['step'])})")
        print(f"device {d}: result (download) {show(run.last.get(d, {}))}  ({show(opt['last'])})")
    r = run.result
    print(f"result: peak {r.max():.6f}, sum {r.sum():.6f}, sha256 {run.digest}")


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "grid rows and columns", gpu=4096, simulator=16),
            Option("steps", "diffusion steps (one kernel per block each)", gpu=100, simulator=4),
            Option("parts", "row blocks (0: one per device)", gpu=0, simulator=0),
            Option("devices", "devices to use (0: every visible one)", gpu=0, simulator=0),
            Option("threads", "1: one host thread per device", gpu=0, simulator=0),
        ],
    )
    main(args.n, args.steps, args.parts, args.devices, threaded=bool(args.threads))
