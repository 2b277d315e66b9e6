"""Streams, events and queued device work of the fake CUDA driver.

Work on a stream is an :class:`Op`; it runs only when the host waits for it (a stream or
context synchronisation, an event synchronisation, a blocking copy), and then in an order
drawn from a seeded random generator among the orders CUDA allows: a stream runs its work in
order; the legacy default stream waits for all work of blocking streams and blocking streams
wait for it (non-blocking streams do neither); ``cuStreamWaitEvent`` orders later work of a
stream after what an event captured. Only the work the host waits for runs: everything else
stays queued, the most adversarial choice CUDA permits. The seed is
``SMARTARRAY_FAKE_GPU_SEED`` (default 0).
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections.abc import Callable

from ._errors import CUDA_ERROR_INVALID_HANDLE, CudaError

__all__ = ["LEGACY", "PER_THREAD", "Event", "Op", "Queue", "Stream"]

LEGACY = 1  # CU_STREAM_LEGACY
PER_THREAD = 2  # CU_STREAM_PER_THREAD
CU_STREAM_NON_BLOCKING = 1


class Op:
    """One piece of queued work."""

    __slots__ = ("deps", "done", "fn", "label", "polled", "stream")

    def __init__(self, fn: Callable[[], None], stream: Stream, label: str, deps: list[Op]):
        self.fn = fn
        self.stream = stream
        self.label = label
        self.deps = deps
        self.done = False
        self.polled = False  # a query already answered "not ready" about it

    def __repr__(self) -> str:
        return f"<Op {self.label} done={self.done}>"


class Stream:
    """A stream: its handle, flags, and the last work queued on it."""

    def __init__(self, handle: int, flags: int, legacy: bool = False) -> None:
        self.handle = handle
        self.flags = flags
        self.legacy = legacy
        self.last: Op | None = None
        self.destroyed = False

    @property
    def blocking(self) -> bool:
        return not self.flags & CU_STREAM_NON_BLOCKING


class Event:
    """An event: the op that its last record captured (``None``: nothing recorded yet)."""

    def __init__(self, handle: int, flags: int) -> None:
        self.handle = handle
        self.flags = flags
        self.op: Op | None = None
        self.destroyed = False


class Queue:
    """All streams and events of the fake device, and the seeded order queued work runs in."""

    def __init__(self, handles: Callable[[], int]) -> None:
        self._handles = handles
        self.rng = random.Random(int(os.environ.get("SMARTARRAY_FAKE_GPU_SEED", "0")))
        self.legacy = Stream(LEGACY, 0, legacy=True)
        self.streams: dict[int, Stream] = {0: self.legacy, LEGACY: self.legacy}
        self._per_thread: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}
        self.ops: list[Op] = []  # queued, not yet run
        self.ran: list[str] = []  # labels of ops, in the order they ran (for tests)
        self._running = threading.local()

    # streams and events -------------------------------------------------------------------
    def stream(self, handle: int | None) -> Stream:
        handle = handle or 0
        if handle == PER_THREAD:
            key = threading.get_ident()
            if key not in self._per_thread:
                self._per_thread[key] = Stream(self._handles(), 0)
            return self._per_thread[key]
        found = self.streams.get(handle)
        if found is None or found.destroyed:
            raise CudaError(
                CUDA_ERROR_INVALID_HANDLE, f"stream {handle:#x} was destroyed or never made"
            )
        return found

    def create_stream(self, flags: int) -> Stream:
        s = Stream(self._handles(), flags)
        self.streams[s.handle] = s
        return s

    def destroy_stream(self, handle: int) -> None:
        # CUDA: the call returns at once; work already queued still runs; the handle is dead.
        s = self.stream(handle)
        if s.legacy:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "the default stream cannot be destroyed")
        s.destroyed = True
        del self.streams[handle]

    def create_event(self, flags: int) -> Event:
        e = Event(self._handles(), flags)
        self.events[e.handle] = e
        return e

    def event(self, handle: int) -> Event:
        found = self.events.get(handle)
        if found is None:
            raise CudaError(
                CUDA_ERROR_INVALID_HANDLE, f"event {handle:#x} was destroyed or never made"
            )
        return found

    # queueing -----------------------------------------------------------------------------
    def enqueue(
        self, stream: Stream, fn: Callable[[], None], label: str, after: list[Op] = ()
    ) -> Op:
        deps = [stream.last] if stream.last is not None else []
        if stream.legacy:
            deps += [s.last for s in self._all_streams() if s.blocking and not s.legacy and s.last]
        elif stream.blocking and self.legacy.last is not None:
            deps.append(self.legacy.last)
        deps += list(after)
        op = Op(fn, stream, label, [d for d in deps if not d.done])
        stream.last = op
        self.ops.append(op)
        return op

    def _all_streams(self) -> list[Stream]:
        return list(
            {id(s): s for s in [*self.streams.values(), *self._per_thread.values()]}.values()
        )

    # running ------------------------------------------------------------------------------
    def run_until(self, targets: list[Op | None]) -> None:
        """Run the queued work ``targets`` need (and nothing else), in a seeded order."""
        if getattr(self._running, "active", False):
            return  # a host function waiting inside queued work: CUDA forbids it; do not recurse
        needed: dict[int, Op] = {}
        stack = [t for t in targets if t is not None and not t.done]
        while stack:
            op = stack.pop()
            if id(op) in needed or op.done:
                continue
            needed[id(op)] = op
            stack.extend(d for d in op.deps if not d.done)
        pending = list(needed.values())
        self._running.active = True
        try:
            while pending:
                ready = [op for op in pending if all(d.done for d in op.deps)]
                op = ready[self.rng.randrange(len(ready))]
                pending.remove(op)
                self.ops.remove(op)
                op.done = True
                self.ran.append(op.label)
                fn, op.fn = op.fn, _ran
                op.deps = []
                fn()
        finally:
            self._running.active = False

    def synchronize(self, stream: Stream) -> None:
        self.run_until([stream.last])

    def synchronize_all(self) -> None:
        self.run_until(list(self.ops))

    def idle(self, stream: Stream) -> bool:
        return stream.last is None or stream.last.done


def _ran() -> None:
    """The work of an op that ran (its closure, holding what it used, is dropped)."""


_ids = itertools.count(0x5000, 0x10)
