"""Strict mode (smartarray.testing): each modelled GPU behaviour, and strict twins of GPU tests.

Every test turns strict mode on itself with ``strict()``, so it runs in both CI passes (plain
simulator and ``SMARTARRAY_STRICT=1``); strict mode runs on numba's CUDA simulator only, so the
whole module is marked ``strict_mode`` and skips on a GPU and on the fake driver (the tests of
the ``SMARTARRAY_STRICT`` switch itself, which start a child process, are in
tests/memory/test_environment.py and run on every target). Tests marked ``strict_only`` show
smartarray defects a GPU would show; they run only under ``SMARTARRAY_STRICT=1`` and are
listed, while the defect is open, in ``STRICT_KNOWN_FAILURES`` (tests/conftest.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray.testing import StrictModeError, is_strict, strict, strict_state
from tests._kernels import add_one

STRICT_ENV = os.environ.get("SMARTARRAY_STRICT", "0") not in ("", "0")
strict_only = pytest.mark.skipif(not STRICT_ENV, reason="runs under SMARTARRAY_STRICT=1 only")

# Every test here turns strict mode on in this process (tests/conftest.py skips them off the
# simulator with the reason), so the marker is the module's, not each test's.
pytestmark = pytest.mark.strict_mode


@cuda.jit
def plus_one_into(out, x):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + 1


@cuda.jit
def fill_five(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 5.0


@cuda.jit
def write_then_raise(x):
    x[0] = 5.0
    raise ValueError("kernel failed")


@cuda.jit(debug=True, opt=False)
def write_then_raise_debug(x):
    x[0] = 5.0
    raise ValueError("kernel failed")


def blocks(n):
    return (n + 31) // 32


# --- switching it on -----------------------------------------------------------------------------


def test_context_manager_turns_strict_mode_on_and_off():
    was = is_strict()
    plain_stream = type(cuda.stream())
    with strict():
        assert is_strict()
        assert was or type(cuda.stream()) is not plain_stream
    assert is_strict() == was
    if not was:
        assert type(cuda.stream()) is plain_stream
        d = cuda.to_device(np.arange(3.0))
        assert d.sum() == 3.0  # the plain simulator's forgiveness is back


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seed": "x"}, TypeError, "seed must be an int .*got str"),
        ({"seed": 1.5}, TypeError, "seed must be an int .*got float"),
        ({"seed": True}, TypeError, "seed must be an int .*got a bool"),
        ({"device_memory": 1.5}, TypeError, "device_memory must be an int of bytes .*got float"),
        ({"device_memory": "1"}, TypeError, "device_memory must be an int of bytes .*got str"),
        ({"device_memory": -1}, ValueError, "device_memory must be an int of bytes >= 0"),
        ({"per_thread_default_stream": 1}, TypeError, "per_thread_default_stream must be a bool"),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(kwargs, error, match):
    was = is_strict()
    state = strict_state()
    with pytest.raises(error, match=match), strict(**kwargs):
        pass  # pragma: no cover
    assert is_strict() == was
    assert strict_state() is state


# --- 1. asynchrony -------------------------------------------------------------------------------


def test_stream_work_is_queued_until_the_host_waits():
    with strict() as state:
        s = cuda.stream()
        d = cuda.to_device(np.zeros(8), stream=s)
        add_one[1, 32, s](d)
        assert state.pending() == 2 and state.log == []
        s.synchronize()
        assert state.pending() == 0 and state.log == ["copy h2d", "kernel add_one"]
        np.testing.assert_array_equal(d.copy_to_host(), np.ones(8))


def test_host_read_after_unsynchronised_async_write_sees_old_data():
    with strict():
        s = cuda.stream()
        out = cuda.pinned_array(8)
        out[:] = -1.0
        d = cuda.to_device(np.zeros(8), stream=s)
        add_one[1, 32, s](d)
        d.copy_to_host(out, stream=s)  # into page-locked memory: asynchronous
        np.testing.assert_array_equal(out, -1.0)  # no wait yet: the old data
        s.synchronize()
        np.testing.assert_array_equal(out, 1.0)


def test_async_upload_from_page_locked_memory_reads_its_source_when_it_runs():
    with strict():
        s = cuda.stream()
        host = cuda.pinned_array(4)
        host[:] = 1.0
        d = cuda.to_device(host, stream=s)
        host[:] = 2.0  # a race on a GPU: the DMA has not read the source yet
        s.synchronize()
        np.testing.assert_array_equal(d.copy_to_host(), 2.0)


def test_async_upload_from_pageable_memory_reads_its_source_before_returning():
    with strict() as state:
        s = cuda.stream()
        host = np.ones(4)
        d = cuda.to_device(host, stream=s)
        host[:] = 2.0
        assert state.pending() == 1
        s.synchronize()
        np.testing.assert_array_equal(d.copy_to_host(), 1.0)


def test_download_into_pageable_memory_is_synchronous():
    with strict() as state:
        s = cuda.stream()
        d = cuda.to_device(np.zeros(4), stream=s)
        add_one[1, 32, s](d)
        out = np.full(4, -1.0)
        syncs = state.host_syncs
        d.copy_to_host(out, stream=s)
        np.testing.assert_array_equal(out, 1.0)
        assert state.host_syncs == syncs + 1


def test_default_stream_copy_waits_for_every_stream():
    with strict():
        s1, s2 = cuda.stream(), cuda.stream()
        a = cuda.to_device(np.zeros(4), stream=s1)
        b = cuda.to_device(np.zeros(4), stream=s2)
        add_one[1, 32, s1](a)
        add_one[1, 32, s2](b)
        cuda.to_device(np.zeros(1))  # a synchronous copy on the legacy default stream
        np.testing.assert_array_equal(a.copy_to_host(), 1.0)
        np.testing.assert_array_equal(b.copy_to_host(), 1.0)


def test_user_stream_work_waits_for_earlier_default_stream_work():
    for seed in range(4):
        with strict(seed=seed) as state:
            s = cuda.stream()
            d = cuda.device_array(4)
            d.copy_to_device(np.zeros(4), stream=s)
            s.synchronize()
            add_one[1, 32](d)  # legacy default stream: queued
            out = cuda.pinned_array(4)
            d.copy_to_host(out, stream=s)  # must wait for the default-stream kernel
            s.synchronize()
            assert state.log[-2:] == ["kernel add_one", "copy d2h"]
            np.testing.assert_array_equal(out, 1.0)


def test_per_thread_default_stream_is_not_ordered_with_other_streams():
    orders = set()
    for seed in range(12):
        with strict(seed=seed, per_thread_default_stream=True) as state:
            s = cuda.stream()
            a = cuda.device_array(4)
            a.copy_to_device(np.zeros(4), stream=s)
            b = cuda.device_array(4)
            fill_five[1, 32](b)  # stream 0, which s does not wait for (nor it for s)
            add_one[1, 32, s](a)
            if seed == 0:
                s.synchronize()
                assert state.pending() == 1  # the stream-0 kernel was not needed
            cuda.synchronize()
            orders.add(tuple(state.log))
    assert len(orders) > 1


def test_stream_synchronize_does_not_run_other_streams():
    with strict() as state:
        s1, s2 = cuda.stream(), cuda.stream()
        a = cuda.to_device(np.zeros(4), stream=s1)
        b = cuda.to_device(np.zeros(4), stream=s2)
        add_one[1, 32, s2](b)
        s1.synchronize()
        assert state.log == ["copy h2d"] and state.pending() == 2
        del a


def test_cuda_synchronize_runs_everything():
    with strict() as state:
        streams = [cuda.stream() for _ in range(3)]
        arrays = [cuda.to_device(np.zeros(4), stream=s) for s in streams]
        for s, d in zip(streams, arrays, strict=True):
            add_one[1, 32, s](d)
        cuda.synchronize()
        assert state.pending() == 0 and len(state.log) == 6


def _two_stream_order(seed):
    with strict(seed=seed) as state:
        s1, s2 = cuda.stream(), cuda.stream()
        a = cuda.device_array(4)
        b = cuda.device_array(4)
        for _ in range(3):
            a.copy_to_device(np.zeros(4), stream=s1)
            b.copy_to_device(np.zeros(4), stream=s2)
        add_one[1, 32, s1](a)
        add_one[1, 32, s2](b)
        start = len(state.log)
        order = []
        state.scheduler.log = order
        cuda.synchronize()
        return start, tuple(order), a.copy_to_host(), b.copy_to_host()


def test_two_streams_interleave_in_several_orders_across_seeds_and_reproducibly():
    orders = {_two_stream_order(seed)[1] for seed in range(12)}
    assert len(orders) > 1
    assert _two_stream_order(3)[1] == _two_stream_order(3)[1]
    for _, _order, a, b in (_two_stream_order(seed) for seed in range(4)):
        # Each stream's own order holds: its kernel runs after its copies.
        np.testing.assert_array_equal(a, 1.0)
        np.testing.assert_array_equal(b, 1.0)


def test_events_order_work_across_streams():
    for seed in range(8):
        with strict(seed=seed):
            s1, s2 = cuda.stream(), cuda.stream()
            src = cuda.to_device(np.zeros(4), stream=s1)
            add_one[1, 32, s1](src)
            ev = cuda.event()
            ev.record(s1)
            s2.wait_event(ev)
            dst = cuda.device_array(4, stream=s2)
            dst.copy_to_device(src, stream=s2)  # device to device, after the event
            ev.synchronize()
            s2.synchronize()
            np.testing.assert_array_equal(dst.copy_to_host(), 1.0)


def test_event_synchronize_waits_for_the_recorded_work_only():
    with strict() as state:
        s = cuda.stream()
        d = cuda.to_device(np.zeros(4), stream=s)
        ev = cuda.event()
        ev.record(s)
        add_one[1, 32, s](d)
        assert not ev.query()
        ev.synchronize()
        assert ev.query() and state.log == ["copy h2d"] and state.pending() == 1


def test_auto_synchronize_waits_on_exit():
    with strict() as state:
        s = cuda.stream()
        with s.auto_synchronize():
            d = cuda.to_device(np.zeros(4), stream=s)
            add_one[1, 32, s](d)
            assert state.pending() == 2
        assert state.pending() == 0


def test_launch_prepares_arguments_on_its_stream_and_runs_retr_before_the_body():
    seen = []

    class Probe(cuda.In):
        def to_device(self, retr, stream=0):
            seen.append(("prepare", stream))
            retr.append(lambda: seen.append(("retr", len(state.log))))
            return super().to_device(retr, stream)

    with strict() as state:
        s = cuda.stream()
        d = cuda.to_device(np.zeros(4), stream=s)
        add_one[1, 32, s](Probe(d))
        # As numba-cuda's _LaunchConfiguration: a cuda.core-like Stream wrapping the launch
        # stream's handle (sync(), __cuda_stream__, no synchronize()), not the user's object.
        (what, given), after = seen
        assert what == "prepare" and given is not s and given.handle == s.handle
        assert given.__cuda_stream__() == (0, s.handle)
        assert callable(given.sync) and not hasattr(given, "synchronize")
        assert after == ("retr", 0)  # retr ran before anything ran
        s.synchronize()
        assert state.log == ["copy h2d", "kernel add_one"]


def test_plain_ndarray_argument_is_copied_back_synchronously():
    with strict():
        s = cuda.stream()
        host = np.zeros(4)
        add_one[1, 32, s](host)  # numba copies back into pageable memory: synchronous
        np.testing.assert_array_equal(host, 1.0)


# --- 2. the device-array surface of a GPU --------------------------------------------------------


def test_device_arrays_have_no_numpy_methods_or_arithmetic():
    with strict():
        d = cuda.to_device(np.arange(4.0))
        with pytest.raises(AttributeError, match="no attribute 'sum'"):
            d.sum()
        with pytest.raises(TypeError, match="copy_to_host"):
            d + 1  # noqa: B018
        assert d.shape == (4,) and d.dtype == np.float64 and d.size == 4 and d.ndim == 1
        assert "data" in d.__cuda_array_interface__


def test_asarray_of_a_device_array_copies():
    with strict():
        d = cuda.to_device(np.arange(4.0))
        host = np.asarray(d)
        host[0] = 100.0
        np.testing.assert_array_equal(d.copy_to_host(), np.arange(4.0))


def test_to_device_into_existing_and_without_copy_as_on_a_gpu():
    with strict():
        target = cuda.device_array(4)
        assert cuda.to_device(np.arange(4.0), to=target) is target
        np.testing.assert_array_equal(target.copy_to_host(), np.arange(4.0))
        fresh = cuda.to_device(np.arange(4.0), copy=False)
        assert not np.array_equal(fresh.copy_to_host(), np.arange(4.0))  # uninitialised


def test_mapped_array_is_numbas_mapped_ndarray_surface():
    with strict() as state:
        m = cuda.mapped_array(4)
        m[:] = 0.0
        assert isinstance(m, np.ndarray) and state.is_page_locked(m)
        add_one[1, 32](m)  # kernels address mapped memory directly, no copy
        cuda.synchronize()
        np.testing.assert_array_equal(m, 1.0)


def test_pinned_and_mapped_take_several_arrays():
    a, b = np.zeros(4), np.zeros(4)
    with strict() as state:
        with cuda.pinned(a, b):
            assert state.is_page_locked(a) and state.is_page_locked(b)
        assert not state.is_page_locked(a)
        with cuda.mapped(a, b) as (da, db):
            add_one[1, 32](da)
            add_one[1, 32](db)
            cuda.synchronize()
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(b, 1.0)


def test_registering_page_locked_memory_again_is_refused():
    with strict():
        host = cuda.pinned_array(16)
        with pytest.raises(RuntimeError, match="ALREADY_REGISTERED"), cuda.pinned(host):
            pass
        a = np.zeros(16)
        with (
            cuda.pinned(a),
            pytest.raises(RuntimeError, match="ALREADY_REGISTERED"),
            cuda.pinned(a),
        ):
            pass


def test_finite_device_memory():
    with strict(device_memory=1024) as state:
        d = cuda.device_array(100)  # 800 bytes
        assert cuda.current_context().get_memory_info() == (224, 1024)
        with pytest.raises(RuntimeError, match="CUDA_ERROR_OUT_OF_MEMORY") as info:
            cuda.device_array(100)
        assert info.value.code == 2
        del d
        again = cuda.device_array(100)  # freed memory can be allocated again
        assert state.device_used == 800 and again.size == 100


def test_smartarray_allocation_failure_leaves_the_host_copy_intact():
    with strict(device_memory=512):
        a = sa.SmartArray(np.arange(100.0))  # 800 bytes do not fit
        with pytest.raises(Exception, match="OUT_OF_MEMORY"):
            add_one[blocks(100), 32](a)
        np.testing.assert_array_equal(np.asarray(a), np.arange(100.0))


def test_kernel_exception_is_lost_without_debug():
    with strict():
        d = cuda.to_device(np.zeros(1))
        write_then_raise[1, 1](d)
        cuda.synchronize()  # nothing raised, as on a GPU
        assert d.copy_to_host()[0] == 5.0


def test_kernel_exception_is_raised_with_debug():
    with strict():
        d = cuda.to_device(np.zeros(1))
        with pytest.raises(ValueError, match="kernel failed"):
            write_then_raise_debug[1, 1](d)


# --- 3. crash checks -----------------------------------------------------------------------------


def test_misaligned_argument_is_reported_with_kernel_and_argument_name():
    with strict():
        raw = cuda.device_array(64, dtype=np.uint8)
        view = raw[1:33].view(np.float64)
        with pytest.raises(StrictModeError, match=r"kernel 'add_one', argument 'x'.*aligned"):
            add_one[1, 32](view)


def test_argument_outside_any_live_allocation_is_reported():
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    with strict():
        stray = FakeCUDAArray(np.zeros(4))  # host memory posing as device memory
        with pytest.raises(StrictModeError, match=r"argument 'x'.*live device allocation"):
            add_one[1, 32](stray)


def test_out_of_bounds_access_is_a_crash_even_without_debug():
    @cuda.jit
    def past_the_end(x):
        x[x.size] = 1.0

    with strict():
        d = cuda.device_array(4)
        past_the_end[1, 1](d)
        with pytest.raises(StrictModeError, match="past_the_end"):
            cuda.synchronize()


# --- strict twins of the gpu-marked tests --------------------------------------------------------


def test_strict_twin_pinned_array_is_page_locked():
    with strict() as state:
        assert state.is_page_locked(sa.pinned_array(1024))
        assert not state.is_page_locked(np.zeros(1024))


def test_strict_twin_register_page_locks_memory():
    a = np.zeros(1 << 10)
    with strict() as state:
        sa.register(a)
        try:
            assert state.is_page_locked(a) and state.is_page_locked(a[10:20])
        finally:
            sa.deregister(a)
        assert not state.is_page_locked(a)


def test_strict_twin_stream_copies_are_asynchronous_and_ordered():
    with strict() as state:
        host = sa.pinned_array(64, dtype=np.float32)
        host[:] = 1.0
        s = sa.stream()
        d = sa.to_device(host, stream=s)
        out = sa.pinned_array(64, dtype=np.float32)
        out[:] = 0.0
        d.copy_to_host(out, stream=s)
        assert state.pending() == 2 and out[-1] == 0.0  # asynchronous: nothing ran yet
        s.synchronize()
        assert state.log == ["copy h2d", "copy d2h"] and out[-1] == 1.0  # ordered


def test_strict_twin_host_read_waits_for_the_launch_stream_only():
    with strict() as state:
        s, other = sa.stream(), sa.stream()
        busy = cuda.to_device(np.zeros(4), stream=other)
        add_one[1, 32, other](busy)
        a = sa.SmartArray(np.zeros(256, dtype=np.float32), pinned=True)
        add_one[blocks(256), 32, s](a)
        np.testing.assert_array_equal(np.asarray(a)[:4], 1.0)
        assert state.pending() == 2  # the other stream was not waited for
        assert "kernel add_one" in state.log and state.log.count("kernel add_one") == 1


def test_strict_twin_eager_refresh_is_ordered_after_a_kernel_on_a_stream():
    for seed in range(3):
        with strict(seed=seed):
            s = sa.stream()
            a = sa.SmartArray(np.zeros(256, dtype=np.float32))
            held = a.host()
            for i in range(3):
                add_one[blocks(256), 32, s](a)
                # No synchronize: the refresh must come after the kernel, with its result.
                np.testing.assert_array_equal(held, i + 1.0)


def test_strict_twin_launches_on_two_streams_are_ordered_on_one_array():
    for seed in range(4):
        with strict(seed=seed):
            s1, s2 = sa.stream(), sa.stream()
            a = sa.SmartArray(np.zeros(256, dtype=np.float32))
            for i in range(6):
                add_one[blocks(256), 32, s1 if i % 2 else s2](a)
            np.testing.assert_array_equal(np.asarray(a), 6.0)


def test_strict_twin_pinned_smartarray_uses_page_locked_host_memory():
    with strict() as state:
        a = sa.SmartArray(np.arange(1024.0), pinned=True)
        assert state.is_page_locked(a._buf.ensure_host())
        add_one[blocks(1024), 32](a)
        np.testing.assert_array_equal(np.asarray(a), np.arange(1024.0) + 1)


# --- smartarray defects strict mode shows -------------------------------------------------------


@strict_only
def test_failed_debug_launch_leaves_nothing_stale_marked_valid():
    a = sa.SmartArray(np.zeros(1))
    with pytest.raises(ValueError, match="kernel failed"):
        write_then_raise_debug[1, 1](a)
    # The kernel wrote before it failed: the host copy must not be declared current.
    np.testing.assert_array_equal(np.asarray(a), [5.0])


@strict_only
def test_default_stream_launch_is_ordered_before_a_user_stream_launch():
    # With per-thread default streams (or non-blocking / external streams) nothing orders
    # stream-0 work before a later launch on a user stream but smartarray itself.
    for seed in range(4):
        with strict(seed=seed, per_thread_default_stream=True):
            a = sa.SmartArray(np.zeros(64))
            fill_five[blocks(64), 32](a)  # on stream 0
            s = sa.stream()
            add_one[blocks(64), 32, s](a)  # must run after fill_five
            np.testing.assert_array_equal(np.asarray(a), 6.0)


@strict_only
def test_get_host_waits_for_an_upload_in_flight():
    s = sa.stream()
    x = sa.SmartArray(np.zeros(64), pinned=True)
    out = sa.SmartArray(np.zeros(64))
    plus_one_into[blocks(64), 32, s](out, sa.In(x))  # uploads x on s, from page-locked memory
    h = x.get("host")
    h[:] = 7.0  # a write the upload must not see
    np.testing.assert_array_equal(np.asarray(out), 1.0)


@strict_only
def test_packed_record_field_view_is_refused_or_works_not_misaligned():
    a = sa.SmartArray(np.zeros(8, dtype=np.dtype([("n", "i1"), ("x", "f8")])))
    try:
        add_one[blocks(8), 32](a["x"])
    except StrictModeError as exc:
        pytest.fail(f"a misaligned pointer reached the kernel: {exc}")
    except (TypeError, ValueError):
        return  # refused with a clear error before anything ran
    np.testing.assert_array_equal(np.asarray(a["x"]), 1.0)


@strict_only
def test_view_of_a_mapped_array_is_refused_or_works_not_null():
    m = sa.mapped_array(64)
    m[:] = 0.0
    try:
        add_one[blocks(32), 32](m[16:48])
        cuda.synchronize()
    except StrictModeError as exc:
        pytest.fail(f"a NULL pointer reached the kernel: {exc}")
    except (TypeError, ValueError):
        return  # refused with a clear error before anything ran
    np.testing.assert_array_equal(np.asarray(m)[16:48], 1.0)
    np.testing.assert_array_equal(np.asarray(m)[:16], 0.0)  # the view's own bytes, no others


@strict_only
def test_register_of_page_locked_memory_is_no_driver_error():
    host = sa.pinned_array(16)
    try:
        with sa.register(host):
            pass
    except sa.RegistrationError:
        pass  # a clear refusal is fine
    b = sa.SmartArray(np.zeros(16), pinned=True)
    try:
        with sa.register(b.host()):
            pass
    except sa.RegistrationError:
        pass


def test_view_of_a_mapped_array_reaches_a_kernel_as_null():
    with strict():
        m = cuda.mapped_array(8)
        m[:] = 0.0
        add_one[1, 32](m)  # the array mapped_array returned has a device pointer
        with pytest.raises(StrictModeError, match=r"argument 'x'.*NULL device pointer"):
            add_one[1, 32](m[2:6])


def test_mapped_ndarray_has_no_alloc_size_as_numba_builds_it():
    with strict():
        m = cuda.mapped_array(4)
        with pytest.raises(AttributeError, match="alloc_size"):
            m.copy_to_host()


@strict_only
def test_strict_twin_mapped_array_copies_are_host_side_and_not_transfers():
    m = sa.mapped_array(16)
    before = sa.stats()
    m.copy_to_device(np.arange(16.0))
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(16.0))
    assert [part.copy_to_host().tolist() for part in m.split(8)] == [
        list(range(8)),
        list(range(8, 16)),
    ]
    assert (sa.stats() - before).count == 0  # mapped memory is host memory: nothing crosses


def test_unpinning_memory_an_async_copy_still_uses_is_an_error():
    a = np.ones(64)
    with strict():
        s = cuda.stream()
        d = cuda.device_array(64)
        with pytest.raises(StrictModeError, match="still queued"), cuda.pinned(a):
            d.copy_to_device(a, stream=s)
        s.synchronize()
        with cuda.pinned(a):
            d.copy_to_device(a, stream=s)
            s.synchronize()  # waited for: unpinning is safe


@strict_only
def test_deregister_waits_for_an_async_copy_from_the_memory():
    a = np.ones(64)
    sa.register(a)
    s = sa.stream()
    d = sa.device_array(64)
    d.copy_to_device(a, stream=s)
    sa.deregister(a)  # must not unpin under a pending DMA
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), 1.0)
