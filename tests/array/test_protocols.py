"""Tests of smartarray._array.protocols: Python's protocols on a SmartArray (iteration, ``in``,
...)."""

from __future__ import annotations

import numpy as np
import pytest

import smartarray as sa
from smartarray.array import SmartArray


def _on_device_only(host: np.ndarray) -> SmartArray:
    """A SmartArray whose current data is on the device only (as after a kernel wrote it)."""
    a = SmartArray(host, where="gpu")
    a.gpu_changed()
    assert a.valid_at == ("gpu",)
    return a


# The ways a user reads every element of an array from Python.
ITERATIONS = {
    "for": lambda a: [x for x in a],
    "list": list,
    "tuple": tuple,
    "iter": lambda a: list(iter(a)),
    "reversed": lambda a: list(reversed(a))[::-1],
    "sum": lambda a: sum(a),
    "max": lambda a: max(a),
    "min": lambda a: min(a),
    "sorted": sorted,
    "enumerate": lambda a: [x for _, x in enumerate(a)],
    "zip": lambda a: [x for x, _ in zip(a, range(len(a)), strict=True)],
    "tolist": lambda a: a.tolist(),
    "in": lambda a: 3.0 in a,
}


@pytest.mark.parametrize("how", sorted(ITERATIONS))
def test_iterating_a_1d_array_current_on_the_device_downloads_it_once(how: str) -> None:
    host = np.arange(50, dtype=np.float64)
    a = _on_device_only(host)
    with sa.trace() as t:
        got = ITERATIONS[how](a)
    expected = ITERATIONS[how](host)
    assert got == expected
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", host.nbytes)]
    assert "host" in a.valid_at


@pytest.mark.parametrize("how", ["for", "list", "iter", "reversed", "enumerate", "zip"])
def test_iterating_an_nd_array_moves_the_data_once_and_yields_smartarray_rows(how: str) -> None:
    host = np.arange(24, dtype=np.int32).reshape(4, 6)
    a = _on_device_only(host)
    with sa.trace() as t:
        rows = ITERATIONS[how](a)
        values = [np.asarray(r).copy() for r in rows]
    assert all(isinstance(r, SmartArray) for r in rows)  # rows stay views, as before
    np.testing.assert_array_equal(np.array(values), host)
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", host.nbytes)]


def test_iterating_a_view_downloads_only_its_bytes() -> None:
    host = np.arange(100, dtype=np.float32)
    a = _on_device_only(host)
    with sa.trace() as t:
        assert list(a[10:20]) == list(host[10:20])
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", 40)]


def test_iteration_already_current_on_the_host_moves_nothing() -> None:
    a = SmartArray(np.arange(10.0))
    with sa.trace() as t:
        assert sum(a) == 45.0
    assert t.events == []


def test_a_device_write_during_iteration_is_seen_by_the_next_elements() -> None:
    # Iteration is lazy, as NumPy's: elements not yet yielded are read when reached, so a
    # device write between two steps is never hidden by a stale host copy.
    a = _on_device_only(np.zeros(4))
    it = iter(a)
    assert next(it) == 0.0
    d = a.gpu()
    d[1:] = 5.0  # simulated device write
    a.gpu_changed()
    assert list(it) == [5.0, 5.0, 5.0]


@pytest.mark.parametrize("how", [iter, reversed])
def test_iterating_a_0d_array_raises_at_once_moving_nothing(how) -> None:
    a = _on_device_only(np.array(3.0))
    with sa.trace() as t, pytest.raises(TypeError, match="0-d"):
        how(a)
    assert t.events == []
