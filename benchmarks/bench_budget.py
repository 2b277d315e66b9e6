"""SmartArrays totalling four times the device budget: bytes moved against two references.

The workload: ``chunks`` arrays of ``n`` float64 and a small result array ``acc``, together four
times the device budget (:func:`smartarray.set_device_budget`). Each step, for each chunk in
turn, a kernel updates the chunk's head (a quarter of it, not page aligned) and a second kernel
reads the whole chunk into ``acc`` (kept resident with :func:`smartarray.resident`); after each
step the host reads ``acc`` and changes a few elements of one chunk; at the end the host reads
every chunk. The chunks are used cyclically, so no policy keeps them all: most device uses find
their chunk evicted.

Figures (bytes moved, host to device plus device to host):

- ``smartarray``: counted with :func:`smartarray.trace` while the workload runs;
- ``smartarray_model``: the same access sequence replayed on a byte-exact model of
  smartarray's policy (clean copies first, then least recently used; only stale bytes move):
  it must equal ``smartarray`` (the suite's test checks it), which validates the models below;
- ``least``: the same byte-exact model with the offline policy that evicts the array whose
  next device use is farthest away (Belady's MIN; clean copies first on ties): what knowing
  the future would save;
- ``unlimited``: the bytes the sequence needs with unlimited device memory (each byte uploaded
  when first needed, downloaded when the host needs it): no policy moves fewer;
- ``managed``: a page-granular model of CUDA managed memory (``cuda.managed_array``) under
  the same budget: 64 KiB pages, a page migrated whole when accessed where it is not current,
  a page dirty on the device written back whole when evicted (least recently used page
  first) or when the host touches it. It is generous to managed memory: a clean page is
  dropped without a copy, and no fault latency is counted.

Run as part of ``python -m smartarray bench`` or call :func:`run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

import smartarray as sa
from smartarray._demo import BLOCK, GRID

__all__ = ["FULL", "PAGE", "QUICK", "BudgetParams", "access_sequence", "models", "run"]

PAGE = 64 << 10  # managed memory's migration granularity modelled here


@dataclass(frozen=True)
class BudgetParams:
    """Sizes: ``chunks`` arrays of ``n`` float64, ``steps`` sweeps over them."""

    chunks: int
    n: int
    steps: int


FULL = BudgetParams(chunks=9, n=1 << 16, steps=4)
QUICK = BudgetParams(chunks=9, n=1 << 13, steps=2)


@cuda.jit
def relax(a: Any) -> None:  # pragma: no cover - runs as a kernel
    """``a = 0.5 a + 1`` (reads and writes every element)."""
    for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
        a[i] = 0.5 * a[i] + 1.0


@cuda.jit
def total_into(acc: Any, x: Any, k: int) -> None:  # pragma: no cover - runs as a kernel
    """``acc[k] += sum(x)`` (reads every element of ``x``)."""
    part = 0.0
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        part += x[i]
    cuda.atomic.add(acc, k, part)


# -- the access sequence ------------------------------------------------------------------------
# ("launch", [(array, lo, hi, intent), ...]) | ("host", array, lo, hi, writes)
# Arrays 0..chunks-1 are the chunks, array ``chunks`` is acc.


def _head(p: BudgetParams) -> int:
    return p.n // 4 + 3  # a quarter and a bit: not page aligned


def _edit(p: BudgetParams, step: int) -> tuple[int, int, int]:
    """(chunk, first element, stop) of the host's edit after ``step``."""
    return step % p.chunks, p.n // 2, p.n // 2 + 16


def access_sequence(p: BudgetParams) -> list[tuple[Any, ...]]:
    """The workload's accesses, in byte ranges of each array (what the models replay)."""
    acc = p.chunks
    ops: list[tuple[Any, ...]] = []
    for step in range(p.steps):
        for k in range(p.chunks):
            ops.append(("launch", [(k, 0, _head(p) * 8, "inout")]))
            ops.append(("launch", [(acc, 0, p.chunks * 8, "inout"), (k, 0, p.n * 8, "in")]))
        ops.append(("host", acc, 0, p.chunks * 8, False))
        k, a, b = _edit(p, step)
        ops.append(("host", k, a * 8, b * 8, True))
    ops.extend(("host", k, 0, p.n * 8, False) for k in range(p.chunks))
    return ops


def sizes(p: BudgetParams) -> list[int]:
    return [p.n * 8] * p.chunks + [p.chunks * 8]


def budget_of(p: BudgetParams) -> int:
    """A quarter of what the SmartArrays total."""
    return sum(sizes(p)) // 4


# -- smartarray ----------------------------------------------------------------------------------


def run_smartarray(p: BudgetParams) -> tuple[np.ndarray, sa.Trace]:
    """Run the workload on SmartArrays under the budget; the chunks' final values and the
    trace (restores the budget that was set before)."""
    before = sa.device_budget()
    chunks = [
        sa.SmartArray(np.linspace(0.0, 1.0, p.n) + k, name=f"chunk{k}") for k in range(p.chunks)
    ]
    acc = sa.SmartArray(np.zeros(p.chunks), name="acc")
    sa.set_device_budget(budget_of(p))
    try:
        with sa.trace() as t, sa.resident(acc):
            for step in range(p.steps):
                for k, x in enumerate(chunks):
                    relax[GRID, BLOCK](x[: _head(p)])
                    total_into[GRID, BLOCK](acc, sa.In(x), k)
                np.asarray(acc)  # the host reads the results of the step
                k, a, b = _edit(p, step)
                chunks[k][a:b] = -1.0
            result = np.concatenate([np.asarray(x) for x in chunks])
    finally:
        sa.set_device_budget(before.budget if before.budget is not None else None)
    return result, t


def reference(p: BudgetParams) -> np.ndarray:
    """The chunks' final values, computed with NumPy."""
    chunks = [np.linspace(0.0, 1.0, p.n) + k for k in range(p.chunks)]
    for step in range(p.steps):
        for x in chunks:
            x[: _head(p)] = 0.5 * x[: _head(p)] + 1.0
        k, a, b = _edit(p, step)
        chunks[k][a:b] = -1.0
    return np.concatenate(chunks)


# -- byte-exact models of a policy ----------------------------------------------------------------


class _Bytes:
    """Which bytes of each array are current on the host and on the device, one policy of
    eviction, and the bytes it moves (smartarray's rules: only stale bytes move)."""

    def __init__(
        self, size: list[int], budget: float, policy: str, ops: list[Any], kept: set[int]
    ) -> None:
        self.size = size
        self.budget = budget
        self.policy = policy
        self.kept = kept
        self.host = [np.ones(s, bool) for s in size]
        self.dev = [np.zeros(s, bool) for s in size]
        self.resident: dict[int, int] = {}  # array -> last use (tick)
        self.used = 0
        self.moved = 0
        self.tick = 0
        # next device use of each array after each op (for the offline policy)
        self.uses: dict[int, list[int]] = {k: [] for k in range(len(size))}
        for i, op in enumerate(ops):
            if op[0] == "launch":
                for k, *_ in op[1]:
                    self.uses[k].append(i)

    def _next_use(self, k: int, now: int) -> float:
        for i in self.uses[k]:
            if i > now:
                return i
        return float("inf")

    def _evict(self, need: int, pinned: set[int], now: int) -> None:
        while self.used + need > self.budget:
            cands = [k for k in self.resident if k not in pinned and k not in self.kept]
            if not cands:
                raise MemoryError("the model cannot make room")

            def dirty(k: int) -> bool:
                return bool((self.dev[k] & ~self.host[k]).any())

            if self.policy == "lru":
                k = min(cands, key=lambda c: (dirty(c), self.resident[c]))
            else:  # offline: farthest next use, clean first on ties
                k = max(cands, key=lambda c: (self._next_use(c, now), not dirty(c)))
            self.moved += int((self.dev[k] & ~self.host[k]).sum())
            self.host[k] |= self.dev[k]
            self.dev[k][:] = False
            del self.resident[k]
            self.used -= self.size[k]

    def launch(self, args: list[tuple[int, int, int, str]], now: int) -> None:
        pinned: set[int] = set()
        for k, lo, hi, intent in args:
            self.tick += 1
            if k not in self.resident:
                self._evict(self.size[k], pinned, now)
                self.resident[k] = self.tick
                self.used += self.size[k]
            self.resident[k] = self.tick
            pinned.add(k)
            if intent != "out":
                self.moved += int((~self.dev[k][lo:hi]).sum())
                self.dev[k][lo:hi] = True
        for k, lo, hi, intent in args:
            if intent != "in":
                self.dev[k][lo:hi] = True
                self.host[k][lo:hi] = False

    def host_access(self, k: int, lo: int, hi: int, writes: bool) -> None:
        if writes:  # a contiguous write of the whole range: nothing to fetch first
            self.host[k][lo:hi] = True
            self.dev[k][lo:hi] = False
        else:
            self.moved += int((~self.host[k][lo:hi]).sum())
            self.host[k][lo:hi] = True


class _Pages:
    """CUDA managed memory, page by page (see the module docstring)."""

    def __init__(self, size: list[int], budget: float) -> None:
        self.size = size
        self.budget = budget
        self.on_device: dict[tuple[int, int], int] = {}  # (array, page) -> last use
        self.dirty: set[tuple[int, int]] = set()
        self.used = 0
        self.moved = 0
        self.tick = 0

    def _bytes(self, page: tuple[int, int]) -> int:
        k, p = page
        return min(PAGE, self.size[k] - p * PAGE)

    def _pages(self, k: int, lo: int, hi: int) -> range:
        return range(lo // PAGE, (hi - 1) // PAGE + 1) if hi > lo else range(0)

    def _write_back(self, page: tuple[int, int]) -> None:
        if page in self.dirty:
            self.moved += self._bytes(page)
            self.dirty.discard(page)

    def launch(self, args: list[tuple[int, int, int, str]]) -> None:
        touched = {(k, p) for k, lo, hi, _ in args for p in self._pages(k, lo, hi)}
        for k, lo, hi, intent in args:
            for p in self._pages(k, lo, hi):
                page = (k, p)
                self.tick += 1
                if page not in self.on_device:
                    need = self._bytes(page)
                    while self.used + need > self.budget:
                        victims = [q for q in self.on_device if q not in touched]
                        if not victims:
                            raise MemoryError("the managed model cannot make room")
                        victim = min(victims, key=self.on_device.__getitem__)
                        self._write_back(victim)
                        del self.on_device[victim]
                        self.used -= self._bytes(victim)
                    self.moved += need  # migrated whole
                    self.used += need
                self.on_device[page] = self.tick
                if intent != "in":
                    self.dirty.add(page)

    def host_access(self, k: int, lo: int, hi: int, writes: bool) -> None:
        for p in self._pages(k, lo, hi):
            page = (k, p)
            if page in self.on_device:
                self._write_back(page)  # the host faults the page back, whole
                if writes:  # the device copy is stale now
                    del self.on_device[page]
                    self.used -= self._bytes(page)


def models(p: BudgetParams) -> dict[str, int]:
    """Bytes moved by each model for the workload's access sequence."""
    ops = access_sequence(p)
    size, budget = sizes(p), budget_of(p)
    out = {}
    for name, policy, limit in (
        ("smartarray_model", "lru", budget),
        ("least", "offline", budget),
        ("unlimited", "lru", float("inf")),
    ):
        model = _Bytes(size, limit, policy, ops, kept={p.chunks})
        for i, op in enumerate(ops):
            if op[0] == "launch":
                model.launch(op[1], i)
            else:
                model.host_access(*op[1:])
        out[name] = model.moved
    pages = _Pages(size, budget)
    for op in ops:
        if op[0] == "launch":
            pages.launch(op[1])
        else:
            pages.host_access(*op[1:])
    out["managed"] = pages.moved
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """Run the workload and the models.

    Returns
    -------
    dict
        ``params``, ``budget``, ``total`` (bytes of the SmartArrays), ``results_agree``,
        ``evictions``, and ``bytes``: {``smartarray``, ``smartarray_model``, ``least``,
        ``unlimited``, ``managed``}.
    """
    p = QUICK if quick else FULL
    result, t = run_smartarray(p)
    figures = {"smartarray": t.stats.nbytes, **models(p)}
    return {
        "params": {"chunks": p.chunks, "n": p.n, "steps": p.steps, "page": PAGE},
        "budget": budget_of(p),
        "total": sum(sizes(p)),
        "results_agree": bool(np.allclose(result, reference(p))),
        "evictions": t.stats.evictions,
        "bytes": figures,
    }


def format_figures(figures: dict[str, Any] | None) -> str:
    """The figures as terminal lines."""
    if not figures:
        return ""
    b = figures["bytes"]
    agree = "" if figures["results_agree"] else "  (RESULTS DIFFER)"
    rows = [
        f"arrays larger than the GPU: {figures['total']:,} B of SmartArrays, budget "
        f"{figures['budget']:,} B, {figures['evictions']} evictions{agree}",
        f"  smartarray                          {b['smartarray']:14,} B",
        f"  least possible (offline, Belady)    {b['least']:14,} B"
        f"   ({b['smartarray'] / b['least']:.2f}x)",
        f"  lower bound (unlimited memory)      {b['unlimited']:14,} B",
        f"  managed memory model (64 KiB pages) {b['managed']:14,} B"
        f"   ({b['managed'] / b['smartarray']:.2f}x smartarray)",
    ]
    return "\n".join(rows)
