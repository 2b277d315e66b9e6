"""The host fast path: scalar reads and writes that reach the host ndarray with one stamp test.

A fast path that skips a recording loses data silently, so every test here ends with what a
user relies on: a launch that must see the host's write (bytes uploaded and values), host
arrays handed out and views that keep showing current values, and the results' types.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import smartarray as sa
from smartarray import SmartArray
from smartarray._array import views as _views
from smartarray._engine.buffer import NO_KEY, Buffer
from tests._kernels import add_one


def delta(before: sa.TransferStats) -> sa.TransferStats:
    return sa.stats() - before


def launch(a: SmartArray) -> None:
    add_one[(a.size + 31) // 32, 32](a)


@pytest.fixture
def slow_writes(monkeypatch):
    """Counts the writes that took the slow path (through the engine, under the lock)."""
    calls: list[object] = []
    slow = _views._setitem

    def counted(self, key, value):
        calls.append(key)
        return slow(self, key, value)

    monkeypatch.setattr(_views, "_setitem", counted)
    return calls


def test_host_only_writes_take_the_fast_path_and_reach_the_next_launch(slow_writes):
    a = SmartArray(np.arange(100.0))
    a[3] = 1.0  # a new array: the host holds the only copy
    a[3] = 2.0
    a[-1] = 5
    assert slow_writes == []  # no write needed a record
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 800  # the device had nothing: all of it goes up
    assert a[3] == 3.0 and a[99] == 6.0 and a[4] == 5.0


def test_a_write_where_the_device_is_current_is_recorded_and_uploaded(slow_writes):
    a = SmartArray(np.arange(100.0))
    launch(a)
    held = a.host()  # read back and held: both copies current
    assert a[3] == 4.0  # the read fast path opens; the write one must not
    a[3] = 7.0
    a[4] = 9.0
    assert slow_writes == [3, 4]
    before = sa.stats()
    launch(a)
    d = delta(before)
    assert d.h2d_bytes == 16  # exactly the two written elements
    assert a[3] == 8.0 and a[4] == 10.0 and a[5] == 7.0
    assert held[3] == 8.0 and held[4] == 10.0  # the held array was refreshed


def test_a_write_after_an_upload_is_recorded(slow_writes):
    a = SmartArray(np.zeros(64))
    a[0] = 1.0
    a[0] = 2.0  # fast: host only
    a.gpu()  # uploads: the device is current too now
    a[0] = 3.0
    assert slow_writes == [0]
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 8
    assert a[0] == 4.0 and a[1] == 1.0


def test_a_fast_read_never_returns_what_a_kernel_overwrote():
    a = SmartArray(np.arange(16.0))
    assert a[2] == 2.0 and a[2] == 2.0  # the read fast path is open
    launch(a)
    assert a[2] == 3.0
    held = a.host()
    assert a[2] == 3.0
    launch(a)
    assert a[2] == 4.0 and held[2] == 4.0


def test_views_exports_and_held_arrays_see_fast_writes():
    a = SmartArray(np.zeros(10))
    held = a.host()
    exported = np.asarray(a)
    b = a[2:6]
    b[1] = 5.0
    b[1] = 6.0
    a[7] = 1.5
    a[7] = 2.5
    assert a[3] == 6.0 and b[1] == 6.0 and held[3] == 6.0 and exported[3] == 6.0
    assert held[7] == 2.5 and exported[7] == 2.5
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 80
    assert a[3] == 7.0 and b[1] == 7.0 and held[3] == 7.0 and exported[7] == 3.5


def test_fast_access_errors_are_numpys():
    a = SmartArray(np.zeros(4))
    a[0] = 1.0
    with pytest.raises(IndexError, match="out of bounds"):
        a[4]
    with pytest.raises(IndexError, match="out of bounds"):
        a[-5] = 1.0
    b = SmartArray(np.zeros(4, np.int8))
    b[0] = 1
    with pytest.raises(OverflowError):
        b[1] = 1000
    assert b.tolist() == [1, 0, 0, 0]


class _UploadBeforeWrite(np.ndarray):
    """A host ndarray whose item assignment lets another thread upload the array first: the
    window between the fast path's stamp test and its write."""

    target: SmartArray | None = None

    def __setitem__(self, key, value):
        target = type(self).target
        if target is not None:
            type(self).target = None
            thread = threading.Thread(target=target.gpu)  # an upload of the old values
            thread.start()
            thread.join()
        super().__setitem__(key, value)


@pytest.mark.parametrize("index", [1, 2], ids=["its_key_again", "another_key"])
def test_a_fast_write_racing_an_upload_is_recorded_again(slow_writes, index):
    """Either door of the fast write re-checks after writing (seqlock-style): the stamp for a
    new key, the view's key for the key it wrote before. An upload that read the host bytes
    before the write landed must not leave the old value marked current on the device."""
    a = SmartArray(np.zeros(8))
    a[1] = 1.0  # the host holds the only copy: no record, and the view keeps the key
    assert a._host_key == 1 and slow_writes == []
    a._host_cells = a._host_cells.view(_UploadBeforeWrite)
    _UploadBeforeWrite.target = a
    a[index] = 2.0  # another thread uploads between the door's test and the write
    assert _UploadBeforeWrite.target is None  # (the upload ran)
    assert slow_writes == [index]  # done again the slow way, and recorded
    launch(a)  # must upload the 2.0 (the device copy holds what the other thread sent up)
    assert a[index] == 3.0
    expected = [1.0] * 8
    expected[1], expected[index] = 2.0, 3.0
    assert a.tolist() == expected


def test_a_host_only_views_repeated_writes_test_only_their_key(slow_writes):
    """A host-only view keeps the key of its first write: the same key again needs no stamp,
    another key takes the stamp's door, and a launch closes the key and uploads every write."""
    a = SmartArray(np.zeros(16))
    b = a[4:12]
    for k in range(3):
        a[3] = float(k)  # the first keeps the key
        b[np.int64(2)] = 10.0 + k  # (another integer class: a key too)
        a[5] = 20.0 + k  # another key: the stamp's door
    assert a._host_key == 3 and b._host_key == 2
    assert [int(k) for k in slow_writes] == [2]  # (a new view's first write opens its doors)
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 128
    assert a._host_key is NO_KEY and b._host_key is NO_KEY  # the transition closed both
    a[3] = 7.0  # the device's copy is the current one now: recorded
    b[2] = 8.0
    assert [int(k) for k in slow_writes] == [2, 3, 2]
    launch(a)
    assert a[3] == 8.0 and a[6] == 9.0 and a[5] == 24.0 and a[0] == 2.0


def test_results_stay_smartarrays():
    a = SmartArray(np.arange(6.0))
    a[0] = 0.0  # the fast paths open
    mask = np.arange(6) % 2 == 0
    for result in (a[1:5], a + 1, np.sin(a), a[mask], a.reshape(2, 3), a.T, a.copy()):
        assert type(result) is SmartArray, type(result)
    assert type(a[2]) is np.float64 and type(a.sum()) is np.float64
    assert [type(v) for v in a] == [np.float64] * 6
    m = a.reshape(2, 3)
    rows = list(m)
    assert all(type(r) is SmartArray for r in rows)
    rows[1][0] = 30.0  # a row is a view: coherent with its base
    assert a[3] == 30.0
    assert a.tolist() == [0.0, 1.0, 2.0, 30.0, 4.0, 5.0] and 30.0 in a


@pytest.mark.parametrize("n", [4, 40])  # element by element; over a tracked host array
def test_iteration_sees_a_kernel_between_two_steps(n):
    a = SmartArray(np.zeros(n))
    seen = []
    for v in a:
        seen.append(float(v))
        launch(a)
    assert seen == [float(i) for i in range(n)]
    assert [float(v) for v in reversed(a)] == [float(n)] * n


@pytest.mark.parametrize("n", [4, 40])
def test_iteration_of_an_array_current_on_the_device_downloads_once(n):
    a = SmartArray(np.arange(float(n)), where="gpu")
    launch(a)
    before = sa.stats()
    assert [float(v) for v in a] == [i + 1.0 for i in range(n)]
    d = delta(before)
    assert (d.d2h_bytes, d.d2h_count) == (8 * n, 1)


def test_rows_of_a_matrix_are_views_that_stay_coherent():
    m = SmartArray(np.arange(12.0).reshape(3, 4))
    rows = list(m)
    assert [r.tolist() for r in rows] == np.arange(12.0).reshape(3, 4).tolist()
    launch(m.reshape(12))  # the device writes every element
    assert rows[2].tolist() == [9.0, 10.0, 11.0, 12.0]
    rows[0][1] = -1.0
    assert m[0, 1] == -1.0 and list(reversed(m))[2][1] == -1.0
    before = sa.stats()
    launch(m.reshape(12))
    assert delta(before).h2d_bytes == 8  # the row's write was recorded, and only it
    assert m.tolist()[0] == [2.0, 0.0, 4.0, 5.0]


def test_cells_of_a_matrix_take_the_fast_path_and_reach_the_next_launch(slow_writes):
    m = SmartArray(np.zeros((4, 8)))
    m[1, 2] = 5.0  # a new array: the host holds the only copy
    m[-1, -1] = 6
    assert slow_writes == [] and m[1, 2] == 5.0 and type(m[1, 2]) is np.float64
    flat = m.reshape(32)
    before = sa.stats()
    launch(flat)
    assert delta(before).h2d_bytes == 256
    assert m[1, 2] == 6.0 and m[3, 7] == 7.0  # read back
    m[0, 0] = 9.0  # the device copy is current too: recorded
    assert slow_writes == [(0, 0)]
    before = sa.stats()
    launch(flat)
    assert delta(before).h2d_bytes == 8
    assert m[0, 0] == 10.0 and m[1, 2] == 7.0
    with pytest.raises(IndexError, match="out of bounds"):
        m[4, 0] = 1.0


def test_a_repeated_write_of_one_element_is_recorded_once_and_uploaded(slow_writes):
    a = SmartArray(np.arange(100.0))
    launch(a)
    held = a.host()  # read back and held: both copies current
    a[3] = 7.0  # recorded: the device copy of this element goes stale
    a[3] = 8.0  # stale there already: nothing more to record
    a[-97] = 9.0  # (the same element by another key: the slow way again)
    a[4] = 1.0
    a[4] = 2.0
    assert slow_writes == [3, -97, 4]
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 16  # exactly the two written elements
    assert a[3] == 10.0 and a[4] == 3.0 and a[5] == 7.0
    assert held[3] == 10.0 and held[4] == 3.0


def test_a_kernel_between_two_writes_of_one_element_closes_their_fast_path(slow_writes):
    a = SmartArray(np.zeros(64))
    launch(a)
    held = a.host()
    a[2] = 5.0  # recorded; the next write of a[2] would need no record
    launch(a)  # the device writes a[2]: current there only now
    a[2] = 20.0  # must be recorded again, or the next launch keeps the device's 6.0
    assert slow_writes == [2, 2]
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 8
    assert a[2] == 21.0 and a[3] == 3.0 and held[2] == 21.0


def test_a_repeated_write_racing_an_upload_is_recorded_again(slow_writes):
    """The write of an element already stale on the device re-checks the stamp after writing:
    an upload that read the host bytes before the write landed must not leave the old value
    marked current on the device."""
    a = SmartArray(np.zeros(8))
    launch(a)
    held = a.host()
    a[1] = 5.0  # recorded
    a[1] = 6.0  # not recorded: the device's copy of a[1] is stale already
    assert slow_writes == [1]
    a._host_cells = a._host_cells.view(_UploadBeforeWrite)
    _UploadBeforeWrite.target = a
    a[1] = 7.0  # another thread uploads the 6.0 between the stamp test and the write
    assert _UploadBeforeWrite.target is None  # (the upload ran)
    assert slow_writes == [1, 1]  # done again the slow way, and recorded
    launch(a)
    assert a[1] == 8.0 and held[1] == 8.0
    assert a.tolist() == [2.0, 8.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]


def test_a_repeated_write_by_an_equal_key_needs_no_record(slow_writes):
    a = SmartArray(np.arange(100.0))
    launch(a)
    held = a.host()
    a[np.int64(3)] = 7.0  # recorded: the device copy of this element goes stale
    a[np.int64(3)] = 8.0  # an equal key of the same class (another object): no record
    a[3] = 9.0  # another class: the slow way again
    assert [int(k) for k in slow_writes] == [3, 3] and slow_writes[0].__class__ is np.int64
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 8
    assert a[3] == 10.0 and held[3] == 10.0 and a[4] == 6.0


_STAMP = Buffer.__dict__["host_stamp"]  # (the slot the watch below shadows)


class _StampWatch(Buffer):
    """A buffer that notes its view's repeated-write key each time its host stamp moves."""

    __slots__ = ()
    view: SmartArray | None = None
    seen: list[object] = []

    @property
    def host_stamp(self) -> int:
        return _STAMP.__get__(self, Buffer)

    @host_stamp.setter
    def host_stamp(self, value: int) -> None:
        assert _StampWatch.view is not None
        _StampWatch.seen.append(_StampWatch.view._host_key)
        _STAMP.__set__(self, value)


def test_every_transition_closes_a_repeated_writes_key_before_its_stamp_moves(slow_writes):
    """A write reading the new stamp while a transition runs must find its key closed: the
    key is closed before the stamp moves (a lock-free write then re-checks only the stamp)."""
    a = SmartArray(np.zeros(8))
    launch(a)
    held = a.host()
    a[1] = 5.0  # recorded: the next write of a[1] needs none
    a[1] = 6.0
    assert slow_writes == [1]
    _StampWatch.view, _StampWatch.seen = a, []
    a._buf.__class__ = _StampWatch
    try:
        launch(a)  # uploads a[1], then the kernel writes every element: the stamp moves
    finally:
        a._buf.__class__ = Buffer
    assert _StampWatch.seen and all(key is NO_KEY for key in _StampWatch.seen)
    a[1] = 20.0  # the device wrote a[1]: recorded again
    assert slow_writes == [1, 1]
    launch(a)
    assert a[1] == 21.0 and held[1] == 21.0 and a[2] == 3.0


def test_repeated_writes_of_fresh_views_keep_bookkeeping_bounded(slow_writes):
    a = SmartArray(np.zeros(64))
    launch(a)
    held = a.host()
    gc.collect()
    for k in range(2000):
        v = a[0:8]  # a new view each time, each recording its key
        v[3] = float(k)
        v[3] = float(k)  # (no record)
    assert len(slow_writes) == 2000
    assert len(a._buf.fast_views) <= 2  # the views' entries went with them
    launch(a)
    assert a[3] == 2000.0 and held[3] == 2000.0


def test_operators_and_slices_of_a_host_current_array_see_a_kernel():
    a = SmartArray(np.arange(8.0))
    b = a[2:6]
    assert (a + 1).tolist()[2] == 3.0 and (10 - a).tolist()[2] == 8.0  # the fast paths open
    assert b.tolist() == [2.0, 3.0, 4.0, 5.0]
    launch(a)  # the device writes: every host fast path closes
    assert (a + 1).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert (10 - a).tolist()[0] == 9.0 and (a * 2.0)[7] == 16.0
    assert b.tolist() == [3.0, 4.0, 5.0, 6.0] and a[::-3].tolist() == [8.0, 5.0, 2.0]
    launch(b)  # a slice is a full view: launched, summed, passed to NumPy, indexed
    assert b.sum() == 22.0 and np.sin(b)[0] == np.sin(4.0) and b[-1] == 7.0
    assert a.tolist() == [1.0, 2.0, 4.0, 5.0, 6.0, 7.0, 7.0, 8.0]
    c = a[5:1:-2]
    c[0] = 60.0
    assert a[5] == 60.0 and c.tolist() == [60.0, 5.0]
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 8  # only the written element
    assert a[5] == 61.0 and a.tolist()[1] == 3.0


def _widened(n: int, slow_writes: list[object]) -> tuple[SmartArray, np.ndarray]:
    """A used array of ``n`` elements (both copies current, a held host array) whose host
    wrote elements 0, 1, 2, ... until the writes stopped needing a record each."""
    a = SmartArray(np.arange(float(n)))
    launch(a)
    held = a.host()
    for k in range(n // 2):
        a[k] = -float(k)
    assert 8 <= len(slow_writes) < n // 2  # recorded one by one, then the whole array at once
    return a, held


def test_distinct_writes_of_a_used_array_become_fast_and_reach_the_next_launch(slow_writes):
    a, held = _widened(100, slow_writes)
    slow = len(slow_writes)
    a[70] = 0.5  # the device's copy of a[70] was current: a fast write must still be uploaded
    a[-1] = 0.25
    assert len(slow_writes) == slow  # no record needed: the host holds the only copy
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 800  # the whole array (what the one record covered)
    expected = np.arange(100.0) + 1
    expected[:50] = -np.arange(50.0)
    expected[70], expected[99] = 0.5, 0.25
    assert a.tolist() == (expected + 1).tolist() and held.tolist() == (expected + 1).tolist()


def test_distinct_writes_of_a_used_array_reach_an_explicit_upload_and_a_view(slow_writes):
    a, held = _widened(64, slow_writes)
    a[40] = 7.0  # fast
    assert a.gpu().copy_to_host()[40] == 7.0 and a.gpu().copy_to_host()[0] == 0.0
    a[41] = 8.0  # the upload moved the stamp: recorded again, the slow way
    assert slow_writes[-1] == 41
    b = a[40:48]
    launch(b)  # a view's launch uploads the recorded element
    assert a[40] == 8.0 and a[41] == 9.0 and held[41] == 9.0 and a[48] == 49.0


def test_a_kernel_after_widened_writes_closes_their_fast_path(slow_writes):
    a, held = _widened(64, slow_writes)
    launch(a)  # the device writes every element: current there only
    slow = len(slow_writes)
    a[60] = 100.0  # must be recorded again, or the next launch keeps the device's value
    assert len(slow_writes) == slow + 1
    before = sa.stats()
    launch(a)
    assert delta(before).h2d_bytes == 8
    assert a[60] == 101.0 and held[60] == 101.0 and a[0] == 2.0


def test_a_few_writes_of_a_large_used_array_stay_recorded_exactly(slow_writes):
    """Writes are recorded over the whole view only once recording them one at a time cost
    more than uploading it: a few writes of a large array move only their own bytes."""
    a = SmartArray(np.zeros(1_000_000))
    a.gpu()
    for k in range(0, 400, 20):
        a[k] = 1.0
    assert len(slow_writes) == 20
    before = sa.stats()
    a.gpu()
    assert delta(before).h2d_bytes < 400 * 8


def test_a_widened_write_racing_an_upload_is_recorded_again(slow_writes):
    a, held = _widened(32, slow_writes)
    slow = len(slow_writes)
    a._host_cells = a._host_cells.view(_UploadBeforeWrite)
    _UploadBeforeWrite.target = a
    a[20] = 7.0  # another thread uploads the old a[20] between the stamp test and the write
    assert _UploadBeforeWrite.target is None  # (the upload ran)
    assert len(slow_writes) == slow + 1  # done again the slow way, and recorded
    launch(a)
    assert a[20] == 8.0 and held[20] == 8.0


def test_writes_at_any_key_of_a_host_only_array_take_the_fast_path(slow_writes):
    a = SmartArray(np.zeros(10))
    m = SmartArray(np.zeros((3, 4)))
    a[2:5] = 1.0
    a[np.array([7, 9])] = 2.0
    a[a.host() > 1.5] = 3.0  # (a mask: NumPy's own indexing of the host copy)
    a[0:2] = a[3:5]  # a SmartArray value: read through its own __array__
    m[1] = 4.0
    m[:, 3] = 5.0
    assert slow_writes == []
    launch(a)
    launch(m.reshape(-1))
    assert a.tolist() == [2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 4.0, 1.0, 4.0]
    assert m.tolist() == [[1.0, 1.0, 1.0, 6.0], [5.0, 5.0, 5.0, 6.0], [1.0, 1.0, 1.0, 6.0]]
    with pytest.raises(ValueError):
        a[0:2] = [1.0, 2.0, 3.0]  # NumPy's error, nothing written
    assert a[0] == 2.0


class _Launching:
    """A value whose conversion runs a kernel on the array it is written to: the stamp moves
    in the middle of a fast write."""

    def __init__(self, a: SmartArray) -> None:
        self.a: SmartArray | None = a

    def __float__(self) -> float:
        if self.a is not None:  # (once: the slow way converts the value again)
            launch(self.a)  # uploads the host's values; then the device holds the only copy
            self.a = None
        return 7.0


def test_a_fast_write_whose_value_runs_a_kernel_is_recorded_again(slow_writes):
    a = SmartArray(np.zeros(4))
    a[0] = 7.0  # fast
    a[1] = _Launching(a)  # the kernel ran before NumPy wrote: the device copy is current
    assert slow_writes == [1]  # done again the slow way, and recorded
    assert a.tolist() == [8.0, 7.0, 1.0, 1.0]  # the kernel's values, and the write
    launch(a)
    assert a[1] == 8.0


def test_a_result_derives_one_lock_and_one_state_in_every_thread():
    """A NumPy result's buffer derives its lock and state on first use: threads asking first
    at once must share one of each (two states would lose one thread's record)."""
    a = SmartArray(np.arange(64.0))
    for _ in range(20):
        r = a + 1
        seen: list[tuple[int, int]] = []
        start = threading.Barrier(4)

        def ask(
            r: SmartArray = r,
            seen: list[tuple[int, int]] = seen,
            start: threading.Barrier = start,
        ) -> None:
            start.wait()
            buf = r._buf
            seen.append((id(buf.lock), id(buf.state)))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(seen)) == 1
    fresh = a * 2.0
    launch(fresh)  # a result never asked anything before its launch
    fresh[0] = 5.0  # (a write after it: recorded, the device copy of it goes stale)
    launch(fresh)
    assert fresh.tolist() == [6.0, *(np.arange(1.0, 64.0) * 2 + 2)]


def test_a_thread_reading_a_result_while_another_derives_it_gets_the_derived_attribute():
    """A thread that entered the result buffer's derived-attribute read just before another
    thread finished deriving (the buffer is a plain Buffer by the time it asks): it gets the
    attribute the other derived, not an error."""
    r = SmartArray(np.arange(8.0)) + 1
    buf = r._buf
    getters = {name: getattr(type(buf), name).fget for name in ("lock", "state", "work")}
    setter = type(buf).name.fset
    buf.state  # noqa: B018 - the other thread's first read: derives everything
    assert {name: get(buf) for name, get in getters.items()} == {
        "lock": buf.lock,
        "state": buf.state,
        "work": buf.work,
    }
    setter(buf, "renamed")  # a set that entered before the derivation, too
    assert buf.name == "renamed"


def test_results_hand_numpy_read_only_data_and_their_writes_reach_the_next_launch(slow_writes):
    """A NumPy result is adopted with its host fast path open: what NumPy's calls read of it is
    read-only (nothing writes it untracked), and a write of it reaches the next launch."""
    a = SmartArray(np.arange(8.0))
    mask = np.arange(8) % 2 == 0
    for r in (np.sin(a), a + 1, a[mask], SmartArray(np.arange(8.0))):
        r.sum()  # a NumPy read (the read-only view is made on the first one)
        assert r._host_nd is not None and not r._host_nd.flags.writeable
        assert r._host_ro().flags.writeable is False
        with pytest.raises(ValueError, match="read-only"):
            np.add(r._host_nd, 1, out=r._host_nd)
        r[0] = 100.0  # the host holds the only copy: no record needed
        launch(r)  # uploads all of it, the write included
        assert r[0] == 101.0
        assert r._host_ro().flags.writeable is False
    assert slow_writes == []


def test_results_that_are_no_plain_numbers_are_adopted_the_general_way():
    from smartarray._array.results import _owning

    rec = np.zeros(3, dtype=[("x", "f8"), ("y", "i4")])
    r = _owning(rec)
    assert type(r) is SmartArray and r._host_nd is None  # records: the slow way
    r[1] = (2.5, 3)
    launch_free = r.tolist()
    assert launch_free[1] == (2.5, 3)
    strided = np.arange(12.0)[::3]  # not contiguous: copied, not adopted
    s = _owning(strided)
    s[0] = 50.0
    assert strided[0] == 0.0 and s.tolist() == [50.0, 3.0, 6.0, 9.0]
    ro = np.arange(3.0)
    ro.setflags(write=False)
    t = _owning(ro)  # read-only: copied, its copy writable
    t[0] = 7.0
    assert ro[0] == 0.0 and t[0] == 7.0


def _made_every_way() -> dict[str, SmartArray]:
    a = SmartArray(np.arange(12.0))
    m = SmartArray(np.arange(12.0).reshape(3, 4))
    mask = np.arange(12) % 3 == 0
    return {
        "SmartArray(1-D)": a,
        "SmartArray(2-D)": m,
        "SmartArray(F order)": SmartArray(np.asfortranarray(np.ones((3, 4)))),
        "SmartArray(records)": SmartArray(np.zeros(3, dtype=[("x", "f8"), ("y", "i4")])),
        "SmartArray(shape=)": SmartArray(shape=(4,)),
        "ufunc": np.sin(a),
        "operator": a + 1,
        "reflected": 2.0 - a,
        "mask": a[mask],
        "index array": a[np.array([0, 3])],
        "slice": a[1:5],
        "reversed slice": a[9:2:-3],
        "empty slice": a[5:2],
        "row slice": m[1:3],
        "transpose": m.T,
        "reshape": a.reshape(4, 3),
        "copy": a.copy(),
    }


@pytest.mark.parametrize("how", list(_made_every_way()))
def test_every_way_of_making_an_array_sets_every_slot(how):
    """Each constructor stores every slot (some inline, on paths NumPy takes in 0.1 us): a slot
    one of them forgets raises AttributeError on the first read that needs it."""
    r = _made_every_way()[how]
    for name in SmartArray.__slots__:
        getattr(r, name)  # raises if never stored
    assert r._launch_cache is None  # the engine makes the launch cache at the first launch
    assert type(r) is SmartArray


def test_a_result_first_read_after_a_kernel_sees_the_kernel():
    """A result's read-only host view is made on its first read: a kernel before that read
    closes the fast path all the same, and every read sees the kernel's values."""
    a = SmartArray(np.arange(8.0))
    mask = np.arange(8) % 2 == 0
    expected = np.arange(8.0) + 2
    for read in (
        lambda r: np.sin(r),
        lambda r: r + 1,
        lambda r: r.sum(),
        lambda r: r[mask],
        lambda r: 3.0 in r,
        lambda r: np.sum(r),
        lambda r: r.max(),
    ):
        r = a + 1  # never read on the host
        launch(r)  # the device writes all of it
        np.testing.assert_array_equal(np.asarray(read(r)), np.asarray(read(expected)))
        np.testing.assert_array_equal(read(r), read(expected))  # (the fast path open again)
        assert r._host_nd is None or not r._host_nd.flags.writeable  # (a mask reads a part)


def test_threads_reading_a_new_result_at_once_read_its_values():
    """Threads making a result's read-only host view at once (each its own, one kept) all read
    the result's values through it, and none can write through what NumPy reads."""
    a = SmartArray(np.arange(64.0))
    for _ in range(20):
        r = a * 3.0
        got: list[np.ndarray] = []
        start = threading.Barrier(4)

        def read(
            r: SmartArray = r, got: list[np.ndarray] = got, start: threading.Barrier = start
        ) -> None:
            start.wait()
            got.append(np.asarray(np.sqrt(r)))

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 4
        for g in got:
            np.testing.assert_array_equal(g, np.sqrt(np.arange(64.0) * 3.0))
        assert not r._host_nd.flags.writeable
        r[0] = 1.0  # still the host's only copy: written, and seen by the next launch
        launch(r)
        assert r[0] == 2.0


@pytest.mark.parametrize(
    ("key", "elements"),
    [(slice(3, 10, 3), [3, 6, 9]), (slice(10, 3, -3), [10, 7, 4]), (slice(2, 7), [2, 3, 4, 5, 6])],
)
def test_a_slice_downloads_and_uploads_only_its_span(key, elements):
    """A slice's byte span (computed inline, for either sign of its step) is what its reads
    download and what a launch of it uploads after a host write."""
    a = SmartArray(np.arange(16.0))
    launch(a)  # the device holds the only current copy
    v = a[key]
    span = (max(elements) - min(elements) + 1) * 8
    before = sa.stats()
    assert v.tolist() == [e + 1.0 for e in elements]
    assert delta(before).d2h_bytes == span
    v[0] = 100.0
    before = sa.stats()
    launch(a)  # (a view with a negative stride is no kernel argument: its array is)
    assert delta(before).h2d_bytes == 8  # the written element only
    assert v[0] == 101.0 and a[elements[0]] == 101.0 and a[elements[-1]] == elements[-1] + 2.0


def test_an_index_array_of_no_axes_gives_a_writable_row_of_a_matrix():
    """``m[np.array(1)]`` indexes like ``m[1]`` in NumPy, a view of the read-only host data the
    fast path reads: the result must be a SmartArray that can be written, never that view."""
    m = SmartArray(np.arange(12.0).reshape(3, 4))
    m.sum()  # the host fast path open
    r = m[np.array(1)]
    assert type(r) is SmartArray and r.tolist() == [4.0, 5.0, 6.0, 7.0]
    r[0] = 40.0
    assert r[0] == 40.0
    v = SmartArray(np.arange(4.0))
    v.sum()
    assert v[np.array(2)] == 2.0 and v[np.array([3, 1])].tolist() == [3.0, 1.0]
    launch(r)
    assert r.tolist() == [41.0, 6.0, 7.0, 8.0]


def test_divmod_of_a_host_current_array_gives_smartarrays():
    """``divmod(a, n)`` (two results) through the operators' host fast path: both stay
    SmartArrays, as every NumPy result of a SmartArray, with NumPy's values."""
    a = SmartArray(np.arange(1.0, 6.0))
    a.sum()  # the host fast path open
    for got, want in (
        (divmod(a, 2), divmod(np.arange(1.0, 6.0), 2)),
        (divmod(7, a), divmod(7, np.arange(1.0, 6.0))),
    ):
        assert type(got) is tuple and [type(r) for r in got] == [SmartArray, SmartArray]
        for r, w in zip(got, want, strict=True):
            assert r.tolist() == w.tolist()


def test_a_unary_ufunc_of_python_objects_gives_numpys_object_array():
    a = SmartArray(np.arange(4.0))
    r = np.frompyfunc(lambda x: x * 2, 1, 1)(a)
    assert type(r) is np.ndarray and r.dtype == object  # (a SmartArray holds numbers only)
    assert r.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_unary_generalized_ufunc_result_has_its_own_shape():
    from numba import guvectorize

    @guvectorize(["void(float64[:], float64[:, :])"], "(n)->(n,n)")
    def outer(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            for j in range(x.shape[0]):
                out[i, j] = x[i] * x[j]

    x = np.arange(1.0, 4.0)
    r = outer(SmartArray(x))
    assert isinstance(r, SmartArray) and r.shape == (3, 3)
    np.testing.assert_array_equal(np.asarray(r), outer(x))
    assert r.sum() == outer(x).sum()
