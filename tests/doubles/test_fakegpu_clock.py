"""The fake driver's clock (``SMARTARRAY_FAKE_GPU_TIMING``): modelled time of copies, kernels
and the host, computed from what CUDA orders work after, not from the order the fake runs it.

The first tests drive the queue and the clock directly (pure Python, every mode); the last ones
run a child on the fake driver with numba-cuda's real target.
"""

from __future__ import annotations

import itertools

import pytest

from smartarray._fakegpu._clock import PCIE5, PRESETS, Clock, from_environment
from smartarray._fakegpu._queue import Queue
from tests.doubles.test_fakegpu import run_fake

N = 1 << 20


def _setup(preset=PCIE5):  # noqa: ANN001, ANN202
    ids = itertools.count(0x100, 0x10)
    queue = Queue(lambda: next(ids))
    clock = Clock(preset)
    queue.clock = clock
    return queue, clock


def _copy(queue, clock, stream, n, source, target, pageable=False):  # noqa: ANN001, ANN202
    op = queue.enqueue(stream, lambda: None, "copy")
    clock.copy(op, n, source, target, pageable)
    return op


def test_a_page_locked_copy_takes_latency_plus_bytes_over_bandwidth_and_leaves_the_host() -> None:
    queue, clock = _setup()
    stream = queue.create_stream(1)
    op = _copy(queue, clock, stream, N, None, 0)
    assert op.end == pytest.approx(PCIE5.copy_latency_s + N / PCIE5.h2d_Bps)
    assert clock.host == 0.0  # asynchronous: the host did not wait
    queue.synchronize(stream)
    assert clock.host == pytest.approx(op.end)


def test_copies_in_two_directions_on_two_streams_overlap_one_direction_serialises() -> None:
    queue, clock = _setup()
    s1, s2 = queue.create_stream(1), queue.create_stream(1)
    up = _copy(queue, clock, s1, N, None, 0)
    down = _copy(queue, clock, s2, N, 0, None)
    one = PCIE5.copy_latency_s + N / PCIE5.h2d_Bps
    assert up.end == pytest.approx(one)
    assert down.end == pytest.approx(one)  # the other copy engine: at the same time
    s3 = queue.create_stream(1)
    up2 = _copy(queue, clock, s3, N, None, 0)
    assert up2.end == pytest.approx(2 * one)  # the H2D engine was busy
    queue.synchronize_all()
    assert clock.host == pytest.approx(2 * one)


def test_a_kernel_waits_for_its_streams_copy_and_overlaps_another_streams_copy() -> None:
    queue, clock = _setup()
    clock.set_kernel_seconds("k", 100e-6)
    s1, s2 = queue.create_stream(1), queue.create_stream(1)
    up = _copy(queue, clock, s1, N, None, 0)
    kernel = queue.enqueue(s1, lambda: None, "kernel")
    clock.kernel(kernel, "k", 0, 0)
    assert kernel.end == pytest.approx(up.end + PCIE5.kernel_latency_s + 100e-6)
    other = _copy(queue, clock, s2, N, None, 0)  # the H2D engine is free after ``up``
    assert other.end == pytest.approx(2 * up.end)
    assert other.end < kernel.end
    # The default rule: the bytes of the array arguments over the memory bandwidth.
    plain = queue.enqueue(s2, lambda: None, "kernel")
    clock.kernel(plain, "plain", N, 0)
    assert plain.end == pytest.approx(
        max(other.end, kernel.end) + PCIE5.kernel_latency_s + N / PCIE5.memory_Bps
    )


def test_a_pageable_copy_runs_at_the_staged_rate_and_blocks_the_host() -> None:
    queue, clock = _setup()
    stream = queue.create_stream(1)
    op = _copy(queue, clock, stream, N, None, 0, pageable=True)
    assert op.end == pytest.approx(PCIE5.copy_latency_s + N / PCIE5.pageable_Bps)
    assert clock.host == pytest.approx(op.end)


def test_modelled_time_does_not_depend_on_the_order_the_fake_runs_work() -> None:
    ends = []
    for order in ((0, 1), (1, 0)):
        queue, clock = _setup()
        streams = [queue.create_stream(1), queue.create_stream(1)]
        ops = [_copy(queue, clock, s, N, None, 0) for s in streams]
        for i in order:  # the host waits for one stream, then the other
            queue.synchronize(streams[i])
        ends.append((tuple(op.end for op in ops), clock.host))
    assert ends[0] == ends[1]


def test_a_later_operation_fills_an_engine_gap_it_fits_in() -> None:
    queue, clock = _setup()
    clock.set_kernel_seconds("long", 1e-3)
    s1, s2 = queue.create_stream(1), queue.create_stream(1)
    k = queue.enqueue(s1, lambda: None, "kernel")
    clock.kernel(k, "long", 0, 0)
    late = _copy(queue, clock, s1, N, None, 0)  # after the kernel: leaves the engine idle
    early = _copy(queue, clock, s2, N, None, 0)  # ready now: runs in the gap before ``late``
    assert early.end < late.end
    assert early.end == pytest.approx(PCIE5.copy_latency_s + N / PCIE5.h2d_Bps)


def test_a_scaled_preset_models_a_larger_copy() -> None:
    scaled = PCIE5.scaled(1000)
    assert scaled.copy_latency_s == PCIE5.copy_latency_s
    assert N / scaled.h2d_Bps == pytest.approx(1000 * N / PCIE5.h2d_Bps)
    with pytest.raises(ValueError, match="factor"):
        PCIE5.scaled(0)


def test_a_device_allocation_costs_the_host_its_latency_and_bytes() -> None:
    _, clock = _setup()
    clock.allocated(N, 0)
    assert clock.host == pytest.approx(PCIE5.alloc_latency_s + N / PCIE5.alloc_Bps)
    assert [s.label for s in clock.spans] == ["alloc"]


@pytest.mark.parametrize("allocation", ["device", "page-locked"])
def test_an_allocation_between_two_streams_commands_keeps_them_from_overlapping(
    allocation: str,
) -> None:
    """The Programming Guide's implicit synchronisation: a device memory allocation or a
    page-locked host allocation issued between two commands of different streams keeps
    them from running at once (the later one starts when the earlier one ended)."""
    queue, clock = _setup()
    s1, s2 = queue.create_stream(1), queue.create_stream(1)
    up = _copy(queue, clock, s1, N, None, 0)
    before = clock.host
    if allocation == "device":
        clock.allocated(4096, 0)
    else:
        clock.page_locked(4096, 0)
    assert clock.host > before  # the allocation's cost
    down = _copy(queue, clock, s2, N, 0, None)
    one = PCIE5.copy_latency_s + N / PCIE5.d2h_Bps
    assert down.end == pytest.approx(up.end + one)  # not beside the upload: after it
    # without the allocation in between the two copies overlap (the other copy engine)
    queue2, clock2 = _setup()
    t1, t2 = queue2.create_stream(1), queue2.create_stream(1)
    _copy(queue2, clock2, t1, N, None, 0)
    assert _copy(queue2, clock2, t2, N, 0, None).end == pytest.approx(one)


def test_an_allocation_orders_only_its_own_devices_work() -> None:
    queue, clock = _setup()
    s0, s1 = queue.create_stream(1), queue.create_stream(1)
    s1.device = 1
    up = _copy(queue, clock, s0, N, None, 0)
    clock.allocated(4096, 1)
    issued = clock.host
    assert issued < up.end
    other = _copy(queue, clock, s1, N, None, 1)
    # device 1's copy starts when issued, not after device 0's upload
    assert other.end == pytest.approx(issued + PCIE5.copy_latency_s + N / PCIE5.h2d_Bps)


def test_frees_and_unlocking_cost_the_host_latency_and_bytes() -> None:
    _, clock = _setup()
    clock.freed(N)
    assert clock.host == pytest.approx(PCIE5.free_latency_s + N / PCIE5.free_Bps)
    before = clock.host
    clock.unlocked(N)
    assert clock.host - before == pytest.approx(PCIE5.unlock_latency_s + N / PCIE5.unlock_Bps)


def test_a_host_copy_runs_at_host_memory_bandwidth_first_touch_costs_more() -> None:
    queue, clock = _setup()
    clock.host_copy(N)
    assert clock.host == pytest.approx(N / PCIE5.host_copy_Bps)
    before = clock.host
    clock.host_copy(N, first_touch=True)
    assert clock.host - before == pytest.approx(N / PCIE5.host_copy_Bps + N / PCIE5.first_touch_Bps)
    # a host-to-host cuMemcpy is a host copy
    before = clock.host
    _copy(queue, clock, queue.create_stream(1), N, None, None)
    assert clock.host - before == pytest.approx(N / PCIE5.host_copy_Bps)


def test_a_scaled_preset_scales_the_memory_management_rates() -> None:
    scaled = PCIE5.scaled(4)
    for name in ("alloc_Bps", "free_Bps", "unlock_Bps", "host_copy_Bps", "first_touch_Bps"):
        assert getattr(scaled, name) == getattr(PCIE5, name) / 4, name
    assert scaled.alloc_latency_s == PCIE5.alloc_latency_s


MEMORY_CHILD = """
from smartarray import _fakegpu
clock = _fakegpu.current().clock
p = clock.preset
n = 1 << 20
stream = cuda.stream()
pinned = cuda.pinned_array(n, np.uint8)
cuda.synchronize()
out = {}
before = clock.host
dev = cuda.device_array(n, np.uint8)
out["alloc_s"] = clock.host - before
out["alloc_model_s"] = p.alloc_latency_s + n / p.alloc_Bps
up = cuda.device_array(n, np.uint8)
up.copy_to_device(pinned, stream=stream)  # queued; the host goes on
copy_end = clock.last_copy.end
assert copy_end > clock.host
del up
ctx = cuda.current_context()
before = clock.host
for owner in (getattr(ctx, "memory_manager", None), ctx):
    if getattr(owner, "deallocations", None) is not None:
        owner.deallocations.clear()
out["free_ended_s"] = clock.host
out["copy_end_s"] = copy_end
out["free_model_s"] = p.free_latency_s + n / p.free_Bps
out["frees"] = _fakegpu.current().calls["cuMemFree"]
before = clock.host
del pinned
for owner in (getattr(ctx, "memory_manager", None), ctx):
    if getattr(owner, "deallocations", None) is not None:
        owner.deallocations.clear()
out["unlock_s"] = clock.host - before
out["unlock_model_s"] = p.unlock_latency_s + n / p.unlock_Bps
print(json.dumps(out))
"""


def test_on_the_fake_driver_allocations_and_frees_take_modelled_time() -> None:
    out = run_fake(MEMORY_CHILD, env={"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"})
    assert out["alloc_s"] >= out["alloc_model_s"]
    # the free waited for the queued copy on the memory, then paid its own cost
    assert out["frees"] >= 1
    assert out["free_ended_s"] >= out["copy_end_s"] + out["free_model_s"]
    assert out["unlock_s"] >= out["unlock_model_s"]


def test_the_environment_names_a_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMARTARRAY_FAKE_GPU_TIMING", raising=False)
    assert from_environment() is None
    for name in PRESETS:
        monkeypatch.setenv("SMARTARRAY_FAKE_GPU_TIMING", name)
        clock = from_environment()
        assert clock is not None and clock.preset.name == name
    monkeypatch.setenv("SMARTARRAY_FAKE_GPU_TIMING", "pcie9")
    with pytest.raises(ValueError, match="pcie5"):
        from_environment()


CHILD = """
from smartarray import _fakegpu
clock = _fakegpu.current().clock
p = clock.preset
n = 1 << 20
pinned = cuda.pinned_array(n, np.uint8)
pageable = np.zeros(n, np.uint8)
dev = cuda.device_array(n, np.uint8)
stream = cuda.stream()
cuda.synchronize()
e0, e1 = cuda.event(), cuda.event()
e0.record(stream)
before = clock.host
dev.copy_to_device(pinned, stream=stream)
issued = clock.host - before
e1.record(stream)
e1.synchronize()
out = {"elapsed_ms": cuda.event_elapsed_time(e0, e1),
       "copy_ms": (p.copy_latency_s + n / p.h2d_Bps) * 1e3, "issued_s": issued,
       "copy_call_s": p.copy_call_s}
cuda.synchronize()
before = clock.host
dev.copy_to_device(pageable, stream=stream)
out["pageable_host_s"] = clock.host - before
out["pageable_s"] = p.copy_latency_s + n / p.pageable_Bps
before = clock.host
cuda.pinned_array(n, np.uint8)
out["pin_host_s"] = clock.host - before
out["pin_s"] = p.pin_latency_s + n / p.pin_Bps
print(json.dumps(out))
"""


def test_on_the_fake_driver_events_copies_and_page_locking_take_modelled_time() -> None:
    out = run_fake(CHILD, env={"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"})
    # The events bracket the copy and the host's API calls that issued it.
    assert out["copy_ms"] < out["elapsed_ms"] <= out["copy_ms"] + out["issued_s"] * 1e3 + 1e-6
    assert out["issued_s"] >= out["copy_call_s"]
    assert out["issued_s"] < out["copy_ms"] / 1e3  # the host returned before the copy ended
    # The host waited for the whole pageable copy, at the staged rate.
    assert out["pageable_host_s"] >= out["pageable_s"]
    # Page-locking n bytes (cuMemHostAlloc) cost the host its latency and bytes.
    assert out["pin_host_s"] >= out["pin_s"]


def test_without_a_preset_the_fake_driver_keeps_no_time() -> None:
    out = run_fake(
        """
        from smartarray import _fakegpu
        a = cuda.to_device(np.ones(64))
        e0, e1 = cuda.event(), cuda.event()
        e0.record(); a.copy_to_host(); e1.record(); e1.synchronize()
        print(json.dumps({"clock": _fakegpu.current().clock is None,
                          "ms": cuda.event_elapsed_time(e0, e1)}))
        """,
        env={"SMARTARRAY_FAKE_GPU_TIMING": ""},
    )
    assert out == {"clock": True, "ms": 0.0, "_stderr": out["_stderr"], "_returncode": 0}


def test_the_timeline_plot_draws_one_lane_per_engine() -> None:
    pytest.importorskip("matplotlib")
    queue, clock = _setup()
    s1, s2 = queue.create_stream(1), queue.create_stream(1)
    _copy(queue, clock, s1, N, None, 0)
    _copy(queue, clock, s2, N, 0, None)
    queue.synchronize_all()
    figure = clock.plot()
    (axes,) = [a for a in figure.axes if a.get_title()]
    lanes = [t.get_text() for t in axes.get_yticklabels()]
    assert lanes == ["gpu0.d2h", "gpu0.h2d", "host"]
    assert "gpu0.h2d:" in clock.timeline()


def test_a_query_answers_not_ready_until_the_modelled_work_ended_and_never_waits() -> None:
    # A query is not a wait: answering "ready" by running the work would move the host's
    # clock to the work's end, a wait the program never made.
    out = run_fake(
        """
        from smartarray import _fakegpu
        clock = _fakegpu.current().clock
        n = 1 << 24
        pinned = cuda.pinned_array(n, np.uint8)
        dev = cuda.device_array(n, np.uint8)
        stream = cuda.stream()
        done = cuda.event()
        cuda.synchronize()
        before = clock.host
        dev.copy_to_device(pinned, stream=stream)
        done.record(stream)
        answers = [done.query() for _ in range(3)]
        spent = clock.host - before
        copy = clock.preset.copy_latency_s + n / clock.preset.h2d_Bps
        stream.synchronize()
        print(json.dumps({"answers": answers, "spent": spent, "copy": copy,
                          "after": done.query()}))
        """,
        env={"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"},
    )
    assert out["answers"] == [False, False, False]
    assert out["spent"] < out["copy"] / 10  # the queries did not wait for the copy
    assert out["after"] is True


def test_trace_events_carry_the_copies_modelled_times() -> None:
    out = run_fake(
        """
        from smartarray import _fakegpu
        clock = _fakegpu.current().clock
        import smartarray as sa

        @cuda.jit
        def twice(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] *= 2

        a = sa.SmartArray(np.arange(1024.0), pinned=True)
        s = sa.stream()
        with sa.trace() as t:
            a.prefetch("gpu", stream=s)
            twice[32, 32, s](a)
            a.host()
        spans = [(sp.start, sp.end) for sp in clock.spans if sp.engine.endswith(("h2d", "d2h"))]
        events = [(e.direction, e.modelled_start_s, e.modelled_end_s) for e in t.events]
        print(json.dumps({"spans": spans[-2:], "events": events}))
        """,
        env={"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"},
    )
    (up, s0, e0), (down, s1, e1) = out["events"]
    assert (up, down) == ("h2d", "d2h")
    assert [[s0, e0], [s1, e1]] == out["spans"]
    assert 0 < s0 < e0 <= s1 < e1


def test_without_the_clock_trace_events_have_no_modelled_times() -> None:
    import numpy as np

    import smartarray as sa

    a = sa.SmartArray(np.arange(8.0))
    with sa.trace() as t:
        a.gpu()
    assert [(e.modelled_start_s, e.modelled_end_s) for e in t.events] == [(0.0, 0.0)]
