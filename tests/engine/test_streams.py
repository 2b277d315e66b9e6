"""Stream ordering of a SmartArray's device work, with stand-in streams and events.

The simulator completes every copy and kernel at once, so ordering bugs never show in values.
These tests drive the launch protocol as numba-cuda's real dispatcher does (``to_device(retr,
stream)`` before the launch, the ``retr`` callbacks right after it, without a sync) with stream
objects that record what the host is made to wait for, and events that record how work on
one stream is ordered after another's. Two shapes of stream objects reach smartarray on a GPU:
numba.cuda's ``Stream`` (``synchronize()``; what users create and pass to copies) and cuda.core's
``Stream`` (``sync()``; what numba-cuda's dispatcher hands ``to_device`` during a launch, even
for the default stream, a fresh object per launch configuration).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray._engine import residency as _residency
from smartarray.testing import is_strict, strict
from tests._kernels import add_one
from tests._targets import real_target_env
from tests.doubles.test_fakegpu import run_fake

# Outcomes depend on the fake driver's adversarial order: CI runs them over several seeds.
pytestmark = pytest.mark.seeds


class Log(list):
    """Host waits (``('sync', name)``, ``('event sync', name)``) and cross-stream orderings
    (``('record', name), ('wait', name)``), in order. Events recorded only to be waited on
    later (a buffer's own event, after each piece of its device work) go to ``records``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list = []


class NumbaStream:
    """A stand-in for numba.cuda's Stream: ``synchronize()`` and a ``handle``."""

    def __init__(self, log: Log, name: str, handle: int) -> None:
        self.log, self.name, self.handle = log, name, handle

    def synchronize(self) -> None:
        self.log.append(("sync", self.name))

    def __repr__(self) -> str:
        return self.name


class CoreStream:
    """A stand-in for cuda.core's Stream (what the dispatcher passes): ``sync()``, ``handle``."""

    def __init__(self, log: Log, name: str, handle: int) -> None:
        self.log, self.name, self.handle = log, name, handle

    def sync(self) -> None:
        self.log.append(("sync", self.name))

    def __repr__(self) -> str:
        return self.name


class Event:
    """An event that logs what it captured: ``wait`` and ``synchronize`` name the stream of the
    latest ``record`` (the work they wait for)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.on = None

    def record(self, stream: object = 0) -> None:
        self.on = getattr(stream, "name", stream)
        self.log.records.append(self.on)

    def wait(self, stream: object = 0) -> None:
        self.log.append(("record", self.on))  # what the wait captured
        self.log.append(("wait", getattr(stream, "name", stream)))

    def synchronize(self) -> None:
        self.log.append(("event sync", self.on))


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    """The log of host waits and events; numba.cuda's default stream and events record into it."""
    if not memory.SIMULATOR:
        pytest.skip(
            "stand-in streams and events that log what smartarray orders: numba-cuda's real "
            "copies take real streams (stream order on the real target: "
            "tests/doubles/test_fakegpu.py)"
        )
    log = Log()
    monkeypatch.setattr(cuda, "event", lambda *args, **kwargs: Event(log))
    monkeypatch.setattr(cuda, "default_stream", lambda: NumbaStream(log, "default", 0))
    # smartarray's own copy stream (copies after a buffer's event), made afresh for each test.
    from smartarray._memory import streams as _streams

    monkeypatch.setattr(cuda, "stream", lambda: NumbaStream(log, "copy", 0x9000))
    monkeypatch.setattr(_streams, "_copy_stream", [None, None])
    return log


def launch(arg: object, stream: object) -> None:
    """What numba-cuda's dispatcher does with a kernel argument around an asynchronous launch."""
    retr: list = []
    arg.to_device(retr, stream)
    for callback in retr:
        callback()


# --- get('host') / host() wait for an upload in flight ---------------------------------------


@pytest.mark.parametrize("method", ["get", "host"])
def test_a_writable_host_array_waits_for_an_upload_from_it_in_flight(log, method):
    a = sa.SmartArray(np.arange(8.0), pinned=True)
    s = NumbaStream(log, "s", 0x1000)
    launch(sa.In(a), s)  # an asynchronous upload from the pinned host copy, on s
    assert a.is_valid("host") and log == []
    host = a.get("host") if method == "get" else a.host()  # nothing to copy, but the DMA
    assert log == [("event sync", "s")]  # reading this memory must be done before it is written
    host[0] = 5.0
    a.host_changed()
    a.host()
    assert log == [("event sync", "s")]  # waited once
    np.testing.assert_array_equal(np.asarray(a), [5.0, 1, 2, 3, 4, 5, 6, 7])


def test_a_read_only_host_view_does_not_wait_for_an_upload(log):
    a = sa.SmartArray(np.arange(8.0), pinned=True)
    launch(sa.In(a), NumbaStream(log, "s", 0x1000))
    np.asarray(a)  # reading memory a DMA reads is no race
    assert log == []


# --- default-stream work and user streams ----------------------------------------------------


def _on_the_device(log):
    """An array current on the device (its upload, on smartarray's upload stream, done)."""
    a = sa.SmartArray(np.zeros(8))
    launch(a, 0)
    np.asarray(a)
    log.clear()
    return a


def test_default_stream_work_is_ordered_before_a_launch_on_another_stream(log):
    a = _on_the_device(log)
    launch(a, 0)  # a kernel on the default stream writes a's device copy
    assert log == []
    s = NumbaStream(log, "s", 0x1000)  # e.g. cuda.external_stream(ptr) of a non-blocking stream
    launch(a, s)
    # An event on the default stream that s waits for: no reliance on the legacy default
    # stream's implicit ordering (per-thread default streams and non-blocking streams have
    # none), and no host wait.
    assert log == [("record", 0), ("wait", "s")]
    np.asarray(a)
    # The host read waits for s, the stream of the latest work: through the buffer's event
    # (s may be gone by now), which smartarray's copy stream waits for before the download.
    assert log[2:] == [("record", "s"), ("wait", "copy"), ("sync", "copy")]


def test_default_stream_launch_as_the_dispatcher_passes_it(log):
    # On a GPU the dispatcher hands to_device a cuda.core Stream wrapping handle 0.
    a = sa.SmartArray(np.zeros(8), pinned=True)
    default = CoreStream(log, "core default", 0)
    launch(sa.In(a), default)  # an asynchronous upload from pinned memory on the default stream
    a[0] = 1.0  # a host write must wait for it
    assert log == [("event sync", "core default")]
    log.clear()
    launch(a, CoreStream(log, "core default again", 0))  # another launch configuration
    launch(a, NumbaStream(log, "s", 0x1000))
    assert log == [("record", "core default again"), ("wait", "s")]


def test_user_streams_are_ordered_on_the_device_and_the_host_waits_for_the_last_only(log):
    a = sa.SmartArray(np.zeros(8))
    s1, s2 = NumbaStream(log, "s1", 0x1000), NumbaStream(log, "s2", 0x2000)
    launch(a, s1)
    launch(a, s2)
    assert log == [("record", "s1"), ("wait", "s2")]  # no host wait between the launches
    np.testing.assert_array_equal(np.asarray(a), np.zeros(8))
    assert log[2:] == [("record", "s2"), ("wait", "copy"), ("sync", "copy")]


def test_a_loop_of_launches_on_one_stream_adds_no_wait_and_no_ordering(log):
    a = sa.SmartArray(np.zeros(8))
    b = sa.SmartArray(np.zeros(8))
    for i in range(5):
        # The dispatcher's cuda.core wrappers of one stream differ per launch configuration.
        launch(a, CoreStream(log, f"config {i}", 0x3000))
        launch(sa.In(b), CoreStream(log, f"config {i}", 0x3000))
    assert log == []
    # Each launch records one event after the kernel (what host reads wait on: the stream
    # may be destroyed before then), and nothing else once in the steady state (b, current on
    # both copies, is read by the fast path too); a launch that prepares a buffer under its
    # lock (the first ones) also records the buffer's event when prepared (a launch that then
    # fails leaves no stream handle to wait on).
    assert log.records == ["config 0"] * 4 + [f"config {i}" for i in range(1, 5) for _ in "ab"]
    s = NumbaStream(log, "s", 0x4000)
    for _ in range(5):
        launch(a, s)
    # One switch, one wait, on the event recorded after the latest launch on the old stream.
    assert log == [("record", "config 4"), ("wait", "s")]


def test_a_host_read_after_default_stream_work_is_ordered_by_the_stream_alone(log):
    # The download goes on the default stream itself, after the kernel in stream order: an
    # event wait there would cost a driver call and order nothing.
    a = _on_the_device(log)
    launch(a, 0)
    np.testing.assert_array_equal(np.asarray(a), np.zeros(8))
    assert not [entry for entry in log if entry[0] in ("record", "wait")], log


@pytest.mark.parametrize("reader", ["same thread", "another thread"])
def test_fake_driver_a_read_after_a_default_stream_launch_waits_for_no_event(reader):
    fake = _fakegpu.current()
    if fake is None:
        pytest.skip("counts the fake driver's calls")
    a = sa.SmartArray(np.zeros(64))
    add_one[2, 32](a)
    add_one[2, 32](a)  # (the steady state: a launch of a current array)
    before = fake.calls.copy()
    seen: list[np.ndarray] = []
    if reader == "same thread":
        seen.append(np.array(a))
    else:  # the legacy default stream is every thread's: ordered there too
        t = threading.Thread(target=lambda: seen.append(np.array(a)))
        t.start()
        t.join()
    np.testing.assert_array_equal(seen[0], np.full(64, 2.0))
    calls = fake.calls - before
    assert calls["cuStreamWaitEvent"] == 0 and calls["cuEventSynchronize"] == 0, calls


def test_host_reads_wait_for_their_own_buffers_stream_only(log):
    a, b = sa.SmartArray(np.zeros(8)), sa.SmartArray(np.ones(8))
    launch(a, NumbaStream(log, "s1", 0x1000))
    launch(b, CoreStream(log, "s2", 0x2000))
    np.testing.assert_array_equal(np.asarray(a), np.zeros(8))
    read_a = [("record", "s1"), ("wait", "copy"), ("sync", "copy")]
    assert log == read_a  # s2's work is not waited for
    np.testing.assert_array_equal(np.asarray(b), np.ones(8))
    assert log == read_a + [("record", "s2"), ("wait", "copy"), ("sync", "copy")]
    np.asarray(a), np.asarray(b)
    assert len(log) == 6  # nothing queued any more


def test_explicit_upload_on_the_default_stream_is_done_before_the_device_array_is_handed_out(
    log,
):
    # A synchronous upload from pageable memory returns once staged; the DMA may still run on
    # the default stream while a non-blocking stream's kernel starts. get('gpu') hands out the
    # device array for any stream: it waits for that DMA, so a launch on
    # another stream after it needs no ordering.
    a = sa.SmartArray(np.arange(8.0))
    a.get("gpu")
    assert log == [("event sync", 0)]
    launch(sa.In(a), NumbaStream(log, "s", 0x1000))
    assert log == [("event sync", 0)]


def test_construction_on_the_device_is_ordered_before_a_launch_elsewhere(log):
    a = sa.SmartArray(np.arange(8.0), where="gpu")
    launch(sa.In(a), NumbaStream(log, "s", 0x1000))
    assert log == [("record", 0), ("wait", "s")]


REAL_STREAMS = """
import json, warnings
warnings.simplefilter("ignore")
from cuda.bindings import driver as binding
from numba import cuda
from numba.cuda.cudadrv import driver
from smartarray._memory import streams as _streams

@cuda.jit
def kernel(x):
    pass

user = driver.Stream(binding.CUstream(0x1000))  # as cuda.stream() / external_stream(ptr) give
user2 = driver.Stream(binding.CUstream(0x2000))
default = kernel[1, 32].stream  # what the dispatcher hands ArgHint.to_device
on_user = kernel[1, 32, user].stream
other_config = kernel[2, 32, user].stream
on_user2 = kernel[1, 32, user2].stream
print("RESULT " + json.dumps({
    "type": type(default).__module__ + "." + type(default).__name__,
    "default is 0": _streams.same(default, 0),
    "default is DEFAULT": _streams.same(default, _streams.DEFAULT),
    "default equals 0": default == 0,
    "has synchronize": hasattr(default, "synchronize"),
    "has sync": hasattr(default, "sync"),
    "on user is user": _streams.same(on_user, user),
    "configs share a stream": _streams.same(on_user, other_config),
    "configs share an object": on_user is other_config,
    "user is not default": not _streams.same(on_user, default),
    "two user streams differ": not _streams.same(on_user, on_user2),
    "on user2 is user2": _streams.same(on_user2, user2) and _streams.same(user2, on_user2),
    "default is not user2": not _streams.same(default, on_user2),
}))
"""


def test_the_streams_numba_cudas_real_dispatcher_passes_are_recognised():
    # Real numba-cuda (no simulator), no GPU needed: a launch configuration's stream.
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-c", REAL_STREAMS], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    facts = json.loads(line[len("RESULT ") :])
    assert facts == {
        "type": "cuda.core._stream.Stream",
        "default is 0": True,
        "default is DEFAULT": True,
        "default equals 0": False,  # so `stream != 0` cannot tell a default-stream launch
        "has synchronize": False,  # so a host wait must call sync()
        "has sync": True,
        "on user is user": True,
        "configs share a stream": True,
        "configs share an object": False,  # so streams are compared by handle
        "user is not default": True,
        "two user streams differ": True,
        "on user2 is user2": True,
        "default is not user2": True,
    }


REAL_ACCEPTANCE = """
import warnings
warnings.simplefilter("ignore")
from cuda.bindings import driver as binding
from numba import cuda
from numba.cuda.cudadrv import driver
from smartarray._memory import checks as _checks, streams as _streams

@cuda.jit
def kernel(x):
    pass

user = driver.Stream(binding.CUstream(0x1000))
for given in (kernel[1, 32].stream, kernel[1, 32, user].stream):  # what to_device receives
    assert _checks._check_stream(given) is given  # no TypeError, taken as it is
assert _streams.pending(kernel[1, 32].stream) is _streams.DEFAULT  # handle 0: the default
assert _streams.pending(kernel[1, 32, user].stream) is not _streams.DEFAULT
print("OK")
"""


def test_the_launch_stream_numba_cudas_real_dispatcher_hands_to_device_is_accepted():
    # Real numba-cuda (no simulator), no GPU needed.
    out = subprocess.run(
        [sys.executable, "-c", REAL_ACCEPTANCE],
        env=real_target_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_the_lock_free_fast_path_serves_each_launch_configurations_stream_wrapper(log, monkeypatch):
    # On a GPU every launch configuration wraps the same CUstream in a new cuda.core Stream:
    # a loop of launches on an array current on the device only must still take the fast path
    # (no lock, no engine call), not only when the wrapper object happens to be the same.
    from smartarray._engine import buffer as _engine

    calls = []
    acquire = _engine.Buffer.acquire
    monkeypatch.setattr(
        _engine.Buffer, "acquire", lambda *a, **k: (calls.append(1), acquire(*a, **k))[1]
    )
    a = sa.SmartArray(np.zeros(8))
    for i in range(3):
        launch(a, CoreStream(log, f"config {i}", 0x3000))
    assert len(calls) == 1  # the first launch uploads; the others take the fast path
    assert log == []
    np.testing.assert_array_equal(np.asarray(a), np.zeros(8))


# --- streams as numba-cuda's real launch hands them, and streams that die -------------------

strict_only = pytest.mark.skipif(not is_strict(), reason="runs under SMARTARRAY_STRICT=1 only")


class ForwardsTheLaunchStream(cuda.In):
    """A user hint that hands the launch's stream on to smartarray's public API, as the demo's
    automatic-copy strategy and the benchmark workloads do."""

    def __init__(self, value, api):
        super().__init__(value)
        self.api = api

    def to_device(self, retr, stream=0):
        return self.api(self.value, retr, stream)


def _via_to_device(host, retr, stream):
    dev = sa.to_device(host, stream=stream)
    retr.append(lambda: dev.copy_to_host(host, stream=stream))
    return dev


def _via_device_array(host, retr, stream):
    dev = sa.device_array(host.shape, host.dtype, stream=stream)
    dev.copy_to_device(host, stream=stream)
    retr.append(lambda: dev.copy_to_host(host, stream=stream))
    return dev


def _via_device_array_like(host, retr, stream):
    dev = sa.device_array_like(host, stream=stream)
    sa.to_device(host, stream=stream, to=dev)
    retr.append(lambda: dev.copy_to_host(host, stream=stream))
    return dev


def _via_smartarray_copy(host, retr, stream):
    a = sa.SmartArray(np.zeros_like(host))
    a.copy_to_device(sa.to_device(host), stream=stream)
    dev = a.gpu()
    retr.append(lambda: dev.copy_to_host(host, stream=stream))  # after the kernel
    return dev


def _via_mapped_array(host, retr, stream):
    dev = sa.mapped_array(host.shape, host.dtype, stream=stream)
    dev.copy_to_device(host, stream=stream)
    retr.append(lambda: dev.copy_to_host(host, stream=stream))
    return dev


@strict_only
@pytest.mark.parametrize(
    "api",
    [
        _via_to_device,
        _via_device_array,
        _via_device_array_like,
        _via_smartarray_copy,
        _via_mapped_array,
    ],
)
@pytest.mark.parametrize("on_stream", [False, True])
def test_public_apis_accept_the_stream_a_launch_hands_to_device(api, on_stream):
    # numba-cuda hands ArgHint.to_device a cuda.core Stream (sync(), __cuda_stream__, no
    # synchronize()), the default stream included; every API that takes a stream accepts it.
    with strict(seed=3):
        s = sa.stream() if on_stream else 0
        host = np.arange(8.0)
        add_one[1, 8, s](ForwardsTheLaunchStream(host, api))
        cuda.synchronize()
        np.testing.assert_array_equal(host, np.arange(8.0) + 1)


@strict_only
def test_the_demos_automatic_copy_strategy_runs_in_strict_mode():
    from smartarray import _demo

    with strict(seed=1):
        auto = _demo.run_auto(8, 3, 3)
        ours = _demo.run_smartarray(8, 3, 3)
    np.testing.assert_allclose(auto, ours)


def _stand_in_core_stream():
    """cuda.core's Stream surface, exactly: handle, __cuda_stream__(), sync(); no
    synchronize() (the simulator ignores streams, so any handle does)."""

    class Stream:
        handle = 0

        def __cuda_stream__(self):
            return (0, 0)

        def sync(self):
            pass

    return Stream()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: sa.to_device(np.arange(3.0), stream=s),
        lambda s: sa.device_array(3, stream=s),
        lambda s: sa.device_array_like(np.arange(3.0), stream=s),
        lambda s: sa.to_device(np.arange(3.0)).copy_to_host(stream=s),
        lambda s: sa.SmartArray(np.zeros(3)).copy_to_device(sa.to_device(np.ones(3)), stream=s),
    ],
)
def test_an_object_with_cuda_stream_is_a_stream(call):
    call(_stand_in_core_stream())  # no TypeError


def _the_launch_stream_died(a, use):
    s = cuda.stream()
    add_one[1, 8, s](a)
    del s  # the user's stream goes; only the launch configuration's non-owning wrapper knew it
    import gc

    gc.collect()
    use(a)


def _host_read(a):
    np.testing.assert_array_equal(np.asarray(a), np.ones(8))


def _launch_elsewhere(a):
    other = cuda.stream()
    add_one[1, 8, other](a)
    other.synchronize()
    np.testing.assert_array_equal(a.host(), np.full(8, 2.0))


def _host_write(a):
    a[0] = 7.0
    np.testing.assert_array_equal(np.asarray(a), [7.0] + [1.0] * 7)


def _eviction(a):
    b = sa.SmartArray(np.zeros(8))
    b.gpu()  # the budget holds one: a's device copy is evicted (downloaded first)
    np.testing.assert_array_equal(np.asarray(a), np.ones(8))


def _interface(a):
    cai = a.__cuda_array_interface__
    assert cai["stream"] is None or cai["stream"] in (1, 2) or cai["stream"] > 2
    np.testing.assert_array_equal(a.host(), np.ones(8))


@strict_only
@pytest.mark.parametrize("use", [_host_read, _launch_elsewhere, _host_write, _eviction, _interface])
def test_a_buffer_never_waits_on_a_destroyed_launch_stream(use):
    for seed in range(4):
        with strict(seed=seed):
            sa.set_device_budget(64)
            try:
                a = sa.SmartArray(np.zeros(8))
                _the_launch_stream_died(a, use)
            finally:
                sa.set_device_budget(None)


@cuda.jit
def _add_one_to_first(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


class FailsToPrepare(cuda.In):
    """An argument whose preparation fails after the earlier arguments' (no callbacks run)."""

    def to_device(self, retr, stream=0):
        raise RuntimeError("this argument cannot be prepared")


@strict_only
def test_a_launch_that_failed_after_preparing_an_argument_leaves_no_dead_stream_to_wait_on():
    for seed in range(3):
        with strict(seed=seed):
            a = sa.SmartArray(np.arange(8.0))
            s = cuda.stream()
            with pytest.raises(RuntimeError, match="cannot be prepared"):
                _add_one_to_first[1, 8, s](a, FailsToPrepare(np.zeros(8)))
            del s
            import gc

            gc.collect()
            np.testing.assert_array_equal(np.asarray(a), np.arange(8.0))  # no kernel ran
            a[0] = 5.0
            np.testing.assert_array_equal(a.host()[:2], [5.0, 1.0])


# --- a device hand-out is ordered after the buffer's queued work -----------------------------


@cuda.jit
def _read_only(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


@cuda.jit
def _fill_five(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 5.0


@strict_only
@pytest.mark.parametrize("hand_out", ["gpu", "get"])
@pytest.mark.parametrize("pinned", [False, True])
def test_a_device_hand_out_is_not_overwritten_by_an_upload_queued_on_another_stream(
    hand_out, pinned
):
    for seed in range(4):
        with strict(seed=seed):
            a = sa.SmartArray(np.arange(8.0), pinned=pinned)
            s1, s2 = cuda.stream(), cuda.stream()
            out = cuda.device_array(8)
            _read_only[1, 8, s1](sa.In(a), out)  # a's upload is queued on s1
            view = a[2:4]
            v = view.gpu() if hand_out == "gpu" else view.get("gpu")
            _fill_five[1, 2, s2](v)  # the user's kernel on a second stream
            s2.synchronize()
            view.gpu_changed()
            np.testing.assert_array_equal(a.host(), [0, 1, 5, 5, 4, 5, 6, 7])


# --- a held host array written after a launch -------------------------------------------------


@strict_only
@pytest.mark.parametrize("on_stream", [False, True])
@pytest.mark.parametrize("hold", ["host", "adopted"])
def test_a_held_host_array_written_after_a_launch_does_not_change_what_the_kernel_read(
    on_stream, hold
):
    # The launch uploads from page-locked memory: the DMA reads it when it runs (on a GPU,
    # cuMemcpyHtoDAsync, even on the default stream: numba-cuda hands to_device a cuda.core
    # Stream). A write through an array the user held since before the launch must not reach
    # the kernel.
    for seed in range(4):
        with strict(seed=seed):
            if hold == "adopted":
                x = sa.pinned_array(8)
                x[:] = np.arange(8.0)
                a = sa.SmartArray(x, copy=False)
                h = x
            else:
                a = sa.SmartArray(np.arange(8.0), pinned=True)
                h = a.host()
            s = cuda.stream() if on_stream else 0
            out = cuda.device_array(8)
            _read_only[1, 8, s](sa.In(a), out)  # read only: nothing refreshes h after it
            h[0] = 100.0  # right after the launch returned
            a.host_changed()
            np.testing.assert_array_equal(out.copy_to_host(), np.arange(8.0))
            assert a.host()[0] == 100.0


# --- per-thread default streams -------------------------------------------------------------


@strict_only
@pytest.mark.parametrize("read", ["asarray", "host", "launch_elsewhere"])
def test_another_threads_host_read_waits_for_work_on_the_first_threads_default_stream(read):
    # With per-thread default streams, stream 0 (handle 0, and 2) is the calling thread's own
    # stream: thread B must wait for thread A's work on A's stream, not on B's own.
    import threading

    def reader(a, read, seen):  # thread B
        if read == "asarray":
            seen.append(np.asarray(a).copy())
        elif read == "host":
            seen.append(a.host().copy())
        else:
            s = cuda.stream()
            add_one[1, 8, s](a)
            s.synchronize()
            seen.append(np.asarray(a) - 1.0)

    for seed in range(4):
        with strict(seed=seed, per_thread_default_stream=True):
            a = sa.SmartArray(np.zeros(8))
            a.gpu()
            worker = threading.Thread(target=add_one[1, 8], args=(a,))  # A, on stream 0
            worker.start()
            worker.join()
            seen: list = []
            other = threading.Thread(target=reader, args=(a, read, seen))
            other.start()
            other.join()
            np.testing.assert_array_equal(seen[0], np.ones(8))


@strict_only
def test_per_thread_default_streams_are_distinct_per_thread_in_strict_mode():
    import threading

    with strict(per_thread_default_stream=True) as state:
        d = cuda.to_device(np.zeros(4))
        worker = threading.Thread(target=lambda: add_one[1, 4](d))
        worker.start()
        worker.join()
        assert state.pending() == 1
        cuda.default_stream().synchronize()  # this thread's own stream: nothing of the worker's
        assert state.pending() == 1
        cuda.legacy_default_stream().synchronize()
        assert state.pending() == 0


# --- with a GPU: streams that die and held host arrays written after a launch, on hardware --


@cuda.jit
def _spin(iterations):
    # Keeps its stream busy for a while (~iterations microseconds), so that work queued after
    # it on the same stream is still pending when the host goes on.
    for _ in range(iterations):
        cuda.nanosleep(1000)


@pytest.mark.gpu
def test_gpu_host_read_after_the_launch_stream_was_destroyed():
    # CuPy destroys its stream when the object is collected; numba's external_stream wrapper
    # (kept in the launch-configuration cache) does not own it, nor does the cuda.core Stream
    # the dispatcher handed to_device. The host read must wait on smartarray's own event.
    import gc

    cp = pytest.importorskip("cupy")
    a = sa.SmartArray(np.zeros(1024, dtype=np.float64))
    side = cp.cuda.Stream(non_blocking=True)
    s = cuda.external_stream(side.ptr)
    _spin[1, 1, s](50_000)  # ~50 ms
    add_one[4, 256, s](a)
    del s, side
    gc.collect()  # the CUstream is destroyed; its queued work still runs
    replacements = [cp.cuda.Stream(non_blocking=True) for _ in range(4)]  # may reuse the handle
    cai = a.__cuda_array_interface__
    assert cai["stream"] == 1  # never the dead handle: the legacy stream, ordered after it
    np.testing.assert_array_equal(a.host(), np.ones(1024))
    b = sa.SmartArray(np.zeros(1024, dtype=np.float64))
    other = cp.cuda.Stream(non_blocking=True)
    side2 = cp.cuda.Stream(non_blocking=True)
    s2 = cuda.external_stream(side2.ptr)
    _spin[1, 1, s2](50_000)
    add_one[4, 256, s2](b)
    del s2, side2
    gc.collect()
    add_one[4, 256, cuda.external_stream(other.ptr)](b)  # ordered after it on the device
    other.synchronize()
    np.testing.assert_array_equal(b.host(), np.full(1024, 2.0))
    del replacements


@pytest.mark.gpu
@pytest.mark.parametrize("on_stream", [False, True])
def test_gpu_a_held_host_array_written_after_a_launch_does_not_change_what_the_kernel_read(
    on_stream,
):
    # The upload from the pinned host copy is queued behind a busy kernel: without a wait
    # before the launch returns, the write below would reach the kernel.
    a = sa.SmartArray(np.arange(1024, dtype=np.float64), pinned=True)
    h = a.host()  # held since before the launch, writable
    s = cuda.stream() if on_stream else 0
    out = cuda.device_array(1024)
    _spin[1, 1, s](50_000)
    _read_only[4, 256, s](sa.In(a), out)
    h[:] = -1.0  # right after the launch returned
    a.host_changed()
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(1024))
    np.testing.assert_array_equal(a.host(), np.full(1024, -1.0))


@pytest.mark.gpu
def test_gpu_smartarray_jit_does_not_make_a_pinned_input_asynchronous():
    x = cuda.pinned_array(1024)
    x[:] = np.arange(1024.0)
    out = cuda.device_array(1024)
    _spin[1, 1](50_000)  # the default stream is busy: an asynchronous upload waits behind it
    _jit_copy_in[4, 256](out, x)
    x[:] = -1.0  # right after the launch returned
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(1024.0))


@sa.jit
def _jit_copy_in(out, x):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


# -- the uploads of a default-stream launch ----------------------------------------------------


def _fresh_arrays_launched_on_the_default_stream(rounds: int = 6) -> None:
    """Each launch uploads a fresh array (its device copy new) on the default stream; the
    kernel must see the uploaded bytes, wherever the upload was queued."""
    arrays = []
    for i in range(rounds):
        a = sa.SmartArray(np.full(64, float(i)))
        add_one[1, 64](a)
        arrays.append(a)
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(a.host(), np.full(64, i + 1.0))


def test_a_default_stream_launch_sees_the_bytes_it_uploaded():
    _fresh_arrays_launched_on_the_default_stream()


@pytest.mark.strict_mode
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_thread", [False, True])
def test_strict_a_default_stream_launch_sees_the_bytes_it_uploaded(per_thread, seed):
    with strict(seed=seed, per_thread_default_stream=per_thread):
        _fresh_arrays_launched_on_the_default_stream()


OVERLAP_CHILD = """
import gc
clock = __import__("smartarray")._fakegpu.current().clock

@cuda.jit
def slow(x):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] += 1.0

n = 1 << 16
upload_s = clock.preset.copy_latency_s + 8 * n / clock.preset.pageable_Bps
clock.set_kernel_seconds("slow", upload_s)
if REUSE:  # device memory of dead arrays of this size, kept for reuse
    warm = [sa.SmartArray(np.zeros(n)) for _ in range(4)]
    for w in warm:
        slow[1, 32](w)
    del warm, w
    gc.collect()
cuda.synchronize()
cached = sa.device_budget().cached
arrays = [sa.SmartArray(np.full(n, float(k))) for k in range(4)]
start = clock.host
for a in arrays:
    slow[1, 32](a)
cuda.synchronize()
seconds = clock.host - start
ok = all(np.array_equal(np.asarray(a), np.full(n, k + 1.0)) for k, a in enumerate(arrays))
print(json.dumps({"seconds": seconds, "upload_s": upload_s, "cached": cached, "ok": ok}))
"""


def test_fake_clock_a_default_stream_launchs_upload_overlaps_the_kernel_before():
    """Fresh arrays launched in turn on the default stream: each upload (pageable: the host
    waits for it) runs on smartarray's upload stream while the previous kernel runs, unless
    an allocation comes between (implicit synchronisation), which device memory kept for
    reuse avoids."""
    if _fakegpu.current() is None:
        pytest.skip("a child on the fake driver's clock: run in the fake driver's job")
    env = {"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"}
    fresh = run_fake(OVERLAP_CHILD.replace("REUSE", "False"), env=env)
    reused = run_fake(OVERLAP_CHILD.replace("REUSE", "True"), env=env)
    assert fresh["ok"] and reused["ok"]
    assert reused["cached"] >= 4 * 8 * (1 << 16)
    # Fresh: each allocation orders the upload after the kernel before (4 uploads, 4 kernels).
    assert fresh["seconds"] >= 8 * fresh["upload_s"], fresh
    # Reused: three of the four kernels (each as long as an upload) run under an upload.
    assert reused["seconds"] <= fresh["seconds"] - 2.5 * fresh["upload_s"], (fresh, reused)


@cuda.jit
def copy_into(src, dst):
    for i in range(cuda.grid(1), src.size, cuda.gridsize(1)):
        dst[i] = src[i]


def _adversarial_order(seed: int) -> None:
    """Run the rest of a test in adversarial order ``seed``: the fake driver's (each seed) or
    strict mode's (seed 0 only); skip it elsewhere."""
    fake = _fakegpu.current()
    if fake is not None:
        fake.queue.rng.seed(seed)
    elif not is_strict() or seed:
        pytest.skip("needs an adversarial order: the fake driver (each seed) or strict mode")


@pytest.mark.parametrize("seed", range(6))
def test_a_hand_outs_default_stream_reader_runs_before_a_later_upload_overwrites_it(seed):
    """The user's kernel on the default stream reads a device array from ``gpu()`` (work
    smartarray never sees); the hand-out is dropped, the host writes, a launch uploads: the
    upload must not overtake that kernel (uploads of memory ever handed out stay on the
    launch's stream)."""
    _adversarial_order(seed)
    a = sa.SmartArray(np.zeros(32))
    d = a.gpu()
    out = cuda.device_array(32)
    copy_into[1, 32](d, out)
    del d
    a[:] = 7.0
    add_one[1, 32](a)
    np.testing.assert_array_equal(out.copy_to_host(), np.zeros(32))
    np.testing.assert_array_equal(np.asarray(a), np.full(32, 8.0))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("reader", ["current", "uploaded", "annotated"])
def test_a_default_stream_reader_runs_before_a_later_upload_overwrites_it(seed, reader):
    """smartarray's own launch reads the array's device copy on the default stream (the
    launch fast path when it is current there; or after uploading it; or with ``sa.In``); the
    host writes, another launch uploads on smartarray's upload stream: the reader still sees
    the old values (the host write waits for the buffer's device work, the upload is ordered
    after it)."""
    _adversarial_order(seed)
    a = sa.SmartArray(np.zeros(32))
    out = sa.SmartArray(np.full(32, -1.0))
    if reader == "annotated":
        copy_into[1, 32](sa.In(a), sa.Out(out))
    else:
        copy_into[1, 32](a, out)  # (uploads a)
        if reader == "current":
            copy_into[1, 32](a, out)  # (current on the device: the launch fast path)
    with sa.trace() as t:
        a[:] = 7.0
        add_one[1, 32](a)
    assert [e.stream for e in t.events if e.direction == "h2d"] == ["smartarray upload"]
    np.testing.assert_array_equal(np.asarray(out), np.zeros(32))
    np.testing.assert_array_equal(np.asarray(a), np.full(32, 8.0))


@pytest.mark.skipif(
    memory.SIMULATOR and not is_strict(),
    reason="the plain simulator cannot run two launches at once (its kernel state is swapped in)",
)
def test_while_another_thread_is_inside_a_launch_uploads_stay_on_the_launchs_stream():
    """Another thread's launch, between its preparation and the callback that records it, is
    in no buffer's work: while one is under way, a default-stream launch's uploads stay on
    the launch's stream (the legacy default stream orders them after that thread's kernels);
    once it is done, they go on the upload stream again."""
    x = sa.SmartArray(np.zeros(32))
    with x._buf.lock:  # the other thread's launch waits in its preparation of x
        thread = threading.Thread(target=lambda: add_one[1, 32](x))
        thread.start()
        deadline = time.monotonic() + 30
        while not _residency.others_launching():
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.001)
        with sa.trace() as during:
            a = sa.SmartArray(np.zeros(32))
            add_one[1, 32](a)
    thread.join()
    with sa.trace() as after:
        b = sa.SmartArray(np.zeros(32))
        add_one[1, 32](b)
    assert [e.stream for e in during.events if e.direction == "h2d"] == ["0"]
    assert [e.stream for e in after.events if e.direction == "h2d"] == ["smartarray upload"]
    for array in (x, a, b):
        np.testing.assert_array_equal(np.asarray(array), np.ones(32))


@pytest.mark.parametrize("seed", range(6))
def test_a_dropped_hand_outs_reader_runs_before_its_memorys_next_array_overwrites_it(seed):
    """The user's kernel on the default stream reads a device array from ``gpu()``; the
    hand-out and its SmartArray die; a new array of the same size is uploaded for a launch:
    if it reused that memory, its upload (on smartarray's upload stream) must not overtake the
    user's kernel, which smartarray never saw (memory ever handed out is not kept for reuse)."""
    _adversarial_order(seed)
    a = sa.SmartArray(np.ones(32))
    d = a.gpu()
    out = cuda.device_array(32)
    copy_into[1, 32](d, out)
    del a, d
    gc.collect()
    b = sa.SmartArray(np.full(32, 2.0))
    add_one[1, 32](b)
    np.testing.assert_array_equal(out.copy_to_host(), np.ones(32))
    np.testing.assert_array_equal(np.asarray(b), np.full(32, 3.0))


POOL_CHILD = """
import gc, weakref
from numba.cuda.cudadrv import driver as drv

class Pool(drv.NumbaCUDAMemoryManager):
    '''A pool that hands a freed block to the next allocation of its size at once, as
    stream-ordered pools do (its free is ordered on the legacy default stream).'''
    blocks = {}

    def memalloc(self, size):
        free = Pool.blocks.setdefault(size, [])
        ptr = free.pop() if free else drv.driver.cuMemAlloc(size)
        return drv.MemoryPointer(
            weakref.proxy(self.context), ptr, size, finalizer=lambda: free.append(ptr)
        )

cuda.set_memory_manager(Pool)

@cuda.jit
def fill(x, v):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] = v

@cuda.jit
def add_one(x):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] += 1.0

d = cuda.device_array(32)
fill[1, 32](d, 5.0)  # the pool's previous owner, on the legacy default stream
del d
gc.collect()
b = sa.SmartArray(np.full(32, 2.0))
add_one[1, 32](b)  # b's copy is d's block: its upload must come after fill
print(json.dumps({"b": np.asarray(b).tolist()}))
"""


@pytest.mark.parametrize("seed", range(6))
def test_an_upload_into_a_pools_reused_block_comes_after_its_previous_owners_kernel(seed):
    """An allocator may hand out a block whose previous owner's kernel is still queued on the
    legacy default stream (a stream-ordered pool; a free from another device's context): an
    upload on smartarray's upload stream into fresh memory waits for that stream first."""
    if _fakegpu.current() is None:
        pytest.skip("a child on the fake driver with a memory pool: run in the fake driver's job")
    out = run_fake(POOL_CHILD, seed=seed)
    assert out["b"] == [3.0] * 32
