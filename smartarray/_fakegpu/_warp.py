"""Warp-level primitives for kernels the fake CUDA driver interprets.

numba's simulator runs each thread of a block on a Python thread and has a block barrier
(``syncthreads``) only. Here each warp-level call (``syncwarp``, the ``shfl_*_sync`` shuffles,
the ``*_sync`` votes, ``match_*_sync``) is a rendezvous: a lane waits until every lane named in
its mask has made the same call with the same mask, or has exited (CUDA: "all non-exited
threads named in mask must execute the same intrinsic with the same mask"), and then each lane
reads its result from the values the others brought. Lanes of a warp with fewer than 32
threads (a block whose size is not a multiple of 32) count as exited.

What CUDA leaves undefined fails the launch instead of returning a value a GPU might not: a
lane whose own bit is not in its mask, lanes that meet with different primitives, and a
rendezvous that can never complete (a lane of the mask waits at ``syncthreads`` meanwhile: a
GPU hangs there). ``activemask`` is absent on purpose: it answers which lanes happen to be
converged at that instant, which threads run one by one in Python do not model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["WarpFault", "Warps", "install"]

WARP = 32
FULL = 0xFFFFFFFF
#: How long a rendezvous may make no progress at all before it is reported as a hang.
STALL_SECONDS = 60.0
#: How long the lanes a rendezvous waits for must all sit at syncthreads, with no progress
#: in the block, before it is reported as a hang: the simulator releases a barrier's threads
#: one by one, so for a moment a released lane sees others still marked as waiting there.
SYNCTHREADS_SECONDS = 2.0


class WarpFault(RuntimeError):
    """A warp-level call that CUDA leaves undefined, or one that would hang a GPU."""


class _Meeting:
    """One warp-level call that the lanes of ``mask`` make together."""

    def __init__(self, op: str, mask: int) -> None:
        self.op = op
        self.mask = mask
        self.values: dict[int, object] = {}  # lane -> what it brought
        self.results: dict[int, object] | None = None


class Warps:
    """The warp-level state of one block: open meetings, exited threads."""

    def __init__(self, block: tuple[int, int, int]) -> None:
        self.nthreads = block[0] * block[1] * block[2]
        self.cond = threading.Condition()
        self.exited: set[int] = set()  # thread ids
        self.threads: dict[int, Any] = {}  # thread id -> the simulator's BlockThread
        self.open: dict[tuple[int, int], _Meeting] = {}  # (warp, mask) -> meeting
        self.progress = time.monotonic()

    def body(self, fn: Callable[..., object]) -> Callable[..., object]:
        """``fn`` as a thread's body that tells the warps when it exits."""

        def run(*args: object) -> object:
            thread = threading.current_thread()
            tid = thread.thread_id  # type: ignore[attr-defined]  # a simulator BlockThread
            with self.cond:
                self.threads[tid] = thread
            try:
                return fn(*args)
            finally:
                with self.cond:
                    self.exited.add(tid)
                    self.progress = time.monotonic()
                    self.cond.notify_all()

        return run

    def _gone(self, tid: int) -> bool:
        return tid >= self.nthreads or tid in self.exited

    def meet(self, op: str, mask: int, value: object, combine: Callable[..., dict]) -> object:
        """The calling lane's result of ``op`` over the lanes of ``mask``.

        ``combine(values)`` maps {lane: value} of the lanes that met to {lane: result}.
        """
        thread = threading.current_thread()
        tid = thread.thread_id  # type: ignore[attr-defined]
        warp, lane = divmod(tid, WARP)
        mask &= FULL
        if not mask >> lane & 1:
            raise WarpFault(
                f"{op}: lane {lane} of warp {warp} calls it with mask {mask:#010x}, which "
                "does not name the lane itself (undefined in CUDA)"
            )
        with self.cond:
            meeting = self.open.get((warp, mask))
            if meeting is None:
                meeting = self.open[(warp, mask)] = _Meeting(op, mask)
            elif meeting.op != op:
                raise WarpFault(
                    f"lanes of warp {warp} meet with mask {mask:#010x} at different warp-level "
                    f"primitives ({meeting.op} and {op}; undefined in CUDA)"
                )
            meeting.values[lane] = value
            self.progress = time.monotonic()
            self.cond.notify_all()
            suspect_since: float | None = None
            while meeting.results is None:
                lanes = [n for n in range(WARP) if mask >> n & 1]
                missing = [
                    n for n in lanes if n not in meeting.values and not self._gone(warp * WARP + n)
                ]
                if not missing:
                    meeting.results = combine(meeting.values)
                    del self.open[(warp, mask)]
                    self.cond.notify_all()
                    break
                if getattr(thread, "abort", False):  # another thread of the block failed
                    raise RuntimeError("abort flag set in a warp-level call")
                waiting = [self.threads.get(warp * WARP + n) for n in missing]
                now = time.monotonic()
                if not all(t is not None and t.syncthreads_blocked for t in waiting):
                    suspect_since = None
                elif suspect_since is None or suspect_since < self.progress:
                    suspect_since = now
                elif now - suspect_since > SYNCTHREADS_SECONDS:
                    raise WarpFault(
                        f"{op} with mask {mask:#010x} in warp {warp} never completes: lanes "
                        f"{missing} wait at syncthreads (a GPU hangs)"
                    )
                if time.monotonic() - self.progress > STALL_SECONDS:
                    raise WarpFault(
                        f"{op} with mask {mask:#010x} in warp {warp} never completes: lanes "
                        f"{missing} never call it (a GPU hangs)"
                    )
                self.cond.wait(0.01)
            return meeting.results[lane]


def _warps() -> Warps:
    manager = threading.current_thread()._manager  # type: ignore[attr-defined]
    return manager.fakegpu_warps


def _lane() -> int:
    return threading.current_thread().thread_id % WARP  # type: ignore[attr-defined]


def _i32(bits: int) -> np.int32:
    """numba types these results int32: the bit pattern, as a signed 32-bit value."""
    return np.uint32(bits & FULL).view(np.int32)


def _shuffle(mode: str) -> Callable[[int, object, int], object]:
    """``shfl.sync`` in ``mode`` with numba's clamp values (the whole warp, no segments)."""

    def source(lane: int, b: int) -> int:
        b &= 0x1F  # PTX reads the lane operand's low 5 bits
        if mode == "idx":
            return b
        if mode == "up":
            return lane - b if lane - b >= 0 else lane
        if mode == "down":
            return lane + b if lane + b <= 0x1F else lane
        return lane ^ b  # bfly

    name = "shfl_sync" if mode == "idx" else f"shfl_{mode}_sync"

    def shfl(mask: int, value: object, b: int) -> object:
        def combine(values: dict[int, Any]) -> dict[int, object]:
            out = {}
            for lane, (_own, operand) in values.items():
                src = source(lane, operand)
                # CUDA: a value read from a lane that did not take part is undefined.
                if src not in values:
                    raise WarpFault(
                        f"{name}: lane {lane} reads lane {src}, which is not in the "
                        f"mask {mask & FULL:#010x} or has exited (undefined in CUDA)"
                    )
                out[lane] = values[src][0]
            return out

        return _warps().meet(name, mask, (value, int(b)), combine)

    return shfl


def _vote(kind: str) -> Callable[[int, object], object]:
    def vote(mask: int, predicate: object) -> object:
        def combine(values: dict[int, object]) -> dict[int, object]:
            preds = {lane: bool(p) for lane, p in values.items()}
            if kind == "all":
                result: object = all(preds.values())
            elif kind == "any":
                result = any(preds.values())
            elif kind == "eq":
                result = len(set(preds.values())) == 1
            else:
                result = _i32(sum(1 << lane for lane, p in preds.items() if p))
            return dict.fromkeys(values, result)

        return _warps().meet(f"{kind}_sync", mask, predicate, combine)

    return vote


def _key(value: object) -> bytes:
    """What match_*_sync compares: the value's bits (numba bitcasts floats to integers)."""
    return np.asarray(value).tobytes()


def match_any_sync(mask: int, value: object) -> np.int32:
    def combine(values: dict[int, object]) -> dict[int, object]:
        return {
            lane: _i32(sum(1 << other for other, v in values.items() if _key(v) == _key(mine)))
            for lane, mine in values.items()
        }

    return _warps().meet("match_any_sync", mask, value, combine)  # type: ignore[return-value]


def match_all_sync(mask: int, value: object) -> tuple[np.int32, bool]:
    def combine(values: dict[int, object]) -> dict[int, object]:
        same = len({_key(v) for v in values.values()}) == 1
        # The lanes that met (a GPU answers 0x3ff for ten threads and the full mask).
        result = (_i32(sum(1 << lane for lane in values)) if same else _i32(0), same)
        return dict.fromkeys(values, result)

    return _warps().meet("match_all_sync", mask, value, combine)  # type: ignore[return-value]


def syncwarp(mask: int = FULL) -> None:
    _warps().meet("syncwarp", mask, None, lambda values: dict.fromkeys(values))


def lanemask_lt() -> np.uint32:
    return np.uint32((1 << _lane()) - 1)


def install(fake_module: object) -> None:
    """Give a launch's ``numba.cuda`` stand-in the warp-level primitives."""
    names: dict[str, object] = {
        "syncwarp": syncwarp,
        "shfl_sync": _shuffle("idx"),
        "shfl_up_sync": _shuffle("up"),
        "shfl_down_sync": _shuffle("down"),
        "shfl_xor_sync": _shuffle("bfly"),
        "all_sync": _vote("all"),
        "any_sync": _vote("any"),
        "eq_sync": _vote("eq"),
        "ballot_sync": _vote("ballot"),
        "match_any_sync": match_any_sync,
        "match_all_sync": match_all_sync,
        "lanemask_lt": lanemask_lt,
    }
    for name, fn in names.items():
        setattr(fake_module, name, fn)
