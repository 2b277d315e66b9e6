"""Streams, events and queued device work of the fake CUDA driver.

Work on a stream is an :class:`Op`; it runs only when the host waits for it (a stream or
context synchronisation, an event synchronisation, a blocking copy), and then in an order
drawn from a seeded random generator among the orders CUDA allows: a stream runs its work in
order; each device's legacy default stream waits for all work of that device's blocking
streams and they wait for it (non-blocking streams do neither, other devices' streams neither);
``cuStreamWaitEvent`` orders later work of a stream after what an event captured, whichever
device recorded it. One queue holds every device's work, so a wait across devices is one more
dependency. Only the work the host waits for runs: everything else stays queued, the most
adversarial choice CUDA permits. The seed is ``SMARTARRAY_FAKE_GPU_SEED`` (default 0).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from .._platform import environment as _environment
from ._errors import CUDA_ERROR_INVALID_HANDLE, CudaError

if TYPE_CHECKING:  # pragma: no cover
    from ._clock import Clock

__all__ = ["LEGACY", "PER_THREAD", "Event", "Op", "Queue", "Stream"]

LEGACY = 1  # CU_STREAM_LEGACY
PER_THREAD = 2  # CU_STREAM_PER_THREAD
CU_STREAM_NON_BLOCKING = 1


class Op:
    """One piece of queued work."""

    __slots__ = ("deps", "done", "end", "fn", "label", "polled", "stream")

    def __init__(self, fn: Callable[[], None], stream: Stream, label: str, deps: list[Op]):
        self.fn = fn
        self.stream = stream
        self.label = label
        self.deps = deps
        self.done = False
        self.polled = False  # a query already answered "not ready" about it
        self.end = 0.0  # modelled end, in seconds (the clock's, when one is on: ._clock)

    def __repr__(self) -> str:
        return f"<Op {self.label} done={self.done}>"


class Stream:
    """A stream: its handle, flags, device (its context's), and the last work queued on it."""

    def __init__(self, handle: int, flags: int, legacy: bool = False, device: int = 0) -> None:
        self.handle = handle
        self.flags = flags
        self.legacy = legacy
        self.device = device
        self.last: Op | None = None
        self.destroyed = False

    @property
    def blocking(self) -> bool:
        return not self.flags & CU_STREAM_NON_BLOCKING


class Event:
    """An event: the op that its last record captured (``None``: nothing recorded yet)."""

    def __init__(self, handle: int, flags: int, device: int = 0) -> None:
        self.handle = handle
        self.flags = flags
        self.device = device
        self.op: Op | None = None
        self.destroyed = False


class Queue:
    """All streams and events of the fake devices, and the seeded order queued work runs in.

    ``device`` answers the calling thread's current device: the stream handles 0 (legacy) and
    2 (per-thread) name a stream of that device's context, and new streams and events belong
    to it.
    """

    def __init__(self, handles: Callable[[], int], device: Callable[[], int] = lambda: 0) -> None:
        self._handles = handles
        self._device = device
        self.rng = random.Random(_environment.integer("SMARTARRAY_FAKE_GPU_SEED", 0))
        self._legacy: dict[int, Stream] = {}  # device -> its legacy default stream
        self.streams: dict[int, Stream] = {}
        self._per_thread: dict[tuple[int, int], Stream] = {}
        self.events: dict[int, Event] = {}
        self.ops: list[Op] = []  # queued, not yet run
        self.ran: list[str] = []  # labels of ops, in the order they ran (for tests)
        self._running = threading.local()
        self._ptds = threading.local()  # .on: handle 0 is the thread's own stream (see stream)
        self._thread_numbers = itertools.count(1)
        self.clock: Clock | None = None  # modelled time (SMARTARRAY_FAKE_GPU_TIMING)

    # streams and events -------------------------------------------------------------------
    @property
    def legacy(self) -> Stream:
        """The current device's legacy default stream."""
        return self.legacy_of(self._device())

    def legacy_of(self, device: int) -> Stream:
        """``device``'s legacy default stream (each context has its own)."""
        found = self._legacy.get(device)
        if found is None:
            found = self._legacy[device] = Stream(LEGACY, 0, legacy=True, device=device)
        return found

    @contextlib.contextmanager
    def per_thread_default_stream(self) -> Iterator[None]:
        """Within: handle 0 names the calling thread's per-thread default stream (an entry
        point resolved with ``CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`` runs in it)."""
        local = self._ptds
        before = getattr(local, "on", False)
        local.on = True
        try:
            yield
        finally:
            local.on = before

    def stream(self, handle: int | None) -> Stream:
        handle = handle or 0
        if handle == 0 and getattr(self._ptds, "on", False):
            handle = PER_THREAD
        if handle in (0, LEGACY):
            return self.legacy
        if handle == PER_THREAD:
            # One stream per host thread, never handed to a later thread (thread idents are
            # reused once a thread ended; a new thread's stream is a new stream).
            number = getattr(self._ptds, "number", None)
            if number is None:
                number = self._ptds.number = next(self._thread_numbers)
            key = (number, self._device())
            if key not in self._per_thread:
                self._per_thread[key] = Stream(self._handles(), 0, device=key[1])
            return self._per_thread[key]
        found = self.streams.get(handle)
        if found is None or found.destroyed:
            raise CudaError(
                CUDA_ERROR_INVALID_HANDLE, f"stream {handle:#x} was destroyed or never made"
            )
        return found

    def create_stream(self, flags: int) -> Stream:
        s = Stream(self._handles(), flags, device=self._device())
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
        e = Event(self._handles(), flags, device=self._device())
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
        self, stream: Stream, fn: Callable[[], None], label: str, after: Sequence[Op] = ()
    ) -> Op:
        deps = [stream.last] if stream.last is not None else []
        if stream.legacy:
            deps += [
                s.last
                for s in self._all_streams()
                if s.blocking and not s.legacy and s.last and s.device == stream.device
            ]
        else:
            legacy = self._legacy.get(stream.device)
            if stream.blocking and legacy is not None and legacy.last is not None:
                deps.append(legacy.last)
        deps += list(after)
        op = Op(fn, stream, label, [d for d in deps if not d.done])
        if self.clock is not None:
            self.clock.queued(op, deps)  # (done work too: it may end later in modelled time)
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
        if self.clock is not None:
            self.clock.waited(targets)
        # Active from here: a wait started while this one chooses what to run (a finalizer
        # that frees memory, run by a collection in this thread) must not run that work.
        self._running.active = True
        try:
            needed: dict[int, Op] = {}
            stack = [t for t in targets if t is not None and not t.done]
            while stack:
                op = stack.pop()
                if id(op) in needed or op.done:
                    continue
                needed[id(op)] = op
                stack.extend(d for d in op.deps if not d.done)
            pending = list(needed.values())
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
        if self.clock is not None:
            self.clock.waited_all()
        self.run_until(list(self.ops))

    def synchronize_device(self, device: int) -> None:
        """Run ``device``'s queued work (and, of other devices' work, what it waits for)."""
        if self.clock is not None:
            self.clock.waited_all(device)
        self.run_until([op for op in self.ops if op.stream.device == device])

    def idle(self, stream: Stream) -> bool:
        return stream.last is None or stream.last.done


def _ran() -> None:
    """The work of an op that ran (its closure, holding what it used, is dropped)."""


_ids = itertools.count(0x5000, 0x10)
