"""Code written for Numba's removed SmartArray and for numba.cuda device arrays (issue 13).

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
