"""The benchmark workloads, each written once per strategy of :mod:`strategies`.

Every workload is a subclass of :class:`Workload` with one method per strategy
(``auto``, ``hand``, ``whole_array_flags``, ``smartarray``); each method runs the whole
workload from host data to a host result and returns the result, so the suite can check
that the four agree. ``hand`` is what an expert writes: the fewest bytes that keep the
result right, with explicit ``to_device`` / ``copy_to_device`` / ``copy_to_host`` calls on
slices where only part of an array changed.

Kernels use grid-stride loops on a small grid (:data:`~smartarray._demo.GRID` blocks of
:data:`~smartarray._demo.BLOCK` threads), so sizes are free and the CUDA simulator stays fast.
Import this module only after the CUDA target was chosen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numba
import numpy as np
from numba import cuda
from strategies import FlagArray, NumbaAutoCopy

import smartarray as sa
from smartarray._demo import BLOCK, GRID

__all__ = ["WORKLOADS", "Params", "Workload"]

Auto = NumbaAutoCopy
Progress = Callable[[int, int], None] | None


# -- kernels ------------------------------------------------------------------------------------


@cuda.jit
def relax(a: Any) -> None:  # pragma: no cover - runs as a kernel
    """``a = 0.5 a + 1`` (reads and writes every element)."""
    for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
        a[i] = 0.5 * a[i] + 1.0


@cuda.jit
def accumulate(out: Any, x: Any, y: Any) -> None:  # pragma: no cover - runs as a kernel
    """``out = 0.9 out + x y``: ``x`` and ``y`` are read only."""
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = 0.9 * out[i] + x[i] * y[i]


@cuda.jit
def transform(y: Any, x: Any) -> None:  # pragma: no cover - runs as a kernel
    """``y = x**2 + 1``: ``x`` read only, ``y`` overwritten entirely."""
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = x[i] * x[i] + 1.0


@cuda.jit
def lookup(s: Any, table: Any) -> None:  # pragma: no cover - runs as a kernel
    """``s = 0.5 s + table[:s.size]``: reads the head of a large table."""
    for i in range(cuda.grid(1), s.size, cuda.gridsize(1)):
        s[i] = 0.5 * s[i] + table[i]


@numba.njit(cache=False)
def prepare(x: Any, t: float) -> None:  # pragma: no cover - compiled
    """Host-side preparation (njit): ``x[i] = sin(0.01 i + t)``."""
    for i in range(x.size):
        x[i] = math.sin(0.01 * i + t)


@cuda.jit
def diffuse(u: Any, v: Any) -> None:  # pragma: no cover - runs as a kernel
    """``v`` = one diffusion step of ``u`` across rows; rows 0 and -1 (halos) copied through."""
    rows, cols = u.shape
    for k in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        i, j = k // cols, k % cols
        if i == 0 or i == rows - 1:
            v[i, j] = u[i, j]
        else:
            v[i, j] = 0.5 * u[i, j] + 0.25 * (u[i - 1, j] + u[i + 1, j])


def _launch(kernel: Any, *args: Any) -> None:
    kernel[GRID, BLOCK](*args)


#: The kernels and the njit function above, as written (plain ``numba.cuda.jit`` / ``njit``).
PLAIN = SimpleNamespace(
    relax=relax,
    accumulate=accumulate,
    transform=transform,
    lookup=lookup,
    prepare=prepare,
    diffuse=diffuse,
)
#: The same code through ``smartarray.jit`` / ``smartarray.njit``: inferred ``In`` hints.
INFERRED = SimpleNamespace(
    relax=sa.jit(relax.py_func),
    accumulate=sa.jit(accumulate.py_func),
    transform=sa.jit(transform.py_func),
    lookup=sa.jit(lookup.py_func),
    prepare=sa.njit(prepare.py_func, cache=False),
    diffuse=sa.jit(diffuse.py_func),
)


# -- workloads ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Sizes of one run.

    Attributes
    ----------
    n : int
        Elements (float64) of the working arrays.
    steps : int
        Kernel launches.
    k : int
        Elements the host updates between launches (partial updates, rare touches).
    table : int
        Elements of the large, rarely touched array.
    """

    n: int
    steps: int
    k: int
    table: int


FULL = Params(n=4096, steps=40, k=64, table=1 << 18)
QUICK = Params(n=1024, steps=8, k=32, table=1 << 15)
WARM = Params(n=64, steps=2, k=4, table=128)


class Workload:
    """One workload; subclasses implement the four strategies, each returning the result."""

    name = ""
    description = ""

    def run(self, strategy: str, p: Params, progress: Progress = None) -> np.ndarray:
        """Run the workload under ``strategy`` and return its host result."""
        return getattr(self, strategy)(p, progress or (lambda done, total: None))

    def auto(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        raise NotImplementedError

    def hand(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        raise NotImplementedError

    def whole_array_flags(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        raise NotImplementedError

    def smartarray(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        raise NotImplementedError

    def smartarray_no_hints(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        """SmartArrays passed bare (no ``In`` / ``Out``) to the plain ``cuda.jit`` kernels.

        This strategy measures on purpose the waste a ``PerformanceWarning`` names (a read-only
        argument copied back for lack of ``In``): the warning says nothing the table does not,
        about arrays the bench user never named, so it is silenced here only.
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sa.PerformanceWarning)
            return self.bare(p, progress, PLAIN)

    def smartarray_jit(self, p: Params, progress: Callable[[int, int], None]) -> np.ndarray:
        """SmartArrays passed bare to the same kernels through ``smartarray.jit`` / ``njit``."""
        return self.bare(p, progress, INFERRED)

    def bare(self, p: Params, progress: Callable[[int, int], None], k: Any) -> np.ndarray:
        """The ``smartarray`` strategy with no hints, with the kernels of ``k``."""
        raise NotImplementedError


def _start(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n)


class IterativeLoop(Workload):
    name = "iterative_loop"
    description = "one array, one kernel launched `steps` times, result read once"

    def auto(self, p, progress):
        a = _start(p.n)
        for s in range(p.steps):
            _launch(relax, Auto(a))
            progress(s + 1, p.steps)
        return a

    def hand(self, p, progress):
        d = sa.to_device(_start(p.n))
        for s in range(p.steps):
            _launch(relax, d)
            progress(s + 1, p.steps)
        return d.copy_to_host()

    def whole_array_flags(self, p, progress):
        f = FlagArray(_start(p.n))
        for s in range(p.steps):
            _launch(relax, f)
            progress(s + 1, p.steps)
        return f.get("host")

    def smartarray(self, p, progress):
        a = sa.SmartArray(_start(p.n))
        for s in range(p.steps):
            _launch(relax, a)
            progress(s + 1, p.steps)
        return np.array(a)

    def bare(self, p, progress, k):
        a = sa.SmartArray(_start(p.n))
        for s in range(p.steps):
            _launch(k.relax, a)
            progress(s + 1, p.steps)
        return np.array(a)


class ReadOnlyInputs(Workload):
    name = "read_only_inputs"
    description = "kernel reads two input arrays it never writes; the host reads them too"

    @staticmethod
    def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.cos(np.arange(n) * 0.01), np.linspace(1.0, 2.0, n)

    def auto(self, p, progress):
        x, y = self._inputs(p.n)
        out = np.zeros(p.n)
        check = 0.0
        for s in range(p.steps):
            _launch(accumulate, Auto(out), Auto(x), Auto(y))
            check += float(x[s % p.n]) + float(y[-1])  # a host-side look at the inputs
            progress(s + 1, p.steps)
        return np.append(out, check)

    def hand(self, p, progress):
        x, y = self._inputs(p.n)
        d_x, d_y = sa.to_device(x), sa.to_device(y)
        d_out = sa.to_device(np.zeros(p.n))
        check = 0.0
        for s in range(p.steps):
            _launch(accumulate, d_out, d_x, d_y)
            check += float(x[s % p.n]) + float(y[-1])
            progress(s + 1, p.steps)
        return np.append(d_out.copy_to_host(), check)

    def whole_array_flags(self, p, progress):
        x, y = (FlagArray(v) for v in self._inputs(p.n))
        out = FlagArray(np.zeros(p.n))
        check = 0.0
        for s in range(p.steps):
            _launch(accumulate, out, x, y)
            check += float(x.get("host")[s % p.n]) + float(y.get("host")[-1])
            progress(s + 1, p.steps)
        return np.append(out.get("host"), check)

    def smartarray(self, p, progress):
        x, y = (sa.SmartArray(v) for v in self._inputs(p.n))
        out = sa.SmartArray(np.zeros(p.n))
        check = 0.0
        for s in range(p.steps):
            _launch(accumulate, out, sa.In(x), sa.In(y))
            check += float(x[s % p.n]) + float(y[-1])
            progress(s + 1, p.steps)
        return np.append(np.array(out), check)

    def bare(self, p, progress, k):
        x, y = (sa.SmartArray(v) for v in self._inputs(p.n))
        out = sa.SmartArray(np.zeros(p.n))
        check = 0.0
        for s in range(p.steps):
            _launch(k.accumulate, out, x, y)
            check += float(x[s % p.n]) + float(y[-1])
            progress(s + 1, p.steps)
        return np.append(np.array(out), check)


class PartialHostUpdates(Workload):
    name = "partial_host_updates"
    description = "the host writes k of n elements between launches"

    @staticmethod
    def _window(p: Params, s: int) -> tuple[int, np.ndarray]:
        lo = (s * 997) % (p.n - p.k)
        return lo, np.full(p.k, float(s))

    def auto(self, p, progress):
        a = _start(p.n)
        for s in range(p.steps):
            lo, new = self._window(p, s)
            a[lo : lo + p.k] = new
            _launch(relax, Auto(a))
            progress(s + 1, p.steps)
        return a

    def hand(self, p, progress):
        a = _start(p.n)
        lo, new = self._window(p, 0)
        a[lo : lo + p.k] = new  # the first update goes up with the one full upload
        d = sa.to_device(a)
        for s in range(p.steps):
            if s:
                lo, new = self._window(p, s)
                d[lo : lo + p.k].copy_to_device(new)
            _launch(relax, d)
            progress(s + 1, p.steps)
        return d.copy_to_host()

    def whole_array_flags(self, p, progress):
        f = FlagArray(_start(p.n))
        for s in range(p.steps):
            lo, new = self._window(p, s)
            f.get("host")[lo : lo + p.k] = new
            f.mark_changed("host")
            _launch(relax, f)
            progress(s + 1, p.steps)
        return f.get("host")

    def smartarray(self, p, progress):
        a = sa.SmartArray(_start(p.n))
        for s in range(p.steps):
            lo, new = self._window(p, s)
            a[lo : lo + p.k] = new
            _launch(relax, a)
            progress(s + 1, p.steps)
        return np.array(a)

    def bare(self, p, progress, k):
        a = sa.SmartArray(_start(p.n))
        for s in range(p.steps):
            lo, new = self._window(p, s)
            a[lo : lo + p.k] = new
            _launch(k.relax, a)
            progress(s + 1, p.steps)
        return np.array(a)


class NjitCudaHostPipeline(Workload):
    name = "njit_cuda_host_pipeline"
    description = "njit fills x, a kernel computes y from x, the host reads y; repeated"

    def auto(self, p, progress):
        x, y = np.empty(p.n), np.empty(p.n)
        total = 0.0
        for s in range(p.steps):
            prepare(x, 0.1 * s)
            _launch(transform, Auto(y), Auto(x))
            total += float(y.sum())
            progress(s + 1, p.steps)
        return np.append(y, total)

    def hand(self, p, progress):
        x, y = np.empty(p.n), np.empty(p.n)
        d_x, d_y = sa.device_array(p.n), sa.device_array(p.n)
        total = 0.0
        for s in range(p.steps):
            prepare(x, 0.1 * s)
            d_x.copy_to_device(x)
            _launch(transform, d_y, d_x)
            d_y.copy_to_host(y)
            total += float(y.sum())
            progress(s + 1, p.steps)
        return np.append(y, total)

    def whole_array_flags(self, p, progress):
        x, y = FlagArray(np.empty(p.n)), FlagArray(np.empty(p.n))
        total = 0.0
        for s in range(p.steps):
            prepare(x.get("host"), 0.1 * s)
            x.mark_changed("host")
            _launch(transform, y, x)
            total += float(y.get("host").sum())
            progress(s + 1, p.steps)
        return np.append(y.get("host"), total)

    def smartarray(self, p, progress):
        x = sa.SmartArray(shape=p.n, dtype=np.float64)
        y = sa.SmartArray(shape=p.n, dtype=np.float64)
        total = 0.0
        for s in range(p.steps):
            prepare(x, 0.1 * s)
            _launch(transform, sa.Out(y), sa.In(x))
            total += float(y.sum())
            progress(s + 1, p.steps)
        return np.append(np.array(y), total)

    def bare(self, p, progress, k):
        x = sa.SmartArray(shape=p.n, dtype=np.float64)
        y = sa.SmartArray(shape=p.n, dtype=np.float64)
        total = 0.0
        for s in range(p.steps):
            k.prepare(x, 0.1 * s)
            _launch(k.transform, y, x)
            total += float(y.sum())
            progress(s + 1, p.steps)
        return np.append(np.array(y), total)


class HostPhase(Workload):
    name = "host_numpy_phase"
    description = "device loop, a NumPy phase on the first quarter on the host, device loop"

    def auto(self, p, progress):
        a, q, half = _start(p.n), p.n // 4, p.steps // 2
        for s in range(p.steps):
            if s == half:
                a[:q] = np.tanh(a[:q] - 1.5)
            _launch(relax, Auto(a))
            progress(s + 1, p.steps)
        return a

    def hand(self, p, progress):
        q, half = p.n // 4, p.steps // 2
        d = sa.to_device(_start(p.n))
        for s in range(p.steps):
            if s == half:
                head = d[:q].copy_to_host()
                d[:q].copy_to_device(np.tanh(head - 1.5))
            _launch(relax, d)
            progress(s + 1, p.steps)
        return d.copy_to_host()

    def whole_array_flags(self, p, progress):
        f, q, half = FlagArray(_start(p.n)), p.n // 4, p.steps // 2
        for s in range(p.steps):
            if s == half:
                h = f.get("host")
                h[:q] = np.tanh(h[:q] - 1.5)
                f.mark_changed("host")
            _launch(relax, f)
            progress(s + 1, p.steps)
        return f.get("host")

    def smartarray(self, p, progress):
        a, q, half = sa.SmartArray(_start(p.n)), p.n // 4, p.steps // 2
        for s in range(p.steps):
            if s == half:
                a[:q] = np.tanh(a[:q] - 1.5)
            _launch(relax, a)
            progress(s + 1, p.steps)
        return np.array(a)

    def bare(self, p, progress, k):
        a, q, half = sa.SmartArray(_start(p.n)), p.n // 4, p.steps // 2
        for s in range(p.steps):
            if s == half:
                a[:q] = np.tanh(a[:q] - 1.5)
            _launch(k.relax, a)
            progress(s + 1, p.steps)
        return np.array(a)


class LargeRarelyTouched(Workload):
    name = "large_rarely_touched"
    description = "a large table passed to every launch, k elements updated every steps/4"

    @staticmethod
    def _table(p: Params) -> np.ndarray:
        return np.sin(np.arange(p.table) * 0.001)

    @staticmethod
    def _touch(p: Params, s: int) -> tuple[int, np.ndarray] | None:
        every = max(p.steps // 4, 1)
        if s == 0 or s % every:
            return None
        lo = (s * 131) % (p.n - p.k)
        return lo, np.full(p.k, -float(s))

    def auto(self, p, progress):
        small, table = _start(p.n), self._table(p)
        for s in range(p.steps):
            touch = self._touch(p, s)
            if touch:
                table[touch[0] : touch[0] + p.k] = touch[1]
            _launch(lookup, Auto(small), Auto(table))
            progress(s + 1, p.steps)
        return small

    def hand(self, p, progress):
        d_small, d_table = sa.to_device(_start(p.n)), sa.to_device(self._table(p))
        for s in range(p.steps):
            touch = self._touch(p, s)
            if touch:
                d_table[touch[0] : touch[0] + p.k].copy_to_device(touch[1])
            _launch(lookup, d_small, d_table)
            progress(s + 1, p.steps)
        return d_small.copy_to_host()

    def whole_array_flags(self, p, progress):
        small, table = FlagArray(_start(p.n)), FlagArray(self._table(p))
        for s in range(p.steps):
            touch = self._touch(p, s)
            if touch:
                table.get("host")[touch[0] : touch[0] + p.k] = touch[1]
                table.mark_changed("host")
            _launch(lookup, small, table)
            progress(s + 1, p.steps)
        return small.get("host")

    def smartarray(self, p, progress):
        small, table = sa.SmartArray(_start(p.n)), sa.SmartArray(self._table(p))
        for s in range(p.steps):
            touch = self._touch(p, s)
            if touch:
                table[touch[0] : touch[0] + p.k] = touch[1]
            _launch(lookup, small, table)  # no intent hint: smartarray works it out
            progress(s + 1, p.steps)
        return np.array(small)

    def bare(self, p, progress, k):
        small, table = sa.SmartArray(_start(p.n)), sa.SmartArray(self._table(p))
        for s in range(p.steps):
            touch = self._touch(p, s)
            if touch:
                table[touch[0] : touch[0] + p.k] = touch[1]
            _launch(k.lookup, small, table)
            progress(s + 1, p.steps)
        return np.array(small)


class _Mailbox:
    """An in-process stand-in for an MPI communicator between the blocks of
    :class:`HaloExchange` (buffered sends), so the ``smartarray`` strategy runs the code of
    :mod:`smartarray.mpi` without an MPI library."""

    def __init__(self, rank: int, boxes: dict[tuple[int, int], list[bytes]]) -> None:
        self.rank, self.boxes = rank, boxes

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:  # noqa: N802 - mpi4py's name
        self.boxes.setdefault((self.rank, dest), []).append(memoryview(buf).tobytes())

    def Recv(self, buf: Any, source: int, tag: int = 0, status: Any = None) -> None:  # noqa: N802
        memoryview(buf).cast("B")[:] = self.boxes[(source, self.rank)].pop(0)


class HaloExchange(Workload):
    name = "halo_exchange"
    description = (
        "two row blocks of a 2-D stencil swap one halo row each way per step "
        "(MPI's pattern, in one process); a kernel steps each block"
    )
    cols = 32

    def _blocks(self, p: Params) -> tuple[int, list[np.ndarray]]:
        rows = max(p.n // self.cols, 2)  # owned rows of each block; plus a halo row each side
        return rows, [
            _start((rows + 2) * self.cols).reshape(rows + 2, self.cols) + b for b in range(2)
        ]

    @staticmethod
    def _exchange_host(a: np.ndarray, b: np.ndarray, rows: int) -> None:
        a[rows + 1], b[0] = b[1], a[rows]

    def _result(self, parts: list[np.ndarray], rows: int) -> np.ndarray:
        return np.concatenate([x[1 : rows + 1] for x in parts])

    def auto(self, p, progress):
        rows, u = self._blocks(p)
        v = [np.empty_like(x) for x in u]
        for s in range(p.steps):
            self._exchange_host(u[0], u[1], rows)
            for b in range(2):
                _launch(diffuse, Auto(u[b]), Auto(v[b]))
            u, v = v, u
            progress(s + 1, p.steps)
        return self._result(u, rows)

    def hand(self, p, progress):
        rows, host = self._blocks(p)
        self._exchange_host(host[0], host[1], rows)  # the first exchange before the upload
        u = [sa.to_device(x) for x in host]
        v = [sa.device_array_like(x) for x in host]
        for s in range(p.steps):
            if s:
                low, high = u[0][rows : rows + 1].copy_to_host(), u[1][1:2].copy_to_host()
                u[0][rows + 1 : rows + 2].copy_to_device(high)
                u[1][0:1].copy_to_device(low)
            for b in range(2):
                _launch(diffuse, u[b], v[b])
            u, v = v, u
            progress(s + 1, p.steps)
        return np.concatenate([x[1 : rows + 1].copy_to_host() for x in u])

    def whole_array_flags(self, p, progress):
        rows, host = self._blocks(p)
        u = [FlagArray(x) for x in host]
        v = [FlagArray(np.empty_like(x)) for x in host]
        for s in range(p.steps):
            self._exchange_host(u[0].get("host"), u[1].get("host"), rows)
            for b in range(2):
                u[b].mark_changed("host")
                _launch(diffuse, u[b], v[b])
            u, v = v, u
            progress(s + 1, p.steps)
        return self._result([x.get("host") for x in u], rows)

    def _smart(self, p: Params, progress: Callable[[int, int], None], launch: Any) -> np.ndarray:
        from smartarray._distributed import mpi_halos as _mpi

        rows, host = self._blocks(p)
        u = [sa.SmartArray(x) for x in host]
        v = [sa.SmartArray(shape=x.shape, dtype=x.dtype) for x in host]
        boxes: dict[tuple[int, int], list[bytes]] = {}
        comm = [_Mailbox(0, boxes), _Mailbox(1, boxes)]
        for s in range(p.steps):
            # What smartarray.mpi.exchange_halos does on each rank: sent rows come down if
            # stale, received rows are host writes that the next launch uploads.
            _mpi.send(comm[0], u[0][rows], dest=1)
            _mpi.send(comm[1], u[1][1], dest=0)
            _mpi.recv(comm[0], u[0][rows + 1], source=1)
            _mpi.recv(comm[1], u[1][0], source=0)
            for b in range(2):
                launch(u[b], v[b])
            u, v = v, u
            progress(s + 1, p.steps)
        return np.concatenate([np.array(x[1 : rows + 1]) for x in u])

    def smartarray(self, p, progress):
        return self._smart(p, progress, lambda u, v: _launch(diffuse, sa.In(u), sa.Out(v)))

    def bare(self, p, progress, k):
        return self._smart(p, progress, lambda u, v: _launch(k.diffuse, u, v))


#: The suite, in table order.
WORKLOADS: tuple[Workload, ...] = (
    IterativeLoop(),
    ReadOnlyInputs(),
    PartialHostUpdates(),
    NjitCudaHostPipeline(),
    HostPhase(),
    LargeRarelyTouched(),
    HaloExchange(),
)
