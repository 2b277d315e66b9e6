"""Streams as the engine sees them: identity, host waits, and ordering across streams.

A base buffer records its device work still in flight per stream (``_engine.Buffer.work``, keyed
by :func:`identity`). These helpers take any stream object that reaches smartarray:

- ``0``: the default stream, as users and the simulator pass it;
- numba.cuda's ``Stream`` (``cuda.stream()``, ``default_stream()``, ``per_thread_default_stream()``,
  ``external_stream(ptr)`` of CuPy's or PyTorch's streams): ``synchronize()`` and ``handle``;
- cuda.core's ``Stream``: what numba-cuda's real dispatcher hands ``ArgHint.to_device`` during a
  launch, *the default stream included* (``_LaunchConfiguration`` converts every launch stream
  with ``driver._to_core_stream``; a fresh object per launch configuration): ``sync()`` and
  ``handle``, no ``synchronize()``, never equal to ``0``;
- the simulator's streams, and test stand-ins: ``synchronize()``, compared by identity.

Nothing here assumes the legacy default stream's implicit ordering: with per-thread default
streams, and for non-blocking streams (CuPy's, PyTorch's), work on the default stream is not
ordered before work on another stream unless an event says so.

One rule for a stream's identity (:func:`identity`): the handle, except for the handles that
name a different stream in each thread. Handle 2 (``CU_STREAM_PER_THREAD``,
``cuda.per_thread_default_stream()``) always names the calling thread's per-thread default
stream, and so does handle 0 when cuda-bindings resolved the driver with per-thread default
streams (``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1``, or a strict session made with
``per_thread=True``); otherwise handle 0 is the legacy default stream, handle 1. Two threads'
per-thread default streams are two streams: an identity says which thread's it is.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Hashable
from typing import Any

import numpy as np
from numba import cuda

from .._platform import cuda_simulator as _sim
from .._platform import environment as _environment
from .._platform import sessions as _sessions  # (a strict session owns its streams and events)
from . import devices as _devices
from . import driver_calls as _driver_calls

__all__ = [
    "DEFAULT",
    "LEGACY",
    "completed",
    "copy_stream",
    "identity",
    "launch_event",
    "native",
    "new_event",
    "order",
    "pending",
    "per_thread_default_streams",
    "record",
    "same",
    "synchronize",
    "this_thread",
    "upload_stream",
    "wait_for",
]

#: The handles CUDA reserves for default streams (``CU_STREAM_LEGACY``, ``CU_STREAM_PER_THREAD``).
LEGACY_HANDLE = 1
PER_THREAD_HANDLE = 2


class _DefaultStream:
    """The default stream as a buffer records it: device work queued there, not yet waited for.

    Distinct from ``0`` (nothing queued), so that default-stream work is ordered before work on
    other streams like any other stream's work.
    """

    __slots__ = ()

    def synchronize(self) -> None:
        """Block until the default stream's work finished."""
        cuda.default_stream().synchronize()

    def __repr__(self) -> str:
        return "<default stream>"


#: Pending work on the default stream (a launch or copy on stream 0 or on a handle-0 stream).
DEFAULT = _DefaultStream()


class _LegacyStream:
    """The legacy default stream (handle 1), named as such: with per-thread default streams
    ``cuda.default_stream()`` is the calling thread's, not this one."""

    __slots__ = ()

    def synchronize(self) -> None:
        """Block until the legacy default stream's work finished."""
        cuda.legacy_default_stream().synchronize()

    def __repr__(self) -> str:
        return "<legacy default stream>"


#: Pending work on the legacy default stream, named by handle 1 (a DLPack consumer's stream 1).
LEGACY = _LegacyStream()


def _ptds_from_environment() -> bool:
    # cuda-bindings reads the switch once, when it resolves the driver's entry points.
    return _environment.text("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM") not in ("", "0")


# The answer of per_thread_default_streams, derived again when a session starts or ends
# (None: not derived yet): every launch asks.
_per_thread_mode: list[bool | None] = [None]
# The identity of :data:`DEFAULT` while it is the same in every thread (the legacy default
# stream's), else None: what a launch on stream 0 asks.
_default_identity: list[int | None] = [None]


def _session_changed() -> None:
    _per_thread_mode[0] = _default_identity[0] = None


_sessions.on_change.append(_session_changed)


def per_thread_default_streams() -> bool:
    """Whether handle 0 names the calling thread's own stream (per-thread default streams):
    a strict session's choice while one is on, else cuda-bindings' (its environment switch,
    read once)."""
    mode = _per_thread_mode[0]
    if mode is None:
        session = _sessions.current()
        if session is not None:
            mode = bool(session.per_thread_default_streams)
        else:
            mode = _ptds_from_environment()
        _per_thread_mode[0] = mode
        _default_identity[0] = None if mode else LEGACY_HANDLE
    return mode


_threads = threading.local()
_thread_numbers = itertools.count(1)


def this_thread() -> int:
    """A number for the calling thread, never reused (thread idents are, once a thread ended):
    what tells two threads' per-thread default streams apart."""
    number = getattr(_threads, "number", None)
    if number is None:
        number = _threads.number = next(_thread_numbers)
    return number


def _is_zero(stream: Any) -> bool:
    return stream is None or stream.__class__ is int or isinstance(stream, np.integer)


def pending(stream: Any) -> Any:
    """What a buffer records for device work queued on ``stream``: the object, or DEFAULT for
    the default stream (0, or a stream object of handle 0: what numba-cuda's dispatcher hands
    ``to_device`` for a default-stream launch, a new cuda.core wrapper per configuration)."""
    if stream is None or stream.__class__ is int or isinstance(stream, np.integer):  # (_is_zero)
        return DEFAULT
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None and not protocol()[1]:
        return DEFAULT
    return stream


def native(stream: Any) -> Any:
    """The stream numba's copies and events accept: ``0`` for :data:`DEFAULT`, the legacy
    default stream for :data:`LEGACY`."""
    if stream is DEFAULT:
        return 0
    if stream is LEGACY:
        return cuda.legacy_default_stream()
    return stream


# cuda.core's Stream class, learned from the first one seen (cuda.core is not imported here:
# the simulator never passes one). Its ``==`` compares CUstream handles in C (about 15 ns),
# and ``__cuda_stream__()`` gives the handle's address (about 50 ns); its ``handle`` property
# builds a new CUstream object each time (about 0.5 us). On a GPU every launch configuration
# hands ``to_device`` a new one, so the launch fast path compares two of them per argument.
_core_stream: list[type] = []


def _is_core_stream(cls: type) -> bool:
    if _core_stream:
        return cls is _core_stream[0]
    if cls.__name__ == "Stream" and cls.__module__.startswith("cuda.core."):
        _core_stream.append(cls)
        return True
    return False


def _key(stream: Any) -> Any:
    if stream is DEFAULT or _is_zero(stream):
        return 0
    if stream is LEGACY:
        return LEGACY_HANDLE
    if _is_core_stream(stream.__class__):
        return stream.__cuda_stream__()[1]  # (protocol version, the CUstream's address)
    handle = getattr(stream, "handle", None)
    if handle is None:
        return stream  # the simulator's streams, stand-ins: identity
    try:
        return int(handle)  # numba's Stream: the CUstream's address
    except (TypeError, ValueError):
        return stream


def identity(stream: Any) -> Hashable:
    """The identity of ``stream`` as the calling thread names it (see the module's docstring).

    Handles 0, 1 and 2 resolved to the stream they name: ``1`` for the legacy default stream,
    ``("per-thread", n)`` for thread ``n``'s per-thread default stream (:func:`this_thread`);
    other handles as they are; a stream without a handle (the simulator's, stand-ins) itself.
    Computed by the thread that queues work: recorded with the work, it stays that thread's.
    """
    if stream is DEFAULT:
        key = _default_identity[0]
        if key is not None:
            return key  # (the legacy default stream: the same in every thread)
        key = 0
    else:
        key = _key(stream)
    if key.__class__ is int and key <= PER_THREAD_HANDLE:
        if key == 0:
            mode = _per_thread_mode[0]
            if mode is None:
                mode = per_thread_default_streams()
            key = PER_THREAD_HANDLE if mode else LEGACY_HANDLE
        if key == PER_THREAD_HANDLE:
            return ("per-thread", this_thread())
    return key


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` name the same CUDA stream in the calling thread (wrappers of one
    handle are the same; see :func:`identity`)."""
    if a is b:
        return True
    cls = a.__class__
    if cls is b.__class__ and _core_stream and cls is _core_stream[0] and a == b:
        return True  # two launch configurations' wrappers of one handle, compared in C
    return identity(a) == identity(b)


def completed(event: Any) -> bool:
    """Whether the work ``event`` captured has finished (a query: the host does not wait).

    The plain simulator's events have no ``query``: its work completes when queued.
    """
    query = getattr(event, "query", None)
    if query is None:
        return _sim.SIMULATOR
    return bool(query())


def synchronize(stream: Any) -> None:
    """Block the host until ``stream``'s work finished (numba's, cuda.core's or 0)."""
    if _is_zero(stream):
        stream = DEFAULT
    sync = getattr(stream, "synchronize", None)
    if sync is None:
        sync = stream.sync  # cuda.core's Stream
    sync()


# smartarray's own stream for copies that follow device work whose stream may be gone: made on
# first need, for the strict session it was made in (strict mode's streams belong to one), one
# per device (a stream belongs to its device's context).
_copy_stream: list[Any] = [None, None]
_device_copy_streams: dict[int, Any] = {}


def copy_stream() -> Any:
    """A stream smartarray owns (never destroyed), for copies ordered after a buffer's event.

    Not the default stream: a copy there would wait for every blocking stream's work (the
    legacy default stream), or for the calling thread's only (per-thread default streams).
    """
    session = _sessions.current()
    device = _devices.current()
    if device:
        stream = _device_copy_streams.get(device)
        if stream is None:
            stream = _device_copy_streams[device] = cuda.stream()
        return stream
    owner, stream = _copy_stream
    if stream is None or owner is not session:
        stream = cuda.stream()
        _copy_stream[:] = [session, stream]
    return stream


# smartarray's own non-blocking stream per device for the uploads of a default-stream launch
# (see upload_stream), with the strict session or simulator it was made for.
_upload_streams: dict[int, tuple[Any, Any]] = {}
CU_STREAM_NON_BLOCKING = 1


def upload_stream() -> Any:
    """A non-blocking stream smartarray owns (never destroyed), one per device: the uploads a
    launch on the default stream needs go on it, so that they overlap the default stream's
    kernels.

    CUDA's "API synchronization behavior": a ``cuMemcpyHtoDAsync`` from pageable memory
    performs a stream synchronisation before the copy starts; on the legacy default stream
    that waits for every blocking stream's work (the previous kernel), on a non-blocking
    stream (``CU_STREAM_NON_BLOCKING``: no implicit order with the legacy default stream)
    only for this stream's own earlier copies. Whoever uses it orders it explicitly: after
    the buffer's earlier work (events) before the copy, and the launch's stream after the
    copy's event. numba's ``cuda.stream()`` makes blocking streams, so this one is made with
    the driver's ``cuStreamCreate`` and wrapped as an external stream; in the simulator and
    in strict mode it is ``cuda.stream()`` (their streams belong to the session).
    """
    session = _sessions.current()
    device = _devices.current()
    owner, stream = _upload_streams.get(device, (None, None))
    if stream is None or owner is not session:
        if _sim.SIMULATOR:
            stream = cuda.stream()
        else:
            from numba.cuda.cudadrv import driver as _driver

            cuda.current_context()  # (the device's context, made current)
            handle = _driver.driver.cuStreamCreate(CU_STREAM_NON_BLOCKING)
            stream = cuda.external_stream(int(handle))
        stream.smartarray_name = "smartarray upload"  # (what a trace calls it)
        _upload_streams[device] = (session, stream)
    return stream


def record(event: Any, stream: Any) -> None:
    """Record ``event`` on ``stream`` (:func:`pending`'s form, or what numba-cuda accepts).

    numba-cuda's own events are recorded through cuda-bindings directly
    (:mod:`smartarray._memory.driver_calls`: a launch records one); any other event (the
    simulator's, a test's stand-in) by its ``record`` method.
    """
    stream = native(stream)
    if event.__class__ is (_event_class if _event_class is not None else _numba_event_class()):
        _driver_calls.event_record(event, _stream_handle(stream))
    else:
        event.record(stream)


def wait_for(event: Any) -> None:
    """Block until ``event`` happened, as :func:`record` records it: numba-cuda's own events
    through cuda-bindings directly, any other by its ``synchronize`` method."""
    if event.__class__ is (_event_class if _event_class is not None else _numba_event_class()):
        _driver_calls.event_synchronize(event)
    else:
        event.synchronize()


# numba-cuda's driver Event class (False on the simulator: none there) and its function that
# names a stream's handle, looked up once (a launch records an event).
_event_class: Any = None
_stream_handle: Any = None


def _numba_event_class() -> Any:
    """numba-cuda's driver ``Event`` class (``False`` on the simulator: none there)."""
    global _event_class, _stream_handle
    if _event_class is None:
        if _sim.SIMULATOR:
            _event_class = False
        else:
            from numba.cuda.cudadrv import driver

            _stream_handle = driver._stream_handle  # type: ignore[attr-defined]
            _event_class = driver.Event
    return _event_class


def new_event() -> Any:
    """A new event for ordering and host waits (no timing data)."""
    return _sim.untimed_event()


# Each thread's launch events (see launch_event), with what they belong to.
_launch_events = threading.local()
_EVENTS_KEPT = 8  # events a thread's pool keeps (each free one is found in a short scan)
# References to an event only the pool holds, as sys.getrefcount counts them in launch_event:
# the pool's list, the loop variable, getrefcount's own argument.
_POOL_ONLY = 3


def _thread_pool(local: Any) -> list[Any]:
    """The calling thread's pool for its session, factory and current device."""
    session, factory = _sessions.current(), cuda.event
    device = _devices.current()
    pools = getattr(local, "pools", None)
    if pools is None or local.session is not session or local.factory is not factory:
        pools = local.pools = {}
    pool = local.pool = pools.setdefault(device, [])
    local.session, local.factory, local.device = session, factory, device
    return pool


def launch_event() -> Any:
    """An event to record a launch on (each launch records one: see smartarray._engine.launch),
    and every other event smartarray records and drops or hands on: a prefetched download's
    arrival, a buffer's own event, an order between two streams.

    Reused once nothing but this thread's pool refers to it: in a loop of launches over the
    same arrays, each launch's event replaces the previous one in its buffers, so two events
    serve the whole loop, where a new event per launch costs a driver call (and numba's
    bookkeeping of the event's lifetime) more than recording one. An event held anywhere else
    (a buffer's latest work, a wait in progress) is never recorded again here; re-recording
    an event is legal in CUDA (waits already queued keep what they captured).
    """
    # Events of the current strict-mode session, made by the current factory (a test may
    # replace numba's with stand-ins), and with several devices of the current device (an
    # event is recorded on its own device's streams only).
    local = _launch_events
    pool = getattr(local, "pool", None)
    if (
        pool is None
        or local.session is not _sessions.current()
        or local.factory is not cuda.event
        or (_devices.several and local.device != _devices.current())
    ):
        pool = _thread_pool(local)
    for event in pool:
        if sys.getrefcount(event) <= _POOL_ONLY:
            return event
    event = new_event()
    pool.append(event)
    if len(pool) > _EVENTS_KEPT:
        del pool[0]  # still referenced elsewhere (it was not free): it lives on there
    return event


def order(before: Any, after: Any) -> None:
    """Make work queued later on ``after`` wait for the work queued so far on ``before``.

    An event recorded on ``before`` that ``after`` waits for: the device orders the two, the
    host does not block.
    """
    event = launch_event()  # (reused: the wait queued now keeps what the record captured)
    event.record(native(before))
    event.wait(native(after))
