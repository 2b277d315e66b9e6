"""SmartArrays as @numba.njit arguments: values, bytes moved, intents, the fast path, traps.

The last section holds what ``@numba.njit`` functions return for SmartArray arguments. Numba's
own SmartArray came back from njit functions as a SmartArray: the argument itself, views of it,
and new arrays computed from it. Here the same holds, and a returned view shares the argument's
coherence state, so a write through it is recorded (never lost).
"""

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
from tests._targets import real_target_env


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


# --- what njit functions return -------------------------------------------------------------

# Child processes import this checkout's smartarray.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sa.__file__)))


@numba.njit
def ident(x):
    return x


@numba.njit
def middle(x):
    return x[1:3]


@numba.njit
def transposed(x):
    return x.T


@numba.njit
def reshaped(x):
    return x.reshape((2, 3))


@numba.njit
def cos_sin(x):
    return np.cos(np.sin(x))


@numba.njit
def plus_one(x):
    return x + 1


@numba.njit
def write_and_view(x):
    x[1] = 42.0
    return x[1:]


@numba.njit
def both(x, y):
    return x[::2], y


@numba.njit
def fresh(n):
    return np.zeros(n)


@cuda.jit
def inc(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def test_returned_argument_is_the_same_object_and_a_write_through_it_is_kept():
    # The returned ndarray used to alias the host copy, so the write of
    # 100 was not recorded and the next launch overwrote it.
    a = sa.SmartArray(np.zeros(4))
    v = ident(a)
    assert v is a
    inc[1, 4](a)
    v[0] = 100.0
    inc[1, 4](a)
    np.testing.assert_array_equal(np.asarray(a), [101.0, 2, 2, 2])


def test_returned_argument_after_device_work_is_current_and_counted_once():
    a = sa.SmartArray(np.zeros(8))
    inc[1, 8](a)
    sa.reset_stats()
    assert ident(a) is a
    assert ident(a) is a  # the fast path: same object again
    s = sa.stats()
    assert (s.d2h_count, s.d2h_bytes, s.h2d_count) == (1, 64, 0)
    np.testing.assert_array_equal(np.asarray(a), np.ones(8))


@pytest.mark.parametrize(
    ("fn", "ref"),
    [
        (middle, lambda b: b[1:3]),
        (transposed, lambda b: b.T),
        (reshaped, lambda b: b.reshape((2, 3))),
    ],
    ids=["slice", "T", "reshape"],
)
def test_returned_view_shares_the_argument_state(fn, ref):
    base = np.arange(6.0) if fn is not transposed else np.arange(6.0).reshape(2, 3)
    a = sa.SmartArray(base)
    a.gpu()  # current on both sides
    v = fn(a)
    assert isinstance(v, sa.SmartArray)
    assert v._buf is a._buf
    np.testing.assert_array_equal(np.asarray(v), ref(base))
    # A write through the view is recorded: the kernel sees it, nothing goes stale.
    v[...] = -1.0
    inc[1, 6](a.reshape(-1))
    expected = base.copy()
    ref(expected)[...] = -1.0
    np.testing.assert_array_equal(np.asarray(a), expected + 1)
    np.testing.assert_array_equal(np.asarray(v), ref(expected + 1))


def test_returned_view_sees_later_device_writes():
    a = sa.SmartArray(np.zeros(4))
    v = middle(a)
    inc[1, 4](a)
    np.testing.assert_array_equal(np.asarray(v), [1.0, 1.0])


def test_write_inside_the_function_then_returned_view():
    a = sa.SmartArray(np.zeros(4))
    a.gpu()
    v = write_and_view(a)
    assert isinstance(v, sa.SmartArray) and v._buf is a._buf
    np.testing.assert_array_equal(np.asarray(v), [42.0, 0, 0])
    inc[1, 4](a)  # the write made inside njit reaches the device
    np.testing.assert_array_equal(np.asarray(a), [1.0, 43, 1, 1])


def test_view_of_a_read_only_argument_marks_nothing_changed():
    a = sa.SmartArray(np.arange(4.0))
    a.gpu()
    v = middle(sa.In(a))
    assert isinstance(v, sa.SmartArray) and v._buf is a._buf
    assert a.valid_at == ("host", "gpu")
    assert ident(sa.In(a)) is a


@pytest.mark.parametrize(
    ("fn", "ref"),
    [(cos_sin, lambda b: np.cos(np.sin(b))), (plus_one, lambda b: b + 1)],
    ids=["cos(sin(x))", "x + 1"],
)
def test_new_array_from_a_smartarray_is_a_smartarray_current_on_the_host(fn, ref):
    base = np.linspace(0, 1, 5)
    a = sa.SmartArray(base)
    r = fn(a)
    assert isinstance(r, sa.SmartArray)
    assert r._buf is not a._buf
    assert r.valid_at == ("host",)
    np.testing.assert_allclose(np.asarray(r), ref(base))
    sa.reset_stats()
    inc[1, 5](r)  # an ordinary SmartArray: one upload, then its own state
    assert (sa.stats().h2d_count, sa.stats().h2d_bytes) == (1, 40)
    np.testing.assert_allclose(np.asarray(r), ref(base) + 1)
    np.testing.assert_array_equal(np.asarray(a), base)


def test_tuple_of_view_and_other_argument():
    a = sa.SmartArray(np.arange(6.0))
    b = sa.SmartArray(np.ones(2))
    v, w = both(a, b)
    assert w is b
    assert isinstance(v, sa.SmartArray) and v._buf is a._buf
    np.testing.assert_array_equal(np.asarray(v), [0.0, 2, 4])


def test_plain_ndarrays_stay_as_numba_gives_them():
    x = np.arange(4.0)
    assert ident(x) is x
    assert type(middle(x)) is np.ndarray
    assert type(cos_sin(x)) is np.ndarray
    assert type(plus_one(x)) is np.ndarray
    assert type(fresh(3)) is np.ndarray


@numba.njit(parallel=True)
def parallel_expr(x):
    return np.cos(x) + x * 2


@pytest.mark.parametrize("make", [lambda b: b, lambda b: b.T], ids=["C", "F"])
def test_parallel_array_expression_is_a_smartarray(make):
    base = np.arange(6.0).reshape(2, 3)
    a = sa.SmartArray(base)
    r = parallel_expr(make(a))
    assert isinstance(r, sa.SmartArray) and r.valid_at == ("host",)
    np.testing.assert_allclose(np.asarray(r), np.cos(make(base)) + make(base) * 2)


RESULTS_CACHE_SCRIPT = textwrap.dedent(
    """
    import numba, numpy as np, smartarray as sa

    @numba.njit(cache=True)
    def tail_and_double(x):
        return x[1:], x * 2

    a = sa.SmartArray(np.arange(4.0))
    v, w = tail_and_double(a)
    print(type(v).__name__, v._buf is a._buf, type(w).__name__, w.sum(),
          bool(tail_and_double.stats.cache_hits))
    """
)


def test_results_with_cache_true(tmp_path):
    script = tmp_path / "cached_results.py"
    script.write_text(RESULTS_CACHE_SCRIPT)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    outs = []
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(run.stdout.split())
    assert outs[0] == ["SmartArray", "True", "SmartArray", "12.0", "False"]
    assert outs[1] == ["SmartArray", "True", "SmartArray", "12.0", "True"]


CUDA_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    import smartarray as sa

    def kernel(x, y):
        i = cuda.grid(1)
        v = x[1:]
        w = x.T
        if i < v.size:
            y[i] = v[i] + w[i]

    a = sa.SmartArray(np.zeros(8, np.float32))
    sig = (a._numba_type_, a._numba_type_)
    ptx, resty = cuda.compile_ptx(kernel, sig, cc=(8, 0))
    print("PTX", len(ptx) > 0, resty)
    """
)


def test_cuda_target_still_compiles_views_of_smartarrays():
    env = real_target_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", CUDA_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "PTX True none" in run.stdout
