"""Streams, events and the queue of device work of strict mode.

Device work (a kernel, an asynchronous copy) becomes an :class:`Op` queued on its stream. It runs
only when the host waits for it, in an order drawn from a seeded random generator among every
order CUDA allows: each stream runs its work in order; the legacy default stream waits for
every other stream and every other stream waits for it; ``Stream.wait_event`` / ``Event.wait``
make later work of a stream wait for what an event captured.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "DEFAULT",
    "Op",
    "Scheduler",
    "StrictCoreStream",
    "StrictEvent",
    "StrictModeError",
    "StrictStream",
]


class StrictModeError(RuntimeError):
    """Strict mode found what a GPU would report as a crash (bad pointer, illegal access)."""


def _ran() -> None:
    """The work of an op that ran (its closure, holding the device arrays, is dropped)."""


class Op:
    """One piece of queued device work."""

    __slots__ = ("deps", "done", "fn", "host_range", "label", "seq", "stream")

    def __init__(self, fn: Callable[[], None], stream: Any, label: str, deps: list[Op]) -> None:
        self.fn = fn
        self.stream = stream
        self.label = label
        self.deps = deps
        self.done = False
        self.seq = 0
        # The page-locked host bytes an asynchronous copy reads or writes when it runs.
        self.host_range: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"<Op {self.label} done={self.done}>"


class StrictStream:
    """A CUDA stream of strict mode: work queued on it runs when the host waits for it.

    Made by ``numba.cuda.stream()`` while strict mode is on (``numba.cuda.default_stream()``
    and ``legacy_default_stream()`` give the legacy default stream).
    """

    # Handles start past 2 (1 and 2 name the legacy and the per-thread default stream) and are
    # never reused: a handle whose stream was collected stays dead (see Scheduler.key).
    _ids = itertools.count(3)

    def __init__(
        self,
        scheduler: Scheduler,
        default: bool = False,
        handle: int = 0,
        nonblocking: bool = False,
    ) -> None:
        self._scheduler = scheduler
        self.is_default = default
        # A default stream's handle says which: 0 the default stream (the legacy one, or the
        # calling thread's with per-thread default streams), 1 the legacy default stream,
        # 2 the calling thread's per-thread default stream.
        self.handle = handle if default else (handle or next(self._ids))
        if not default:
            scheduler.streams[self.handle] = self  # for external_stream(handle)
            if nonblocking:
                # Not ordered with the legacy default stream (cudaStreamNonBlocking), as
                # CuPy's, PyTorch's and JAX's side streams are.
                scheduler.nonblocking.add(self.handle)

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has run."""
        self._scheduler.host_wait_stream(self)

    @contextlib.contextmanager
    def auto_synchronize(self) -> Iterator[StrictStream]:
        """A context manager that synchronizes the stream on exit."""
        yield self
        self.synchronize()

    def wait_event(self, event: StrictEvent) -> None:
        """Make later work on this stream wait for the work ``event`` captured."""
        event.wait(self)

    def add_callback(self, callback: Callable[..., Any], arg: Any = None) -> None:
        """Call ``callback(stream, status, arg)`` once the work queued so far has run."""
        self._scheduler.enqueue(self, lambda: callback(self, 0, arg), "callback")

    def __int__(self) -> int:
        return self.handle

    def __repr__(self) -> str:
        if self.is_default:
            which = ("default", "legacy default", "per-thread default")[self.handle]
            return f"<strict {which} stream>"
        return f"<strict stream {self.handle}>"


class StrictCoreStream:
    """What numba-cuda's ``_LaunchConfiguration`` hands ``ArgHint.to_device``: a cuda.core
    ``Stream`` made with ``Stream.from_handle`` (a fresh object per launch configuration).

    It has exactly the surface smartarray may rely on: ``handle``, ``__cuda_stream__()``,
    ``sync()``, ``==`` by handle; no ``synchronize()``. It does not own its stream: once the
    stream it names is destroyed (collected), any use of it is a :class:`StrictModeError`,
    where a GPU would use a dead ``CUstream`` (undefined behaviour).
    """

    __slots__ = ("_scheduler", "handle")

    def __init__(self, scheduler: Scheduler, handle: int) -> None:
        self._scheduler = scheduler
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def sync(self) -> None:
        """Block the host until all work queued on the stream has run."""
        self._scheduler.host_wait_stream(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StrictCoreStream) and other.handle == self.handle

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        return f"<strict cuda.core Stream handle={self.handle}>"


def core_stream(scheduler: Scheduler, stream: Any) -> StrictCoreStream:
    """``driver._to_core_stream(stream)``: the launch's stream as a non-owning cuda.core one."""
    if not stream:
        return StrictCoreStream(scheduler, 0)
    if isinstance(stream, StrictCoreStream):
        return stream
    return StrictCoreStream(scheduler, int(getattr(stream, "handle", 0) or 0))


class StrictEvent:
    """A CUDA event of strict mode: ``record`` captures a stream's queued work."""

    def __init__(self, scheduler: Scheduler, timing: bool = True) -> None:
        self._scheduler = scheduler
        self._marker: Op | None = None
        self.timing = timing

    def record(self, stream: Any = 0) -> None:
        """Capture the work queued on ``stream`` so far."""
        self._marker = self._scheduler.enqueue(stream, lambda: None, "event record")

    def wait(self, stream: Any = 0) -> None:
        """Make later work on ``stream`` wait for the captured work (the host does not wait)."""
        if self._marker is not None and not self._marker.done:
            self._scheduler.enqueue(stream, lambda: None, "event wait", deps=[self._marker])

    def synchronize(self) -> None:
        """Block the host until the captured work has run."""
        self._scheduler.count_host_sync()
        if self._marker is not None:
            self._scheduler.run_until([self._marker])

    def query(self) -> bool:
        """Whether the captured work has run (it runs only when the host waits)."""
        return self._marker is None or self._marker.done

    def elapsed_time(self, event: StrictEvent) -> float:
        """Strict mode does not model time: always -1.0, like the simulator."""
        return -1.0


#: Stands for stream 0 (the legacy default stream) in the queues.
DEFAULT = "default"


class Scheduler:
    """The queues of device work and the seeded choice of what runs next."""

    def __init__(self, seed: int | None, per_thread_default_stream: bool = False) -> None:
        self.seed = seed
        # Stream 0 as the per-thread default stream: an ordinary stream, not ordered with the
        # other streams (CUDA_API_PER_THREAD_DEFAULT_STREAM); otherwise the legacy one.
        self.per_thread = per_thread_default_stream
        self.rng = random.Random(seed)
        self.queues: dict[Any, deque[Op]] = {}
        # Live streams by handle: what ``cuda.external_stream(handle)`` finds.
        self.streams: weakref.WeakValueDictionary[int, StrictStream] = weakref.WeakValueDictionary()
        self.nonblocking: set[int] = set()  # handles of streams not ordered with the legacy one
        self.last_default: Op | None = None
        self.host_syncs = 0
        self.log: list[str] = []
        self._seq = itertools.count()
        # Host threads share the queues (a GPU's queues are shared by every host thread).
        self.lock = threading.RLock()
        self._thread = threading.local()
        self._threads = itertools.count(1)

    # -- queueing --------------------------------------------------------------------------

    def key(self, stream: Any) -> Any:
        """The queue of ``stream`` (its handle): ``DEFAULT`` for 0, None and default streams.

        Queues are keyed by handle, not by stream object: a stream collected with work queued
        is destroyed, and its work still runs (as ``cuStreamDestroy`` lets it). A stream named
        by the handle of a destroyed stream is a :class:`StrictModeError`.
        """
        cls = stream.__class__
        if cls is StrictStream:
            return self._default_key(stream.handle) if stream.is_default else stream.handle
        if cls is StrictCoreStream:
            handle = stream.handle
            if handle in (0, 1, 2):
                return self._default_key(handle)
            if self.streams.get(handle) is None:
                raise StrictModeError(
                    f"stream handle {handle:#x} was used after its stream was destroyed (the "
                    "stream object was collected; on a GPU: a dead CUstream, undefined "
                    "behaviour): keep an event recorded on it, not its handle"
                )
            return handle
        return self._default_key(0)

    def _default_key(self, handle: int) -> Any:
        """The queue of default-stream handle 0, 1 or 2: the legacy default stream's, or the
        calling thread's own per-thread default stream's (handle 2, and 0 when per-thread
        default streams are on), a distinct stream for each host thread."""
        if handle == 2 or (handle == 0 and self.per_thread):
            key = getattr(self._thread, "key", None)
            if key is None:
                # Numbered per thread, never reused (thread idents are, once a thread ended).
                key = self._thread.key = ("per-thread default stream", next(self._threads))
            return key
        return DEFAULT

    @staticmethod
    def is_default_key(key: Any) -> bool:
        """Whether ``key`` is the queue of a default stream (legacy or per-thread)."""
        return key is DEFAULT or key.__class__ is tuple

    def enqueue(
        self, stream: Any, fn: Callable[[], None], label: str, deps: list[Op] | None = None
    ) -> Op:
        """Queue ``fn`` on ``stream`` after everything CUDA orders before it; return the op."""
        with self.lock:
            return self._enqueue(stream, fn, label, deps)

    def _enqueue(
        self, stream: Any, fn: Callable[[], None], label: str, deps: list[Op] | None
    ) -> Op:
        key = self.key(stream)
        deps = list(deps or ())
        if key is DEFAULT and self.per_thread:
            pass
        elif key is DEFAULT:
            # The legacy default stream waits for the work of every (blocking) stream.
            for other, queue in self.queues.items():
                if other is not DEFAULT and queue and other not in self.nonblocking:
                    deps.append(queue[-1])
        elif (
            self.last_default is not None
            and not self.last_default.done
            and key not in self.nonblocking
        ):
            deps.append(self.last_default)  # ... and every stream waits for it
        op = Op(fn, key, label, deps)
        op.seq = next(self._seq)
        self.queues.setdefault(key, deque()).append(op)
        if key is DEFAULT and not self.per_thread:
            self.last_default = op
        return op

    # -- waiting ---------------------------------------------------------------------------

    def count_host_sync(self) -> None:
        with self.lock:
            self.host_syncs += 1

    def host_wait_stream(self, stream: Any) -> None:
        """What ``stream.synchronize()`` does: run the work queued on ``stream``."""
        self.count_host_sync()
        key = self.key(stream)
        if key is DEFAULT:
            self.run_all()
            return
        with self.lock:
            queue = self.queues.get(key)
            if queue:
                self._run_until([queue[-1]])

    def host_wait_all(self) -> None:
        """What ``cuda.synchronize()`` does: run everything."""
        self.count_host_sync()
        self.run_all()

    def run_all(self) -> None:
        with self.lock:
            tails = [q[-1] for q in self.queues.values() if q]
            if tails:
                self._run_until(tails)

    def pending_host_use(self, lo: int, hi: int) -> Op | None:
        """A queued copy that will still read or write host bytes in ``[lo, hi)``."""
        with self.lock:
            for queue in self.queues.values():
                for op in queue:
                    r = op.host_range
                    if r is not None and r[0] < hi and lo < r[1]:
                        return op
        return None

    def pending(self) -> int:
        """How many ops are queued and not run yet."""
        return sum(len(q) for q in self.queues.values())

    def run_until(self, targets: list[Op]) -> None:
        """Run the targets and everything they depend on, in a seeded adversarial order.

        Work nothing waits for stays queued: a host that forgot to wait for it sees old data.
        """
        with self.lock:
            self._run_until(targets)

    def _run_until(self, targets: list[Op]) -> None:
        needed: set[int] = set()
        stack = [t for t in targets if not t.done]
        by_id: dict[int, Op] = {}
        while stack:
            op = stack.pop()
            if op.done or id(op) in needed:
                continue
            needed.add(id(op))
            by_id[id(op)] = op
            stack.extend(d for d in op.deps if not d.done)
            queue = self.queues.get(op.stream)
            if queue:
                for earlier in queue:
                    if earlier is op:
                        break
                    if id(earlier) not in needed:
                        stack.append(earlier)
        while needed:
            ready = [
                q[0]
                for q in self.queues.values()
                if q and id(q[0]) in needed and all(d.done for d in q[0].deps)
            ]
            if not ready:  # pragma: no cover - an event wait captures only queued work
                raise RuntimeError("strict mode: queued device work waits in a cycle")
            ready.sort(key=lambda o: o.seq)
            op = ready[self.rng.randrange(len(ready))]
            self.queues[op.stream].popleft()
            needed.discard(id(op))
            op.done = True
            if op.label not in ("event record", "event wait"):
                self.log.append(op.label)
            fn, op.fn = op.fn, _ran
            fn()  # then dropped: a finished op (kept as last_default) holds no device memory
