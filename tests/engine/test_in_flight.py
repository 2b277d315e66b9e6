"""Work in flight on one array from several host threads: every launch, whichever thread or
stream queued it, is waited for; per-thread default streams are each thread's own; an njit
call still writing without the GIL is never copied mid-write.

The interleavings are forced, not hoped for: a later kernel argument whose preparation runs
another thread's whole launch holds the first launch between its first argument's
preparation and its kernel (numba-cuda prepares arguments one after the other, so another
thread may run there); a nogil njit function waits at a gate while another thread launches.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numba
import numpy as np
import pytest
from numba import cuda
from numba.cuda import args as numba_args

import smartarray as sa
from smartarray import SmartArray, _fakegpu
from smartarray._memory import streams as _streams
from smartarray._strict import state as _strict_state
from smartarray.testing import strict

FAKE_GPU = _fakegpu.current() is not None
# (not imported from tests.conftest: a second import of it in a fake-driver session sets
# NUMBA_ENABLE_CUDASIM in the environment, which later tests read)
STRICT = _strict_state.get() is not None
PLAIN_SIMULATOR = bool(numba.config.ENABLE_CUDASIM) and not STRICT

# The plain simulator runs a kernel inside its launch, with its thread-local kernel state
# swapped in: another thread's launch cannot run while one is being prepared there.
two_launches_at_once = pytest.mark.skipif(
    not (FAKE_GPU or STRICT), reason="the plain simulator cannot run two launches at once"
)

N = 64
HALF = N // 2
ROUNDS = 4


@cuda.jit
def bump(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


@cuda.jit
def bump_held(x, unused):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


@cuda.jit
def reads(x):
    pass


@cuda.jit
def copy_in(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


class RunsMeanwhile(numba_args.In):
    """A later kernel argument whose preparation blocks until ``meanwhile`` ran to its end in
    another thread: the launch is held between its first argument's preparation and its
    kernel, as any host thread may hold it there."""

    def __init__(self, meanwhile: Any) -> None:
        super().__init__(sa.to_device(np.zeros(1)))
        self.meanwhile = meanwhile
        self.errors: list[BaseException] = []

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        finished = threading.Event()

        def other() -> None:
            try:
                self.meanwhile()
            except BaseException as exc:  # noqa: BLE001 - reported in the launching thread
                self.errors.append(exc)
            finally:
                finished.set()

        threading.Thread(target=other, daemon=True).start()
        assert finished.wait(60), "the other thread's launch did not finish"
        if self.errors:
            raise self.errors[0]
        return super().to_device(retr, stream)


STREAMS = {
    "a stream per thread": lambda: cuda.stream(),
    "per-thread default streams": lambda: cuda.per_thread_default_stream(),
    "the default stream": lambda: 0,
}


def _bracketed_launches(stream: Any) -> None:
    """Thread A's launch on the first half brackets thread B's whole launch on the second."""
    for _ in range(ROUNDS):
        a = SmartArray(np.zeros(N))

        def meanwhile(a: SmartArray = a) -> None:
            theirs = stream()  # (made in that thread: a per-thread default stream is its own)
            bump[1, 32, theirs](a[HALF:])

        ours = stream()
        bump_held[1, 32, ours](a[:HALF], RunsMeanwhile(meanwhile))
        np.testing.assert_array_equal(np.asarray(a), np.ones(N))  # neither kernel's write lost
        cuda.synchronize()
        np.testing.assert_array_equal(a.host(), np.ones(N))


@two_launches_at_once
@pytest.mark.parametrize("stream", STREAMS)
def test_a_launch_between_another_threads_preparation_and_kernel_is_not_lost(stream):
    _bracketed_launches(STREAMS[stream])


@pytest.mark.strict_mode
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_thread", [False, True])
@pytest.mark.parametrize("stream", STREAMS)
def test_strict_a_launch_between_another_threads_preparation_and_kernel_is_not_lost(
    stream, per_thread, seed
):
    with strict(seed=seed, per_thread_default_stream=per_thread):
        _bracketed_launches(STREAMS[stream])


def _one_thread_after_another(stream: Any, threads: int = 3) -> SmartArray:
    a = SmartArray(np.zeros(N))
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            mine = stream()
            bump[2, 32, mine](a)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            errors.append(exc)

    for _ in range(threads):
        t = threading.Thread(target=launch)
        t.start()
        t.join()
    if errors:
        raise errors[0]
    return a


@pytest.mark.parametrize("stream", STREAMS)
def test_threads_launching_one_after_another_on_their_default_streams_add_up(stream):
    a = _one_thread_after_another(STREAMS[stream])
    np.testing.assert_array_equal(np.asarray(a), np.full(N, 3.0))


@pytest.mark.strict_mode
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_thread", [False, True])
@pytest.mark.parametrize("stream", STREAMS)
def test_strict_threads_launching_one_after_another_add_up(stream, per_thread, seed):
    with strict(seed=seed, per_thread_default_stream=per_thread):
        a = _one_thread_after_another(STREAMS[stream])
        np.testing.assert_array_equal(np.asarray(a), np.full(N, 3.0))


def test_each_threads_per_thread_default_stream_is_its_own():
    # (strict mode's streams have handles, as a GPU's; the plain simulator's do not)
    with strict(seed=0) if PLAIN_SIMULATOR else contextlib.nullcontext():
        _per_thread_identities()


def _per_thread_identities() -> None:
    seen: dict[str, Any] = {}

    def identify(name: str) -> None:
        seen[name] = _streams.identity(cuda.per_thread_default_stream())
        seen[name + " again"] = _streams.identity(cuda.per_thread_default_stream())

    for name in ("first", "second"):
        t = threading.Thread(target=identify, args=(name,))
        t.start()
        t.join()
    assert seen["first"] == seen["first again"]  # one thread: one stream
    assert seen["first"] != seen["second"]  # (the second thread may reuse the first's ident)
    assert _streams.identity(cuda.legacy_default_stream()) == _streams.LEGACY_HANDLE


# -- an njit call writing without the GIL ---------------------------------------------------


@numba.njit(nogil=True)
def write_at_a_gate(x, value, gate, reached, scratch):
    """Write ``value`` to the first half of ``x``, say so, wait for ``gate``, write the rest."""
    half = x.size // 2
    for i in range(half):
        x[i] = value
    reached[0] = 1.0
    n = 0
    # (``scratch`` may alias ``gate`` as far as the compiler knows: ``gate`` is read again
    # each turn; the bound keeps a broken test from hanging)
    while gate[0] == 0.0 and n < 4_000_000_000:
        scratch[0] += 1.0
        n += 1
    for i in range(half, x.size):
        x[i] = value


# Elements of one-element runs uploaded before: the device's valid set has 8 runs, and the
# gap [21, 25) (the njit call's bytes) is its smallest.
RUNS = (0, 10, 20, 25, 35, 45, 55, 65)
WRITER = slice(21, 25)


@pytest.fixture
def copies_cost_no_latency():
    """Plans copy each run on its own (no latency to save by merging runs)."""
    sa.set_transfer_cost(sa.TransferCost(latency_s=1e-12, bandwidth_Bps=1e9))
    yield
    sa.set_transfer_cost(None)


@pytest.mark.usefixtures("copies_cost_no_latency")
def test_a_launch_never_copies_bytes_an_njit_call_is_still_writing():
    a = SmartArray(np.zeros(100))
    for i in RUNS:
        reads[1, 1](sa.In(a[i : i + 1]))  # uploads that one element
    view = a[WRITER]
    gate, reached, scratch = np.zeros(1), np.zeros(1), np.zeros(1)
    gate[0] = 1.0
    write_at_a_gate(view, 1.0, gate, reached, scratch)  # compiles; arms the fast path
    gate[0] = reached[0] = 0.0
    writer = threading.Thread(target=write_at_a_gate, args=(view, 7.0, gate, reached, scratch))
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while reached[0] == 0.0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert reached[0] == 1.0, "the njit call did not start"
        # Open the gate later, from a third thread: a launch that waits for the call returns
        # only then; one that does not copies the half-written bytes now.
        opener = threading.Timer(0.5, gate.__setitem__, (0, 1.0))
        opener.start()
        # A ninth run: the plan fills the smallest gap, the njit call's bytes.
        reads[1, 1](sa.In(a[80:81]))
    finally:
        gate[0] = 1.0
        writer.join()
    np.testing.assert_array_equal(np.asarray(view), np.full(4, 7.0))
    if a[WRITER].is_valid("gpu"):  # the device copy claims these bytes: it must hold them
        np.testing.assert_array_equal(view.get("gpu").copy_to_host(), np.full(4, 7.0))


@pytest.mark.strict_mode
def test_in_flight_says_whether_device_work_is_still_recorded_on_an_array():
    with strict(seed=0):
        a = SmartArray(np.zeros(N))
        assert not a._buf.in_flight()
        s = cuda.stream()
        bump[1, 32, s](a[:HALF])  # queued, not run (strict mode runs work when waited for)
        assert a._buf.in_flight()
        np.asarray(a)  # a host read waits for all of it
        assert not a._buf.in_flight()


@pytest.mark.usefixtures("copies_cost_no_latency")
def test_in_flight_counts_an_njit_call_running_after_its_fast_path_was_disarmed():
    a = SmartArray(np.zeros(100))
    view = a[WRITER]
    gate, reached, scratch = np.ones(1), np.zeros(1), np.zeros(1)
    write_at_a_gate(view, 1.0, gate, reached, scratch)  # arms the fast path
    gate[0] = 0.0
    writer = threading.Thread(target=write_at_a_gate, args=(view, 7.0, gate, reached, scratch))
    writer.start()
    try:
        while reached[0] == 0.0:
            time.sleep(0.001)
        assert not a._buf.in_flight()  # armed: nothing else may touch its bytes
        reads[1, 1](sa.In(a[60:70]))  # an upload elsewhere disarms it: the call is registered
        assert a._buf.in_flight()
    finally:
        gate[0] = 1.0
        writer.join()
    a._buf.wait_for_device()  # (the launch's device work: recorded until waited for)
    assert not a._buf.in_flight()  # and the call returned
    np.testing.assert_array_equal(np.asarray(view), np.full(4, 7.0))


# -- a DLPack consumer on stream 1 ----------------------------------------------------------


def test_a_dlpack_consumer_on_stream_1_is_waited_for_on_the_legacy_default_stream(monkeypatch):
    from tests.interop.test_dlpack import Consumer, export

    a = SmartArray(np.arange(8.0))
    holder = Consumer(export(a, stream=1))
    assert [entry.stream for entry in a._buf.work.values()] == [_streams.LEGACY]
    synchronized: list[str] = []
    real_legacy, real_default = cuda.legacy_default_stream, cuda.default_stream

    class Spy:
        def __init__(self, name: str, stream: Any) -> None:
            self.name, self.stream = name, stream

        def synchronize(self) -> None:
            synchronized.append(self.name)
            self.stream.synchronize()

    monkeypatch.setattr(cuda, "legacy_default_stream", lambda: Spy("legacy", real_legacy()))
    monkeypatch.setattr(cuda, "default_stream", lambda: Spy("default", real_default()))
    a[0] = 5.0  # a host write waits for the consumer's stream: the one it named
    monkeypatch.undo()
    holder.release()
    assert synchronized == ["legacy"]
    np.testing.assert_array_equal(np.asarray(a), [5.0, *range(1, 8)])


# -- per-thread default streams on the fake driver ------------------------------------------

STREAM_0_PER_THREAD = """
import threading
from smartarray import _fakegpu
queue = _fakegpu.current().queue
seen = []

def record():
    event = cuda.event()
    event.record(0)  # (numba records on handle 0: the default stream)
    stream = queue.event(int(event.handle)).op.stream
    seen.append([stream.legacy, stream.handle])

for _ in range(2):
    t = threading.Thread(target=record)
    t.start()
    t.join()
print(json.dumps({"streams": seen}))
"""


@pytest.mark.parametrize("per_thread", [False, True])
def test_fake_driver_handle_0_is_each_threads_own_stream_with_per_thread_default_streams(
    per_thread,
):
    from tests.doubles.test_fakegpu import run_fake

    env = {"CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM": "1" if per_thread else "0"}
    (first_legacy, first), (second_legacy, second) = run_fake(STREAM_0_PER_THREAD, env=env)[
        "streams"
    ]
    if per_thread:  # each thread's own stream, not the legacy one
        assert not first_legacy and not second_legacy and first != second
    else:
        assert first_legacy and second_legacy


IN_FLIGHT_CHILD = """
import threading
from tests.engine.test_in_flight import _bracketed_launches, _one_thread_after_another, STREAMS
for name in STREAMS:
    _bracketed_launches(STREAMS[name])
    a = _one_thread_after_another(STREAMS[name])
    np.testing.assert_array_equal(np.asarray(a), np.full(a.size, 3.0))
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("per_thread", ["0", "1"])
def test_fake_driver_threads_lose_no_write(per_thread, seed):
    """Bracketed launches and threads one after another, on the fake driver in a child, with
    the legacy default stream and with per-thread default streams (handle 0 each thread's own
    stream, CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1: launches on the default stream from
    several threads are not ordered by the device)."""
    from tests.doubles.test_fakegpu import run_fake

    env = {"CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM": per_thread}
    assert run_fake(IN_FLIGHT_CHILD, seed=seed, env=env)["ok"]


TWO_DEVICES_CHILD = """
from tests.engine.test_in_flight import RunsMeanwhile, bump, bump_held, N, HALF, ROUNDS
for peer_copy in (False, True):
    for _ in range(ROUNDS):
        a = sa.SmartArray(np.zeros(N))
        if peer_copy:
            bump[2, 32](a)  # current on device 0 only: device 1 fills its copy peer to peer

        def meanwhile(a=a):
            with cuda.gpus[1]:
                theirs = cuda.stream()
                bump[1, 32, theirs](a[HALF:])

        ours = cuda.stream()
        bump_held[1, 32, ours](a[:HALF], RunsMeanwhile(meanwhile))
        expect = np.full(N, 2.0 if peer_copy else 1.0)
        np.testing.assert_array_equal(np.asarray(a), expect)
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("peer", ["1", "0"])
def test_fake_driver_a_launch_on_another_device_between_preparation_and_kernel(peer, seed):
    from tests.doubles.test_fakegpu import run_fake

    env = {"SMARTARRAY_FAKE_GPU_DEVICES": "2", "SMARTARRAY_FAKE_GPU_PEER": peer}
    assert run_fake(TWO_DEVICES_CHILD, seed=seed, env=env)["ok"]


# -- a host read between a launch's kernel and its post-launch record ------------------------


class ReadsBeforeTheLock:
    """A buffer's lock whose first acquisition by the launching thread inside a launch's
    post-launch record (after the kernel was queued) first runs another thread's whole-array
    host read to its end: the host may then hold pre-kernel bytes, marked current."""

    def __init__(self, lock: Any, read: Any) -> None:
        self.lock = lock
        self.read = read
        self.armed = False
        self.errors: list[BaseException] = []

    def __enter__(self) -> Any:
        if self.armed and threading.current_thread() is threading.main_thread():
            self.armed = False

            def other() -> None:
                try:
                    self.read()
                except BaseException as exc:  # noqa: BLE001 - reported in the launching thread
                    self.errors.append(exc)

            t = threading.Thread(target=other, daemon=True)
            t.start()
            t.join(60)
            assert not t.is_alive(), "the other thread's read did not finish"
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lock, name)


def _read_between_kernel_and_record(stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from smartarray._engine import launch as _launch

    for _ in range(ROUNDS):
        a = SmartArray(np.zeros(N))
        s = stream()
        bump[2, 32, s](a)  # current on the device only: the next launch records nothing first
        seen: list[np.ndarray] = []
        hook = ReadsBeforeTheLock(a._buf.lock, lambda a=a, seen=seen: seen.append(np.array(a)))
        a._buf.lock = hook
        record = _launch.Launch._record

        def armed(self: Any, record: Any = record, hook: Any = hook) -> Any:
            hook.armed = True
            try:
                return record(self)
            finally:
                hook.armed = False

        with monkeypatch.context() as m:
            m.setattr(_launch.Launch, "_record", armed)
            bump[2, 32, s](a)
        a._buf.lock = hook.lock
        if hook.errors:
            raise hook.errors[0]
        assert len(seen) == 1, "the other thread's read did not run"
        assert seen[0][0] in (1.0, 2.0)  # (before or after the kernel: either is a valid read)
        np.testing.assert_array_equal(np.asarray(a), np.full(N, 2.0))  # the write is not lost
        cuda.synchronize()
        np.testing.assert_array_equal(a.host(), np.full(N, 2.0))


@pytest.mark.parametrize("stream", STREAMS)
def test_a_host_read_between_a_kernel_and_its_record_loses_no_write(stream, monkeypatch):
    _read_between_kernel_and_record(STREAMS[stream], monkeypatch)


@pytest.mark.strict_mode
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_thread", [False, True])
@pytest.mark.parametrize("stream", STREAMS)
def test_strict_a_host_read_between_a_kernel_and_its_record_loses_no_write(
    stream, per_thread, seed, monkeypatch
):
    with strict(seed=seed, per_thread_default_stream=per_thread):
        _read_between_kernel_and_record(STREAMS[stream], monkeypatch)


# -- an array dropped while its work is queued on another device -----------------------------

DROPPED_CHILD = """
import gc
from tests.engine.test_in_flight import bump, copy_in, N
for stream_kind in ("own", "default", "per-thread"):
    for copies in (1, 2):  # a copy on device 1; copies on both devices
        with cuda.gpus[1]:
            other = cuda.current_context()
            stream = {"own": cuda.stream(), "default": 0,
                      "per-thread": cuda.per_thread_default_stream()}[stream_kind]
        a = sa.SmartArray(np.zeros(N))
        if copies == 2:
            bump[1, 64](a)  # (device 0)
        with cuda.gpus[1]:
            bump[1, 64, stream](a)  # queued on device 1
        del a
        gc.collect()
        # numba-cuda frees device 1's memory when its deferred frees are cleared, in
        # whatever context is current then: device 0's, which waits for device 0 only.
        with cuda.gpus[0]:
            other.memory_manager.deallocations.clear()
        with cuda.gpus[1]:
            cuda.synchronize()  # the kernel ran on memory still allocated
    # A plain ndarray in sa.In: smartarray's upload of it, for a launch on device 1's stream.
    x = np.arange(N, dtype=np.float64)
    with cuda.gpus[1]:
        other = cuda.current_context()
        stream = {"own": cuda.stream(), "default": 0,
                  "per-thread": cuda.per_thread_default_stream()}[stream_kind]
        out = sa.SmartArray(np.zeros(N))
        copy_in[1, 64, stream](sa.In(x), out)
    gc.collect()
    with cuda.gpus[0]:
        other.memory_manager.deallocations.clear()
    np.testing.assert_array_equal(np.asarray(out), x)
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_fake_driver_an_array_dropped_with_work_queued_on_another_device(seed):
    """An array whose last reference goes while a kernel on it is queued on another device
    keeps its device memory until that kernel ran, whichever context frees it."""
    from tests.doubles.test_fakegpu import run_fake

    env = {"SMARTARRAY_FAKE_GPU_DEVICES": "2", "SMARTARRAY_FAKE_GPU_PEER": "1"}
    assert run_fake(DROPPED_CHILD, seed=seed, env=env)["ok"]
