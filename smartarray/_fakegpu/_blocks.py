"""Running one thread block of an interpreted kernel: numba's simulator threads, woken by events.

numba's simulator ``BlockManager`` finds out that every thread of a block reached
``syncthreads`` (or ended) by polling the threads in a loop that never sleeps: with a block's
threads all wanting the interpreter lock, that loop takes it from them, and a kernel with a
barrier ran about five times slower than one without. Here the threads (numba's own
``BlockThread``, so ``syncthreads_count`` & co. and the simulator's kernel API work as they
do there) tell the block when they block or end, and the block waits on a condition between.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["run_block"]


class _Block:
    """What the simulator's threads read of their ``BlockManager`` (``_block_dim``,
    ``block_state``), the warps (:mod:`._warp`), and the condition they signal."""

    def __init__(self, block: tuple[int, int, int], warps: object) -> None:
        self._block_dim = block
        self.block_state = np.zeros(block, dtype=np.bool_)
        self.fakegpu_warps = warps
        self.cond = threading.Condition()


def _thread_class() -> type:
    from numba.cuda.simulator.kernel import BlockThread

    class Thread(BlockThread):
        """A simulator thread that signals its block when it waits at a barrier or ends."""

        finished = False

        def syncthreads(self) -> None:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            block: _Block = self._manager
            with block.cond:
                self.syncthreads_blocked = True
                block.cond.notify_all()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

        def run(self) -> None:
            try:
                super().run()
            finally:
                block: _Block = self._manager
                with block.cond:
                    self.finished = True
                    block.cond.notify_all()

    return Thread


_THREAD: list[type] = []


def run_block(
    fn: Callable[..., object],
    block: tuple[int, int, int],
    grid_point: tuple[int, ...],
    args: list,
    debug: bool,
    warps: object,
) -> None:
    """Run block ``grid_point`` of ``fn`` over ``args``; raises the first thread's exception
    (re-created by the simulator thread with the thread and block indices in its message)."""
    if not _THREAD:
        _THREAD.append(_thread_class())
    state = _Block(block, warps)

    def target() -> None:
        fn(*args)

    threads: list[Any] = [
        _THREAD[0](target, state, grid_point, point, debug) for point in np.ndindex(*block)
    ]
    for t in threads:
        t.start()
    with state.cond:
        while True:
            failed = next((t for t in threads if t.exception), None)
            if failed is not None:
                for other in threads:  # as the simulator: the others stop at their barrier
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            live = [t for t in threads if not t.finished]
            if not live:
                break
            if all(t.syncthreads_blocked for t in live):
                for t in live:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                continue
            state.cond.wait()
    for t in threads:
        t.join()
