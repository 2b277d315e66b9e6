"""Tests of smartarray._like: ``empty_like`` / ``zeros_like`` make a SmartArray like an array."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray.array import SmartArray

# The prototypes a user has at hand: an ndarray, a SmartArray, a numba device array.
PROTOTYPES = {
    "ndarray": lambda h: h,
    "SmartArray": lambda h: SmartArray(h, where="gpu"),
    "device array": lambda h: cuda.to_device(h),
}
LIKE = {"empty_like": sa.empty_like, "zeros_like": sa.zeros_like}


@pytest.mark.parametrize("make", sorted(PROTOTYPES))
@pytest.mark.parametrize("like", sorted(LIKE))
@pytest.mark.parametrize("order", ["C", "F"])
def test_like_takes_shape_dtype_and_order_and_moves_nothing(make, like, order) -> None:
    host = np.arange(12, dtype=np.float32).reshape((3, 4), order=order)
    prototype = PROTOTYPES[make](host)
    with sa.trace() as t:
        out = LIKE[like](prototype)
    assert isinstance(out, SmartArray)
    assert (out.shape, out.dtype) == ((3, 4), np.float32)
    assert out.flags.f_contiguous == (order == "F")
    assert out.flags.c_contiguous == (order == "C")
    assert t.events == []  # the prototype's data is never read
    if like == "zeros_like":
        np.testing.assert_array_equal(np.asarray(out), np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("like", sorted(LIKE))
def test_like_overrides(like) -> None:
    prototype = np.zeros((2, 3), np.int16, order="F")
    out = LIKE[like](prototype, dtype=np.float64, order="C", shape=(5,), name="out")
    assert (out.shape, out.dtype, out.flags.c_contiguous, out.name) == (
        (5,),
        np.float64,
        True,
        "out",
    )


def _fill(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = i


# As Out, or passed bare (smartarray.jit never infers Out: docs/user_guide.rst says why).
WRITERS = {
    "Out, cuda.jit": (cuda.jit(_fill), sa.Out),
    "bare, smartarray.jit": (sa.jit(_fill), lambda a: a),
}


@pytest.mark.parametrize("how", sorted(WRITERS))
def test_empty_like_written_by_a_kernel_uploads_nothing(how) -> None:
    kernel, wrap = WRITERS[how]
    out = sa.empty_like(np.zeros(64))
    with sa.trace() as t:
        kernel[1, 64](wrap(out))
        values = np.asarray(out).copy()
    np.testing.assert_array_equal(values, np.arange(64.0))
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", 512)]


@pytest.mark.parametrize("like", sorted(LIKE))
@pytest.mark.parametrize("bad", [None, 3, [1, 2], "abc"])
def test_like_without_an_array_is_a_type_error_naming_prototype(like, bad) -> None:
    with pytest.raises(TypeError, match="prototype must be an array"):
        LIKE[like](bad)


@pytest.mark.parametrize("like", sorted(LIKE))
def test_like_with_an_unknown_order_is_a_value_error(like) -> None:
    with pytest.raises(ValueError, match="order must be"):
        LIKE[like](np.zeros(3), order="X")
