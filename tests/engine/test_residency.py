"""The device-memory budget (smartarray._engine.residency): eviction, its order, what is never
evicted, errors, stats and trace, strict mode's finite device memory, and random pipelines of
several arrays under a small budget against a NumPy model."""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import threading
import weakref

import numba
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray._engine import residency as _residency
from smartarray._memory import devices as _devices
from smartarray._platform import cuda_simulator as _simulator
from smartarray.testing import is_strict, strict
from tests._kernels import add_one
from tests._targets import real_target_env

N = 32  # elements of each test array
NB = N * 8  # its bytes


@cuda.jit(debug=True, opt=False)  # a GPU reports kernel exceptions with debug only
def k_out_of_bounds(x):
    x[x.size + 1000] = 1.0


@cuda.jit
def k_add3(x, y, z):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0
        y[i] += 2.0
        z[i] += x[i] + y[i]


@cuda.jit
def k_add_one_first(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


@cuda.jit
def k_in_then_two(x, y, z):
    i = cuda.grid(1)
    if i < x.size:
        y[i] += x[i]
        z[i] += 2.0 * x[i]


@cuda.jit
def k_sum_into(x, out):
    if cuda.grid(1) == 0:
        total = 0.0
        for j in range(x.size):
            total += x[j]
        out[0] = total


@numba.njit
def j_add_one(x):
    for i in range(x.size):
        x[i] += 1.0


def launch(kernel, *args):
    kernel[1, 32](*args)


def _clear_others():
    """Evict every other test's device copies that may go, so that budgets here are exact."""
    gc.collect()
    with _residency._lock:
        _residency._evict(1 << 62, None, "budget")
        _residency._drop_cached(_devices.current())


def _kept_bytes():
    return sum(r.nbytes for r in sa.device_budget().resident if r.kept)


@pytest.fixture
def budget():
    """``budget(n)``: a budget of ``n`` bytes for this test's arrays; restored after."""

    def set_budget(nbytes):
        _clear_others()
        sa.set_device_budget(_kept_bytes() + nbytes)

    yield set_budget
    _residency.reset()


def resident_names():
    return {r.name for r in sa.device_budget().resident}


def arrays(count, prefix="r"):
    return [
        sa.SmartArray(np.arange(N, dtype=np.float64) + 100 * k, name=f"{prefix}{k}")
        for k in range(count)
    ]


# -- the public API -------------------------------------------------------------------------


def test_set_device_budget_refuses_bad_input_and_changes_nothing():
    before = sa.device_budget().budget
    for bad in (-1, -(1 << 40)):
        with pytest.raises(ValueError, match="nbytes must be >= 0"):
            sa.set_device_budget(bad)
    for bad in (1.5, "1024", True, [1]):
        with pytest.raises(TypeError, match="nbytes must be an int"):
            sa.set_device_budget(bad)
    assert sa.device_budget().budget == before


def test_reset_unsets_the_budget_and_keeps_live_copies_counted():
    a = sa.SmartArray(np.ones(N), name="kept")
    a.gpu()
    used = sa.device_budget().used
    sa.set_device_budget(used + 4096)
    _residency.reset()
    after = sa.device_budget()
    assert after.used == used and "kept" in resident_names()  # the live array's copy
    sa.set_device_budget(None)
    assert after.budget != used + 4096 and sa.device_budget().budget != used + 4096
    if numba.config.ENABLE_CUDASIM or _fakegpu.current() is not None:
        # the default again (on a GPU it follows the free memory other processes change)
        assert after.budget == sa.device_budget().budget


def test_budget_is_read_back_and_none_restores_the_default(budget):
    sa.set_device_budget(np.int64(4096))
    assert sa.device_budget().budget == 4096
    sa.set_device_budget(0)
    assert sa.device_budget().budget == 0
    sa.set_device_budget(None)
    if memory.SIMULATOR:
        assert sa.device_budget().budget is None  # the simulator: unlimited unless set
    else:  # a GPU: the memory free at first use, less a margin
        free = cuda.current_context().get_memory_info().free
        assert 0 < sa.device_budget().budget <= free + sa.device_budget().used


def test_resident_refuses_what_is_not_a_smartarray():
    a = sa.SmartArray(np.zeros(4))
    with (
        pytest.raises(TypeError, match=r"arrays\[1\] must be a SmartArray"),
        sa.resident(a, np.zeros(4)),
    ):
        pass
    assert a._buf.residency is None or a._buf.residency.keep == 0  # nothing kept


# -- eviction -------------------------------------------------------------------------------


def test_arrays_four_times_the_budget_run_correctly(budget):
    """The over-budget workload: SmartArrays totalling 4x the budget, used in turn by kernels,
    njit and the host; every value right, the budget never exceeded."""
    xs = arrays(8)
    ref = [np.asarray(x).copy() for x in xs]
    budget(2 * NB)
    assert sum(x.nbytes for x in xs) == 4 * (2 * NB)
    sa.reset_stats()
    for step in range(4):
        for k, x in enumerate(xs):
            launch(add_one, x)
            ref[k] += 1
            if (step + k) % 3 == 0:
                x[k] = -step  # a host write between launches
                ref[k][k] = -step
            if (step + k) % 5 == 0:
                j_add_one(x)
                ref[k] += 1
            assert sa.device_budget().used - _kept_bytes() <= 2 * NB
    for x, r in zip(xs, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(x), r)
    s = sa.stats()
    assert s.evictions > 0 and s.evicted_bytes == s.evictions * NB


def test_clean_copies_go_first_and_move_nothing(budget):
    a, b, c = arrays(3)
    out = sa.SmartArray(shape=1)
    budget(2 * NB + out.nbytes)
    launch(add_one, a)  # a: current on the device only (dirty)
    launch(k_sum_into, sa.In(b), sa.Out(out))  # b: clean (host current)
    with sa.trace() as t:
        launch(add_one, c)  # needs room: b goes first though a is less recently used
    assert [(e.array, e.downloaded) for e in t.evictions] == [("r1", 0)]
    assert [(e.direction, e.array) for e in t.events] == [("h2d", "r2")]
    assert {"r0", "r2"} <= resident_names() and "r1" not in resident_names()


def test_least_recently_used_dirty_copy_is_downloaded_then_evicted(budget):
    a, b, c = arrays(3)
    budget(2 * NB)
    launch(add_one, a)
    launch(add_one, b)
    launch(add_one, a)  # b is now the least recently used
    with sa.trace() as t:
        launch(add_one, c)
    assert [(e.array, e.nbytes, e.downloaded, e.reason) for e in t.evictions] == [
        ("r1", NB, NB, "budget")
    ]
    evict = [e for e in t.events if e.reason == "eviction"]
    assert [(e.direction, e.array, e.nbytes) for e in evict] == [("d2h", "r1", NB)]
    assert t.stats.evictions == 1 and t.stats.evicted_bytes == NB
    # b comes back lazily: a host read moves nothing (the host is current), a launch uploads
    with sa.trace() as t:
        np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 101)
    assert t.events == []
    assert b._buf.device_bytes is None and b.valid_at == ("host",)


def test_only_the_bytes_the_device_alone_holds_are_downloaded(budget):
    a, b = arrays(2)
    budget(NB)
    launch(add_one, a[4:10])  # a's device copy: all current, bytes [32, 80) there only
    with sa.trace() as t:
        launch(add_one, b)
    [down] = [e for e in t.events if e.reason == "eviction"]
    assert (down.start, down.stop) == (32, 80)
    expected = np.arange(N, dtype=np.float64)
    expected[4:10] += 1
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_an_evicted_array_comes_back_moving_only_what_is_needed(budget):
    a, b = arrays(2)
    budget(NB)
    launch(add_one, a)
    launch(add_one, b)  # evicts a (downloaded)
    with sa.trace() as t:
        launch(add_one, a[0:4])  # evicts b; a comes back: only its 32 bytes go up
    ups = [(e.array, e.start, e.stop) for e in t.events if e.direction == "h2d"]
    assert ups == [("r0", 0, 32)]
    expected = np.arange(N, dtype=np.float64) + 1
    expected[0:4] += 1
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_cached_device_views_are_not_reused_after_eviction(budget):
    """The launch fast path caches a device view per view: an eviction must clear it (it
    points into the freed copy), so the next launch uses the new copy."""
    a, b = arrays(2)
    budget(NB)
    for _ in range(3):
        launch(add_one, a)  # fast path from the 2nd launch on
    cache = a._launch_cache
    old = cache.view
    assert old is not None and cache.gpu_only_at >= 0  # (the fast path open)
    launch(add_one, b)  # evicts a
    assert cache.view is None and cache.arg is None and cache.gpu_only_at == cache.device_at == -1
    launch(add_one, a)
    assert a._launch_cache.view is not None and a._launch_cache.view is not old
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 4)
    np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 101)


def test_held_host_arrays_stay_current_through_eviction(budget):
    a, b = arrays(2)
    budget(NB)
    held = a.host()
    row = held[3:7]
    launch(add_one, a)  # refreshes the held array
    launch(add_one, b)  # evicts a
    launch(add_one, a)
    np.testing.assert_array_equal(held, np.arange(N) + 2)
    np.testing.assert_array_equal(row, np.arange(3, 7) + 2)


def test_budget_lowered_below_resident_evicts_at_next_allocation(budget):
    a, b, c = arrays(3)
    budget(3 * NB)
    launch(add_one, a)
    launch(add_one, b)
    sa.set_device_budget(_kept_bytes() + NB)
    assert {"r0", "r1"} <= resident_names()  # nothing evicted by setting the budget
    launch(add_one, c)
    assert "r0" not in resident_names() and "r1" not in resident_names()
    for k, x in enumerate((a, b, c)):
        np.testing.assert_array_equal(np.asarray(x), np.arange(N) + 100 * k + 1)


# -- what is never evicted ------------------------------------------------------------------


def test_a_launch_never_evicts_its_own_arguments(budget):
    """Three arguments, room for three: preparing the third must not evict the first, which
    is clean (host current too) and would otherwise go first."""
    x, y, z, other = arrays(4)
    budget(3 * NB)
    launch(add_one, other)  # dirty, resident
    launch(k_sum_into, sa.In(x), sa.Out(sa.SmartArray(shape=1)))  # x clean, resident
    gc.collect()
    with sa.trace() as t:
        launch(k_in_then_two, sa.In(x), y, z)  # reads x (a GPU refuses writes to an In)
    assert [e.array for e in t.evictions] == ["r3"]  # not r0, though r0 is clean
    ref_x = np.arange(N, dtype=np.float64)
    np.testing.assert_array_equal(np.asarray(z), ref_x + 200 + 2 * ref_x)
    np.testing.assert_array_equal(np.asarray(y), ref_x + 100 + ref_x)
    np.testing.assert_array_equal(np.asarray(x), ref_x)
    np.testing.assert_array_equal(np.asarray(other), np.arange(N) + 301)


@pytest.mark.strict_mode
def test_a_launch_prepared_in_another_thread_keeps_its_arguments(budget):
    """Thread 1 prepared ``a`` and is still preparing its next argument; thread 2 needs room:
    ``a`` is pinned (its lock is free by then), so it is not evicted under the launch. (In
    strict mode: the plain simulator's launches share one global kernel context, so two
    threads cannot launch at once there.)"""
    with strict(seed=5):
        a, b = arrays(2)
        budget(NB)
        started, go = threading.Event(), threading.Event()

        class Blocker(cuda.args.ArgHint):
            def to_device(self, retr, stream=0):
                started.set()
                go.wait(30)
                return cuda.to_device(np.zeros(1))

        errors = []

        def worker():
            try:
                launch(k_add_one_first, a, Blocker(None))
            except Exception as exc:  # pragma: no cover  # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        try:
            assert started.wait(30)
            with pytest.raises(sa.DeviceMemoryError, match="r0 .*a launch being prepared or run"):
                launch(add_one, b)  # would have to evict a
        finally:
            go.set()
            thread.join(30)
        assert not errors
        np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1)
        launch(add_one, b)  # the launch ran: a may go now
        np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 101)


@pytest.mark.parametrize("same_address", [True, False], ids=["reused-address", "new-address"])
def test_a_launch_after_one_that_failed_before_its_callbacks_starts_afresh(budget, same_address):
    """A launch that failed runs no post-launch callback: its arguments stay pinned until this
    thread's next launch, which must start afresh, also when its ``retr`` list reuses the
    failed launch's address (CPython's free list makes that the usual case): a launch is
    identified by the object it appended to ``retr``, never by ``id``."""
    x, y = arrays(2, prefix="f")
    budget(4 * NB)
    launch(add_one, x)
    launch(add_one, y)
    failed: list = []
    x.to_device(failed, 0)  # prepared; the launch "fails": no callback runs
    if same_address:
        # The same list object, emptied: what an address reuse looks like, made certain.
        failed.clear()
        retr = failed
    else:
        retr = []
    del failed
    y.to_device(retr, 0)
    for callback in retr:
        callback()
    # Nothing stays pinned: x can be evicted again (the failed launch's pin is gone).
    assert [r.kept for r in sa.device_budget().resident] == ["", ""]
    np.testing.assert_array_equal(np.asarray(y), np.arange(N) + 100 + 1)


@pytest.mark.parametrize("pinned_first", [True, False], ids=["after-pin", "before-pin"])
def test_an_eviction_in_another_thread_during_a_fast_path_launch_loses_nothing(
    budget, monkeypatch, pinned_first
):
    """A loop of launches takes the lock-free fast path. Another thread's allocation evicts
    the array while a launch is between its preparation and the kernel: either the eviction
    sees the launch's pin, or the launch sees the fast path closed and prepares again under
    the lock. The kernel's write is never lost."""
    from smartarray._engine import launch as _launch

    (a,) = arrays(1, prefix="t")
    budget(NB)
    launch(add_one, a)
    launch(add_one, a)  # the fast path is open now
    real = _launch.Launch.add
    raced = []

    def racing(self, buf, view, intent, fast):
        if pinned_first:
            real(self, buf, view, intent, fast)
        if not raced and fast:
            raced.append(1)

            def other():
                # It may find the launch's pin: no room to make (the lost write is checked).
                with contextlib.suppress(sa.DeviceMemoryError):
                    sa.SmartArray(np.ones(N), name="t-other").gpu()

            worker = threading.Thread(target=other)
            worker.start()
            worker.join()
        if not pinned_first:
            real(self, buf, view, intent, fast)

    monkeypatch.setattr(_launch.Launch, "add", racing)
    # The other thread may find a pinned: it could not make room (it raises there).
    with contextlib.suppress(sa.DeviceMemoryError):
        launch(add_one, a)
    monkeypatch.undo()
    assert raced, "the launch took no fast path: the race was not run"
    filler = [np.full(N, -7.0) for _ in range(50)]  # freed memory reused would hide a loss
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 3.0)
    del filler


def test_a_failed_launch_does_not_keep_its_arguments_claimed(budget):
    """A launch that raises runs no post-launch callback: its arguments must not stay pinned
    once its thread does anything else (or has ended)."""
    x, y = arrays(2, prefix="u")
    budget(NB)

    def fails():
        with pytest.raises(Exception):  # noqa: B017 - the target's own launch error
            if memory.SIMULATOR:  # raises the kernel's out-of-bounds error at the launch
                k_out_of_bounds[1, 1](x)
            else:  # a GPU faults such a kernel later (a dead context); it refuses this launch
                add_one[1, 4096](x)  # more threads per block than any GPU has

    worker = threading.Thread(target=fails)
    worker.start()
    worker.join()
    assert [r.kept for r in sa.device_budget().resident] == [""]
    y.gpu()  # evicts x: nobody launches with it any more
    fails()  # the same in this thread
    assert [r.kept for r in sa.device_budget().resident] == [""]
    x.host()  # (x is current wherever the failed kernel could not write)
    y.gpu()
    assert resident_names() == {"u1"}


@cuda.jit(debug=True, opt=False)  # a GPU reports kernel exceptions with debug only
def k_out_of_bounds_first(x, y):
    x[x.size + 1000] = 1.0


class FailingArgument(cuda.args.ArgHint):
    """A kernel argument that is not a SmartArray and whose preparation fails (typed as its
    value, a float64 vector)."""

    def to_device(self, retr, stream=0):
        raise RuntimeError("this argument cannot be prepared")


FAILED_LAUNCHES = ["budget", "refused-view", "other-argument", "kernel-refused"]


def fail_a_launch(how, x, second):
    """Launch with ``x`` (prepared first) and a second argument, in a way that raises after
    ``x`` was prepared and before any post-launch callback."""
    with pytest.raises(Exception) as info:  # noqa: B017 - each way has its own error
        if how == "budget":  # second is larger than the budget
            launch(k_add_one_first, x, second)
        elif how == "refused-view":  # negative strides: refused before anything moves
            launch(k_add_one_first, x, second[::-1])
        elif how == "other-argument":
            launch(k_add_one_first, x, FailingArgument(np.zeros(1)))
        elif memory.SIMULATOR:  # raises the kernel's out-of-bounds error at the launch
            k_out_of_bounds_first[1, 1](x, second)
        else:  # more threads per block than any GPU has: the driver refuses the launch
            k_add_one_first[1, 4096](x, second)
    expected = {
        "budget": sa.DeviceMemoryError,
        "refused-view": ValueError,
        "other-argument": RuntimeError,
    }
    if how in expected:
        assert isinstance(info.value, expected[how])


@pytest.mark.parametrize("how", FAILED_LAUNCHES)
def test_a_failed_launch_in_a_live_thread_lets_other_threads_evict_its_arguments(budget, how):
    """A launch that raised runs no callback: its thread lives on, doing something else, and
    another thread's allocation must evict the failed launch's arguments as usual (not fail
    with "a launch being prepared or run uses it")."""
    x, y, z = arrays(3, prefix="v")
    big = sa.SmartArray(np.ones(4 * N), name="v-big")
    second = big if how == "budget" else y
    budget(2 * NB)
    failed, finish = threading.Event(), threading.Event()
    errors: list = []

    def worker():
        try:
            fail_a_launch(how, x, second)
        except BaseException as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)
        failed.set()
        finish.wait(30)  # alive, doing something else

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert failed.wait(30)
        assert not errors, errors
        assert [r.kept for r in sa.device_budget().resident] == [""] * len(
            sa.device_budget().resident
        )
        with sa.trace() as t:
            launch(k_add_one_first, y, z)  # room for y and z: x (and y's copy) must go
        assert "v0" in [e.array for e in t.evictions]
    finally:
        finish.set()
        thread.join(30)
    x_expected = np.arange(N, dtype=np.float64)
    if how == "kernel-refused" and memory.SIMULATOR:
        np.testing.assert_array_equal(np.asarray(x)[:4], x_expected[:4])  # (ran, then failed)
    else:
        np.testing.assert_array_equal(np.asarray(x), x_expected)  # the kernel never ran
    np.testing.assert_array_equal(np.asarray(y), np.arange(N) + 100 + 1)
    np.testing.assert_array_equal(np.asarray(z), np.arange(N) + 200)
    np.testing.assert_array_equal(np.asarray(big), np.ones(4 * N))


@pytest.mark.parametrize("how", FAILED_LAUNCHES)
def test_a_failed_launch_keeps_nothing_alive_after_its_thread_ended(budget, how):
    """Once the thread whose launch raised has ended, nothing of smartarray's keeps that
    launch's arguments alive."""
    x, y = arrays(2, prefix="w")
    big = sa.SmartArray(np.ones(4 * N), name="w-big")
    budget(2 * NB)

    def worker(first, second):
        with contextlib.suppress(BaseException):  # (checked by the test above)
            fail_a_launch(how, first, second)

    thread = threading.Thread(target=worker, args=(x, big if how == "budget" else y))
    thread.start()
    thread.join(30)
    refs = [weakref.ref(x), weakref.ref(y), weakref.ref(big)]
    del x, y, big
    gc.collect()
    assert [ref() is None for ref in refs] == [True, True, True]


@pytest.mark.parametrize("how", FAILED_LAUNCHES)
def test_a_failed_launch_drops_its_claims_in_its_own_thread(budget, how):
    """The thread whose launch raised launches again: the failed launch's arguments may be
    evicted to make room for the new one's."""
    x, y, z = arrays(3, prefix="q")
    big = sa.SmartArray(np.ones(4 * N), name="q-big")
    budget(2 * NB)
    fail_a_launch(how, x, big if how == "budget" else y)
    with sa.trace() as t:
        launch(k_add_one_first, y, z)  # room for y and z: x must go
    assert "q0" in [e.array for e in t.evictions]
    np.testing.assert_array_equal(np.asarray(y), np.arange(N) + 101)
    np.testing.assert_array_equal(np.asarray(z), np.arange(N) + 200)


def test_a_launch_still_being_prepared_in_another_thread_keeps_its_claims(budget):
    """While another thread is still preparing its launch (between two arguments, inside the
    dispatcher), its prepared arguments stay claimed: an allocation here cannot evict them."""
    a, b = arrays(2, prefix="p")
    budget(NB)
    started, go = threading.Event(), threading.Event()

    class Blocker(cuda.args.ArgHint):  # (typed as its value, a float64 vector)
        def to_device(self, retr, stream=0):
            started.set()
            go.wait(30)
            return cuda.In(cuda.to_device(self.value)).to_device(retr, stream)

    errors = []

    def worker():
        try:
            launch(k_add_one_first, a, Blocker(np.zeros(1)))
        except Exception as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert started.wait(30)
        with pytest.raises(sa.DeviceMemoryError, match="p0 .*a launch being prepared or run"):
            b.gpu()  # would have to evict a
    finally:
        go.set()
        thread.join(30)
    assert not errors
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1)
    b.gpu()  # the launch ran: a may go now
    np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 100)


def test_a_launch_that_cannot_fit_its_arguments_fails_cleanly(budget):
    x, y, z = arrays(3)
    budget(2 * NB)
    limit = sa.device_budget().budget
    with pytest.raises(sa.DeviceMemoryError) as info:
        launch(k_add3, x, y, z)
    err = info.value
    assert isinstance(err, MemoryError) and isinstance(err, sa.SmartArrayError)
    assert err.array == "r2" and err.nbytes == NB and err.budget == limit
    assert ("r0", NB, "a launch being prepared or run uses it") in err.resident
    msg = str(err)
    assert "r2 (256 B) does not fit" in msg and "set_device_budget" in msg and "r0" in msg
    # nothing lost, nothing stale: the kernel never ran
    for k, a in enumerate((x, y, z)):
        np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 100 * k)
    # and the next launch with room works (the failed launch's pins are gone)
    sa.set_device_budget(_kept_bytes() + 3 * NB)
    launch(k_add3, x, y, z)
    np.testing.assert_array_equal(np.asarray(x), np.arange(N) + 1)


def test_an_array_larger_than_the_budget_is_refused_before_anything_moves(budget):
    a, b = arrays(2)
    budget(2 * NB)
    size = sa.device_budget().budget // 8 + 1
    big = sa.SmartArray(np.ones(size), name="big")
    launch(add_one, a)
    with sa.trace() as t, pytest.raises(sa.DeviceMemoryError, match="larger than the budget"):
        launch(add_one, big)
    assert t.events == [] and t.evictions == []  # nothing evicted in vain
    np.testing.assert_array_equal(np.asarray(big), np.ones(size))


def test_resident_arrays_are_kept_inside_the_block(budget):
    a, b, c = arrays(3)
    budget(2 * NB)
    with sa.resident(a):
        launch(add_one, a)
        launch(add_one, b)
        launch(add_one, c)  # a is least recently used, but kept: b goes
        launch(add_one, b)  # c goes
        assert "r0" in resident_names()
        kept = {r.name: r.kept for r in sa.device_budget().resident}
        assert kept["r0"] == "kept resident (smartarray.resident)"
        with sa.resident(a):  # nested
            pass
        launch(add_one, c)
        assert "r0" in resident_names()
    launch(add_one, b)  # a may go now (least recently used)
    assert "r0" not in resident_names()
    for k, x in enumerate((a, b, c)):
        np.testing.assert_array_equal(np.asarray(x), np.arange(N) + 100 * k + (1, 3, 2)[k])


def test_device_arrays_handed_out_keep_their_copy_until_dropped(budget):
    a, b = arrays(2)
    budget(NB)
    d = a.get("gpu")
    with pytest.raises(sa.DeviceMemoryError) as info:
        launch(add_one, b)
    assert ("r0", NB, "a device array from get('gpu') over it is still referenced") in (
        info.value.resident
    )
    del d
    gc.collect()
    launch(add_one, b)
    assert "r0" not in resident_names()


@cuda.jit
def k_set_minus_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = -1.0


@pytest.mark.parametrize(
    "derive",
    [lambda d: d[2:4], lambda d: d.reshape(4, N // 4)[1, :], lambda d: d[::2][1:]],
    ids=["slice", "reshape-row", "strided-slice"],
)
def test_views_of_a_dropped_hand_out_keep_the_copy_resident(budget, derive):
    """Only ``v = a.gpu()[2:4]`` kept: the copy was evicted, the user wrote through ``v`` into
    freed memory, and ``gpu_changed()`` declared a fresh device copy current."""
    a, b = arrays(2)
    budget(NB)
    v = derive(a.gpu())  # the hand-out itself is dropped at once
    gc.collect()
    with pytest.raises(sa.DeviceMemoryError, match="still referenced"):
        launch(add_one, b)  # needs room: a's copy may not go while v shows it
    k_set_minus_one[1, 32](v)  # the user writes through v (a numba device array)
    a.gpu_changed()
    expected = np.arange(N, dtype=np.float64)
    derive(expected)[...] = -1.0
    np.testing.assert_array_equal(np.asarray(a), expected)
    del v
    gc.collect()
    launch(add_one, b)  # now it may go
    np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 101)


def test_views_of_a_hand_out_keep_its_token_on_numba_cudas_real_target():
    """On a GPU a slice of a numba device array owns a new ``MemoryPointer``: the hand-out's
    token must be its owner, handed on to every view (checked on numba-cuda's real target
    with a stand-in allocation; there is no GPU here)."""
    code = (
        "import ctypes, gc, weakref\n"
        "import numpy as np\n"
        "from numba.cuda.cudadrv.driver import MemoryPointer\n"
        "from numba.cuda.cudadrv.devicearray import DeviceNDArray\n"
        "from smartarray._memory import byte_ranges as _byteranges\n"
        "from smartarray._platform import cuda_simulator as _simulator\n"
        "assert not _simulator.SIMULATOR\n"
        "mem = MemoryPointer(None, ctypes.c_void_p(1 << 20), 256)\n"
        "raw = DeviceNDArray((256,), (1,), np.uint8, gpu_data=mem)\n"
        "dev, token = _byteranges.handout_view(raw, 16, (8,), (8,), np.float64)\n"
        "ref = weakref.ref(token)\n"
        "del token\n"
        "# DeviceNDArray.__getitem__ without its context check (no driver here)\n"
        "v = dev._do_getitem(slice(2, 4)).reshape(2, 1)\n"
        "del dev\n"
        "gc.collect()\n"
        "assert ref() is not None, 'a view of the hand-out keeps its token'\n"
        "assert v.gpu_data.device_pointer_value == (1 << 20) + 32\n"
        "del v\n"
        "gc.collect()\n"
        "assert ref() is None, 'the token dies with the last view'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=real_target_env(), timeout=300)


def test_memory_shared_through_the_cuda_array_interface_is_never_evicted(budget):
    a, b = arrays(2)
    budget(NB)
    a.__cuda_array_interface__  # noqa: B018 - a consumer keeps the pointer
    with pytest.raises(sa.DeviceMemoryError, match="__cuda_array_interface__"):
        launch(add_one, b)
    np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 100)


@pytest.mark.strict_mode
def test_queued_device_work_is_waited_for_before_eviction(budget):
    """A copy whose launch is still queued on a stream (strict mode runs it only when waited
    for) is evicted only after that work ran: the eviction downloads the kernel's result."""
    with strict(seed=3):
        a, b = arrays(2)
        budget(NB)
        s = cuda.stream()
        add_one[1, 32, s](a)
        assert a._buf.in_flight()  # its kernel is recorded in flight
        add_one[1, 32, s](b)  # evicts a: waits for s first
        np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1)
        np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 101)


def test_a_transfer_guard_refusing_downloads_refuses_dirty_evictions_only(budget):
    a, b, c = arrays(3)
    out = sa.SmartArray(shape=1)
    budget(2 * NB + out.nbytes)
    launch(add_one, a)  # dirty
    launch(k_sum_into, sa.In(b), sa.Out(out))  # b clean
    with sa.transfer_guard("disallow", direction="d2h"), sa.trace() as t:
        launch(add_one, c)  # b is clean: given back, nothing moves
        assert [e.array for e in t.evictions] == ["r1"]
        with pytest.raises(sa.DeviceMemoryError) as info:
            launch(add_one, b)  # only a or c could go: their downloads are refused
    assert ("r0", NB, "the transfer guard refuses its download") in info.value.resident
    assert [e.direction for e in t.events] == ["h2d"]  # c's upload; nothing went down
    for k, x in enumerate((a, b, c)):
        np.testing.assert_array_equal(np.asarray(x), np.arange(N) + 100 * k + (1, 0, 1)[k])


# -- strict mode: a device that runs out ----------------------------------------------------


@pytest.mark.strict_mode
def test_strict_device_memory_out_of_memory_evicts_and_retries():
    """No budget set: strict mode's finite device memory fails an allocation with numba's
    CUDA_ERROR_OUT_OF_MEMORY; eviction gives memory back and the allocation is retried."""
    sa.set_device_budget(None)
    _clear_others()
    with strict(device_memory=3 * NB) as state:
        xs = arrays(6, prefix="m")
        with sa.trace() as t:
            for _ in range(2):
                for x in xs:
                    launch(add_one, x)
        assert state.device_used <= 3 * NB
        for k, x in enumerate(xs):
            np.testing.assert_array_equal(np.asarray(x), np.arange(N) + 100 * k + 2)
    assert t.evictions and {e.reason for e in t.evictions} == {"out of memory"}


@pytest.mark.strict_mode
def test_strict_out_of_memory_never_evicts_the_launchs_own_arguments():
    """No budget set, but strict mode's allocations can fail: a launch pins its arguments
    there too, so the out-of-memory eviction while preparing the third argument takes the
    dirty bystander, not the clean first argument (which would otherwise go first)."""
    sa.set_device_budget(None)
    _clear_others()
    with strict(device_memory=3 * NB + 64):
        x, y, z, other = arrays(4, prefix="p")
        launch(add_one, other)  # dirty, resident
        launch(k_sum_into, sa.In(x), sa.Out(sa.SmartArray(shape=1)))  # x clean, resident
        gc.collect()
        with sa.trace() as t:
            launch(k_in_then_two, sa.In(x), y, z)
        assert [(e.array, e.reason) for e in t.evictions] == [("p3", "out of memory")]
        ref_x = np.arange(N, dtype=np.float64)
        np.testing.assert_array_equal(np.asarray(z), ref_x + 200 + 2 * ref_x)
        np.testing.assert_array_equal(np.asarray(y), ref_x + 100 + ref_x)
        np.testing.assert_array_equal(np.asarray(x), ref_x)
        np.testing.assert_array_equal(np.asarray(other), np.arange(N) + 301)


@pytest.mark.strict_mode
def test_strict_out_of_memory_that_eviction_cannot_fix_is_a_clear_error():
    _clear_others()
    with strict(device_memory=NB) as state:
        a = sa.SmartArray(np.zeros(2 * N), name="toobig")
        with pytest.raises(sa.DeviceMemoryError, match="out of memory") as info:
            launch(add_one, a)
        assert info.value.__cause__ is not None  # numba's CudaAPIError
        assert state.device_used == 0
        np.testing.assert_array_equal(np.asarray(a), np.zeros(2 * N))


def test_numba_out_of_memory_error_of_a_gpu_is_recognised():
    """On a GPU, numba-cuda raises CudaAPIError with the binding's CUresult enum: the
    eviction-and-retry path must recognise it (checked on numba-cuda's real target)."""
    code = (
        "from numba.cuda.cudadrv.driver import CudaAPIError, binding\n"
        "from smartarray._platform import cuda_simulator as _simulator\n"
        "assert not _simulator.SIMULATOR\n"
        "R = binding.CUresult\n"
        "assert _simulator.out_of_memory(CudaAPIError(R.CUDA_ERROR_OUT_OF_MEMORY, 'x'))\n"
        "assert not _simulator.out_of_memory(CudaAPIError(R.CUDA_ERROR_INVALID_VALUE, 'x'))\n"
        "assert not _simulator.out_of_memory(MemoryError())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=real_target_env(), timeout=300)


# RMM's numba plugin (RMMNumbaManager) allocates an rmm.DeviceBuffer: its C++ rmm::out_of_memory
# (a std::bad_alloc) reaches Python as MemoryError("std::bad_alloc: out_of_memory: ..."), and
# CuPy's allocator raises cupy.cuda.memory.OutOfMemoryError (a MemoryError).
RMM_OUT_OF_MEMORY = MemoryError(
    "std::bad_alloc: out_of_memory: CUDA error at: rmm/mr/device/cuda_memory_resource.hpp:60: "
    "cudaErrorMemoryAllocation out of memory"
)


class OutOfMemoryError(MemoryError):
    """CuPy's name for it."""


@pytest.mark.parametrize(
    "error", [RMM_OUT_OF_MEMORY, OutOfMemoryError("Out of memory allocating 512 bytes")]
)
def test_an_allocator_plugins_out_of_memory_evicts_and_retries(monkeypatch, error):
    sa.set_device_budget(None)
    _clear_others()
    other, a = arrays(2, prefix="plugin")
    launch(add_one, other)  # resident, dirty: the eviction downloads it
    real = memory.device_array
    failures = []

    def plugin_device_array(*args, **kwargs):  # the plugin runs out once
        if not failures:
            failures.append(1)
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(memory, "device_array", plugin_device_array)
    with sa.trace() as t:
        launch(add_one, a)
    assert failures and [(e.array, e.reason) for e in t.evictions] == [("plugin0", "out of memory")]
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 100 + 1)
    np.testing.assert_array_equal(np.asarray(other), np.arange(N) + 1)


def test_a_memory_error_that_does_not_say_out_of_device_memory_is_not_evicted_for(monkeypatch):
    sa.set_device_budget(None)
    _clear_others()
    other, a = arrays(2, prefix="host-oom")
    launch(add_one, other)
    monkeypatch.setattr(
        memory, "device_array", lambda *args, **kwargs: (_ for _ in ()).throw(MemoryError())
    )
    with sa.trace() as t, pytest.raises(MemoryError):
        launch(add_one, a)
    assert not t.evictions
    assert not _simulator.out_of_memory(sa.DeviceMemoryError("the device is out of memory"))


def test_eviction_flushes_numba_cudas_deferred_frees():
    """numba-cuda defers cuMemFree of device allocations on the memory manager's pending list:
    after an eviction, give_back_freed flushes it (and the context's), so a retried allocation
    finds the memory. Checked on numba-cuda's real target with its own pending-free lists (a
    context stands in for the driver's: there is no GPU here)."""
    code = (
        "from types import SimpleNamespace\n"
        "import logging\n"
        "from numba.cuda.cudadrv import driver\n"
        "from numba.cuda.cudadrv.driver import _PendingDeallocs\n"
        "if not hasattr(driver, '_logger'):  # set when the driver initialises\n"
        "    driver._logger = logging.getLogger('numba.cuda')\n"
        "from smartarray._platform import cuda_simulator as _simulator\n"
        "assert not _simulator.SIMULATOR\n"
        "freed = []\n"
        "def free(handle):\n"
        "    freed.append(handle)\n"
        "free.__name__ = 'cuMemFree'\n"
        "mm, own = _PendingDeallocs(1 << 40), _PendingDeallocs(1 << 40)\n"
        "mm.add_item(free, 'device memory', 256)\n"
        "own.add_item(free, 'stream', 0)\n"
        "ctx = SimpleNamespace(memory_manager=SimpleNamespace(deallocations=mm), "
        "deallocations=own)\n"
        "_simulator.cuda.current_context = lambda: ctx\n"
        "assert freed == []  # deferred\n"
        "_simulator.give_back_freed()\n"
        "assert freed == ['device memory', 'stream'], freed\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=real_target_env(), timeout=300)


# -- reuse of dead arrays' device memory ------------------------------------------------------


@pytest.fixture
def allocations(monkeypatch):
    """The device allocations smartarray makes from here on (each one's byte count)."""
    made = []
    allocate = memory.device_array

    def counted(shape, *args, **kwargs):
        made.append(shape)
        return allocate(shape, *args, **kwargs)

    monkeypatch.setattr(memory, "device_array", counted)
    gc.collect()
    _residency.reset()
    yield made
    _residency.reset()


def _dead(make):
    """Make an array with ``make``, use it on the device, drop it; its copy's bytes."""
    a = make()
    launch(add_one, a)
    a.host()  # (its work ran)
    nbytes = a.nbytes
    del a
    gc.collect()
    return nbytes


@pytest.mark.parametrize("second", ["from-data", "shape-only", "view"])
def test_a_dead_arrays_device_copy_serves_the_next_of_its_size(allocations, second):
    nbytes = _dead(lambda: sa.SmartArray(np.zeros(N), name="first"))
    assert allocations == [nbytes]
    assert sa.device_budget().cached == nbytes
    if second == "from-data":
        b = sa.SmartArray(np.arange(N, dtype=np.float64))
        launch(add_one, b)
        expected = np.arange(N) + 1.0
    elif second == "shape-only":
        b = sa.SmartArray(shape=N, dtype=np.float64)
        b[:] = 7.0
        launch(add_one, b)
        expected = np.full(N, 8.0)
    else:
        b = sa.SmartArray(np.arange(2 * N, dtype=np.float64).reshape(2, N))[1]
        b = sa.SmartArray(np.asarray(b))
        launch(add_one, b)
        expected = np.arange(N, 2 * N) + 1.0
    assert allocations == [nbytes], "the dead array's copy was not reused"
    assert sa.device_budget().cached == 0
    np.testing.assert_array_equal(np.asarray(b), expected)


def test_other_sizes_and_empty_cache_allocate_afresh(allocations):
    nbytes = _dead(lambda: sa.SmartArray(np.zeros(N)))
    c = sa.SmartArray(np.zeros(2 * N))
    launch(add_one, c)
    assert allocations == [nbytes, 2 * nbytes]  # another size: a new allocation
    assert sa.empty_cache() == nbytes and sa.device_budget().cached == 0
    assert sa.empty_cache() == 0
    b = sa.SmartArray(np.zeros(N))
    launch(add_one, b)
    assert allocations == [nbytes, 2 * nbytes, nbytes]


@pytest.mark.parametrize("bad", ["0", 1.0, True, [0]])
def test_empty_cache_refuses_what_is_not_a_device(bad):
    with pytest.raises(TypeError, match="device must be an int"):
        sa.empty_cache(bad)


@pytest.mark.parametrize("outside", ["get-gpu", "cuda-array-interface"])
def test_memory_held_outside_is_never_reused(allocations, outside):
    """A device array from get('gpu'), or a pointer from ``__cuda_array_interface__``,
    outlives its SmartArray: the memory it shows must not become another array's copy (a
    DLPack export keeps its array alive)."""
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    launch(add_one, a)
    held = a.get("gpu") if outside == "get-gpu" else a.__cuda_array_interface__
    del a
    gc.collect()
    b = sa.SmartArray(np.full(N, 5.0))
    launch(add_one, b)
    assert len(allocations) == 2, "memory held outside became another array's copy"
    np.testing.assert_array_equal(np.asarray(b), np.full(N, 6.0))
    if outside == "get-gpu":
        np.testing.assert_array_equal(held.copy_to_host(), np.arange(N) + 1.0)
    del held


@pytest.mark.strict_mode
def test_a_copy_is_reused_only_after_the_work_queued_on_it_ran(allocations):
    with strict(seed=5):
        s = sa.stream()
        a = sa.SmartArray(np.zeros(N))
        add_one[1, 32, s](a)  # queued: strict mode runs it when waited for
        del a
        gc.collect()
        b = sa.SmartArray(np.ones(N))
        launch(add_one, b)
        assert len(allocations) == 2, "a copy with work still queued was reused"
        s.synchronize()
        np.testing.assert_array_equal(np.asarray(b), np.full(N, 2.0))
        del b
        gc.collect()
        c = sa.SmartArray(np.full(N, 3.0))
        launch(add_one, c)
        assert len(allocations) == 2, "a copy whose work ran was not reused"
        np.testing.assert_array_equal(np.asarray(c), np.full(N, 4.0))


def test_cached_memory_counts_in_the_budget_and_goes_before_any_eviction(budget, allocations):
    a, b = arrays(2)
    budget(5 * NB)
    for x in (a, b):
        launch(add_one, x)
    _dead(lambda: sa.SmartArray(np.zeros(N)))
    assert sa.device_budget().cached == NB
    sa.reset_stats()
    big = sa.SmartArray(np.zeros(3 * N), name="big")  # 2 NB + NB cached + 3 NB > 5 NB
    launch(add_one, big)
    assert sa.stats().evictions == 0, "a live copy was evicted while cached memory was kept"
    assert sa.device_budget().cached == 0
    assert {"r0", "r1", "big"} <= resident_names()
    assert sa.device_budget().used == 5 * NB


def test_the_cache_keeps_at_most_a_quarter_of_the_budget(budget, allocations):
    budget(8 * NB)
    _dead(lambda: sa.SmartArray(np.zeros(3 * N)))  # 3 NB: more than a quarter
    assert sa.device_budget().cached == 0
    for _ in range(3):
        _dead(lambda: sa.SmartArray(np.zeros(N)))  # each reuses the one before
    assert sa.device_budget().cached == NB


# -- random pipelines under a small budget --------------------------------------------------

M = 4  # arrays
# Few distinct bounds: valid sets stay within the fragmentation cap (DEFAULT_MAX_RUNS), so the
# bytes moved are exactly the stale ones (no consolidation copies), under a transfer cost model
# whose latency is worth no bytes (no cost-based coalescing: tests/coherence/test_coherence.py
# has that).
EXACT = sa.TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)
slices = st.sampled_from(
    [slice(0, N), slice(0, 8), slice(5, 27), slice(8, 20), slice(20, N), slice(13, 14)]
)
which = st.integers(0, M - 1)


class Budgeted(RuleBasedStateMachine):
    """Several arrays under a budget of three: host writes and reads, launches of one and
    three arguments, njit calls, get('gpu'), views of dropped hand-outs written through,
    keep-resident blocks. After every step: the
    values against NumPy, every byte marked valid holds the current value, the bytes moved
    are exactly the stale ones (evictions included: each downloads exactly the bytes its
    device copy alone held), and the budget holds."""

    @initialize()
    def start(self):
        _clear_others()
        self.xs = arrays(M, prefix="p")
        self.ref = [np.arange(N, dtype=np.float64) + 100 * k for k in range(M)]
        self.host_valid = [np.ones(N, bool) for _ in range(M)]
        self.gpu_valid = [np.zeros(N, bool) for _ in range(M)]
        self.budget = _kept_bytes() + 3 * NB
        sa.set_device_budget(self.budget)
        self.previous_cost = sa.set_transfer_cost(EXACT)
        self.views = {}

    def teardown(self):
        sa.set_device_budget(None)
        if hasattr(self, "previous_cost"):
            sa.set_transfer_cost(self.previous_cost)

    def view(self, k, sl):
        key = (k, sl.start, sl.stop)
        if key not in self.views:
            self.views[key] = self.xs[k][sl]
        return self.views[key]

    def run(self, action, up=None, down=None):
        """Run ``action`` in a trace; apply its evictions to the model (they come first: an
        array is pinned once prepared) and check each downloaded exactly what the device
        alone held. ``up``/``down``: {array: elements} the action itself moves (computed by
        the callables after the evictions)."""
        names = {x.name: k for k, x in enumerate(self.xs)}
        with sa.trace() as t:
            result = action()
        evicted_down = {}
        for e in t.evictions:
            k = names.get(e.array)
            if k is None:
                continue
            alone = int((self.gpu_valid[k] & ~self.host_valid[k]).sum())
            assert e.downloaded == alone * 8, (e, alone)
            evicted_down[k] = evicted_down.get(k, 0) + alone
            self.host_valid[k] |= self.gpu_valid[k]
            self.gpu_valid[k][:] = False
        want_up = up() if up else {}
        want_down = down() if down else {}
        for k, x in enumerate(self.xs):
            moved_up = sum(e.nbytes for e in t.events if e.array == x.name and e.direction == "h2d")
            moved_down = sum(
                e.nbytes for e in t.events if e.array == x.name and e.direction == "d2h"
            )
            assert moved_up == want_up.get(k, 0) * 8, (k, moved_up, want_up)
            assert moved_down == (want_down.get(k, 0) + evicted_down.get(k, 0)) * 8, (
                k,
                moved_down,
                want_down,
                evicted_down,
            )
        return result

    @rule(k=which, sl=slices, value=st.floats(-5, 5, allow_nan=False))
    def host_write(self, k, sl, value):
        def down():
            # a strided/partial write of a view with stale host bytes syncs its interval
            return {}

        self.run(lambda: self.xs[k].__setitem__(sl, value), down=down)
        self.ref[k][sl] = value
        self.host_valid[k][sl] = True
        self.gpu_valid[k][sl] = False

    @rule(k=which, sl=slices)
    def host_read(self, k, sl):
        got = self.run(
            lambda: np.array(self.view(k, sl)),
            down=lambda: {k: int((~self.host_valid[k][sl]).sum())},
        )
        np.testing.assert_array_equal(got, self.ref[k][sl])
        self.host_valid[k][sl] = True

    @rule(k=which, sl=slices)
    def kernel_add(self, k, sl):
        self.run(
            lambda: launch(add_one, self.view(k, sl)),
            up=lambda: {k: int((~self.gpu_valid[k][sl]).sum())},
        )
        self.ref[k][sl] += 1.0
        self.gpu_valid[k][sl] = True
        self.host_valid[k][sl] = False

    @rule(ks=st.permutations(range(M)).map(lambda p: p[:3]))
    def kernel_three(self, ks):
        """Three arguments and a budget of three: none may evict another."""
        i, j, m = ks
        self.run(
            lambda: launch(k_add3, self.xs[i], self.xs[j], self.xs[m]),
            up=lambda: {q: int((~self.gpu_valid[q]).sum()) for q in ks},
        )
        self.ref[i] += 1.0
        self.ref[j] += 2.0
        self.ref[m] += self.ref[i] + self.ref[j]
        for q in ks:
            self.gpu_valid[q][:] = True
            self.host_valid[q][:] = False

    @rule(ks=st.permutations(range(M)).map(lambda p: p[:3]))
    def kernel_three_first_read_only(self, ks):
        """The same with an ``In`` first argument: it stays clean (host current too), which
        eviction takes first, so only its pin keeps it while the others are allocated."""
        i, j, m = ks
        self.run(
            lambda: launch(k_in_then_two, sa.In(self.xs[i]), self.xs[j], self.xs[m]),
            up=lambda: {q: int((~self.gpu_valid[q]).sum()) for q in ks},
        )
        self.ref[j] += self.ref[i]
        self.ref[m] += 2.0 * self.ref[i]
        for q in ks:
            self.gpu_valid[q][:] = True
        for q in (j, m):
            self.host_valid[q][:] = False

    @rule(k=which, sl=slices)
    def njit_add(self, k, sl):
        self.run(
            lambda: j_add_one(self.view(k, sl)),
            down=lambda: {k: int((~self.host_valid[k][sl]).sum())},
        )
        self.ref[k][sl] += 1.0
        self.host_valid[k][sl] = True
        self.gpu_valid[k][sl] = False

    @rule(k=which)
    def get_gpu(self, k):
        self.run(lambda: self.xs[k].get("gpu"), up=lambda: {k: int((~self.gpu_valid[k]).sum())})
        self.gpu_valid[k][:] = True  # the device array handed out is dropped at once

    @rule(k=which, sl=slices)
    def write_through_a_view_of_a_dropped_hand_out(self, k, sl):
        """``v = a.gpu()[sl]`` (the hand-out dropped), launches on every other array (room
        is made: ``a`` becomes the least recently used), a write through ``v``, then
        ``gpu_changed()``: ``v`` keeps the copy resident, so the write is the array's."""
        v = self.run(lambda: self.xs[k].gpu()[sl], up=lambda: {k: int((~self.gpu_valid[k]).sum())})
        self.gpu_valid[k][:] = True
        gc.collect()  # only v shows the device copy now
        for other in range(M):
            if other == k:
                continue
            self.run(
                lambda o=other: launch(add_one, self.xs[o]),
                up=lambda o=other: {o: int((~self.gpu_valid[o]).sum())},
            )
            self.ref[other] += 1.0
            self.gpu_valid[other][:] = True
            self.host_valid[other][:] = False
        assert self.xs[k]._buf.device_bytes is not None  # v keeps it resident
        add_one[1, 32](v)  # the user writes through v (a numba device array)
        self.run(self.xs[k].gpu_changed)
        self.ref[k][sl] += 1.0
        self.gpu_valid[k][:] = True
        self.host_valid[k][:] = False
        del v
        gc.collect()

    @rule(k=which, other=which)
    def kernel_while_kept(self, k, other):
        x = self.xs[k]
        with sa.resident(x):
            if k == other:
                return
            was = x._buf.device_bytes is not None
            self.run(
                lambda: launch(add_one, self.xs[other]),
                up=lambda: {other: int((~self.gpu_valid[other]).sum())},
            )
            assert (x._buf.device_bytes is not None) == was  # kept: never evicted
        self.ref[other] += 1.0
        self.gpu_valid[other][:] = True
        self.host_valid[other][:] = False

    @invariant()
    def within_budget(self):
        assert sa.device_budget().used <= self.budget

    @invariant()
    def every_byte_marked_valid_holds_the_current_value(self):
        for k, x in enumerate(self.xs):
            buf = x._buf
            state = buf.state
            ref = self.ref[k].view(np.int64)
            copies = {}
            if buf.host_bytes is not None:
                copies["host"] = buf.host_bytes.view(np.int64)
            if buf.device_bytes is not None:
                copies["gpu"] = memory._Uncounted(buf.device_bytes).copy_to_host().view(np.int64)
            else:  # evicted (or never allocated): nothing is current there
                assert not state.valid("gpu"), k
            for where, values in copies.items():
                for i in range(N):
                    if state.is_valid(where, i * 8, (i + 1) * 8):
                        assert values[i] == ref[i], (k, where, i)
            for i in range(N):
                assert any(state.is_valid(w, i * 8, (i + 1) * 8) for w in ("host", "gpu"))
            # the model and the engine agree on what is current where
            for where, model in (("host", self.host_valid[k]), ("gpu", self.gpu_valid[k])):
                for i in range(N):
                    assert state.is_valid(where, i * 8, (i + 1) * 8) == model[i], (k, where, i)


Budgeted.TestCase.settings = settings(
    max_examples=20 if is_strict() or _fakegpu.current() is not None else 40,
    stateful_step_count=25,
    deadline=None,
)
TestBudgeted = Budgeted.TestCase


# -- weakref callbacks take no lock ------------------------------------------------------------

_NJIT_THEN_GPU = """
import numba, numpy as np, smartarray as sa

@numba.njit
def total(x):
    return x.sum()

a = sa.SmartArray(np.arange(10.0))
total(a)
d = a.gpu()
"""


def _readme_smartarray_snippet() -> str:
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## SmartArray", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    return "import numpy as np, smartarray as sa\n" + block


@pytest.mark.parametrize("program", ["njit_then_gpu", "readme_smartarray_snippet"])
def test_a_program_ends_without_noise_on_stderr(program):
    # A resident array collected at interpreter exit ran a weakref callback that took a module
    # lock already torn down to None: "Exception ignored in ... gone ...".
    code = _NJIT_THEN_GPU if program == "njit_then_gpu" else _readme_smartarray_snippet()
    env = dict(os.environ)
    if _fakegpu.current() is not None:  # the child runs on this session's target
        env["SMARTARRAY_FAKE_GPU"] = "1"
    # numba-cuda's own warning for a small grid on a real target is numba's voice, not noise
    # at exit (the question here).
    env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_a_collected_resident_array_never_waits_for_the_registry_lock():
    # The callback of a collected resident array ran in whatever thread collected it and
    # waited for the registry lock; that thread may hold a lock the lock's holder waits for
    # (sa.stats() allocating under the stats lock, an eviction download counting its bytes).
    a = sa.SmartArray(np.zeros(N), name="collected")
    del a  # nothing else may hold it
    gc.collect()
    b = sa.SmartArray(np.zeros(N), name="collected")
    b.gpu()
    used = sa.device_budget().used
    holding, release = threading.Event(), threading.Event()
    collected = threading.Event()

    def hold_the_registry_lock():
        with _residency._lock:
            holding.set()
            release.wait(30)

    def collect():
        nonlocal b
        b = None
        gc.collect()
        collected.set()

    holder = threading.Thread(target=hold_the_registry_lock)
    holder.start()
    assert holding.wait(30)
    collector = threading.Thread(target=collect)
    collector.start()
    try:
        assert collected.wait(10), "collecting a resident array waited for the registry lock"
    finally:
        release.set()
        holder.join(30)
        collector.join(30)
    assert sa.device_budget().used == used - NB  # its bytes are no longer counted
