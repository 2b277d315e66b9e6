"""Edge cases of SmartArray found by adversarial testing (issue 10): geometry, validation
before anything moves, and bytes that need not move."""

from __future__ import annotations

import gc

import numba
import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray.array import SmartArray

STRUCT = np.dtype([("x", np.float32), ("y", np.int16)])


def delta(before: sa.TransferStats) -> sa.TransferStats:
    return sa.stats() - before


@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= 2


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


# --- D13: shapes too big for NumPy are refused, naming the shape ------------------------------


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


# --- D7: ravel is a view exactly when NumPy's is --------------------------------------------


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


# --- D8: empty views whose offset lies past the end of the buffer -----------------------------


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


# --- D10: fancy and boolean index results are not exported views ----------------------------


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


# --- D9: njit calls on fresh views do not grow the buffer's bookkeeping ------------------------


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


# --- D18: a held host array is refreshed once per launch, over the union of the writes --------


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


# --- D11: a write that covers the whole destination downloads nothing first -------------------


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


# --- D12: bad arguments are refused before any byte moves -----------------------------------


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
