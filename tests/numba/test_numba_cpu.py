"""SmartArrays as @numba.njit arguments: values, bytes moved, intents, the fast path, traps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray._numba.njit import SmartArrayType
from tests._kernels import add_one


@numba.njit
def double(x):
    for i in range(x.size):
        x[i] *= 2
    return x.sum()


@numba.njit
def total(x):
    return x.sum()


@numba.njit
def set_first(x, value):
    x[0] = value


@numba.njit(parallel=True)
def add_parallel(x, y):
    for i in numba.prange(x.size):
        x[i] += y[i]


@numba.njit
def scale_in_place(x):
    x *= 2


@numba.njit
def fill_index(x):
    for i in range(x.size):
        x[i] = i


@cuda.jit
def fill_const(x, value):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = value


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()


def test_njit_sees_an_array_and_writes_are_recorded():
    a = sa.SmartArray(np.arange(5.0))
    assert double(a) == 20.0
    np.testing.assert_array_equal(np.asarray(a), np.arange(5.0) * 2)
    assert numba.typeof(a) == SmartArrayType(numba.float64, 1, "C")


def test_njit_after_device_work_downloads_once_and_marks_the_host():
    a = sa.SmartArray(np.zeros(64))
    add_one[2, 32](a)
    sa.reset_stats()
    double(a)
    double(a)
    s = sa.stats()
    assert (s.d2h_count, s.d2h_bytes, s.h2d_count) == (1, 512, 0)
    assert a.is_valid("host") and not a.is_valid("gpu")
    add_one[2, 32](a)  # the njit writes must reach the device
    np.testing.assert_array_equal(np.asarray(a), np.full(64, 1.0 * 4 + 1))


def test_mixed_pipeline_exact_bytes():
    a = sa.SmartArray(shape=256, dtype=np.float32)  # uninitialised: nothing to copy
    fill_index(a)  # njit prepares on the host
    assert sa.stats().count == 0
    add_one[8, 32](a)  # kernel transforms: one upload
    assert (sa.stats().h2d_count, sa.stats().h2d_bytes) == (1, 1024)
    assert total(a) == np.arange(256).sum() + 256  # host reads: one download
    s = sa.stats()
    assert (s.d2h_count, s.d2h_bytes) == (1, 1024)


def test_fast_path_armed_when_current_only_on_host_and_disarmed_by_device_use():
    a = sa.SmartArray(np.arange(4.0))
    double(a)
    assert a._njit_fast is not None  # now no Python hook runs on the call
    double(a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0) * 4)
    a.gpu()
    assert a._njit_fast is None
    double(a)  # through the hooks again: the device copy goes stale
    assert not a.is_valid("gpu")
    np.testing.assert_array_equal(a.gpu().copy_to_host(), np.arange(4.0) * 8)


def test_fast_path_disarmed_for_every_view_of_the_buffer():
    a = sa.SmartArray(np.zeros(8))
    left, right = a[:4], a[4:]
    double(left)
    double(right)
    assert left._njit_fast is not None and right._njit_fast is not None
    add_one[1, 8](a)
    assert left._njit_fast is None and right._njit_fast is None
    set_first(right, 5.0)
    np.testing.assert_array_equal(np.asarray(a), [1, 1, 1, 1, 5, 1, 1, 1])


def test_fast_path_disarmed_by_a_kernel_that_overwrites_without_upload():
    a = sa.SmartArray(np.zeros(16), where="gpu")
    view = a[0:8]
    double(view)
    assert view._njit_fast is not None
    fill_const[1, 8](sa.Out(view), 3.0)  # nothing uploaded: only the device write disarms
    assert view._njit_fast is None
    double(view)
    np.testing.assert_array_equal(np.asarray(a)[:8], 6.0)


def test_In_is_read_only_and_records_nothing():
    a = sa.SmartArray(np.arange(4.0))
    a.gpu()
    assert total(sa.In(a)) == 6.0
    assert a.is_valid("gpu")  # not marked changed
    with pytest.raises(numba.core.errors.TypingError):
        set_first(sa.In(a), 1.0)
    assert numba.typeof(sa.In(a)).mutable is False


def test_Out_skips_the_download():
    a = sa.SmartArray(np.zeros(32))
    add_one[1, 32](a)
    sa.reset_stats()
    fill_index(sa.Out(a))
    assert sa.stats().d2h_count == 0
    np.testing.assert_array_equal(np.asarray(a), np.arange(32.0))


@pytest.mark.parametrize("make", [lambda a: a[::2], lambda a: a.reshape(4, 4).T, lambda a: a[3:9]])
def test_views_as_njit_arguments(make):
    base = np.arange(16.0)
    a = sa.SmartArray(base)
    view = make(a)
    scale_in_place(view)
    expected = base.copy()
    make_view = make(expected)
    make_view *= 2
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_parallel_njit_and_two_smartarrays():
    x = sa.SmartArray(np.ones(100))
    y = sa.SmartArray(np.arange(100.0))
    add_parallel(x, y)
    np.testing.assert_array_equal(np.asarray(x), 1 + np.arange(100.0))
    assert y.is_valid("host")


def test_function_compiled_for_ndarrays_then_smartarrays_and_back():
    @numba.njit
    def inc(x):
        x += 1

    plain = np.zeros(3)
    smart = sa.SmartArray(np.zeros(3))
    smart.gpu()
    inc(plain)
    inc(smart)  # not the ndarray version: the device copy must learn of the write
    inc(plain)
    assert not smart.is_valid("gpu")
    np.testing.assert_array_equal(np.asarray(smart), np.ones(3))
    np.testing.assert_array_equal(plain, np.full(3, 2.0))


def test_eager_signature_fails_with_a_clear_type_error():
    @numba.njit("f8(f8[::1])")
    def eager(x):
        return x.sum()

    with pytest.raises(TypeError, match="SmartArray"):
        eager(sa.SmartArray(np.zeros(3)))


def test_failed_later_argument_keeps_state_consistent():
    @numba.njit
    def put(x, n):
        x[0] = n

    a = sa.SmartArray(np.zeros(3))
    put(a, 1)  # compiled for (SmartArray, int64)
    a.gpu()
    with pytest.raises(OverflowError):
        put(a, 2**70)  # the second argument fails to unbox after the first was entered
    np.testing.assert_array_equal(np.asarray(a), [1.0, 0, 0])
    add_one[1, 4](a)
    np.testing.assert_array_equal(np.asarray(a), [2.0, 1, 1])


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="dtype"):
        total(sa.SmartArray(np.zeros(2, dtype=np.longdouble)))


def test_intent_of_a_plain_array_is_refused_by_njit():
    with pytest.raises(TypeError):
        total(sa.In(np.zeros(3)))


PACKED = np.dtype([("n", "i1"), ("x", "f8")])  # 'x' at offset 1 in 9-byte records


def test_field_view_of_packed_records_is_typed_unaligned_and_njit_reads_and_writes_it():
    records = np.zeros(5, PACKED)
    records["n"] = np.arange(5)
    records["x"] = np.arange(5) * 1.5
    a = sa.SmartArray(records)
    x = a["x"]
    assert x._numba_type_.aligned is False  # offset 1, stride 9: no element is 8-aligned
    assert a["n"]._numba_type_.aligned is True  # int8 needs no alignment
    assert sa.SmartArray(np.arange(4.0))[1:]._numba_type_.aligned is True
    assert double(x) == 2 * records["x"].sum()
    np.testing.assert_array_equal(np.asarray(a["x"]), records["x"] * 2)
    np.testing.assert_array_equal(np.asarray(a["n"]), np.arange(5))  # neighbours untouched


def test_views_taken_inside_njit_of_an_unaligned_field_stay_unaligned():
    # numba derives a view's type with copy(): the alignment must survive it, or compiled code
    # would use aligned 8-byte accesses on the view (a fault on a GPU, undefined on some CPUs).
    records = np.zeros(6, PACKED)
    records["x"] = np.arange(6) * 1.5
    x = sa.SmartArray(records)["x"]
    assert x._numba_type_.copy(layout="A").aligned is False
    assert x._numba_type_.copy(ndim=1, readonly=True).aligned is False

    @numba.njit
    def tail(v):
        return v[2:]

    t = tail(x)
    np.testing.assert_array_equal(np.asarray(t), records["x"][2:])


def test_adopted_misaligned_host_buffer_is_typed_unaligned():
    host = np.frombuffer(bytearray(8 * 4 + 1), dtype=np.float64, offset=1)
    assert not host.flags.aligned
    a = sa.SmartArray(host, copy=False)
    assert a._numba_type_.aligned is False
    assert sa.SmartArray(host)._numba_type_.aligned is True  # a copy is in aligned memory
    set_first(a, 3.5)
    assert host[0] == 3.5


def test_plain_array_passed_where_a_smartarray_version_is_compiled():
    # An eager signature with the SmartArray type: a plain array of the same type converts
    # to it (same data model). Numba's array_to_array cast asserted here before.
    sig = numba.types.float64(sa.SmartArray(np.zeros(3))._numba_type_)

    @numba.njit(sig)
    def inner(x):
        return x.sum()

    @numba.njit
    def outer(y):
        return inner(y)

    assert outer(np.arange(4.0)) == 6.0


CACHE_SCRIPT = textwrap.dedent(
    """
    import numba, numpy as np, smartarray as sa

    @numba.njit(cache=True)
    def scale(x):
        for i in range(x.size):
            x[i] *= 3
        return x.sum()

    a = sa.SmartArray(np.arange(4.0))
    first = scale(a)  # through the hooks; the second call takes the fast path (cached code too)
    print(first, scale(a), scale.stats.cache_hits.most_common(1) if scale.stats.cache_hits else [])
    """
)


def test_cache_true(tmp_path):
    script = tmp_path / "cached_module.py"
    script.write_text(CACHE_SCRIPT)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = [
        subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.startswith("18.0 54.0")
    assert "[]" in runs[0].stdout  # compiled and saved
    assert "1)]" in runs[1].stdout  # loaded from the cache
