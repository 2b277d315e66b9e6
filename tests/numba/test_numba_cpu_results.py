"""What ``@numba.njit`` functions return for SmartArray arguments (issue 13).

Numba's own SmartArray came back from njit functions as a SmartArray: the argument itself,
views of it, and new arrays computed from it. Here the same holds, and a returned view shares
the argument's coherence state, so a write through it is recorded (never lost).
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
from tests._targets import real_target_env

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


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()


def test_returned_argument_is_the_same_object_and_a_write_through_it_is_kept():
    # The example of issue 13: the returned ndarray aliased the host copy, so the write of
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


CACHE_SCRIPT = textwrap.dedent(
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
    script.write_text(CACHE_SCRIPT)
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
