"""Tests of smartarray._numba.copy_counting: ``count_all_transfers`` counts numba.cuda's own
copies."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float64

import smartarray as sa

# xoroshiro128p wraps uint64 arithmetic by design; the simulator runs the kernels that draw
# numbers with NumPy scalars, which warn on each wraparound (tests/conftest.py: numba's own).
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in scalar:RuntimeWarning")

STATE_BYTES = 16  # numba.cuda.random's xoroshiro128p state: two uint64


@pytest.fixture
def all_numba():
    was_on = sa.count_all_transfers(True)
    yield
    sa.count_all_transfers(was_on)


def events(t: sa.Trace) -> list[tuple[str, int, str]]:
    return [(e.direction, e.nbytes, e.array) for e in t.events]


def by_whom(t: sa.Trace) -> list[tuple[str, int, bool]]:
    """(direction, bytes, made by numba) of each event."""
    return [(e.direction, e.nbytes, e.array == "numba.cuda") for e in t.events]


@cuda.jit
def hits(rng_states, samples, out):
    i = cuda.grid(1)
    if i < out.size:
        inside = 0
        for _ in range(samples):
            x = xoroshiro128p_uniform_float64(rng_states, i)
            y = xoroshiro128p_uniform_float64(rng_states, i)
            if x * x + y * y <= 1.0:
                inside += 1
        out[i] = inside / samples


def monte_carlo(threads: int) -> tuple[float, sa.Trace]:
    """RNG states + a kernel + a reduction, as numba's Monte Carlo example."""
    with sa.trace() as t:
        states = create_xoroshiro128p_states(threads, seed=7)
        out = sa.empty_like(np.empty(threads), name="out")
        hits[threads // 32, 32](states, 16, sa.Out(out))
        estimate = 4.0 * float(out.mean())
    return estimate, t


def test_the_count_matches_a_hand_count_on_the_monte_carlo_pattern(all_numba):
    threads = 64
    before = sa.stats()
    estimate, t = monte_carlo(threads)
    # By hand: numba uploads the states it initialised on the host (16 bytes each); the kernel
    # writes out on the device (Out: nothing up); the reduction downloads out once.
    assert events(t) == [("h2d", threads * STATE_BYTES, "numba.cuda"), ("d2h", threads * 8, "out")]
    delta = sa.stats() - before
    assert (delta.h2d_bytes, delta.d2h_bytes) == (threads * STATE_BYTES, threads * 8)
    assert (delta.h2d_count, delta.d2h_count) == (1, 1)
    assert 0.0 < estimate <= 4.0


def test_off_by_default_numba_own_copies_are_not_counted():
    assert sa.count_all_transfers(False) is False  # nothing switched it on
    _, t = monte_carlo(64)
    assert [(d, n) for d, n, _ in events(t)] == [("d2h", 64 * 8)]


def test_numba_device_array_copies_are_counted(all_numba):
    host = np.arange(10.0)
    with sa.trace() as t:
        d = cuda.to_device(host)
        d.copy_to_device(host[::-1].copy())
        d2 = cuda.device_array_like(host)
        d2.copy_to_device(d)
        back = d2.copy_to_host()
    np.testing.assert_array_equal(back, host[::-1])
    # (The reason names the wrapped function: the driver's on a GPU, the simulator's here.)
    assert events(t) == [
        ("h2d", 80, "numba.cuda"),
        ("h2d", 80, "numba.cuda"),
        ("d2d", 80, "numba.cuda"),
        ("d2h", 80, "numba.cuda"),
    ]
    assert all(e.reason.startswith("numba ") for e in t.events)


def _smartarray_copies() -> list[tuple[str, int, bool]]:
    host = np.arange(32.0)
    with sa.trace() as t:
        d = sa.to_device(host)
        d.copy_to_host()
        d.copy_to_device(host)
        a = sa.SmartArray(host, where="gpu")
        a.gpu_changed()
        b = a.copy()  # device to device
        a.get("host")
        b.get("host")
    return by_whom(t)


def test_smartarray_own_copies_are_counted_once():
    sa.count_all_transfers(False)
    expected = _smartarray_copies()
    was_on = sa.count_all_transfers(True)
    try:
        assert _smartarray_copies() == expected
    finally:
        sa.count_all_transfers(was_on)
    assert {d for d, _, _ in expected} == {"h2d", "d2h", "d2d"}
    assert not any(numba for _, _, numba in expected)


def test_switching_off_restores_numba_and_reports_the_previous_state():
    assert sa.count_all_transfers(True) is False
    assert sa.count_all_transfers(True) is True  # idempotent
    assert sa.count_all_transfers(False) is True
    with sa.trace() as t:
        cuda.to_device(np.zeros(4))
    assert t.events == []


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_a_non_bool_is_a_type_error_changing_nothing(bad):
    with pytest.raises(TypeError, match="enabled must be a bool"):
        sa.count_all_transfers(bad)
    assert sa.count_all_transfers(False) is False


def test_numbas_own_copies_are_traced_on_the_stream_the_program_passed(all_numba):
    stream = cuda.stream()
    host = np.arange(8.0)
    with sa.trace() as t:
        d = cuda.to_device(host, stream=stream)
        d.copy_to_host(np.empty_like(host), stream=stream)
        stream.synchronize()
        cuda.to_device(host)  # the default stream
    streams = [(e.direction, e.stream) for e in t.events]
    # A smartarray copy on the same stream names it as the trace names every stream.
    with sa.trace() as mine:
        sa.to_device(host, stream=stream)
    stream.synchronize()
    label = mine.events[0].stream
    assert label != "0"
    assert streams == [("h2d", label), ("d2h", label), ("h2d", "0")]
