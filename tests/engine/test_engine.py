"""The coherence engine (smartarray._engine.buffer): acquire / release rules of each intent, on one
base buffer, checked by the bytes moved and the validity recorded."""

from __future__ import annotations

import numpy as np
import pytest

import smartarray as sa
from smartarray._engine.buffer import GPU, HOST, IN, INOUT, LOCATIONS, OUT, Buffer


def _on_device(n: int = 16) -> sa.SmartArray:
    """An array of ``n`` float64 current on the device only."""
    a = sa.SmartArray(np.arange(float(n)))
    a.get(GPU)
    a.mark_changed(GPU)
    assert a.valid_at == (GPU,)
    return a


def test_locations_and_intents_are_the_strings_users_pass():
    assert LOCATIONS == (HOST, GPU) == ("host", "gpu")
    assert (sa.In.intent, sa.Out.intent, sa.InOut.intent) == (IN, OUT, INOUT)


def test_host_in_downloads_only_the_stale_range_and_release_records_nothing():
    a = _on_device()
    buf: Buffer = a._buf
    before = sa.stats()
    with buf.lock:
        buf.acquire(HOST, 0, 64, IN, "host read")
        buf.release(HOST, 0, 64, IN)
    moved = sa.stats() - before
    assert (moved.d2h_count, moved.d2h_bytes, moved.h2d_bytes) == (1, 64, 0)
    assert buf.state.is_valid(GPU, 0, 128)  # nothing written: the device copy stays current
    assert buf.state.is_valid(HOST, 0, 64) and not buf.state.is_valid(HOST, 64, 128)


def test_host_out_of_a_covered_range_moves_nothing_and_release_makes_the_device_stale():
    a = _on_device()
    buf = a._buf
    before = sa.stats()
    with buf.lock:
        buf.acquire(HOST, 0, 64, OUT, "host write gap", covers=True)
        buf.ensure_host()[0:64] = 0
        buf.release(HOST, 0, 64, OUT)
    assert (sa.stats() - before).count == 0
    assert buf.state.is_exclusive(HOST, 0, 64) and buf.state.is_exclusive(GPU, 64, 128)
    np.testing.assert_array_equal(np.asarray(a), [0] * 8 + list(range(8, 16)))


def test_host_out_of_a_strided_range_falls_back_to_inout():
    a = _on_device()
    buf = a._buf
    before = sa.stats()
    with buf.lock:
        buf.acquire(HOST, 0, 128, OUT, "host write gap", covers=False)  # the gaps stay current
    moved = sa.stats() - before
    assert (moved.d2h_count, moved.d2h_bytes) == (1, 128)


def test_abort_records_only_bytes_that_were_current():
    a = _on_device()
    buf = a._buf
    with buf.lock:
        buf.acquire(HOST, 0, 64, IN, "host read")
    buf.abort(HOST, 0, 128, INOUT)  # a failed call may have written: only [0, 64) is trusted
    assert buf.state.is_exclusive(HOST, 0, 64)
    assert buf.state.is_exclusive(GPU, 64, 128)
    np.testing.assert_array_equal(np.asarray(a), np.arange(16.0))


@pytest.mark.parametrize("transition", ["mark", "upload", "launch_out"])
def test_every_transition_towards_the_device_disarms_the_njit_fast_path(transition):
    a = sa.SmartArray(np.zeros(16))
    view = a[:8]
    view._njit_enter()
    view._njit_exit()
    assert view._njit_fast is not None  # current on the host only: armed by the release
    buf = a._buf
    with buf.lock:
        if transition == "mark":
            buf.mark(GPU, 64, 128)  # another range of the same buffer
        elif transition == "upload":
            buf.sync(GPU, 0, 64, "device use")
        else:
            buf.acquire(GPU, 0, 64, OUT, "device use", covers=True, launch=0)
    assert view._njit_fast is None


@pytest.mark.parametrize("cost", ["PCIE5_X16", "NVLINK_C2C"])
def test_scattered_reads_never_overwrite_an_unannounced_write_through_a_held_host_array(cost):
    """The cost model copies the whole span of scattered reads, bytes valid at the host
    included: over a held host array the user wrote and has not announced yet, that copy
    brought the device's old values back (the write was lost)."""
    n = 1 << 17  # 1 MiB of float64: a span copy is cheaper than a few latencies
    previous = sa.set_transfer_cost(getattr(sa, cost))
    try:
        a = sa.SmartArray(np.zeros(n))
        a.gpu()
        a.gpu_changed()  # current on the device only
        v = a[1000:1010]
        h = v.host()  # held by the user
        h[:] = 42.0  # written, not announced yet
        for i in (0, 50_000, 100_000, 120_000, 130_000):
            assert a[i] == 0.0  # scattered reads of other bytes
        v.host_changed()
        np.testing.assert_array_equal(np.asarray(a[1000:1010]), np.full(10, 42.0))
    finally:
        sa.set_transfer_cost(previous)


def test_a_lazy_buffers_property_found_before_another_thread_derived_it_still_answers() -> None:
    """Two threads read a new array's lock at once: one finds the lazy property, the other
    derives the buffer (it becomes a Buffer) before the first calls it; the first must get
    the lock, not an AttributeError (seen in test_threads_properties.py, strict mode)."""
    import numpy as np

    import smartarray as sa
    from smartarray._engine.buffer import Buffer, _LazyBuffer

    buf = sa.SmartArray(np.zeros(4))._buf
    assert type(buf) is _LazyBuffer
    found = _LazyBuffer.__dict__["lock"]  # (the first thread's lookup)
    buf.state  # noqa: B018 - the other thread derives everything
    assert type(buf) is Buffer
    assert found.fget(buf) is buf.lock
