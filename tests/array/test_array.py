"""Tests of smartarray.array.SmartArray on the CUDA simulator (or a GPU).

The last sections hold edge cases found by adversarial testing: geometry, validation before
anything moves, and bytes that need not move.
"""

from __future__ import annotations

import copy
import gc
import pickle
import threading
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray.array import SmartArray
from smartarray.errors import CoherenceError

STRUCT = np.dtype([("x", np.float32), ("y", np.int16)])
DTYPES = [np.float64, np.int32, np.complex128, np.bool_, np.float16, STRUCT]


def delta(before: sa.TransferStats) -> sa.TransferStats:
    return sa.stats() - before


def sample(dtype, shape, order="C"):
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.names:
        out = np.zeros(n, dt)
        out["x"] = np.arange(n)
        out["y"] = -np.arange(n)
    else:
        out = (np.arange(n) % 7).astype(dt)
    return out.reshape(shape, order=order)


# --- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 0, 3)], ids=str)
@pytest.mark.parametrize("where", ["host", "gpu"])
def test_construct_from_obj(dtype, shape, where):
    data = sample(dtype, shape)
    a = SmartArray(data, where=where)
    assert a.shape == data.shape and a.dtype == data.dtype and a.ndim == data.ndim
    assert a.size == data.size and a.itemsize == data.itemsize and a.nbytes == data.nbytes
    if data.size:
        assert a.is_valid(where)
        assert a.is_valid("host") == (where == "host")
    np.testing.assert_array_equal(a.host(), data)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), data)
    data[...] = data  # the SmartArray holds a copy
    assert np.shares_memory(a.host(), data) is False


@pytest.mark.parametrize("order", ["C", "F"])
def test_construct_order_and_noncontiguous(order):
    base = sample(np.float64, (4, 6), order=order)
    a = SmartArray(base, order=order)
    assert a.flags[f"{order}_CONTIGUOUS"]
    b = SmartArray(base[::2, 1::2])
    np.testing.assert_array_equal(b.host(), base[::2, 1::2])
    c = SmartArray(base[::-1])
    np.testing.assert_array_equal(c.host(), base[::-1])
    d = SmartArray(shape=(3, 4), order=order)
    assert d.flags[f"{order}_CONTIGUOUS"] and d.dtype == np.float64


def test_copy_false_adopts_and_exports():
    data = np.arange(8.0)
    a = SmartArray(data, copy=False)
    a[2] = 99
    assert data[2] == 99
    d = a.gpu()
    d[5] = -1.0
    a.gpu_changed()
    assert data[5] == -1.0  # adopted obj refreshed eagerly
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    b = SmartArray(f, copy=False)
    np.testing.assert_array_equal(b.host(), f)
    assert np.shares_memory(b.host(), f)


def test_construct_from_smartarray_copies_current_data():
    a = SmartArray(np.arange(4.0), where="gpu")
    b = SmartArray(a)
    b[0] = 10
    assert a[0] == 0 and b[0] == 10


def test_uninitialised_never_copies():
    sa.reset_stats()
    a = SmartArray(shape=(100,), dtype=np.float32)
    a.gpu()
    a.host()
    assert sa.stats().nbytes == 0
    assert a.is_valid("host") and a.is_valid("gpu")


def test_pinned_host_copy():
    a = SmartArray(np.arange(4.0), pinned=True)
    np.testing.assert_array_equal(a.host(), np.arange(4.0))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (
            {"obj": [1], "where": "cpu"},
            ValueError,
            "'host', 'gpu' \\(the current device\\) or 'gpu:N'",
        ),
        ({}, TypeError, "obj"),
        ({"obj": np.array([object()])}, TypeError, "object"),
        ({"obj": np.array(["a"])}, TypeError, "string"),
        ({"shape": 3, "dtype": object}, TypeError, "object"),
        ({"shape": 3, "dtype": "U3"}, TypeError, "string"),
        ({"shape": -1}, ValueError, "negative"),
        ({"obj": [1, 2], "order": "X"}, ValueError, "order"),
        ({"obj": [1, 2], "shape": (3,)}, ValueError, "conflicts"),
        ({"obj": [[1], [1, 2]]}, ValueError, "obj"),
    ],
)
def test_construction_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        SmartArray(**kwargs)


# --- exact bytes moved -----------------------------------------------------------------------


def test_scalar_read_moves_one_element():
    a = SmartArray(np.arange(1000.0), where="gpu")
    before = sa.stats()
    assert a[5] == 5.0
    d = delta(before)
    assert (d.d2h_bytes, d.d2h_count, d.h2d_bytes) == (8, 1, 0)
    before = sa.stats()
    assert a[5] == 5.0
    assert delta(before).nbytes == 0


def test_host_write_then_gpu_uploads_only_written_bytes():
    a = SmartArray(np.zeros(1000))
    a.gpu()
    before = sa.stats()
    a[10:17] = 3.0
    assert delta(before).nbytes == 0  # contiguous write: no sync
    a.gpu()
    d = delta(before)
    assert (d.h2d_bytes, d.d2h_bytes) == (7 * 8, 0)
    assert a.is_valid("gpu") and a.is_valid("host")


def test_view_write_makes_exactly_that_interval_stale():
    a = SmartArray(np.zeros(10))
    a.gpu()
    a[2:5] = [1, 2, 3]
    state = a._buf.state
    assert state.valid("gpu").runs == ((0, 16), (40, 80))
    assert a[5:].is_valid("gpu") and not a[2:5].is_valid("gpu")


def test_strided_host_write_syncs_gaps_first():
    a = SmartArray(np.arange(10.0), where="gpu")
    before = sa.stats()
    a[1:8:2] = -1.0  # elements 1,3,5,7: bounding interval bytes [8, 64)
    d = delta(before)
    assert d.d2h_bytes == 56 and d.h2d_bytes == 0
    expected = np.arange(10.0)
    expected[1:8:2] = -1
    before = sa.stats()
    a.gpu()
    assert delta(before).h2d_bytes == 56
    np.testing.assert_array_equal(a.gpu().copy_to_host(), expected)
    np.testing.assert_array_equal(a.host(), expected)


def test_advanced_index_read_and_write():
    a = SmartArray(np.arange(100.0), where="gpu")
    before = sa.stats()
    r = a[[3, 5, 7]]
    assert isinstance(r, SmartArray)
    np.testing.assert_array_equal(r.host(), [3, 5, 7])
    assert delta(before).d2h_bytes == 5 * 8  # bounding interval of elements 3..7
    a[[20, 21, 22]] = [1, 2, 3]  # covers its interval: no sync needed
    a[a > 95] = 0
    ref = np.arange(100.0)
    ref[[20, 21, 22]] = [1, 2, 3]
    ref[ref > 95] = 0
    np.testing.assert_array_equal(a.host(), ref)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), ref)


@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2


@cuda.jit
def fill(x, v):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = v


def test_kernel_manual_pattern_and_eager_refresh():
    a = SmartArray(np.arange(16.0))
    held = a.host()
    d = a.gpu()
    double[1, 16](d)
    before = sa.stats()
    a.gpu_changed()
    assert delta(before).d2h_bytes == 16 * 8  # eager refresh of the held host array
    np.testing.assert_array_equal(held, np.arange(16.0) * 2)
    del held
    d = a.gpu()
    double[1, 16](d)
    before = sa.stats()
    a.gpu_changed()
    assert delta(before).nbytes == 0  # nobody holds a host array: download waits
    assert a[3] == 12.0
    assert delta(before).d2h_bytes == 8
    np.testing.assert_array_equal(a.host(), np.arange(16.0) * 4)
    assert delta(before).d2h_bytes == 16 * 8


def test_kernel_on_view():
    a = SmartArray(np.zeros(10))
    v = a[2:6]
    fill[1, 8](v.gpu(), 5.0)
    v.gpu_changed()
    before = sa.stats()
    np.testing.assert_array_equal(a.host(), [0, 0, 5, 5, 5, 5, 0, 0, 0, 0])
    assert delta(before).d2h_bytes == 4 * 8


def test_mark_changed_on_strided_view_needs_current_gaps():
    a = SmartArray(np.zeros(10))
    a.gpu()
    a[3] = 1.0  # gpu copy of byte range of a[3] is stale
    with pytest.raises(CoherenceError, match="get"):
        a[::2].gpu_changed()
    v = a[::2]
    v.gpu()
    v.gpu_changed()
    assert a[3] == 1.0


def test_failed_transfer_changes_nothing(monkeypatch):
    a = SmartArray(np.arange(10.0), where="gpu")
    state = repr(a._buf.state)

    def broken(*args, **kwargs):
        raise RuntimeError("simulated copy failure")

    monkeypatch.setattr(memory, "copy_range", broken)
    before = sa.stats()
    with pytest.raises(sa.TransferError, match="simulated"):
        a.host()
    with pytest.raises(sa.TransferError):
        a[3]
    assert repr(a._buf.state) == state and delta(before).nbytes == 0
    monkeypatch.undo()
    np.testing.assert_array_equal(a.host(), np.arange(10.0))


# --- views -----------------------------------------------------------------------------------


def test_views_share_state():
    a = SmartArray(np.arange(24.0).reshape(4, 6))
    ref = np.arange(24.0).reshape(4, 6)
    for view, rv in [
        (a[1], ref[1]),
        (a[:, 2], ref[:, 2]),
        (a[::-1, ::2], ref[::-1, ::2]),
        (a[None, 1:3, ...], ref[None, 1:3, ...]),
        (a.T, ref.T),
        (a.transpose(1, 0), ref.transpose(1, 0)),
        (a.reshape(6, 4), ref.reshape(6, 4)),
        (a.ravel(), ref.ravel()),
        (a[1, 2, ...], ref[1, 2, ...]),
    ]:
        assert view._buf is a._buf
        np.testing.assert_array_equal(view.host(), rv)
    t = a.T.reshape(24)  # needs a copy in NumPy too
    assert t._buf is not a._buf
    np.testing.assert_array_equal(t.host(), ref.T.reshape(24))
    with pytest.raises(ValueError):
        a.reshape(5, 5)


def test_structured_field_view():
    data = sample(STRUCT, (5,))
    a = SmartArray(data)
    x = a["x"]
    assert x.dtype == np.float32 and x._buf is a._buf
    np.testing.assert_array_equal(x.host(), data["x"])
    a.gpu()
    x[:] = 7  # strided write: gaps (the y fields) synced first, stay intact
    np.testing.assert_array_equal(a.gpu().copy_to_host()["y"], data["y"])
    np.testing.assert_array_equal(a.host()["x"], 7)


def test_index_errors_change_nothing():
    a = SmartArray(np.arange(10.0), where="gpu")
    state = repr(a._buf.state)
    before = sa.stats()
    with pytest.raises(IndexError):
        a[10]
    with pytest.raises(IndexError):
        a[10] = 1
    with pytest.raises(ValueError):
        a[2:5] = [1, 2]
    with pytest.raises(ValueError):
        a[2:5] = "abc"
    with pytest.raises(IndexError):
        a[[1, 20]]
    with pytest.raises(ValueError):
        a.get("cpu")
    assert delta(before).nbytes == 0
    assert repr(a._buf.state) == state
    np.testing.assert_array_equal(a.host(), np.arange(10.0))


# --- NumPy protocols -------------------------------------------------------------------------


def test_asarray_is_read_only_and_refreshed():
    a = SmartArray(np.arange(4.0))
    x = np.asarray(a)
    with pytest.raises(ValueError, match="read-only"):
        x[0] = 1
    a.gpu()[1] = 10.0
    a.gpu_changed()
    assert x[1] == 10.0
    y = np.array(a)  # a copy
    y[0] = 5
    assert a[0] == 0


def test_ufuncs_and_operators():
    ref = np.arange(1.0, 7.0)
    a = SmartArray(ref.copy(), where="gpu")
    for res, exp in [
        (a + 1, ref + 1),
        (2 * a, 2 * ref),
        (a**2, ref**2),
        (-a, -ref),
        (a == 3, ref == 3),
        (np.sqrt(a), np.sqrt(ref)),
        (np.add(a, a), ref + ref),
        (np.add.reduce(a), np.add.reduce(ref)),
    ]:
        if isinstance(exp, np.ndarray):
            assert isinstance(res, SmartArray)
        np.testing.assert_allclose(res, exp)
    a.gpu()
    a += 1
    ref += 1
    assert not a.is_valid("gpu")
    np.testing.assert_allclose(a, ref)
    out = SmartArray(shape=(6,))
    r = np.multiply(a, 2, out=out)
    assert r is out
    np.testing.assert_allclose(out, ref * 2)
    b = SmartArray(np.zeros(10))
    b.gpu()
    np.add(a, 1, out=b[1:7])
    np.testing.assert_allclose(b.gpu().copy_to_host()[1:7], ref + 1)
    np.add.at(b, [0, 0], 1)
    assert b[0] == 2


def test_numpy_functions():
    ref = np.arange(12.0).reshape(3, 4)
    a = SmartArray(ref.copy(), where="gpu")
    assert np.sum(a) == ref.sum()
    np.testing.assert_allclose(np.concatenate([a, a]), np.concatenate([ref, ref]))
    np.testing.assert_allclose(np.where(a > 4, a, -1), np.where(ref > 4, ref, -1))
    assert isinstance(np.concatenate([a, a]), SmartArray)
    assert np.shape(a) == (3, 4) and np.ndim(a) == 2 and np.size(a) == 12
    r = np.reshape(a, (4, 3))
    assert isinstance(r, SmartArray) and r._buf is a._buf
    assert np.transpose(a)._buf is a._buf
    assert np.ravel(a)._buf is a._buf
    at = np.atleast_2d(a)  # aliases the input in NumPy: copied here
    assert isinstance(at, SmartArray) and at._buf is not a._buf
    np.copyto(a, 1.0)
    assert not a.is_valid("gpu")
    np.testing.assert_array_equal(a.gpu().copy_to_host(), np.ones((3, 4)))
    np.testing.assert_allclose(a, np.ones((3, 4)))


def test_methods():
    ref = np.array([3.0, 1.0, 2.0, 5.0])
    a = SmartArray(ref.copy(), where="gpu")
    assert a.sum() == ref.sum() and a.mean() == ref.mean() and a.max() == 5
    assert a.argmax() == 3 and a.argmin() == 1 and a.min() == 1
    assert a.std() == ref.std() and a.var() == ref.var() and a.prod() == ref.prod()
    assert a.all() and a.any()
    assert a.tolist() == ref.tolist() and a.item(0) == 3.0 and a.tobytes() == ref.tobytes()
    for name in ("copy", "cumsum", "flatten", "round", "conj"):
        res = getattr(a, name)()
        assert isinstance(res, SmartArray)
        np.testing.assert_allclose(res, getattr(ref, name)())
    c = a.copy()
    c[0] = 100
    assert a[0] == 3.0
    assert a.astype(np.int32).dtype == np.int32
    np.testing.assert_array_equal(a.clip(2, 3), ref.clip(2, 3))
    np.testing.assert_array_equal(a.take([0, 2]), [3.0, 2.0])
    np.testing.assert_array_equal(a.nonzero()[0], [0, 1, 2, 3])
    assert a.dot(a) == ref.dot(ref)
    assert a.reshape(1, 4, 1).squeeze()._buf is a._buf
    a.sort()
    assert not a.is_valid("gpu")
    np.testing.assert_array_equal(a.gpu().copy_to_host(), np.sort(ref))
    a.fill(7)
    np.testing.assert_array_equal(a.host(), [7, 7, 7, 7])
    a.put([0], [1.0])
    assert a[0] == 1.0
    a.partition(2)
    assert a[2] == 7
    b = SmartArray(np.arange(3, dtype=np.int32))
    b.byteswap(inplace=True)
    np.testing.assert_array_equal(b, np.arange(3, dtype=np.int32).byteswap())
    with pytest.raises(TypeError, match="np.resize"):
        a.resize(10)
    with pytest.raises(TypeError, match="setflags"):
        a.setflags(write=False)
    with pytest.raises(AttributeError, match=r"a\.host\(\)\.view"):
        getattr(a, "view")  # noqa: B009


def test_strided_fill_keeps_gaps():
    a = SmartArray(np.arange(6.0), where="gpu")
    a[::2].fill(-1)
    np.testing.assert_array_equal(a, [-1, 1, -1, 3, -1, 5])


def test_python_protocols():
    a = SmartArray(np.array([1.0, 2.0]))
    a.gpu()
    assert repr(a) == "SmartArray([1., 2.], valid='host,gpu')"
    assert str(a) == "[1. 2.]"
    assert f"{a[0:1][0]:.2f}" == "1.00" and format(SmartArray(np.float64(2.5)), ".1f") == "2.5"
    assert len(a) == 2 and 2.0 in a and 3.0 not in a
    assert [float(x) for x in a] == [1.0, 2.0]
    rows = list(SmartArray(np.arange(4).reshape(2, 2)))
    assert all(isinstance(r, SmartArray) for r in rows)
    # Truthy by length, as numba's device arrays; a 0-d array by its value.
    assert bool(SmartArray([0])) and bool(SmartArray([1.0, 2.0])) and not bool(SmartArray([]))
    assert bool(SmartArray(np.float64(1))) and not bool(SmartArray(np.float64(0)))
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(TypeError):
        len(SmartArray(np.float64(1)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pickle_copy_deepcopy(dtype):
    data = sample(dtype, (2, 3))
    a = SmartArray(data, where="gpu")
    for b in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
        assert b.dtype == a.dtype and b.shape == a.shape and b._buf is not a._buf
        np.testing.assert_array_equal(b.host(), data)


# --- threads ---------------------------------------------------------------------------------


def test_threads_disjoint_slices():
    n_threads, chunk = 8, 64
    a = SmartArray(np.zeros(n_threads * chunk))
    a.gpu()
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            view = a[t * chunk : (t + 1) * chunk]
            for i in range(50):
                view[i % chunk] = t * 1000 + i
                assert view[i % chunk] == t * 1000 + i
                if i % 10 == 0:
                    view.gpu()
        except BaseException as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    ref = np.zeros(n_threads * chunk)
    for t in range(n_threads):
        for i in range(50):
            ref[t * chunk + i % chunk] = t * 1000 + i
    np.testing.assert_array_equal(a.host(), ref)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), ref)


# --- state machine ---------------------------------------------------------------------------

N = 24

slices = st.builds(
    slice,
    st.one_of(st.none(), st.integers(-N, N)),
    st.one_of(st.none(), st.integers(-N, N)),
    st.one_of(st.none(), st.integers(1, 4), st.integers(-4, -1)),
)


# The bytes checked below are the exact model's: a transfer cost model whose latency is worth
# no bytes (no cost-based coalescing of scattered reads; tests/coherence/test_coherence.py
# covers that).
EXACT = sa.TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)


class SmartArrayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.previous_cost = sa.set_transfer_cost(EXACT)
        self.ref = np.arange(N, dtype=np.float64)
        self.a = SmartArray(self.ref.copy())
        # Host arrays the user keeps, each with what it shows of ``ref``.
        self.held: list[tuple[np.ndarray, Any]] = []
        self.counter = 100.0

    def _value(self) -> float:
        self.counter += 1
        return self.counter

    @rule(s=slices)
    def host_write(self, s):
        view = self.a[s]
        stale = 0
        if not view._covers():
            stale = self.a._buf.state.valid("host").gaps(view._lo, view._hi).total
        before = sa.stats()
        v = self._value()
        self.a[s] = v
        self.ref[s] = v
        moved = delta(before)
        assert moved.h2d_bytes == 0
        assert stale <= moved.d2h_bytes <= stale + N  # at most N*8/max_runs extra (coalescing)

    @rule(s=slices)
    def host_read(self, s):
        np.testing.assert_array_equal(self.a[s].host(), self.ref[s])

    @rule(i=st.integers(-N, N - 1))
    def scalar_read(self, i):
        before = sa.stats()
        valid = self.a._buf.state.is_valid("host", (i % N) * 8, (i % N) * 8 + 8)
        assert self.a[i] == self.ref[i]
        assert delta(before).d2h_bytes == (0 if valid else 8)

    @rule(s=slices)
    def device_write(self, s):
        view = self.a[s]
        if view.size == 0 or any(st < 0 for st in view.strides):
            return
        d = view.gpu()
        v = self._value()
        d[...] = v  # a simulated kernel write through the device view
        before = sa.stats()
        view.gpu_changed()
        if not self.held:  # nobody holds a host array: the download waits for a read
            assert delta(before).d2h_bytes == 0
        self.ref[s] = v

    @rule(s=slices, how=st.sampled_from(["host()", "np.asarray"]))
    def hold_host(self, s, how):
        view = self.a[s]
        kept = view.host() if how == "host()" else np.asarray(view)
        self.held.append((kept, lambda ref, s=s: ref[s]))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def derive_and_drop_the_original(self, data):
        # What the user keeps is a view NumPy derived; the hand-out itself is dropped.
        i = data.draw(st.integers(0, len(self.held) - 1))
        kept, shows = self.held.pop(i)
        self.held.append((kept[::2], lambda ref, shows=shows: shows(ref)[::2]))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def drop_host(self, data):
        self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))

    @rule()
    def sync_gpu(self):
        before = sa.stats()
        stale = N * 8 - self.a._buf.state.valid("gpu").total
        self.a.gpu()
        assert delta(before).h2d_bytes == stale

    @rule()
    def pickle_roundtrip(self):
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(self.a)).host(), self.ref)

    @invariant()
    def held_is_current(self):
        for kept, shows in self.held:
            np.testing.assert_array_equal(kept, shows(self.ref))

    @invariant()
    def valid_bytes_are_current(self):
        buf = self.a._buf
        ref_bytes = self.ref.view(np.uint8)
        for where, mem in (("host", buf.host_bytes), ("gpu", buf.device_bytes)):
            valid = buf.state.valid(where)
            if mem is None:
                continue
            raw = mem if where == "host" else memory._raw(mem).copy_to_host()
            for lo, hi in valid.runs:
                np.testing.assert_array_equal(raw[lo:hi], ref_bytes[lo:hi])

    def teardown(self):
        sa.set_transfer_cost(self.previous_cost)


# Fewer on the fake driver, whose kernels (numba's `d[...] = v` too) run in Python threads.
SmartArrayMachine.TestCase.settings = settings(
    max_examples=50 if _fakegpu.current() is None else 8, stateful_step_count=20
)
TestSmartArrayMachine = SmartArrayMachine.TestCase


def test_results_of_numpy_are_not_eagerly_refreshed():
    a = SmartArray(np.arange(100.0))
    b = a + 1  # a new array nobody else holds
    b.gpu()
    sa.reset_stats()
    b.gpu_changed()
    assert sa.stats().d2h_bytes == 0  # the download waits until the host needs it
    c = pickle.loads(pickle.dumps(a))
    c.gpu()
    sa.reset_stats()
    c.gpu_changed()
    assert sa.stats().d2h_bytes == 0


def test_ufunc_out_with_where_keeps_unselected_elements_current():
    out = SmartArray(np.zeros(6))
    dev = out.gpu()
    dev[...] = 5.0  # the device copy changes: the host copy is stale
    out.gpu_changed()
    mask = np.array([True, False] * 3)
    np.add(np.ones(6), 1.0, out=out, where=mask)
    np.testing.assert_array_equal(np.asarray(out), [2.0, 5.0, 2.0, 5.0, 2.0, 5.0])


def test_constructor_has_the_reference_signature_plus_pinned_name_and_stream():
    import inspect

    params = inspect.signature(SmartArray).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("obj", None),
        ("copy", True),
        ("shape", None),
        ("dtype", None),
        ("order", None),
        ("where", "host"),
        ("pinned", False),
        ("name", None),
        ("stream", 0),  # numba.cuda.to_device's stream, for ports
    ]
    for method, default in [("get", "host"), ("mark_changed", "host"), ("is_valid", "host")]:
        where = inspect.signature(getattr(SmartArray, method)).parameters["where"]
        assert where.default == default


# --- record elements -------------------------------------------------------------------------


def test_field_assignment_through_a_record_element_lands_and_is_recorded():
    data = sample(STRUCT, (4,))
    a = SmartArray(data)
    a.gpu()  # current on both copies
    a[0]["x"] = 5  # NumPy: the record is a view, the write lands
    data[0]["x"] = 5
    a[1][1] = -7  # by field position
    data[1][1] = -7
    for rec in a[2:]:
        rec["y"] = 3
    data[2:]["y"] = 3
    np.testing.assert_array_equal(a.host(), data)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), data)  # uploaded: recorded
    assert a[0]["x"] == 5.0 and type(a[0]["x"]) is np.float32
    assert a[1][1] == -7 and len(a[0]) == 2 and list(a[3]) == [3.0, 3]
    assert a[0] == data[0] and a[0] != data[1]
    assert a[0][()] == data[0] and type(a[0][()]) is np.void
    with pytest.raises(IndexError, match="field"):
        a[0][2]
    with pytest.raises(ValueError):
        a[0]["nope"]


def test_record_element_of_a_2d_array_and_nested_records():
    inner = np.dtype([("u", np.int32), ("v", np.float64, (2,))])
    outer = np.dtype([("p", inner), ("q", np.int16)])
    data = np.zeros((2, 3), outer)
    a = SmartArray(data)
    a.gpu()
    a[1, 2]["p"]["u"] = 4
    a[1, 2]["p"]["v"][1] = 2.5
    a[0, 0]["q"] = 9
    data[1, 2]["p"]["u"] = 4
    data[1, 2]["p"]["v"][1] = 2.5
    data[0, 0]["q"] = 9
    np.testing.assert_array_equal(a.host(), data)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), data)


# --- edge cases: kernels and njit functions they use ------------------------------------------


@cuda.jit
def double_2d(x):
    # double's ``x[i] *= 2`` on a 2-D array is an array operation, which numba-cuda does not
    # compile (the simulator runs it with NumPy): a GPU needs both indices.
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        x[i, j] *= 2


@cuda.jit
def touch(x):
    pass


@numba.njit
def count(x):
    return x.size


@numba.njit
def add_one(x):
    for i in range(x.size):
        x[i] += 1


# --- shapes too big for NumPy are refused, naming the shape -----------------------------------


@pytest.mark.parametrize(
    "shape", [(2**32, 2**32), (3, 2**62), 2**61, (0, 2**62, 4), (2**63,)], ids=str
)
def test_shape_too_big_is_refused_before_allocating(shape):
    before = sa.stats()
    with pytest.raises(ValueError, match=r"shape .* too big"):
        SmartArray(shape=shape)
    with pytest.raises(ValueError, match=r"shape .* too big"):
        sa.device_array(shape)
    with pytest.raises(ValueError, match=r"shape .* too big"):
        sa.pinned_array(shape)
    assert delta(before).nbytes == 0


def test_shape_limit_counts_the_itemsize():
    # 2**60 elements fit in np.intp as bytes of uint8, not as float64 (8 bytes each).
    with pytest.raises(ValueError, match="shape"):
        SmartArray(shape=2**60, dtype=np.float64)
    big = SmartArray(shape=(2**20, 2**20), dtype=np.uint8)  # lazily allocated: nothing yet
    assert big.size == 2**40 and big.nbytes == 2**40


# --- ravel is a view exactly when NumPy's is ------------------------------------------------


def _geometries():
    b = SmartArray(np.arange(24.0).reshape(4, 3, 2))
    f = SmartArray(np.asfortranarray(np.arange(24.0).reshape(4, 3, 2)))
    yield b
    yield b[::2]
    yield b[1:3]
    yield b[:, :2]
    yield b[..., 0]
    yield b[:, ::-1]
    yield b[::-1]
    yield b[:, :, ::2][::2]
    yield b[:, 1:2, :]
    yield b.transpose(1, 0, 2)
    yield b.transpose(2, 0, 1)
    yield b.T
    yield f
    yield f[1:]
    yield f[:, :, 1]
    yield b.reshape(4, 6)[:, ::2]
    yield SmartArray(np.zeros((0, 4)))
    yield SmartArray(np.arange(6.0))[::2]


@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_ravel_is_a_view_exactly_when_numpys_is(order):
    for a in _geometries():
        ref = a.host()  # an ndarray of the same geometry
        expect_view = np.shares_memory(np.ravel(ref, order), ref) if a.size else None
        r = a.ravel(order)
        np.testing.assert_array_equal(r.host(), np.ravel(ref, order))
        if expect_view is None:
            continue
        is_view = r._buf is a._buf
        assert is_view == expect_view, (a.shape, a.strides, order)


def test_ravel_of_a_strided_view_is_a_copy():
    a = SmartArray(np.arange(6.0))
    r = a[::2].ravel()
    r[0] = 99
    np.testing.assert_array_equal(a.host(), np.arange(6.0))


def test_ravel_k_of_a_permuted_contiguous_array_is_a_view():
    b = SmartArray(np.arange(24.0).reshape(4, 3, 2))
    r = b.transpose(1, 0, 2).ravel("K")
    r[0] = 99
    assert b[0, 0, 0] == 99
    np.testing.assert_array_equal(r.host(), np.ravel(np.asarray(b).transpose(1, 0, 2), "K"))


# --- empty views whose offset lies past the end of the buffer ---------------------------------


def _empty_views():
    yield SmartArray(np.zeros((0, 4)))[:, 2]
    yield SmartArray(np.zeros((3, 0)))[1]
    yield SmartArray(np.zeros(0, STRUCT))["y"]
    yield SmartArray(np.zeros((0, 4)), where="gpu")[:, 3]
    yield SmartArray(np.zeros((2, 4)))[:, 4:]


@pytest.mark.parametrize(
    "use",
    [
        repr,
        str,
        np.asarray,
        lambda v: v.host(),
        lambda v: v.get("gpu"),
        lambda v: touch[1, 1](v),
        lambda v: touch[1, 1](sa.Out(v)),
        lambda v: (double if v.ndim == 1 else double_2d)[1, 1](v),
        count,
        add_one,
        lambda v: v.sum(),
        lambda v: v.__setitem__(..., 1),
        lambda v: v.ravel(),
        lambda v: SmartArray(v),
        lambda v: v.mark_changed("gpu"),
        lambda v: v.copy(),
        lambda v: v + 1,
    ],
)
def test_empty_views_past_the_end_work(use):
    for v in _empty_views():
        assert v.size == 0
        before = sa.stats()
        use(v)
        assert delta(before).nbytes == 0
        assert np.asarray(v).shape == v.shape
        assert v.get("gpu").shape == v.shape


# --- fancy and boolean index results are not exported views ---------------------------------


@pytest.mark.parametrize("index", [[0, 2], "mask"])
def test_fancy_index_result_is_not_eagerly_refreshed(index):
    a = SmartArray(np.arange(6.0) - 2)
    key = np.arange(6) > 2 if index == "mask" else index
    r = a[a > 0] if index == "mask" else a[key]
    r.get("gpu")
    before = sa.stats()
    for _ in range(3):
        double[1, 8](r)
    assert delta(before).nbytes == 0  # nobody holds a host array of r: nothing downloads
    np.testing.assert_array_equal(r.host(), (np.arange(6.0) - 2)[key] * 8)


# --- njit calls on fresh views do not grow the buffer's bookkeeping ----------------------------


def test_njit_on_fresh_views_keeps_bookkeeping_bounded():
    a = SmartArray(np.zeros(64))
    add_one(a[1:])  # compile
    gc.collect()
    for _ in range(2000):
        add_one(a[1:])
    assert len(a._buf.fast_views) <= 2
    np.testing.assert_array_equal(a.host()[1:], np.full(63, 2001.0))
    v = a[2:]
    add_one(v)
    add_one(v)  # fast path armed for v
    a.get("gpu")  # makes device bytes current: every armed fast path is disarmed
    a.gpu_changed()
    add_one(v)  # must see the device's values (a download), not the stale fast host view
    assert a[5] == 2004.0


# --- a host array handed out again and again is held exactly while anything shows it -----------


@pytest.mark.parametrize(
    "keep",
    [
        pytest.param((lambda h: h, slice(None)), id="the array"),
        pytest.param((lambda h: h[2:5], slice(2, 5)), id="a slice of it"),
        pytest.param(
            (lambda h: h.view()[::2].reshape(-1), slice(None, None, 2)), id="a view of a view"
        ),
        pytest.param((lambda h: h.base, slice(None)), id="its base"),
    ],
)
@pytest.mark.parametrize("reads", [1, 3, 40], ids=["read once", "read 3x", "40 geometries"])
def test_a_host_array_read_again_and_again_is_refreshed_while_anything_shows_it(keep, reads):
    """``host()`` hands out views of one array per geometry; whatever the user keeps of any
    of them (NumPy derives views from that one array) is refreshed after a device write, and
    nothing is once all of it is dropped, also after many geometries were read."""
    a = SmartArray(np.arange(8.0))
    hand_outs = [a.host() for _ in range(reads)]
    others = [a[i % 4 :].host() for i in range(reads)]  # (more geometries when reads is 40)
    keep, shows = keep
    kept = keep(hand_outs[0])
    del hand_outs, others
    a.get("gpu")
    before = sa.stats()
    double[1, 8](a)
    assert delta(before).d2h_bytes == 8 * 8  # refreshed at once: something shows it
    np.testing.assert_array_equal(np.asarray(kept), (np.arange(8.0) * 2)[shows])
    del kept
    before = sa.stats()
    double[1, 8](a)
    assert delta(before).nbytes == 0  # nobody holds a host array: nothing moves
    np.testing.assert_array_equal(a.host(), np.arange(8.0) * 4)


# --- a held host array is refreshed once per launch, over the union of the writes -------------


@cuda.jit
def two(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


@pytest.mark.parametrize(
    "args", ["same twice", "overlapping views", "one view and the whole", "in and out"]
)
def test_held_host_array_refreshed_once_per_launch(args):
    a = SmartArray(np.arange(8.0))
    held = a.host()
    a.get("gpu")
    x, y = {
        "same twice": (a, a),
        "overlapping views": (a[0:6], a[2:8]),
        "one view and the whole": (a[2:4], a),
        "in and out": (a[0:6], sa.InOut(a[4:8])),
    }[args]
    before = sa.stats()
    two[1, 8](x, y)
    moved = delta(before)
    assert moved.h2d_bytes == 0
    assert moved.d2h_bytes == 8 * 8  # the union of the written bytes, once
    lo, n = {
        "same twice": (0, 8),
        "overlapping views": (0, 6),
        "one view and the whole": (2, 2),
        "in and out": (0, 6),
    }[args]  # the kernel writes x only
    expect = np.arange(8.0)
    expect[lo : lo + n] += 1
    np.testing.assert_array_equal(held, expect)
    assert a.valid_at == ("host", "gpu")


# --- a write that covers the whole destination downloads nothing first ------------------------


@pytest.mark.parametrize(
    "write",
    [
        lambda a: np.copyto(a, np.ones(8)),
        lambda a: np.copyto(a, 1.0),
        lambda a: np.copyto(a, np.ones(8), where=True),
        lambda a: np.copyto(a, np.ones(8), "same_kind", True),
        lambda a: a.fill(1.0),
        lambda a: a.__setitem__(..., 1.0),
        lambda a: np.multiply(np.ones(8), 1.0, out=a),
    ],
)
def test_full_overwrite_downloads_nothing(write):
    a = SmartArray(np.arange(8.0), where="gpu")  # current on the device only
    before = sa.stats()
    write(a)
    assert delta(before).nbytes == 0
    assert a.valid_at == ("host",)
    np.testing.assert_array_equal(a.host(), np.ones(8))
    assert delta(before).nbytes == 0


def test_copyto_with_a_mask_or_on_a_strided_view_keeps_the_rest():
    a = SmartArray(np.arange(8.0), where="gpu")
    np.copyto(a, -1.0, where=np.arange(8) % 2 == 0)
    np.testing.assert_array_equal(a.host(), np.where(np.arange(8) % 2 == 0, -1, np.arange(8.0)))
    b = SmartArray(np.arange(8.0), where="gpu")
    np.copyto(b[::2], -1.0)  # the gaps between elements must stay current
    np.testing.assert_array_equal(b.host(), np.where(np.arange(8) % 2 == 0, -1, np.arange(8.0)))


# --- bad arguments are refused before any byte moves ----------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda a: np.add(a, np.zeros(3), out=a),
        lambda a: np.add(a, 1.0, out=a[:4]),
        lambda a: np.add(np.zeros((2, 8)), a, out=a),
        lambda a: np.negative(a, out=SmartArray(np.zeros(3))),
        lambda a: a.sort(axis=3),
        lambda a: a.sort(-2),
        lambda a: a.partition(1, axis=2),
        lambda a: a[::-1].gpu(),
        lambda a: a[::-1].get("gpu"),
        lambda a: double[1, 8](a[::-1]),
        lambda a: touch[1, 8](sa.In(a[::-1])),  # double writes: a GPU refuses it at compile
        lambda a: double[1, 8](sa.Out(a[::-1])),
        lambda a: np.copyto(a, np.zeros(3)),
        lambda a: np.copyto(a[::2], np.zeros(8)),
    ],
)
@pytest.mark.parametrize("where", ["host", "gpu"])
def test_bad_arguments_move_nothing(bad, where):
    a = SmartArray(np.arange(8.0), where=where)
    valid = a.valid_at
    before = sa.stats()
    with pytest.raises((ValueError, TypeError, IndexError)):
        bad(a)
    assert delta(before).nbytes == 0
    assert a.valid_at == valid
    np.testing.assert_array_equal(a.host(), np.arange(8.0))
