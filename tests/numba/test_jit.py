"""smartarray.jit / smartarray.njit / smartarray.explain: drop-ins that infer In hints."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from numba import cuda
from numba.cuda import args as numba_args

import smartarray as sa
from smartarray import memory
from smartarray.jit import _hinted_args, _InferredIn, _plan
from smartarray.testing import is_strict, strict
from tests._targets import real_target_env, with_checkout


def _accumulate(out, x, y):  # pragma: no cover - runs as a kernel
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        out[i] = 0.9 * out[i] + x[i] * y[i]


sa_accumulate = sa.jit(_accumulate)
plain_accumulate = cuda.jit(_accumulate)


@sa.jit(device=True)
def _dev_scale(a, i):  # pragma: no cover - device function
    return 2.0 * a[i]


@sa.jit
def scaled(out, x):  # pragma: no cover - runs as a kernel
    i = cuda.grid(1)
    if i < out.size:
        out[i] = _dev_scale(x, i)


@sa.njit
def bump_first_row(m):
    r = m[0]
    r += 1.0  # a row of a 2-d `m` is a view: this writes it; an element of a 1-d is a copy
    return r


def _trace_pipeline(kernel, hints: bool, n=64, steps=5):
    x = sa.SmartArray(np.cos(np.arange(n) * 0.1))
    y = sa.SmartArray(np.linspace(1.0, 2.0, n))
    out = sa.SmartArray(np.zeros(n))
    check = 0.0
    with sa.trace() as t:
        for s in range(steps):
            if hints:
                kernel[2, 32](out, sa.In(x), sa.In(y))
            else:
                kernel[2, 32](out, x, y)
            check += float(x[s]) + float(y[-1])  # the host reads the inputs
        result = np.array(out)
    return result, check, [(e.direction, e.nbytes) for e in t.events]


def test_bytes_without_hints_equal_hand_annotated():
    annotated = _trace_pipeline(plain_accumulate, hints=True)
    inferred = _trace_pipeline(sa_accumulate, hints=False)
    bare = _trace_pipeline(plain_accumulate, hints=False)
    np.testing.assert_array_equal(inferred[0], annotated[0])
    assert inferred[1] == annotated[1] == bare[1]
    assert inferred[2] == annotated[2]
    n = 64 * 8
    # hand-optimal: each array up once, the result down once
    assert sorted(inferred[2]) == sorted([("h2d", n)] * 3 + [("d2h", n)])
    assert sum(b for _, b in bare[2]) > sum(b for _, b in inferred[2])  # plain jit re-downloads


def test_read_only_argument_stays_current_where_it_was():
    x = sa.SmartArray(np.arange(8.0))
    out = sa.SmartArray(np.zeros(8))
    scaled[1, 8](out, x)
    assert x.is_valid("host") and x.is_valid("gpu")
    assert not out.is_valid("host")
    np.testing.assert_array_equal(np.array(out), 2.0 * np.arange(8.0))


def test_explicit_hint_wins():
    x = sa.SmartArray(np.arange(8.0))
    out = sa.SmartArray(np.zeros(8))
    scaled[1, 8](out, sa.InOut(x))  # the user says it is written: recorded so
    assert not x.is_valid("host")
    hinted = _hinted_args(_plan(_accumulate, True), (out, sa.Out(x), numba_args.InOut(x)), True)
    assert type(hinted[1]) is sa.Out and type(hinted[2]) is numba_args.InOut


def test_plain_ndarrays_get_numbas_in():
    x = np.arange(8.0)
    out = np.zeros(8)
    hinted = _hinted_args(_plan(_accumulate, True), (out, x, x), True)
    assert hinted[0] is out
    assert isinstance(hinted[1], numba_args.In) and hinted[1].value is x
    scaled[1, 8](out, x)
    np.testing.assert_array_equal(out, 2.0 * x)
    d = cuda.to_device(x)
    assert _hinted_args(_plan(_accumulate, True), (out, d, 1.0), True)[1] is d  # as it is


def test_rank_decides_element_copies():
    m1 = sa.SmartArray(np.arange(4.0))
    m1.get("gpu")
    assert bump_first_row(m1) == 1.0
    assert m1.is_valid("gpu")  # 1-d: `r` is an element copy, `m` read only
    m2 = sa.SmartArray(np.zeros((4, 3)))
    m2.get("gpu")
    bump_first_row(m2)
    assert not m2.is_valid("gpu")  # 2-d: a row view was written
    np.testing.assert_array_equal(np.array(m2)[0], np.ones(3))


def test_proxy_reaches_numbas_dispatcher():
    assert scaled.py_func.__name__ == "scaled"
    assert scaled.__wrapped__ is not None
    assert isinstance(scaled.overloads, dict)
    assert "smartarray.kernel" in repr(scaled)
    spec = scaled.specialize(sa.SmartArray(np.zeros(4)), sa.SmartArray(np.zeros(4)))
    out, x = sa.SmartArray(np.zeros(4)), sa.SmartArray(np.arange(4.0))
    spec[1, 4](out, x)
    assert x.is_valid("host")
    out2 = sa.SmartArray(np.zeros(4))
    scaled[1, 4, 0, 0](out2, x)  # griddim, blockdim, stream, sharedmem
    np.testing.assert_array_equal(np.array(out2), 2.0 * np.arange(4.0))
    assert x.is_valid("host")
    fa = sa.SmartArray(np.zeros(4))
    scaled.forall(4)(fa, x)
    np.testing.assert_array_equal(np.array(fa), 2.0 * np.arange(4.0))
    assert x.is_valid("host")


def test_eager_signature_and_decorator_forms():
    @sa.jit("void(float64[:], float64[:])")
    def copy(out, x):  # pragma: no cover - runs as a kernel
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i]

    @sa.jit(debug=False)
    def copy2(out, x):  # pragma: no cover - runs as a kernel
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i]

    for k in (copy, copy2):
        out, x = sa.SmartArray(np.zeros(4)), sa.SmartArray(np.arange(4.0))
        k[1, 4](out, x)
        np.testing.assert_array_equal(np.array(out), np.arange(4.0))
        assert x.is_valid("host") and x.is_valid("gpu")


def test_device_function_is_numbas():
    assert type(_dev_scale).__module__.startswith("numba")  # numba's own, no proxy


# -- njit ---------------------------------------------------------------------------------------


@sa.njit
def total(x, y):
    y[0] = x.sum()
    return x.sum()


@sa.njit(cache=False)
def first(x):
    return x[0]


def test_njit_read_only_smartarray_keeps_its_device_copy():
    x = sa.SmartArray(np.arange(4.0))
    y = sa.SmartArray(np.zeros(2))
    x.get("gpu")  # current in both places
    with sa.trace() as t:
        assert total(x, y) == 6.0
    assert t.events == []
    assert x.is_valid("gpu") and x.is_valid("host")
    plain = numba.njit(total.py_func)
    plain(x, y)
    assert not x.is_valid("gpu")  # plain njit records a host write


def _write_through_list_copy(x):
    l2 = [x].copy()  # a shallow copy of a list: its item is x itself
    l2[0][0] = 3.0


def _write_through_dict_copy(x):
    d2 = {0: x}.copy()
    d2[0][0] = 3.0


@pytest.mark.parametrize("fn", [_write_through_list_copy, _write_through_dict_copy])
def test_njit_write_through_a_copied_container_reaches_both_copies(fn):
    x = sa.SmartArray(np.zeros(4))
    x.get("gpu")  # current in both places
    sa.njit(fn)(x)
    assert np.asarray(x)[0] == 3.0
    # the device copy must not be declared current with the old value
    assert x.get("gpu").copy_to_host()[0] == 3.0
    numba.njit(fn)(plain := np.zeros(4))
    assert plain[0] == 3.0


@cuda.jit(device=True)
def _dev_reads(a):  # pragma: no cover - device function
    return a[0]


@cuda.jit(device=True)
def _dev_writes(a):  # pragma: no cover - device function
    a[0] = 5.0


_LAUNCHES = {
    "configured-each-time": lambda kern: lambda *a: kern[1, 1](*a),
    "configured-once": lambda kern: kern[1, 1],
    "forall": lambda kern: kern.forall(1),
}


@pytest.mark.parametrize("how", list(_LAUNCHES))
def test_kernel_sees_a_rebound_device_function(how):
    def run(jit, make):
        ns = {"cuda": cuda, "helper": _dev_reads}
        exec("def kern(a, out):\n    out[0] = helper(a)\n", ns)
        launch = _LAUNCHES[how](jit(ns["kern"]))
        a, out = make(np.zeros(4)), make(np.zeros(1))
        launch(a, out)
        ns["helper"] = _dev_writes  # rebound between launches
        launch(a, out)
        return a

    plain = run(cuda.jit, lambda v: v)
    a = run(sa.jit, sa.SmartArray)
    # Which helper the second launch runs is the target's: the simulator (and the fake driver,
    # whose kernel bodies it runs) looks the global up at each launch, numba-cuda's real target
    # compiled it into the kernel at the first. sa.jit must do what plain cuda.jit does.
    assert plain[0] in (0.0, 5.0)
    if memory.SIMULATOR:
        assert plain[0] == 5.0  # the rebinding reaches the kernel: the case the test is for
    assert a.get("gpu").copy_to_host()[0] == plain[0]
    assert np.asarray(a)[0] == plain[0]  # the host copy was not left current with old values


@numba.njit
def _njit_reads(a):
    return a[0]


@numba.njit
def _njit_writes(a):
    a[0] = 5


def test_njit_sees_a_rebound_helper():
    def run(njit, make):
        ns = {"helper": _njit_reads}
        exec("def f(a):\n    helper(a)\n", ns)
        f = njit(ns["f"])
        f(make(np.zeros(4)))
        ns["helper"] = _njit_writes
        # numba compiles a new signature with the new helper (the old one keeps the old)
        x = make(np.zeros(4, dtype=np.int64))
        if isinstance(x, sa.SmartArray):
            x.get("gpu")  # current in both places
        f(x)
        return x

    plain = run(numba.njit, lambda v: v)
    x = run(sa.njit, sa.SmartArray)
    assert plain[0] == 5
    assert np.asarray(x)[0] == 5
    assert x.get("gpu").copy_to_host()[0] == 5  # not the old value declared current


def test_njit_keywords_and_decorator_forms():
    x = sa.SmartArray(np.arange(3.0))
    x.get("gpu")
    assert first(x=x) == 0.0
    assert x.is_valid("gpu")
    assert first(np.arange(2.0) + 5) == 5.0  # plain arrays as numba takes them


def test_njit_proxy_called_from_numba_njit():
    @numba.njit
    def outer(a, b):
        return total(a, b)

    assert outer(np.arange(3.0), np.zeros(1)) == 3.0


# -- explain ------------------------------------------------------------------------------------


def test_explain_says_what_and_why():
    line = inspect.getsourcelines(_accumulate)[1]
    text = sa.explain(sa_accumulate)
    assert text.splitlines()[0] == "_accumulate:"
    assert f"out: written at line {line + 2}: `out[i] = 0.9 * out[i] + x[i] * y[i]`" in text
    assert "x: read only" in text and "y: read only" in text
    assert sa.explain(plain_accumulate) == text
    with pytest.raises(TypeError, match="explain"):
        sa.explain("not a function")


# -- the real numba.cuda target (no simulator) ----------------------------------------------------

REAL = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda
    import smartarray as sa
    from numba.cuda.dispatcher import CUDADispatcher

    @sa.jit
    def k(out, x):
        i = cuda.grid(1)
        if i < out.size:
            cuda.atomic.add(out, i, x[i])

    assert isinstance(k.__wrapped__, CUDADispatcher)
    assert isinstance(k, CUDADispatcher)  # the proxy passes isinstance
    print(sa.explain(k))
    ptx, _ = cuda.compile_ptx(k.py_func, (sa.SmartArray(np.zeros(4))._numba_type_,) * 2, cc=(8, 0))
    print("ptx", len(ptx) > 0)
    launch = k[128, 32]  # numba's _LaunchConfiguration behind the launch wrapper
    assert launch is k[128, 32]  # numba caches it; so does the wrapper
    assert launch.pre_launch_callbacks == [] and launch.griddim == (128, 1, 1)
    assert k.configure(128, 32).blockdim == (32, 1, 1)
    print("launch ok")
    """
)


def test_real_target_proxy_and_typing():
    env = real_target_env()
    with_checkout(env)
    out = subprocess.run(
        [sys.executable, "-c", REAL], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "out: atomic update" in out.stdout
    assert "x: read only" in out.stdout
    assert "ptx True" in out.stdout
    assert "launch ok" in out.stdout


def test_inferred_in_keeps_the_bare_type():
    a = sa.SmartArray(np.zeros(4))
    assert _InferredIn(a)._numba_type_ is a._numba_type_
    assert sa.In(a)._numba_type_ is not a._numba_type_


# --- page-locked plain ndarrays are not made asynchronous -----------------------------------


@sa.jit
def _copy_in(out, x):  # pragma: no cover - runs as a kernel
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i]


@pytest.mark.skipif(not is_strict(), reason="runs under SMARTARRAY_STRICT=1 only")
@pytest.mark.parametrize("make", ["pinned_array", "registered"])
def test_a_host_write_after_a_launch_does_not_reach_a_page_locked_input(make):
    # numba's In uploads with cuMemcpyHtoDAsync even on stream 0: from page-locked memory the
    # DMA reads the host bytes when it runs. Plain cuda.jit (InOut) waits for the launch; so
    # must smartarray.jit, where the array is never written.
    for seed in range(3):
        with strict(seed=seed):
            if make == "registered":
                x = np.arange(8.0)
                registration = sa.register(x)
            else:
                x = getattr(sa, make)(8)
                x[:] = np.arange(8.0)
                registration = None
            out = cuda.device_array(8)
            _copy_in[1, 8](out, x)
            x[0] = 100.0  # right after the launch returned
            np.testing.assert_array_equal(out.copy_to_host(), np.arange(8.0))
            if registration is not None:
                sa.deregister(x)


def test_launches_alternating_between_configurations_each_use_their_own():
    """A loop alternating two launch configurations: each launch covers what its own
    configuration says (off the simulator one wrapper per configuration is kept and reused;
    the simulator's kernel configures itself in place, so it is never kept there)."""
    out = sa.SmartArray(np.zeros(64))
    x = sa.SmartArray(np.arange(64.0))
    for _ in range(3):
        out[:] = 0.0
        scaled[1, 16](out, x)  # 16 threads: the first 16 elements
        np.testing.assert_array_equal(np.asarray(out)[:17], [*(2.0 * np.arange(16.0)), 0.0])
        scaled[2, 32](out, x)  # all 64
        np.testing.assert_array_equal(np.asarray(out), 2.0 * np.arange(64.0))
    if not sa.memory.SIMULATOR:
        assert scaled[1, 16] is scaled[1, 16] and scaled[2, 32] is scaled[2, 32]
