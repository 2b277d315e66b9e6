"""One launch object per kernel launch (smartarray._engine.launch): the steady state of a loop of
launches is lock-free for every intent, records one event per launch, and keeps each
buffer's event until nothing refers to it; a launch is found by the object it put in
``retr``, never by ``id``."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray._engine import buffer as _engine
from smartarray._engine import launch as _launch
from smartarray._memory import streams as _streams


@cuda.jit
def k_sum(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


@cuda.jit
def k_fill(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 1.0


def _kernel_sum(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


inferred_sum = sa.jit(_kernel_sum)

# The ways a user launches the same loop: bare arrays, hints written by hand (In on the
# inputs; Out or InOut on the output), and smartarray.jit's inferred hints.
LAUNCHES = {
    "bare": lambda out, x, y: k_sum[1, 32](out, x, y),
    "In": lambda out, x, y: k_sum[1, 32](out, sa.In(x), sa.In(y)),
    "Out": lambda out, x, y: k_fill[1, 32](sa.Out(out), sa.In(x), sa.In(y)),
    "InOut": lambda out, x, y: k_sum[1, 32](sa.InOut(out), sa.In(x), sa.In(y)),
    "inferred": lambda out, x, y: inferred_sum[1, 32](out, x, y),
}


def _counted(monkeypatch, method):
    """The arguments of every call of ``Buffer.<method>`` from now on (the test's)."""
    calls = []
    real = getattr(_engine.Buffer, method)

    def counting(self, *args, **kws):
        calls.append(args)
        return real(self, *args, **kws)

    monkeypatch.setattr(_engine.Buffer, method, counting)
    return calls


@pytest.fixture
def acquisitions(monkeypatch):
    """Count the engine's acquisitions (the slow path, under a buffer's lock)."""
    return _counted(monkeypatch, "acquire")


@pytest.mark.parametrize("how", list(LAUNCHES))
def test_a_loop_of_launches_takes_the_lock_free_path_for_every_intent(how, acquisitions):
    out, x, y = (sa.SmartArray(np.arange(32.0) + k) for k in (0, 10, 20))
    launch = LAUNCHES[how]
    for _ in range(2):  # the first launches move what is stale and open the fast path
        launch(out, x, y)
    acquisitions.clear()
    before = sa.stats()
    for _ in range(5):
        launch(out, x, y)
    assert acquisitions == []
    assert sa.stats() == before  # nothing moved
    expected = np.ones(32) if how == "Out" else np.arange(32.0) * 2 + 30
    np.testing.assert_array_equal(np.asarray(out), expected)
    np.testing.assert_array_equal(np.asarray(x), np.arange(32.0) + 10)  # read only: current


def test_an_input_current_on_both_copies_is_read_by_the_fast_path(acquisitions):
    x = sa.SmartArray(np.arange(32.0))
    out = sa.SmartArray(np.zeros(32))
    k_sum[1, 32](out, sa.In(x), sa.In(x))
    assert x.valid_at == ("host", "gpu") or set(x.valid_at) == {"host", "gpu"}
    acquisitions.clear()
    k_sum[1, 32](out, sa.In(x), sa.In(x))
    assert [a[0] for a in acquisitions] == []
    x[0] = 5.0  # a host write: the device copy is stale, the fast path closed
    k_sum[1, 32](out, sa.In(x), sa.In(x))
    assert len(acquisitions) == 2  # both x arguments prepared under the lock again
    np.testing.assert_array_equal(np.asarray(out)[:2], [10.0, 2.0])


def latest_event(buf):
    """The event of a buffer's only work in flight (one stream used)."""
    (entry,) = buf.work.values()
    return entry.event


def test_each_launch_records_one_event_and_a_loop_reuses_two(monkeypatch):
    # Earlier tests' buffers still awaiting collection may hold pooled events: collected now,
    # so that none becomes free in the middle of the loop and joins it as a third event.
    gc.collect()
    out, x, y = (sa.SmartArray(np.zeros(32)) for _ in range(3))
    for _ in range(2):
        k_sum[1, 32](out, sa.In(x), sa.In(y))
    made = []
    real = _streams.new_event

    def counting():
        made.append(1)
        return real()

    monkeypatch.setattr(_streams, "new_event", counting)
    events = set()
    for _ in range(10):
        k_sum[1, 32](out, sa.In(x), sa.In(y))
        event = latest_event(out._buf)
        assert event is latest_event(x._buf) is latest_event(y._buf)  # one for the launch
        events.add(id(event))
    assert len(made) <= 2
    assert len(events) <= 2


def test_an_event_a_buffer_still_holds_is_never_recorded_again():
    a, b = sa.SmartArray(np.zeros(32)), sa.SmartArray(np.zeros(32))
    k_fill[1, 32](a, sa.In(a), sa.In(a))
    for _ in range(5):
        k_fill[1, 32](b, sa.In(b), sa.In(b))
        assert latest_event(b._buf) is not latest_event(a._buf)  # a's work still uses it
    np.testing.assert_array_equal(np.asarray(a), np.ones(32))


def test_a_launch_is_found_by_its_object_in_retr_not_by_address():
    a, b = sa.SmartArray(np.zeros(4)), sa.SmartArray(np.zeros(4))
    retr: list = []
    a.to_device(retr, 0)
    b.to_device(retr, 0)
    launches = [c for c in retr if isinstance(c, _launch.Launch)]
    assert len(launches) == 1 and len(launches[0].entries) == 2
    retr.clear()  # the same list object, as an address reuse would give
    a.to_device(retr, 0)
    fresh = [c for c in retr if isinstance(c, _launch.Launch)]
    assert len(fresh) == 1 and fresh[0] is not launches[0]
    assert launches[0].claimed_buffers() == []  # the failed launch claims nothing
    for callback in retr:
        callback()
    assert fresh[0].claimed_buffers() == []  # ran: its claims dropped


def test_a_launched_array_dropped_after_its_launch_is_freed_at_once():
    """The thread's latest launch is remembered (for its pins) but holds none of its arguments
    once its callback ran: an array dropped after a launch goes at once, with its device
    memory (no garbage collection, no later launch needed)."""
    import weakref

    a = sa.SmartArray(np.zeros(32))
    k_fill[1, 32](a, sa.In(a), sa.In(a))
    buffer = weakref.ref(a._buf)
    del a
    assert buffer() is None


@pytest.fixture
def releases(monkeypatch):
    """Count the post-launch records of writes (Buffer.release from a launch's callback)."""
    return _counted(monkeypatch, "release")


@pytest.mark.parametrize("how", ["bare", "InOut", "Out", "inferred"])
def test_a_launch_after_a_host_read_records_its_write_once_before_the_kernel(how, releases):
    # The iterative solver's loop: launch, read on the host, launch again. The write is
    # recorded before the kernel (the host copy goes stale then); the callback has nothing
    # left to record, and the next launch takes the fast path.
    out, x, y = (sa.SmartArray(np.arange(32.0) + k) for k in (0, 10, 20))
    launch = LAUNCHES[how]
    expected = np.ones(32) if how == "Out" else np.arange(32.0) * 2 + 30
    launch(out, x, y)
    for _ in range(3):
        np.testing.assert_array_equal(out.host(), expected)  # host and device current
        x[0] += 1.0  # (a host write of an input: its upload, not the output's record)
        if how != "Out":
            expected = expected + np.eye(32)[0]
        releases.clear()
        launch(out, x, y)
        assert releases == []  # (x too: uploaded, and written by the bare launches)
        assert out.valid_at == ("gpu",)
    np.testing.assert_array_equal(out.host(), expected)


def test_a_held_host_array_is_refreshed_after_a_launch_that_follows_a_read(releases):
    out, x, y = (sa.SmartArray(np.arange(32.0) + k) for k in (0, 10, 20))
    k_sum[1, 32](out, x, y)
    held = out.host()  # kept across the next launch: refreshed after its kernel
    releases.clear()
    k_sum[1, 32](out, sa.In(out), sa.In(y))
    assert len(releases) == 1  # the callback records the write and refreshes the held array
    np.testing.assert_array_equal(held, np.arange(32.0) * 3 + 50)
