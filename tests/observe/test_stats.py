"""Transfer counters and traces: exact counts, thread safety, nesting."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import types

import numpy as np
import pytest

import smartarray as sa
from tests._kernels import add_one

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
    with pytest.raises(RuntimeError), sa.trace() as t:
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


# -- events: names, byte ranges, streams, times, source lines -------------------------------


def _line_of(marker: str) -> int:
    import inspect

    source = inspect.getsource(sys.modules[__name__]).splitlines()
    return next(i for i, s in enumerate(source, 1) if marker in s and "_line_of" not in s)


def test_events_carry_name_range_stream_time_and_the_users_line():
    x = sa.SmartArray(np.zeros(16, dtype=np.float32), name="x")
    y = sa.SmartArray(np.zeros(16, dtype=np.float32))
    x.gpu()
    x[4:6] = 1.0
    with sa.trace() as t:
        add_one[1, 16](x)  # marker: launch x
        add_one[1, 16](y)  # marker: launch y
        x[8:12].host()  # marker: view get
    up_x, up_y, down = t.events
    assert (up_x.array, up_x.direction, up_x.reason) == ("x", "h2d", "device use")
    assert (up_x.start, up_x.stop, up_x.nbytes) == (16, 24, 8)  # only the stale bytes
    assert up_x.stream == "0"  # (x's memory was handed out: its uploads keep the launch's stream)
    assert up_y.stream == "smartarray upload"  # (a default-stream launch's uploads go there)
    assert up_x.file == __file__ and up_x.lineno == _line_of("marker: launch x")
    assert up_x.line == f"test_stats.py:{up_x.lineno}"
    assert up_y.array == y.name and up_y.array != "x" and up_y.lineno == _line_of("launch y")
    assert (down.array, down.direction, down.reason) == ("x", "d2h", "explicit get")
    assert (down.start, down.stop) == (32, 48) and down.lineno == _line_of("marker: view get")
    assert up_x.time_ns <= up_y.time_ns <= down.time_ns
    assert all(e.duration_ns >= 0 and e.thread == "MainThread" for e in t.events)


def test_events_on_a_stream_name_the_stream():
    s = sa.stream()
    with sa.trace() as t:
        sa.to_device(np.zeros(4), stream=s)
    assert t.events[0].stream == repr(s)


def test_names_are_automatic_unique_shared_by_views_and_checked():
    a, b = sa.SmartArray(np.zeros(4)), sa.SmartArray(shape=3)
    assert a.name != b.name and a.name.startswith("a") and a.name[1:].isdigit()
    assert a[1:3].name == a.name and a.T.name == a.name
    a.name = "renamed"
    assert a[1:].name == "renamed"
    with pytest.raises(TypeError, match="name must be a str"):
        sa.SmartArray(np.zeros(2), name=3)
    with pytest.raises(TypeError, match="name must be a str"):
        a.name = None


def test_element_copies_of_device_arrays_carry_the_line():
    d = sa.to_device(np.arange(4.0))
    with sa.trace() as t:
        d[1]  # marker: element read
    assert t.events[0].reason == "element read"
    assert t.events[0].lineno == _line_of("marker: element read")


def test_nobody_listening_records_no_line(monkeypatch):
    """Without a listener, begin() walks no stack (the fast case)."""
    calls = []
    frames = importlib.import_module("smartarray._observe.frames")
    monkeypatch.setattr(frames, "user_frame", lambda skip=1: calls.append(skip) or ("", 0))
    a = sa.SmartArray(np.zeros(4))
    a.gpu()
    assert calls == []
    with sa.trace():
        a.host_changed()
        a.gpu()
    assert len(calls) == 1


# -- summary, JSON -------------------------------------------------------------------------------


def test_summary_groups_by_array_reason_and_line_with_directions():
    x = sa.SmartArray(np.zeros(8), name="x")
    y = sa.SmartArray(np.zeros(4), name="y")
    with sa.trace() as t:
        for _ in range(3):
            x[0] = 1.0
            add_one[1, 8](x)  # marker: summary launch x
            float(x[1])  # marker: summary read
        add_one[1, 4](y)  # marker: summary launch y
    launch_x = f"test_stats.py:{_line_of('marker: summary launch x')}"
    launch_y = f"test_stats.py:{_line_of('marker: summary launch y')}"
    read = f"test_stats.py:{_line_of('marker: summary read')}"
    rows = [r.split() for r in t.summary().splitlines()]
    # Largest group first; uploads and downloads in their own columns.
    assert rows == [
        ["array", "reason", "line", "h2d", "d2h", "d2d"],
        ["x", "device", "use", launch_x, "80", "B", "in", "3"],  # 64 B, then 8 B twice
        ["y", "device", "use", launch_y, "32", "B", "in", "1"],
        ["x", "host", "read", read, "24", "B", "in", "3"],
        ["total", "112", "B", "in", "4", "24", "B", "in", "3"],
    ]
    down = t.summary().splitlines()[3]
    assert down.index("24 B in 3") == t.summary().splitlines()[0].index("d2h")


def test_summary_cells_read_as_total_bytes_and_copy_count():
    """Four copies of 512 B read as 2.0 KiB moved in 4 copies (not "4 x 2.0 KiB", which
    reads as four copies of 2 KiB each)."""
    a = sa.SmartArray(np.zeros(256), name="q")
    with sa.trace() as t:
        for i in range(4):
            a[i * 64 : (i + 1) * 64].get("gpu")
    total = t.summary().splitlines()[-1].split()
    assert total == ["total", "2.0", "KiB", "in", "4"]


def test_to_json_round_trips_events_and_totals():
    import json

    a = sa.SmartArray(np.zeros(4), name="j")
    with sa.trace() as t:
        a.gpu()
    doc = json.loads(t.to_json(indent=1))
    assert doc["stats"]["h2d_bytes"] == 32 and doc["stats"]["d2h_count"] == 0
    (event,) = doc["events"]
    assert event["array"] == "j" and (event["start"], event["stop"]) == (0, 32)
    assert event["line"] == t.events[0].line and event["reason"] == "explicit get"


# -- logging, NVTX -------------------------------------------------------------------------------


def test_debug_logging_reports_each_transfer(caplog):
    a = sa.SmartArray(np.zeros(4), name="logged")
    with caplog.at_level(logging.DEBUG, logger="smartarray"):
        a.gpu()  # marker: logged get
    (record,) = [r for r in caplog.records if r.name == "smartarray"]
    assert record.levelno == logging.DEBUG
    line = f"test_stats.py:{_line_of('marker: logged get')}"
    assert record.getMessage().startswith(f"transfer: h2d 32 B logged (explicit get) {line}")


def test_nvtx_ranges_wrap_each_transfer(monkeypatch):
    pushed, popped = [], []
    fake = types.SimpleNamespace(
        push_range=lambda message: pushed.append(message), pop_range=lambda: popped.append(1)
    )
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    a = sa.SmartArray(np.zeros(256), name="x")
    assert sa.enable_nvtx() is False
    try:
        add_one[1, 256](a)  # marker: nvtx launch
    finally:
        assert sa.enable_nvtx(False) is True
    line = _line_of("marker: nvtx launch")
    assert pushed == [f"h2d 2048 B x (device use) test_stats.py:{line}"] and popped == [1]
    a.host_changed()
    add_one[1, 256](a)
    assert len(pushed) == 1  # off again


def test_nvtx_range_is_closed_when_a_copy_fails(monkeypatch):
    pushed, popped = [], []
    fake = types.SimpleNamespace(push_range=pushed.append, pop_range=lambda: popped.append(1))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    memory = importlib.import_module("smartarray.memory")
    byte_ranges = importlib.import_module("smartarray._memory.byte_ranges")

    def fails(*args):
        def copy():
            raise RuntimeError("the driver refused the copy")

        return copy

    monkeypatch.setattr(byte_ranges, "_copier", fails)
    sa.enable_nvtx()
    try:
        with pytest.raises(RuntimeError, match="refused"):
            memory.copy_range("h2d", np.zeros(4, np.uint8), sa.device_array(4, np.uint8), 0, 4)
    finally:
        sa.enable_nvtx(False)
    assert len(pushed) == len(popped) == 1
    assert "h2d 4 B" in pushed[0]


def test_enable_nvtx_without_the_package_raises_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)
    with pytest.raises(ImportError):
        sa.enable_nvtx()
    assert sa.enable_nvtx(False) is False


def test_smartarray_nvtx_environment_variable_switches_ranges_on(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "nvtx.py").write_text(
        "def push_range(message):\n    print('push', message)\ndef pop_range():\n    print('pop')\n"
    )
    root = Path(__file__).resolve().parents[2]
    code = "import numpy as np, smartarray as sa\nsa.to_device(np.zeros(2))\n"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", SMARTARRAY_NVTX="1")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(root)])
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["push h2d 16 B float64[2] (to_device) <string>:2", "pop"]
