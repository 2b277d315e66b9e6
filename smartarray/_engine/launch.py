"""One kernel launch's SmartArray arguments, from the first one's preparation to its callback.

numba-cuda prepares a launch's arguments one after the other (``ArgHint.to_device(retr,
stream)``), queues the kernel, then runs the zero-argument callbacks in ``retr``. The first
SmartArray argument of a launch makes a :class:`Launch` and appends it to ``retr``: the
launch's only smartarray callback. Later arguments find it in O(1) (the thread's latest
launch, at the index of ``retr`` where it was appended; no identity by ``id``) and add
themselves to it. The launch object owns what a launch means to the engine:

- the *claims*: while a launch is being prepared or queued, it claims its arguments' device
  copies, and an eviction (another thread's allocation) leaves them alone (see
  :mod:`smartarray._engine.residency`);
- the *post-launch record*, run once after the kernel was queued: one event recorded on the
  launch's stream for every buffer, replacing that stream's entry in the buffer's work in
  flight and no other (host reads and work on other streams wait for it: on a GPU the
  launch's stream object may die first; another thread's launch on another stream, queued
  between this launch's preparation and its kernel, stays recorded; another thread's launch
  on the same stream that recorded its event later but registered it first stays too: its
  event covers this kernel), the kernel's writes
  recorded (a buffer's held host arrays refreshed once, after its last argument's write), the
  launch fast path re-opened, the claims dropped;
- the *failures*: a held host array whose refresh failed stays marked stale, the other
  arguments' writes are still recorded, and the error is raised last, after numba's own
  callbacks ran.
"""

from __future__ import annotations

import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from .._memory import devices as _devices
from .._memory import streams as _streams
from ..errors import TransferError
from . import device_work as _device_work
from . import residency as _residency
from .buffer import IN

if TYPE_CHECKING:  # pragma: no cover
    from .buffer import Buffer
    from .residency import LaunchCache

__all__ = ["Launch", "LaunchArgument", "LaunchWrites", "current"]


class LaunchArgument(Protocol):
    """What a launch reads of, and asks of, a view passed as a kernel argument (SmartArray
    implements it; its side is ``smartarray/_array/arguments.py``). The engine never names the
    array class."""

    _lo: int  # the view's bytes in its buffer: [_lo, _hi)
    _hi: int
    _launch_cache: LaunchCache | None  # the launch fast path's cache (the engine's object)

    def _after_launch(self, writes: LaunchWrites | None = None) -> TransferError | None:
        """Record the kernel's write to the view's bytes; a failed refresh is returned."""
        ...


class LaunchWrites:
    """One launch's writes to one buffer: its held host arrays are refreshed once, after the
    last of them was recorded (an array passed twice, or overlapping views, download the
    overlap once)."""

    __slots__ = ("pending", "ranges")

    def __init__(self, pending: int) -> None:
        self.pending = pending  # writes still to record
        self.ranges: list[tuple[int, int]] = []


class Launch:
    """The SmartArray arguments of one launch and its one post-launch callback.

    Parameters
    ----------
    stream : object
        The stream numba-cuda hands ``to_device`` (``0`` or a stream object).
    slot : int
        Where in the launch's ``retr`` list this object is appended.
    """

    __slots__ = ("stream", "pending", "key", "slot", "entries", "state", "retr", "__weakref__")

    PREPARING, QUEUED, DONE = 0, 1, 2

    def __init__(self, stream: Any, retr: list[Any]) -> None:
        self.stream = stream
        self.pending = _streams.pending(stream)  # what buffers record (see _streams.pending)
        # The stream's entry key in its buffers' work (its identity in this thread, and device):
        # computed once; the launch fast path compares it with a buffer's only entry.
        self.key = _device_work.key_of(self.pending)
        self.slot = len(retr)
        # (buffer, view, intent, fast) per argument, in order; ``fast``: prepared by the
        # fast path (the view was current on the device only, or, for ``In``, current there).
        self.entries: list[tuple[Buffer, LaunchArgument, str, bool]] = []
        self.state = Launch.PREPARING
        # Held only to append a failure report at its end; dropped by the callback (a
        # reference back from ``retr``'s callback: a cycle while the launch is pending).
        self.retr: list[Any] | None = retr
        retr.append(self)

    def add(self, buf: Buffer, view: LaunchArgument, intent: str, fast: bool) -> None:
        """``view`` (of ``buf``) is an argument: claimed from now until the callback ran."""
        self.entries.append((buf, view, intent, fast))

    def _done(self) -> None:
        """Its claims dropped; its arguments are let go (the thread keeps this object as its latest
        launch: it must not keep their memory alive)."""
        self.state = Launch.DONE
        self.entries = []

    def failed(self) -> None:
        """The launch raised before its callback (an argument's preparation, the driver's
        refusal): no callback will run. Its claims and arguments are let go, and its reference
        to ``retr`` (which holds it: a cycle) is dropped."""
        if self.state == Launch.PREPARING:
            self.retr = None
            self._done()

    def claimed_buffers(self, stack: FrameType | None = None) -> list[Buffer]:
        """The buffers this launch keeps from eviction (none once its callback ran).

        ``stack``: the innermost frame of the thread that launches, when that is another
        thread. A launch being prepared is in flight only while a frame of that thread holds
        its ``retr`` (the dispatcher's own frame does, until the launch returns or raises).
        A launch that raised is found so, whatever failed (a later argument that is not a
        SmartArray, the driver refusing the kernel): its claims are dropped then.
        """
        if self.state == Launch.DONE:
            return []
        if stack is not None and self.state == Launch.PREPARING and not self._running(stack):
            self.failed()
            return []
        return [entry[0] for entry in list(self.entries)]  # (a snapshot: another thread adds)

    def _running(self, frame: FrameType | None) -> bool:
        """Whether a frame of this stack holds this launch's ``retr``."""
        retr = self.retr
        if retr is None:
            return False
        while frame is not None:
            if any(value is retr for value in frame.f_locals.values()):
                return True
            frame = frame.f_back
        return False

    def __call__(self) -> None:
        """The post-launch record (numba-cuda runs it right after queuing the kernel)."""
        self.state = Launch.QUEUED
        retr, self.retr = self.retr, None
        errors: list[TransferError] = []
        try:
            errors = self._record()
        finally:
            self._done()
        if errors:
            failures = LaunchFailures(errors)
            if retr is not None:
                retr.append(failures)  # raised after numba's own callbacks (its list loop)
            else:  # pragma: no cover - retr is always held until the callback
                failures()

    def _record(self) -> list[TransferError]:
        pending = self.pending
        event = _streams.launch_event()
        seq = _device_work.record(event, pending)
        # Per buffer, its arguments (in argument order).
        arguments: dict[Buffer, list[tuple[LaunchArgument, str, bool]]] = {}
        device = _devices.current()
        for buf, view, intent, fast in self.entries:
            args = arguments.get(buf)
            if args is None:
                args = arguments[buf] = []
            args.append((view, intent, fast))
        errors: list[TransferError] = []
        for buf, args in arguments.items():
            with buf.lock:
                # The launch's event first (replacing this stream's entry only): a host read
                # from now on waits for the kernel. Then, under the same lock, which writes
                # need a record: a fast argument's write needs none unless the state moved
                # since it was found current on the device only (a host read made the host
                # current with pre-kernel values, in another thread or by a later argument's
                # preparation). Checked before the event was recorded, a read in between
                # (another thread's) would download pre-kernel bytes and mark them current,
                # and the kernel's write would be lost.
                # (Loops, not comprehensions: before Python 3.12 each comprehension is a call,
                # two per buffer per launch.)
                items = []
                for view, intent, _ in args:
                    items.append((device, intent != IN, view._lo, view._hi))
                buf.kernel_queued(pending, self.key, event, seq, items)
                version = buf.state.version
                # (A fast argument's launch cache was made by its first preparation; without
                # one, the write is recorded all the same.)
                views = []
                for view, intent, fast in args:
                    if intent != IN and (
                        not fast
                        or (cache := view._launch_cache) is None
                        or cache.gpu_only_at != version
                    ):
                        views.append(view)
            if views:
                writes = LaunchWrites(len(views))
                for view in views:
                    error = view._after_launch(writes)
                    if error is not None:
                        errors.append(error)
        return errors

    def __repr__(self) -> str:
        return f"<smartarray launch of {len(self.entries)} argument(s) on {self.pending!r}>"


class LaunchFailures:
    """The last post-launch callback of a launch whose host refresh failed: raises then."""

    def __init__(self, errors: list[TransferError]) -> None:
        self.errors = errors

    def __call__(self) -> None:
        first = self.errors[0]
        raise TransferError(
            f"the kernel ran and its writes are recorded, but refreshing {len(self.errors)} "
            "held host array(s) failed; they are marked stale and the next host read "
            f"downloads again (do not launch again to retry): {first}"
        ) from first


_local = threading.local()


def current(retr: list[Any], stream: Any) -> Launch:
    """The launch whose callbacks are ``retr``: the thread's latest one if ``retr`` holds it
    at its slot, else a new one (appended to ``retr``).

    The thread keeps its latest launch by a weak reference: ``retr`` (the dispatcher's list)
    is what keeps a launch alive, so a launch that raised is let go with that list.
    """
    ref = getattr(_local, "launch", None)
    launch = None if ref is None else ref()
    if launch is not None:
        slot = launch.slot
        if slot < len(retr) and retr[slot] is launch:
            return launch
        launch.failed()  # (if it is still being prepared: it raised before queuing)
    launch = Launch(stream, retr)
    _local.launch = ref = weakref.ref(launch)
    _residency.started(ref)
    return launch
