"""Inference against plain Numba on generated programs, with globals rebound between launches.

Hypothesis writes small kernels and njit functions over three array parameters (reads, writes
through slices, tuples, lists and dicts of the arrays, ``.copy()`` of arrays and of containers,
calls of a global helper, branches) and a sequence of launches; between launches the global
helper is rebound (a reader or a writer). Each launch runs twice: ``smartarray.jit`` /
``smartarray.njit`` on SmartArrays current in both places, and plain ``numba.cuda.jit`` /
``numba.njit`` on NumPy arrays. After each launch, both copies of every SmartArray (host and
device) must hold what plain Numba computed: a parameter wrongly inferred read only leaves one
copy recorded current with the old values.

njit launches alternate the type of a scalar argument, so that Numba compiles a new signature
(with the helper bound then) or runs code compiled with an earlier helper, as it does.
"""

from __future__ import annotations

import numba
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numba import cuda

import smartarray as sa

N = 6


@numba.njit
def _njit_reader(a):
    return a[0] + 1.0


@numba.njit
def _njit_writer(a):
    a[1] += 12.0


@cuda.jit(device=True)
def _dev_reader(a):  # pragma: no cover - device function
    return a[0] + 1.0


@cuda.jit(device=True)
def _dev_writer(a):  # pragma: no cover - device function
    a[1] += 12.0


NJIT_HELPERS = (_njit_reader, _njit_writer)
DEVICE_HELPERS = (_dev_reader, _dev_writer)

# {p}, {q}: array parameters; {i}, {j}: indexes; {k}: 0 or 1.
COMMON = [
    "{p}[{i}] = {q}[{j}] + 1.0",
    "r = {q}[{i}] * 2.0\n    r += 1.0",
    "t1 = ({p}, {q})\n    t1[{k}][{i}] = 4.0",
    "helper({p})",
    "if {q}[{i}] > 2.0:\n        helper({p})",
    "if {q}[{i}] > 2.0:\n        {p}[{j}] = 9.0",
    "v1 = {p}[1:]\n    v1[{i}] = 10.0",
    "w1 = {p}.T\n    w1[{i}] = 3.0",
]
NJIT_ONLY = [
    "l1 = [{p}, {q}]\n    l1[{k}][{i}] = 3.0",
    "d1 = {{0: {p}}}\n    d1[0][{i}] = 5.0",
    "l2 = [{p}].copy()\n    l2[0][{i}] = 6.0",
    "d2 = {{0: {p}}}.copy()\n    d2[0][{i}] = 7.0",
    "c1 = {p}.copy()\n    c1[{i}] = 8.0\n    {q}[{j}] = c1[{i}] + c1[{j}]",
    "l3 = [{p}, {q}].copy()\n    c2 = l3[{k}].copy()\n    c2[{i}] = 11.0",
    "helper([{p}].copy()[0])",
]
KERNEL_ONLY = [
    "cuda.atomic.add({p}, {i}, 1.0)",
    "sm = cuda.local.array(4, numba.float64)\n    sm[0] = {p}[{j}]\n    {q}[{i}] = sm[0]",
]
NJIT_STATEMENTS = COMMON + NJIT_ONLY
KERNEL_STATEMENTS = COMMON + KERNEL_ONLY


def _steps(n_statements: int) -> st.SearchStrategy:
    return st.lists(
        st.tuples(
            st.integers(0, n_statements - 1),
            st.integers(0, 2),
            st.integers(0, 2),
            st.integers(0, N - 2),
            st.integers(0, N - 2),
            st.integers(0, 1),
        ),
        min_size=1,
        max_size=4,
    )


# The helper bound for the first launch (0 reader, 1 writer; the other one is bound before each
# next launch), and per launch (njit) whether the scalar argument is a float (a new signature).
_launches = st.tuples(st.integers(0, 1), st.lists(st.booleans(), min_size=2, max_size=3))


def _source(statements: list[str], steps: list, header: str) -> str:
    body = [
        statements[s].format(p="abc"[p], q="abc"[q], i=i, j=j, k=k) for s, p, q, i, j, k in steps
    ]
    return header + "\n    " + "\n    ".join(body) + "\n"


def _arrays() -> list[np.ndarray]:
    return [np.linspace(0.0, 3.0, N) + j for j in range(3)]


def _check_both_copies(smart: list[sa.SmartArray], plain: list[np.ndarray], why: str) -> None:
    for name, x, ref in zip("abc", smart, plain, strict=True):
        np.testing.assert_array_equal(np.asarray(x), ref, err_msg=f"host copy of {name}: {why}")
        np.testing.assert_array_equal(
            x.get("gpu").copy_to_host(), ref, err_msg=f"device copy of {name}: {why}"
        )


def _run(source: str, helpers: tuple, launches: tuple, launch_sa, launch_plain) -> None:
    first, floats = launches
    namespace = {"cuda": cuda, "numba": numba, "np": np}
    exec(compile(source, "<generated>", "exec"), namespace)
    fn = namespace["f"]
    smart = [sa.SmartArray(a) for a in _arrays()]
    plain = _arrays()
    for n, as_float in enumerate(floats):
        namespace["helper"] = helpers[(first + n) % 2]  # rebound between launches
        for x in smart:
            x.get("gpu")  # current in both places: a missed write leaves one copy stale
        launch_sa(fn, smart, as_float)
        launch_plain(fn, plain, as_float)
        why = f"after launch {n} of {launches} of\n{source}"
        _check_both_copies(smart, plain, why)


@settings(max_examples=15, deadline=None)
@given(steps=_steps(len(NJIT_STATEMENTS)), launches=_launches)
@example(steps=[(len(COMMON) + 2, 0, 1, 0, 0, 0)], launches=(0, [False, False]))  # [x].copy()
@example(steps=[(len(COMMON) + 3, 1, 1, 2, 0, 0)], launches=(0, [False, False]))  # {0: x}.copy()
@example(steps=[(3, 0, 0, 0, 0, 0)], launches=(0, [False, True]))  # a rebound helper
def test_generated_njit_functions_agree_with_plain_numba_on_both_copies(steps, launches):
    source = _source(NJIT_STATEMENTS, steps, "def f(a, b, c, s):")
    njits: dict[str, object] = {}

    def launch(make):
        def go(fn, arrays, as_float):
            if make not in njits:
                njits[make] = make(fn)  # one dispatcher per way: it keeps its compiled code
            njits[make](*arrays, 1.5 if as_float else 1)

        return go

    _run(source, NJIT_HELPERS, launches, launch(sa.njit), launch(numba.njit))


@settings(max_examples=30, deadline=None)
@given(steps=_steps(len(KERNEL_STATEMENTS)), launches=_launches)
@example(steps=[(3, 2, 2, 0, 0, 0)], launches=(0, [False, False]))  # a rebound helper
def test_generated_kernels_agree_with_plain_numba_on_both_copies(steps, launches):
    source = _source(KERNEL_STATEMENTS, steps, "def f(a, b, c):")
    kernels: dict[str, object] = {}

    def launch(make):
        def go(fn, arrays, _as_float):
            if make not in kernels:
                kernels[make] = make(fn)
            kernels[make][1, 1](*arrays)

        return go

    _run(source, DEVICE_HELPERS, launches, launch(sa.jit), launch(cuda.jit))
