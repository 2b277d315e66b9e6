"""In / Out / InOut: construction, typing and what they delegate to."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.cuda.args import ArgHint

import smartarray as sa


@pytest.mark.parametrize("hint", [sa.In, sa.Out, sa.InOut])
def test_hints_are_numba_arg_hints_with_a_repr(hint):
    a = sa.SmartArray(np.zeros(2))
    h = hint(a)
    assert isinstance(h, ArgHint)
    assert repr(h).startswith(f"{hint.__name__}(SmartArray(")
    assert h.value is a


def test_hint_of_a_hint_is_refused():
    with pytest.raises(TypeError, match="not another intent wrapper"):
        sa.In(sa.Out(sa.SmartArray(np.zeros(2))))


def test_types_of_hints():
    a = sa.SmartArray(np.zeros((3, 2)))
    assert numba.typeof(sa.In(a)).mutable is False
    assert numba.typeof(sa.Out(a)) == numba.typeof(a)
    assert numba.typeof(sa.InOut(a)) == numba.typeof(a)
    plain = np.zeros(4, dtype=np.int32)
    assert sa.In(plain)._numba_type_ == numba.typeof(plain)


def test_bare_smartarray_is_inout():
    assert sa.SmartArray(np.zeros(1)).intent == sa.InOut.intent == "inout"
    assert (sa.In.intent, sa.Out.intent) == ("in", "out")


# --- plain ndarrays in the hints, on the default stream and on another ---------------------

from numba import cuda  # noqa: E402


@cuda.jit
def _double_into(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = 2 * x[i]


@cuda.jit
def _fill_index(y):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = i + 1


@cuda.jit
def _add_one(y):
    i = cuda.grid(1)
    if i < y.size:
        y[i] += 1


def _moved() -> tuple[int, int]:
    s = sa.stats()
    return s.h2d_bytes, s.d2h_bytes


def _launch_stream(on_stream: bool):
    return sa.stream() if on_stream else 0


@pytest.mark.parametrize("on_stream", [False, True], ids=["default", "stream"])
def test_in_of_a_plain_ndarray_is_uploaded_on_the_launch_stream(on_stream):
    x = np.arange(8.0)
    out = sa.SmartArray(np.zeros(8))
    s = _launch_stream(on_stream)
    sa.reset_stats()
    _double_into[1, 32, s](out, sa.In(x))
    x[:] = -1.0  # after the launch returned: the kernel read x's bytes at the call
    np.testing.assert_array_equal(out.host(), np.arange(8.0) * 2)
    assert _moved() == (64 + 64, 64)  # x and out up, out down


@pytest.mark.parametrize("on_stream", [False, True], ids=["default", "stream"])
def test_out_of_a_plain_ndarray_is_downloaded_before_the_launch_returns(on_stream):
    y = np.zeros(8)
    s = _launch_stream(on_stream)
    sa.reset_stats()
    _fill_index[1, 32, s](sa.Out(y))
    np.testing.assert_array_equal(y, np.arange(1.0, 9.0))  # no wait needed
    assert _moved() == (0, 64)


@pytest.mark.parametrize("on_stream", [False, True], ids=["default", "stream"])
def test_inout_of_a_plain_ndarray_round_trips_on_the_launch_stream(on_stream):
    full = np.arange(12.0).reshape(3, 4)
    y = full[:, 1]  # strided: gathered, then scattered back
    s = _launch_stream(on_stream)
    sa.reset_stats()
    _add_one[1, 32, s](sa.InOut(y))
    np.testing.assert_array_equal(y, [2.0, 6.0, 10.0])
    np.testing.assert_array_equal(full[:, 0], [0.0, 4.0, 8.0])  # the gaps untouched
    assert _moved() == (24, 24)


@pytest.mark.parametrize("on_stream", [False, True], ids=["default", "stream"])
def test_bare_ndarrays_through_smartarray_jit_on_any_stream(on_stream):
    @sa.jit
    def double_into(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 2 * x[i]

    x, out = np.arange(8.0), np.zeros(8)
    s = _launch_stream(on_stream)
    sa.reset_stats()
    double_into[1, 32, s](out, x)
    np.testing.assert_array_equal(out, np.arange(8.0) * 2)  # written back before returning
    if on_stream:  # smartarray moved them: x up (In), out up and down (InOut)
        assert _moved() == (128, 64)


# --- a hinted launch's cost ------------------------------------------------------------------


def _wrapper_calls(call) -> list[str]:
    """The calls of a wrapper's ``_numba_type_`` defined in smartarray/hints.py or
    smartarray/jit.py that run during ``call()``."""
    import sys

    ran: list[str] = []
    files = ("smartarray/hints.py", "smartarray/jit.py")

    def profile(frame, event, arg):
        code = frame.f_code
        if (
            event == "call"
            and code.co_name == "_numba_type_"
            and code.co_filename.replace("\\", "/").endswith(files)
        ):
            ran.append(code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return ran


@pytest.mark.parametrize("hint", [sa.Out, sa.InOut])  # (and In on the other argument)
def test_a_wrapper_made_per_launch_adds_no_call_to_the_launch(hint):
    # A loop of launches makes a new wrapper each time; numba reads its type twice per
    # launch: those reads reach the array's cached type with no call of the wrapper's own.
    out, x = sa.SmartArray(np.zeros(8)), sa.SmartArray(np.arange(8.0))
    _double_into[1, 32](hint(out), sa.In(x))  # compiled, both current on the device
    wrapped = (hint(out), sa.In(x))
    assert _wrapper_calls(lambda: _double_into[1, 32](*wrapped)) == []
    np.testing.assert_array_equal(out.host(), np.arange(8.0) * 2)


def test_an_inferred_read_only_argument_adds_no_call_to_the_launch():
    @sa.jit
    def double_into(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 2 * x[i]

    out, x = sa.SmartArray(np.zeros(8)), sa.SmartArray(np.arange(8.0))
    double_into[1, 32](out, x)
    assert _wrapper_calls(lambda: double_into[1, 32](out, x)) == []
    np.testing.assert_array_equal(out.host(), np.arange(8.0) * 2)


@pytest.mark.parametrize("hint", [sa.In, sa.Out, sa.InOut])
def test_a_wrapper_of_an_array_numba_cannot_type_is_refused_when_made(hint):
    if np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("long double is float64 here: Numba compiles for it")
    a = sa.SmartArray(np.arange(2, dtype=np.longdouble))
    sa.reset_stats()
    with pytest.raises(TypeError, match="cannot compile"):
        hint(a)
    assert _moved() == (0, 0)
    np.testing.assert_array_equal(a.host(), [0, 1])
