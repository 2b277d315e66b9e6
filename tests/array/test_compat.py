"""Code written for Numba's removed SmartArray and for numba.cuda device arrays.

The behaviours that Numba's own SmartArray tests (numba 0.30 to 0.45) and numba's helpers rely
on, written for smartarray: njit boxing and unboxing, ``len``/``shape`` in compiled code,
results that stay SmartArrays, truthiness by length, and numba-cuda's ``transpose`` helper
accepting SmartArrays.
"""

from __future__ import annotations

import types

import numba
import numpy as np
import pytest

import smartarray as sa
from smartarray import SmartArray
from smartarray.memory import SIMULATOR


@numba.njit
def length(x):
    return len(x)


@numba.njit
def shape_of(x):
    return x.shape


@numba.njit
def item(x, key):
    return x[key]


def test_njit_len_shape_and_scalar_items():
    a = SmartArray(np.int32([42, 8, -5]))
    assert length(a) == 3
    assert shape_of(a) == (3,)
    assert item(a, 1) == 8 and isinstance(item(a, 1), int)


def test_njit_slice_of_an_argument_is_a_smartarray_of_the_same_values():
    a = SmartArray(np.int32([42, 8, -5]))
    tail = item(a, slice(1, None))
    assert isinstance(tail, SmartArray)
    assert list(tail) == [8, -5]
    tail[0] = 7  # a view of a: the write shows in a
    assert list(a) == [42, 7, -5]


def test_astype_is_a_smartarray_of_the_new_dtype():
    a = SmartArray(np.int32([42, 8, -5]))
    b = a.astype(np.float64)
    assert isinstance(b, SmartArray) and b.dtype.type is np.float64
    np.testing.assert_array_equal(b.get("host"), [42.0, 8.0, -5.0])


def test_assignment_and_comparison_stay_smartarrays():
    a = SmartArray(np.arange(16).reshape(4, 4))
    a[:, :] = 1
    eq = a == SmartArray(np.ones((4, 4), dtype=a.dtype))
    assert isinstance(eq, SmartArray) and eq.dtype == np.bool_
    assert eq.all()


def test_truthiness_by_length_reads_no_data():
    a = SmartArray(np.zeros(3), where="gpu")
    with sa.trace() as t:
        assert a and SmartArray(np.zeros(1)) and not SmartArray(np.zeros((0, 3)))
    assert t.events == []  # deciding truth moved nothing
    assert not SmartArray(np.float64(0.0))  # 0-d: no length, its value decides (NumPy)


@pytest.fixture
def numba_transpose(monkeypatch):
    """numba-cuda's own ``transpose`` helper (the example of Numba's SmartArray deprecation).

    On the simulator its ``driver.get_device()`` is missing (numba's device arrays fail there
    the same way): only that lookup is supplied.
    """
    from numba.cuda.kernels import transpose as module

    if SIMULATOR:
        device = types.SimpleNamespace(MAX_THREADS_PER_BLOCK=1024)
        monkeypatch.setattr(module, "driver", types.SimpleNamespace(get_device=lambda: device))
    return module.transpose


def test_numba_transpose_helper_accepts_smartarrays(numba_transpose):
    a = SmartArray(np.arange(16, dtype=float).reshape(4, 4))
    b = SmartArray(where="gpu", shape=(4, 4), dtype=float)
    c = SmartArray(where="gpu", shape=(4, 4), dtype=float)
    with sa.trace() as t:
        numba_transpose(a, b)
        numba_transpose(b, c)
    assert [(e.direction, e.nbytes) for e in t.events] == [("h2d", 128)]  # a, once
    np.testing.assert_array_equal(b.get("host"), np.arange(16.0).reshape(4, 4).T)
    assert (c.get("host") == a.get("host")).all()


# -- copy_to_device: what numba.cuda accepts, checked in its order ------------------------------


def test_copy_to_device_gathers_a_strided_host_array_in_one_counted_upload():
    d = sa.device_array(6)
    before = sa.stats()
    d.copy_to_device(np.arange(12.0)[::2])
    moved = sa.stats()
    assert (moved.h2d_count - before.h2d_count, moved.h2d_bytes - before.h2d_bytes) == (1, 48)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(12.0)[::2])


def test_copy_to_device_f_ordered_host_into_c_device():
    d = sa.device_array((4, 6))
    src = np.asfortranarray(np.arange(24.0).reshape(4, 6))
    d.copy_to_device(src)
    np.testing.assert_array_equal(d.copy_to_host(), src)


def test_to_device_into_existing_array_gathers_too():
    d = sa.device_array(3)
    assert sa.to_device(np.arange(6.0)[::2], to=d) is d
    np.testing.assert_array_equal(d.copy_to_host(), [0.0, 2, 4])


def test_copy_to_device_strided_device_source_reports_contiguity_before_shape():
    d = sa.device_array(6)
    wrong_shape_and_strided = sa.device_array((4, 6))[:, ::2]
    before = sa.stats()
    with pytest.raises(ValueError, match="non-contiguous"):
        d.copy_to_device(wrong_shape_and_strided)
    assert sa.stats().count == before.count


@pytest.mark.parametrize(
    ("source", "error", "match"),
    [
        (lambda: np.zeros(6, np.float32), TypeError, "dtype"),
        (lambda: np.zeros(5), ValueError, "shape"),
        # F order, not .T: numba-cuda's .T is a transposed copy on a GPU (C order again)
        (lambda: sa.device_array((4, 6), order="F"), ValueError, "strides"),
    ],
    ids=["dtype", "shape", "strides"],
)
def test_copy_to_device_mismatch_errors_as_numba_and_nothing_moves(source, error, match):
    d = sa.to_device(np.arange(24.0).reshape(4, 6)) if match == "strides" else sa.device_array(6)
    keep = d.copy_to_host()
    src = source()
    before = sa.stats()
    with pytest.raises(error, match=match):
        d.copy_to_device(src)
    after = sa.stats()
    assert after.count == before.count
    np.testing.assert_array_equal(d.copy_to_host(), keep)


def test_copy_to_device_of_an_empty_source_does_nothing():
    d = sa.device_array(6)
    before = sa.stats()
    d.copy_to_device(np.zeros(0, np.float32))  # numba returns before any check
    assert sa.stats().count == before.count


def test_copy_to_device_into_a_strided_destination_is_refused():
    d = sa.device_array((4, 6))
    with pytest.raises(ValueError, match="non-contiguous"):
        d[:, ::2].copy_to_device(np.zeros((4, 3)))


def test_reference_mapping_lists_every_name_of_numba_cudas_api():
    import ast
    import pathlib

    import numba_cuda

    api = pathlib.Path(numba_cuda.__file__).parent / "numba" / "cuda" / "api.py"
    tree = ast.parse(api.read_text())
    names = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }
    assert {"managed_array", "pinned_array_like", "external_stream"} <= names
    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference_mapping.rst"
    text = docs.read_text()
    missing = sorted(n for n in names if f"``{n}``" not in text and f"``{n}(" not in text)
    assert missing == []


def test_copy_to_device_into_broadcast_device_arrays_across_orders():
    core_c = np.arange(6).reshape((2, 3), order="C")
    core_f = np.arange(6).reshape((2, 3), order="F")
    broad_c = np.broadcast_to(core_c[:, np.newaxis], (2, 4, 3))
    broad_f = np.broadcast_to(core_f[:, np.newaxis], (2, 4, 3))
    d_c, d_f = sa.to_device(broad_c), sa.to_device(broad_f)
    d_c.copy_to_device(broad_f)  # the host core is gathered in the destination's order
    d_f.copy_to_device(broad_c)
    np.testing.assert_array_equal(d_c.copy_to_host(), broad_f)
    np.testing.assert_array_equal(d_f.copy_to_host(), broad_c)


@pytest.mark.parametrize(
    ("dst", "src"),
    [
        (lambda m: m.device_array(6), lambda m: np.zeros(6, np.float32)),
        (lambda m: m.device_array(6), lambda m: np.zeros(5)),
        (lambda m: m.device_array((4, 6)), lambda m: m.device_array((4, 6), order="F")),
        (lambda m: m.device_array(6), lambda m: m.device_array((4, 6))[:, ::2]),
        (lambda m: m.device_array((4, 6))[:, ::2], lambda m: np.zeros((4, 3))),
    ],
    ids=["dtype", "shape", "strides", "strided-source", "strided-destination"],
)
def test_copy_to_device_errors_are_numbas(dst, src):
    """Same exception class and message as numba.cuda's own device arrays."""
    from numba import cuda

    with pytest.raises(Exception) as numba_error:
        dst(cuda).copy_to_device(src(cuda))
    with pytest.raises(numba_error.type) as ours:
        dst(sa).copy_to_device(src(sa))
    assert str(ours.value) == str(numba_error.value)


# -- device-array methods numba's helpers call on their arguments ------------------------------


def test_copy_to_device_from_device_memory_records_a_device_write():
    # What numba-cuda's reduce does with ``res=``: res[:1].copy_to_device(partials[:1]).
    res = SmartArray(np.zeros(2))
    partials = sa.to_device(np.array([5.0, 6.0]))
    with sa.trace() as t:
        res[:1].copy_to_device(partials[:1])
        values = np.asarray(res).copy()
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2d", 8), ("d2h", 8)]
    np.testing.assert_array_equal(values, [5.0, 0.0])


def test_copy_to_device_from_a_strided_host_array_and_errors_as_numba():
    a = SmartArray(np.zeros(3))
    a.gpu()
    a.copy_to_device(np.arange(6.0)[::2])
    np.testing.assert_array_equal(np.asarray(a), [0.0, 2, 4])
    b = SmartArray(np.zeros((4, 6)))
    with pytest.raises(ValueError, match="non-contiguous"):
        b[:, ::2].copy_to_device(np.zeros((4, 3)))
    with pytest.raises(TypeError, match="incompatible dtype"):
        a.copy_to_device(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="incompatible shape"):
        a.copy_to_device(sa.device_array(4))
    np.testing.assert_array_equal(np.asarray(a), [0.0, 2, 4])  # nothing changed


def test_copy_to_host_returns_a_copy_or_fills_ary():
    a = SmartArray(np.arange(4.0), where="gpu")
    host = a.copy_to_host()
    assert type(host) is np.ndarray and host.flags.writeable
    np.testing.assert_array_equal(host, np.arange(4.0))
    host[0] = 99.0  # a copy: the SmartArray is unchanged
    out = np.empty(4)
    assert a.copy_to_host(out) is out
    np.testing.assert_array_equal(out, np.arange(4.0))
    with pytest.raises(ValueError, match="incompatible shape"):
        a.copy_to_host(np.empty(5))


def test_device_to_device_copies_are_counted_once():
    d = sa.device_array(4)
    src = sa.to_device(np.arange(4.0))
    with sa.trace() as t:
        d.copy_to_device(src)
        sa.to_device(src, to=d)
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2d", 32), ("d2d", 32)]


def test_failed_copy_to_device_leaves_nothing_stale_marked_valid(monkeypatch):
    from smartarray import memory

    a = SmartArray(np.arange(4.0))
    a.gpu()  # current on both sides
    base = memory._base_class(a.gpu())
    source = sa.to_device(np.zeros(4))  # before the fault: strict mode's to_device copies too

    def broken(self, ary, stream=0):
        if hasattr(self, "_ary"):  # the simulator's memory: half done, garbage written
            self._ary[...] = -1.0
        raise RuntimeError("injected copy fault")

    monkeypatch.setattr(base, "copy_to_device", broken)
    with pytest.raises(sa.TransferError):
        a.copy_to_device(source)
    monkeypatch.undo()
    assert a.valid_at == ("host",)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))
    assert np.array_equal(a.gpu().copy_to_host(), np.arange(4.0))  # uploaded again


@pytest.mark.gpu
def test_numba_reduce_helper_accepts_smartarrays():
    """numba-cuda's ``cuda.reduce`` (its GPU kernels; the simulator has its own host version)."""
    from numba import cuda

    total = cuda.reduce(lambda a, b: a + b)
    a = SmartArray(np.arange(1000.0))
    assert total(a) == np.arange(1000.0).sum()
    res = SmartArray(np.zeros(2))
    assert total(a, res=res) is None  # res[:1].copy_to_device(partials[:1])
    np.testing.assert_array_equal(np.asarray(res), [np.arange(1000.0).sum(), 0.0])
