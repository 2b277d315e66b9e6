"""Transfer counters and traces: exact counts, thread safety, nesting."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

import smartarray as sa

stats_module = importlib.import_module("smartarray.stats")


def test_stats_is_frozen_and_reset_zeroes():
    sa.to_device(np.zeros(4))
    snapshot = sa.stats()
    with pytest.raises(AttributeError):
        snapshot.h2d_bytes = 0  # type: ignore[misc]
    sa.reset_stats()
    assert sa.stats() == sa.TransferStats()


def test_totals_and_subtraction():
    a = sa.TransferStats(h2d_count=2, h2d_bytes=10, d2h_count=1, d2h_bytes=4)
    b = sa.TransferStats(h2d_count=1, h2d_bytes=3)
    assert (a.count, a.nbytes) == (3, 14)
    assert a - b == sa.TransferStats(h2d_count=1, h2d_bytes=7, d2h_count=1, d2h_bytes=4)


def test_trace_records_events_in_order_with_reason_and_array():
    with sa.trace() as t:
        d = sa.to_device(np.arange(6, dtype=np.int16).reshape(2, 3))
        d.copy_to_host()
    assert [(e.direction, e.nbytes, e.reason, e.array) for e in t.events] == [
        ("h2d", 12, "to_device", "int16[2,3]"),
        ("d2h", 12, "copy_to_host", "int16[2,3]"),
    ]
    assert t.stats == sa.TransferStats(h2d_count=1, h2d_bytes=12, d2h_count=1, d2h_bytes=12)


def test_nested_traces_both_see_inner_copies():
    with sa.trace() as outer:
        sa.to_device(np.zeros(2))
        with sa.trace() as inner:
            sa.to_device(np.zeros(3))
    assert outer.stats.h2d_bytes == 40 and inner.stats.h2d_bytes == 24


def test_trace_stops_recording_after_block_even_on_error():
    with pytest.raises(RuntimeError):
        with sa.trace() as t:
            raise RuntimeError("boom")
    sa.to_device(np.zeros(1))
    assert t.events == []


def test_record_rejects_unknown_direction_and_counts_nothing():
    before = sa.stats()
    with pytest.raises(ValueError, match="direction"):
        stats_module.record("up", 4, "x")
    assert sa.stats() == before


def test_counting_is_thread_safe():
    sa.reset_stats()
    per_thread, threads = 500, 4

    def work():
        for _ in range(per_thread):
            stats_module.record("h2d", 3, "test")

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sa.stats().h2d_count == per_thread * threads
    assert sa.stats().h2d_bytes == 3 * per_thread * threads
