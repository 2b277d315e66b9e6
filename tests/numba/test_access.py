"""The access analysis (smartarray._access): a corpus of known patterns, and soundness.

Each corpus function states, per parameter, what a sound and useful analysis infers:
``"r"`` (never written), ``"w"`` (written whatever is passed), or an int ``k`` (read only for
arrays of 1 to ``k`` dimensions: what the function writes is an element copy there).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

import smartarray as sa
from smartarray import _access
from smartarray._access import NEVER, analyse
from tests._targets import real_target_env, with_checkout

# -- device functions and helpers used by the corpus --------------------------------------------


@cuda.jit(device=True)
def dev_write(a, i):  # pragma: no cover - device function
    a[i] = 1.0


@cuda.jit(device=True)
def dev_read(a, i):  # pragma: no cover - device function
    return a[i] * 2.0


@cuda.jit(device=True)
def dev_view(a):  # pragma: no cover - device function
    return a[1:]


@cuda.jit(device=True)
def dev_alias(a):  # pragma: no cover - device function
    return a


@cuda.jit(device=True)
def dev_nested(a, i):  # pragma: no cover - device function
    dev_write(a, i)


def python_helper(a):  # a plain Python function: not analysed
    return a


@numba.njit
def njit_read(a):  # pragma: no cover - compiled
    return a.sum()


@numba.njit
def njit_write(a):  # pragma: no cover - compiled
    a[0] = 1.0


# -- the corpus ---------------------------------------------------------------------------------


def k_reads(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + math.sqrt(y[i]) + y.sum()


def k_write_slice(x, y):
    v = x[1:]
    v[0] = y[0]


def k_write_transpose(x, y):
    x.T[0, 0] = y[0, 0]


def k_tuple(a, b):
    t = (a, b)
    t[1][0] = t[0][0]


def k_tuple_unpack(a, b):
    p, q = (a, b)
    q[0] = p[0]


def k_tuple_dynamic(a, b, k):
    t = (a, b)
    t[k][0] = 1.0


def k_device(a, b, c, d):
    i = cuda.grid(1)
    dev_write(a, i)
    c[i] = dev_read(b, i)
    dev_nested(i=i, a=d)


def k_device_returns_view(a, b):
    v = dev_view(a)
    v[0] = b[0]


def k_atomics(h, m, x):
    i = cuda.grid(1)
    cuda.atomic.add(h, 0, 1)
    cuda.atomic.max(m[1:], 0, x[i])


def k_conditional(x, y):
    i = cuda.grid(1)
    if x[i] > 0:
        y[i] = 0.0


def k_loop_alias(x, y):
    s = y[0:]
    for j in range(3):
        s = x[j:]
    s[0] = 1.0


def k_accumulate(out, x):
    acc = 0.0
    for j in range(x.size):
        acc += x[j] * x[j]
    out[0] = acc


def k_element_update(x, out):
    i = cuda.grid(1)
    e = x[i]
    e += 1.0
    out[i] = e


def k_2d(out, x):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] + x[j, i]


def k_shared(x, out):
    sm = cuda.shared.array(4, numba.float64)
    sm[0] = x[0]
    cuda.syncthreads()
    out[0] = sm[0]


def k_unknown(x, y):
    python_helper(x)
    y[0] = 1.0


def k_njit_calls(a, b):
    njit_write(a)
    return njit_read(b)


def n_inplace(x, y):
    x += 1.0
    return y.sum()


def n_methods(x, y, z):
    y.fill(0.0)
    return x.sum() + x.mean() + z.copy()[0]


def n_return(x, y):
    z = y[0]
    if z > 0:
        return x
    return x[1:]


def n_return_element(x):
    return x[0]


def n_list_escape(x, y):
    lst = [x]
    lst[0][0] = 1.0
    return y[0]


def n_store(x, lst):
    lst[0] = x


def n_ufunc(a, b, c):
    np.add(a, b, c)


def n_recursive(a, n):
    if n > 0:
        n_recursive_j(a, n - 1)
    return a[0]


def n_record(x, y):
    r = x[0]
    r.f = 1.0
    return y[0]


def n_closure(x):
    def inner():
        x[0] = 1.0

    inner()


def n_varargs(*arrays):
    return arrays[0][0]


def n_reshape(x):
    r = x.reshape(2, -1)
    e = r[0]
    e += 1.0


def n_list_copy(x, y):
    l2 = [x].copy()  # a shallow copy: its item is still x
    l2[0][0] = 3.0
    return y[0]


def n_dict_copy(x, y):
    d2 = {0: x}.copy()
    d2[0][0] = 3.0
    return y[0]


def n_record_field_named_shape(x, y):
    x[0].shape[0] = 5.0  # a record field named "shape": a nested array inside x
    n = y.size
    n += 1  # an array's size is a plain value
    return y.shape[0] + n


def n_array_copy(x, y):
    c = x.copy()  # the receiver is an array: the copy is new memory
    c[0] = 1.0
    s = y[1:].copy()
    s[0] = 2.0


n_recursive_j = numba.njit(n_recursive)

CUDA_CORPUS = [
    (k_reads, {"out": "w", "x": "r", "y": "r"}),
    (k_write_slice, {"x": "w", "y": "r"}),
    (k_write_transpose, {"x": "w", "y": "r"}),
    (k_tuple, {"a": "r", "b": "w"}),
    (k_tuple_unpack, {"a": "r", "b": "w"}),
    (k_tuple_dynamic, {"a": "w", "b": "w", "k": "r"}),
    (k_device, {"a": "w", "b": "r", "c": "w", "d": "w"}),
    (k_device_returns_view, {"a": "w", "b": "r"}),
    (k_atomics, {"h": "w", "m": "w", "x": "r"}),
    (k_conditional, {"x": "r", "y": "w"}),
    (k_loop_alias, {"x": "w", "y": "w"}),
    (k_accumulate, {"out": "w", "x": "r"}),
    (k_element_update, {"x": 1, "out": "w"}),
    (k_2d, {"out": "w", "x": "r"}),
    (k_shared, {"x": "r", "out": "w"}),
    (k_unknown, {"x": "w", "y": "w"}),
    (k_njit_calls, {"a": "w", "b": "r"}),
]
CPU_CORPUS = [
    (k_reads, {"out": "w", "x": "r", "y": "r"}),  # arithmetic gives new values
    (k_shared, {"x": "r", "out": "w"}),  # storing into a new array copies
    (n_inplace, {"x": "w", "y": "r"}),
    (n_methods, {"x": "r", "y": "w", "z": "r"}),
    (n_return, {"x": "w", "y": "r"}),
    (n_return_element, {"x": 1}),
    (n_list_escape, {"x": "w", "y": 1}),
    (n_store, {"x": "w", "lst": "w"}),
    (n_ufunc, {"a": "r", "b": "r", "c": "w"}),
    (n_recursive, {"a": "w", "n": "r"}),
    (n_record, {"x": "w", "y": 1}),
    (n_closure, {"x": "w"}),
    (n_varargs, {"arrays": "w"}),
    (n_reshape, {"x": "w"}),
    (n_list_copy, {"x": "w", "y": 1}),
    (n_dict_copy, {"x": "w", "y": 1}),
    (n_array_copy, {"x": "r", "y": "r"}),
    (n_record_field_named_shape, {"x": "w", "y": "r"}),
]


def _category(thr: float) -> object:
    if thr == NEVER:
        return "r"
    if thr < 1:
        return "w"
    return thr


@pytest.mark.parametrize(
    ("fn", "expected", "on_cuda"),
    [(f, e, True) for f, e in CUDA_CORPUS] + [(f, e, False) for f, e in CPU_CORPUS],
    ids=[f.__name__ for f, _ in CUDA_CORPUS] + [f"cpu-{f.__name__}" for f, _ in CPU_CORPUS],
)
def test_corpus(fn, expected, on_cuda):
    access = analyse(fn, cuda=on_cuda)
    got = {p.name: _category(p.threshold) for p in access.params}
    assert got == expected, access.explain()


def test_reasons_name_the_line_and_the_code():
    first = inspect.getsourcelines(k_reads)[1]
    text = analyse(k_reads, cuda=True).explain()
    assert f"out: written at line {first + 3}: `out[i] = x[i] + math.sqrt(y[i]) + y.sum()`" in text
    assert "x: read only" in text and "y: read only" in text
    unknown = analyse(k_unknown, cuda=True).params[0].describe()
    assert "passed to unknown function python_helper" in unknown
    assert "counted as written" in unknown
    device = analyse(k_device, cuda=True).params[0].describe()
    assert "passed to dev_write" in device and "`a[i] = 1.0`" in device
    assert "atomic update" in analyse(k_atomics, cuda=True).params[0].describe()
    assert "read only for arrays of 1 to 1 dimension" in (
        analyse(k_element_update, cuda=True).params[0].describe()
    )


def test_record_field_named_like_an_array_attribute_is_written():
    dt = np.dtype([("shape", np.float64, (3,)), ("v", np.float64)])
    x = sa.SmartArray(np.zeros(2, dtype=dt))
    x.get("gpu")  # current in both places
    sa.njit(n_record_field_named_shape)(x, np.zeros(3))
    assert np.asarray(x)[0]["shape"][0] == 5.0
    assert x.get("gpu").copy_to_host()[0]["shape"][0] == 5.0


def test_read_only_for_depends_on_rank_and_record_fields():
    x = analyse(k_element_update, cuda=True).params[0]
    assert x.read_only_for(1)
    assert not x.read_only_for(2)
    assert not x.read_only_for(0)  # a 0-d array: `e` would be the array itself
    assert not x.read_only_for(1, record=True)  # a record element is a reference
    assert analyse(k_reads, cuda=True).params[1].read_only_for(3, record=True)


def test_dispatchers_and_cache():
    for disp in (cuda.jit(k_reads), numba.njit(n_inplace)):
        assert analyse(disp) is analyse(disp)
    assert analyse(cuda.jit(k_reads)).params[1].threshold == NEVER  # a kernel: cuda typing
    with pytest.raises(TypeError, match="Python function or a Numba dispatcher"):
        analyse(42)


# -- rebinding what the analysis resolved -----------------------------------------------------


class _Helpers:
    helper = dev_read


def _closure_kernel():
    helper = dev_read

    def kern(a, b):
        helper(a, 0)
        b[0] = 1.0

    def rebind(new):
        nonlocal helper
        helper = new

    return kern, rebind


def _global_kernel(body: str):
    ns = {"cuda": cuda, "helper": dev_read, "Helpers": _Helpers}
    exec(f"def kern(a, b):\n    {body}\n    b[0] = 1.0\n", ns)

    def rebind(new):
        ns["helper"] = new

    return ns["kern"], rebind


def _attribute_kernel():
    kern, _ = _global_kernel("Helpers.helper(a, 0)")

    def rebind(new):
        _Helpers.helper = new

    return kern, rebind


@pytest.mark.parametrize(
    ("make", "on_cuda", "reader", "writer"),
    [
        (lambda: _global_kernel("helper(a, 0)"), True, dev_read, dev_write),
        (lambda: _global_kernel("helper(a)"), False, njit_read, njit_write),
        (_closure_kernel, True, dev_read, dev_write),
        (_attribute_kernel, True, dev_read, dev_write),
    ],
    ids=["global-device-function", "global-njit-helper", "closure-cell", "class-attribute"],
)
def test_rebinding_a_helper_redoes_the_analysis(make, on_cuda, reader, writer):
    kern, rebind = make()
    try:
        rebind(reader)
        assert analyse(kern, cuda=on_cuda).params[0].threshold == NEVER
        rebind(writer)
        assert analyse(kern, cuda=on_cuda).params[0].threshold < 1
        # Numba keeps code compiled with the old helper: what it ran may still run, so the
        # analysis only ever adds writes.
        rebind(reader)
        assert analyse(kern, cuda=on_cuda).params[0].threshold < 1
        assert analyse(kern, cuda=on_cuda).params[1].threshold < 1
    finally:
        _Helpers.helper = dev_read


def _rebinding_nested():
    ns = {"cuda": cuda, "inner": dev_read}
    exec("def middle(a, i):\n    inner(a, i)\n", ns)
    middle = cuda.jit(device=True)(ns["middle"])
    ns2 = {"middle": middle}
    exec("def kern(a):\n    middle(a, 0)\n", ns2)
    return ns2["kern"], ns


def test_rebinding_a_helpers_helper_redoes_the_analysis():
    kern, ns = _rebinding_nested()
    assert analyse(kern, cuda=True).params[0].threshold == NEVER
    ns["inner"] = dev_write
    assert analyse(kern, cuda=True).params[0].threshold < 1


# -- soundness: generated kernels ---------------------------------------------------------------

STATEMENTS = [
    "{p}[i] = {q}[i] + 1.0",
    "v = {p}[1:]\n    v[0] = {q}[0]",
    "t = ({p}, {q})\n    t[{k}][i] = 2.0",
    "dev_write({p}, i)",
    "{q}[i] = dev_read({p}, i)",
    # A device function returning a view of its argument compiles on the simulator only
    # (numba-cuda: "Only accept returning of array passed into the function as argument").
    f"w = {'dev_view' if numba.config.ENABLE_CUDASIM else 'dev_alias'}({{p}})\n    w[0] = 5.0",
    "cuda.atomic.add({p}, i, 1.0)",
    "if {q}[i] > 0.5:\n        {p}[i] = 0.0",
    "acc = {p}[i]\n    acc += 1.0\n    {q}[i] = acc",
    "w = {p}.T\n    w[i] = 3.0",
    "for j in range(i):\n        s = {p}[j:]\n    if i > 0:\n        s[0] = 7.0",
    "x = {p}[i] * {q}[i]\n    {q}[i] = x",
    "a1, b1 = {p}, {q}\n    b1[i] = a1[i]",
    "sm = cuda.shared.array(8, numba.float64)\n    sm[i] = {p}[i]\n    {q}[i] = sm[i]",
]


def _kernel_source(steps: list[tuple[int, int, int, int]]) -> str:
    body = []
    names = "abc"
    for s, p, q, k in steps:
        body.append(STATEMENTS[s].format(p=names[p], q=names[q], k=k))
    return (
        "import numba\nfrom numba import cuda\n"
        "from test_access import dev_write, dev_read, dev_view, dev_alias\n\n"
        "def kern(a, b, c):\n    i = cuda.grid(1)\n    " + "\n    ".join(body) + "\n"
    )


_counter = [0]


def _load(tmp_path, source: str):
    _counter[0] += 1
    path = tmp_path / f"gen_kernel_{_counter[0]}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kern


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(STATEMENTS) - 1),
            st.integers(0, 2),
            st.integers(0, 2),
            st.integers(0, 1),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_no_argument_inferred_read_only_is_written(tmp_path_factory, steps):
    tmp = tmp_path_factory.mktemp("gen")
    sys.path.insert(0, str(tmp.parent))
    source = _kernel_source(steps)
    fn = _load(tmp, source)
    access = analyse(fn, cuda=True)
    arrays = [np.linspace(0.0, 1.0, 8) + j for j in range(3)]
    before = [a.copy() for a in arrays]
    cuda.jit(fn)[1, 8](*arrays)
    for pa, a, b in zip(access.params, arrays, before, strict=True):
        if pa.read_only_for(1):
            assert np.array_equal(a, b), f"{pa.name} inferred read only but written:\n{source}"
    # The same launch through smartarray.jit with bare SmartArrays current on both sides: a
    # write to an argument passed as In would leave its host copy recorded current but stale,
    # unlike its device copy. (Values are compared copy against copy, not against the plain
    # run: a generated kernel may race between threads.)
    smart = [sa.SmartArray(b.copy()) for b in before]
    for x in smart:
        x.get("gpu")
    sa.jit(fn)[1, 8](*smart)
    for x in smart:
        host = np.array(x)
        np.testing.assert_array_equal(host, x.get("gpu").copy_to_host(), err_msg=source)


# -- the real numba.cuda target (no simulator) --------------------------------------------------

REAL = textwrap.dedent(
    """
    import os, sys
    assert "NUMBA_ENABLE_CUDASIM" not in os.environ
    sys.path.insert(0, {tests!r})
    from numba import cuda
    import numba.cuda.simulator as sim
    import test_access as t
    from smartarray import _access
    assert not isinstance(t.dev_write, sim.kernel.FakeCUDAKernel)
    out = []
    for fn, expected in t.CUDA_CORPUS:
        got = {{p.name: t._category(p.threshold) for p in _access.analyse(fn, cuda=True).params}}
        out.append(got == expected)
    kern = cuda.jit(t.k_reads)
    out.append(_access.analyse(kern).params[1].threshold == _access.NEVER)
    print(all(out), out)
    """
)


def test_same_inference_on_the_real_cuda_target():
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    env = with_checkout(real_target_env())
    out = subprocess.run(
        [sys.executable, "-c", REAL.format(tests=tests)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True"), out.stdout


def test_module_constants():
    assert _access.NEG < -1000 and float("inf") == NEVER


# -- soundness: generated njit functions ------------------------------------------------------

NJIT_STATEMENTS = [
    "{p}[0] = {q}[1]",
    "v = {p}[1:]\n    v[0] = 2.0",
    "t = ({p}, {q})\n    t[{k}][2] = 3.0",
    "{p} += 1.0",
    "acc = {p}[0]\n    acc += 1.0\n    {q}[0] = acc",
    "lst = [{p}]\n    lst[0][3] = 4.0",
    "{p}.fill(5.0)",
    "{q}[1] = {p}.sum() + {p}.mean()",
    "np.add({p}, 1.0, {q})",
    "w = {p}.T\n    w[4] = 1.0",
    "njit_write({p})",
    "{q}[5] = njit_read({p})",
    "for j in range({p}.size):\n        {q}[j] = {q}[j] + {p}[j]",
]


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(NJIT_STATEMENTS) - 1),
            st.integers(0, 2),
            st.integers(0, 2),
            st.integers(0, 1),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_no_njit_argument_inferred_read_only_is_written(tmp_path_factory, steps):
    tmp = tmp_path_factory.mktemp("gen")
    names = "abc"
    body = [NJIT_STATEMENTS[s].format(p=names[p], q=names[q], k=k) for s, p, q, k in steps]
    source = (
        "import numpy as np\n"
        "from test_access import njit_write, njit_read\n\n"
        "def kern(a, b, c):\n    " + "\n    ".join(body) + "\n"
    )
    fn = _load(tmp, source)
    access = analyse(fn, cuda=False)
    arrays = [np.linspace(0.0, 1.0, 8) + j for j in range(3)]
    before = [a.copy() for a in arrays]
    numba.njit(fn)(*arrays)
    for pa, a, b in zip(access.params, arrays, before, strict=True):
        if pa.read_only_for(1):
            assert np.array_equal(a, b), f"{pa.name} inferred read only but written:\n{source}"
    # through smartarray.njit with SmartArrays current on both sides: a host write to an
    # argument passed as In would leave its device copy recorded current but stale
    smart = [sa.SmartArray(b.copy()) for b in before]
    for x in smart:
        x.get("gpu")
    sa.njit(fn)(*smart)
    for x, a in zip(smart, arrays, strict=True):
        np.testing.assert_array_equal(x.get("gpu").copy_to_host(), a, err_msg=source)
