"""Performance warnings: each fires once per array and cause, names the fix, and stays quiet
where the bytes moved are the ones the program needs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from tests._kernels import add_one

N = 1024  # 8 KiB of float64: above the size worth a warning


@cuda.jit
def _total(x, out):
    i = cuda.grid(1)
    if i == 0:
        s = 0.0
        for j in range(x.size):
            s += x[j]
        out[0] = s


def _caught(action):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [w for w in caught if issubclass(w.category, sa.PerformanceWarning)]


def test_eager_refresh_of_a_held_array_warns_once():
    a = sa.SmartArray(np.zeros(N), name="held_refresh")
    held = a.host()

    def loop():
        for _ in range(6):
            add_one[4, 256](a)  # each launch downloads into `held` again

    (w,) = _caught(loop)
    message = str(w.message)
    assert "held_refresh" in message and "del" in message and "host()" in message
    assert w.filename == __file__  # points at the user's line
    assert held[0] == 6.0
    del held
    assert _caught(lambda: add_one[4, 256](a)) == []


def test_no_eager_refresh_warning_without_a_held_array_or_for_small_arrays():
    a = sa.SmartArray(np.zeros(N), name="not_held")
    a.host()  # not kept
    small = sa.SmartArray(np.zeros(8), name="small_held")
    held_small = small.host()

    def loop():
        for _ in range(6):
            add_one[4, 256](a)
            add_one[1, 8](small)

    assert _caught(loop) == []
    assert held_small[0] == 6.0


def test_whole_array_mark_after_a_small_host_write_warns_once():
    a = sa.SmartArray(np.zeros(N), name="whole_mark")

    def loop():
        for i in range(6):
            a.host()[i] = 1.0  # one element written...
            a.host_changed()  # ...the whole array declared changed
            add_one[4, 256](a)

    with sa.trace() as t:
        (w,) = _caught(loop)
    assert "whole_mark" in str(w.message) and "a[i:j] = ..." in str(w.message)
    assert [e.nbytes for e in t.events if e.direction == "h2d"] == [8 * N] * 6


def test_item_assignment_uploads_only_what_it_wrote_and_does_not_warn():
    a = sa.SmartArray(np.zeros(N), name="item_write")

    def loop():
        for i in range(6):
            a[i] = 1.0
            add_one[4, 256](a)

    with sa.trace() as t:
        assert _caught(loop) == []
    assert [e.nbytes for e in t.events if e.direction == "h2d"] == [8 * N] + [8] * 5


def test_argument_copied_back_unchanged_warns_once_naming_in():
    x = sa.SmartArray(np.ones(N), name="read_only_arg")
    out = sa.SmartArray(np.zeros(1))

    def loop():
        for _ in range(5):
            _total[1, 1](x, out)  # x is never written, but it is InOut by default
            x.sum()  # the host reads x: it is downloaded again

    (w,) = _caught(loop)
    assert "read_only_arg" in str(w.message) and "In(x)" in str(w.message)
    np.testing.assert_array_equal(np.asarray(x), np.ones(N))


@cuda.jit
def _zero(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 0.0


def test_in_hint_out_hint_or_a_writing_kernel_does_not_warn_of_copy_back():
    x = sa.SmartArray(np.ones(N), name="hinted_in")
    y = sa.SmartArray(np.ones(N), name="really_written")
    z = sa.SmartArray(np.zeros(N), name="out_same_values")
    out = sa.SmartArray(np.zeros(1))

    def loop():
        for _ in range(5):
            _total[1, 1](sa.In(x), out)
            x.sum()
            add_one[4, 256](y)
            y.sum()
            _zero[4, 256](sa.Out(z))  # writes, though the values do not change
            z.sum()

    assert _caught(loop) == []
    assert float(y[0]) == 6.0


@cuda.jit
def _inc_both(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1
        y[i] += 1


def test_a_warning_made_an_error_is_raised_before_a_launch_never_after_it():
    """Under ``-W error`` (this suite's setting) the warning raises where nothing is half done:
    raised from a post-launch callback it would skip the other arguments' callbacks and leave
    their kernel writes unrecorded."""
    a = sa.SmartArray(np.zeros(N), name="held_error")
    b = sa.SmartArray(np.zeros(N), name="second_arg")
    held = a.host()
    launches = 0
    with pytest.raises(sa.PerformanceWarning):
        for _ in range(6):
            _inc_both[4, 256](a, b)
            launches += 1
    assert launches == 3  # the 4th launch refused to start: the warning came first
    assert held[0] == 3.0
    np.testing.assert_array_equal(np.asarray(b), np.full(N, 3.0))
    np.testing.assert_array_equal(np.asarray(a), np.full(N, 3.0))
