"""Six real numba.cuda programs, in the shapes users port: values and bytes moved.

Each test is a kernel of the shape of a well-known public program (the shared-memory matmul and
Monte Carlo examples of numba's documentation, the Laplace 2-D stream example, numba-examples'
histogram and Black-Scholes, a two-stream event-timing program), written here in the project's
own words, run on SmartArrays with the few changes a port needs. Each checks the values against
NumPy and the bytes moved, exactly, with :func:`smartarray.trace`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float64
from numba.cuda.random import create_xoroshiro128p_states, xoroshiro128p_uniform_float64

import smartarray as sa


def moved(t: sa.Trace) -> tuple[int, int]:
    """(bytes up, bytes down) of a trace."""
    return t.stats.h2d_bytes, t.stats.d2h_bytes


# -- shared-memory matmul ------------------------------------------------------------------------

TILE = 4


@cuda.jit
def tiled_matmul(a, b, c):
    """c = a @ b, square tiles staged through shared memory (a.shape[0] a multiple of TILE)."""
    sa_tile = cuda.shared.array((TILE, TILE), float64)
    sb_tile = cuda.shared.array((TILE, TILE), float64)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = 0.0
    for tile in range(a.shape[1] // TILE):
        sa_tile[tx, ty] = a[x, ty + tile * TILE]
        sb_tile[tx, ty] = b[tx + tile * TILE, y]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa_tile[tx, k] * sb_tile[k, ty]
        cuda.syncthreads()
    c[x, y] = acc


def test_shared_memory_matmul():
    n = 8
    a_host = np.arange(n * n, dtype=np.float64).reshape(n, n) / 7
    b_host = np.cos(np.arange(n * n, dtype=np.float64)).reshape(n, n)
    a, b = sa.SmartArray(a_host), sa.SmartArray(b_host)
    c = sa.empty_like(a_host)
    with sa.trace() as t:
        tiled_matmul[(n // TILE, n // TILE), (TILE, TILE)](sa.In(a), sa.In(b), sa.Out(c))
        result = np.array(c)
    np.testing.assert_allclose(result, a_host @ b_host)
    assert moved(t) == (2 * a_host.nbytes, a_host.nbytes)  # a and b up, c down; nothing else


# -- Monte Carlo with RNG states -------------------------------------------------------------------


@cuda.jit
def quarter_circle_hits(rng_states, samples, out):
    """out[i] = the fraction of ``samples`` random points of the unit square inside the circle."""
    i = cuda.grid(1)
    if i < out.size:
        inside = 0
        for _ in range(samples):
            x = xoroshiro128p_uniform_float64(rng_states, i)
            y = xoroshiro128p_uniform_float64(rng_states, i)
            if x * x + y * y <= 1.0:
                inside += 1
        out[i] = inside / samples


def monte_carlo_pi(threads: int, samples: int, seed: int) -> tuple[float, sa.Trace]:
    with sa.trace() as t:
        states = create_xoroshiro128p_states(threads, seed=seed)
        out = sa.empty_like(np.empty(threads))
        quarter_circle_hits[threads // 32, 32](states, samples, sa.Out(out))
        estimate = 4.0 * float(out.mean())
    return estimate, t


# xoroshiro128p wraps uint64 arithmetic by design; the simulator runs the kernel with NumPy
# scalars, which warn on each wraparound (tests/conftest.py: numba's own).
@pytest.mark.filterwarnings("ignore:overflow encountered in scalar:RuntimeWarning")
def test_monte_carlo_with_rng_states():
    threads, samples = 64, 64
    estimate, t = monte_carlo_pi(threads, samples, seed=1)
    # 4096 points: the estimate's standard deviation is about 0.026.
    assert abs(estimate - math.pi) < 0.15
    assert monte_carlo_pi(threads, samples, seed=1)[0] == estimate  # same seed, same draws
    # smartarray moves only the result down; numba's RNG states (16 bytes per thread) are
    # uploaded by numba itself, outside smartarray's counts (sa.count_all_transfers sees them).
    assert moved(t) == (0, threads * 8)


# -- Laplace 2-D, with a stream and a host check every iteration -----------------------------------


@cuda.jit
def jacobi_step(u, unew, err):
    """One Jacobi sweep of the interior; err[0] = the largest change (atomic max)."""
    i, j = cuda.grid(2)
    n, m = u.shape
    if 0 < i < n - 1 and 0 < j < m - 1:
        value = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        unew[i, j] = value
        cuda.atomic.max(err, 0, abs(value - u[i, j]))


def jacobi_reference(u: np.ndarray, tolerance: float, limit: int) -> tuple[np.ndarray, int]:
    u = u.copy()
    for iteration in range(1, limit + 1):
        new = u.copy()
        new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        err = np.abs(new - u).max()
        u = new
        if err < tolerance:
            return u, iteration
    return u, limit


def test_laplace_2d_with_a_stream_and_host_checks():
    n, tolerance, limit = 16, 1e-3, 60
    start = np.zeros((n, n))
    start[0, :] = 1.0  # a hot top edge
    u, unew = sa.SmartArray(start), sa.SmartArray(start)
    err = sa.zeros_like(np.zeros(1))
    stream = sa.stream()
    iterations = 0
    with sa.trace() as t:
        while iterations < limit:
            iterations += 1
            err[0] = 0.0  # reset on the host: 8 bytes go up with the launch
            jacobi_step[(n // 8, n // 8), (8, 8), stream](sa.In(u), unew, err)
            u, unew = unew, u
            if err[0] < tolerance:  # the host check: 8 bytes come down, waiting for the stream
                break
        result = np.array(u)
    expected, expected_iterations = jacobi_reference(start, tolerance, limit)
    assert iterations == expected_iterations
    np.testing.assert_allclose(result, expected)
    grid = start.nbytes
    # Both grids go up once; err goes up and down once per iteration; the result comes down.
    assert moved(t) == (2 * grid + 8 * iterations, 8 * iterations + grid)


# -- histogram with atomics ------------------------------------------------------------------------


@cuda.jit
def histogram(data, lo, width, bins):
    """bins[k] += 1 for each value in [lo + k width, lo + (k + 1) width) (atomic)."""
    for i in range(cuda.grid(1), data.size, cuda.gridsize(1)):
        k = int((data[i] - lo) / width)
        if 0 <= k < bins.size:
            cuda.atomic.add(bins, k, 1)


def test_histogram_with_atomics():
    rng = np.random.default_rng(0)
    data_host = rng.normal(size=2000)
    nbins, lo, hi = 16, -4.0, 4.0
    data = sa.SmartArray(data_host)
    bins = sa.zeros_like(np.zeros(nbins, np.int32))
    with sa.trace() as t:
        histogram[4, 64](sa.In(data), lo, (hi - lo) / nbins, bins)
        counts = np.array(bins)
    expected, _ = np.histogram(data_host, bins=nbins, range=(lo, hi))
    np.testing.assert_array_equal(counts, expected)
    # The data and the zeroed bins go up, the bins come down.
    assert moved(t) == (data_host.nbytes + nbins * 4, nbins * 4)


# -- Black-Scholes with forall ---------------------------------------------------------------------


@cuda.jit(device=True)
def normal_cdf(d):
    return 0.5 * (1.0 + math.erf(d / math.sqrt(2.0)))


@cuda.jit
def black_scholes(call, put, price, strike, years, rate, volatility):
    i = cuda.grid(1)
    if i < price.size:
        root = math.sqrt(years[i])
        d1 = (math.log(price[i] / strike[i]) + (rate + 0.5 * volatility**2) * years[i]) / (
            volatility * root
        )
        d2 = d1 - volatility * root
        discounted = strike[i] * math.exp(-rate * years[i])
        call[i] = price[i] * normal_cdf(d1) - discounted * normal_cdf(d2)
        put[i] = discounted * normal_cdf(-d2) - price[i] * normal_cdf(-d1)


def black_scholes_reference(price, strike, years, rate, volatility):
    from math import erf

    cdf = np.vectorize(lambda d: 0.5 * (1.0 + erf(d / math.sqrt(2.0))))
    root = np.sqrt(years)
    d1 = (np.log(price / strike) + (rate + 0.5 * volatility**2) * years) / (volatility * root)
    d2 = d1 - volatility * root
    discounted = strike * np.exp(-rate * years)
    return price * cdf(d1) - discounted * cdf(d2), discounted * cdf(-d2) - price * cdf(-d1)


@pytest.mark.parametrize("kernel", [black_scholes, sa.jit(black_scholes.py_func)])
def test_black_scholes_with_forall(kernel):
    n = 300
    rng = np.random.default_rng(1)
    hosts = [rng.uniform(5, 30, n), rng.uniform(1, 100, n), rng.uniform(0.25, 10, n)]
    price, strike, years = (sa.SmartArray(h) for h in hosts)
    call, put = sa.empty_like(hosts[0]), sa.empty_like(hosts[0])
    with sa.trace() as t:
        if kernel is black_scholes:
            kernel.forall(n)(
                sa.Out(call), sa.Out(put), sa.In(price), sa.In(strike), years, 0.02, 0.3
            )
        else:  # smartarray.jit infers In for the inputs; the outputs are empty_like
            kernel.forall(n)(call, put, price, strike, years, 0.02, 0.3)
        got = np.array(call), np.array(put)
    expected = black_scholes_reference(*hosts, 0.02, 0.3)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-10, atol=1e-12)
    # Three inputs up, two outputs down: years passed bare to cuda.jit stays current on the
    # device too (no download unless the host reads it).
    assert moved(t) == (3 * n * 8, 2 * n * 8)


# -- two streams, timed with events ----------------------------------------------------------------


@cuda.jit
def scale(x, factor):
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        x[i] *= factor


def test_two_streams_timed_with_events():
    n = 512
    host = np.arange(2 * n, dtype=np.float64)
    a = sa.SmartArray(host)
    halves = (a[:n], a[n:])
    streams = (sa.stream(), sa.stream())
    with sa.trace() as t:
        start, stop = cuda.event(), cuda.event()
        start.record(streams[0])
        for half, stream, factor in zip(halves, streams, (2.0, 3.0), strict=True):
            scale[4, 64, stream](half, factor)
        stop.record(streams[1])
        stop.synchronize()
        elapsed = start.elapsed_time(stop)
        result = np.array(a)
    assert isinstance(elapsed, float)  # milliseconds on a GPU; the simulator answers -1.0
    np.testing.assert_array_equal(result, np.concatenate([host[:n] * 2.0, host[n:] * 3.0]))
    assert moved(t) == (host.nbytes, host.nbytes)  # each half up once, the whole down once
    # Each half went up with its own launch (on its own stream), then one download.
    assert [(e.direction, e.nbytes) for e in t.events] == [
        ("h2d", n * 8),
        ("h2d", n * 8),
        ("d2h", 2 * n * 8),
    ]


# -- the forms numba.cuda programs write: a stream at construction, copy_to_host(ary, stream) ----


@cuda.jit
def _twice(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 2.0 * x[i]


def _label(stream) -> str:
    """How a trace names ``stream``."""
    with sa.trace() as t:
        sa.to_device(np.zeros(1), stream=stream)
    stream.synchronize()
    return t.events[0].stream


def test_a_stream_at_construction_moves_nothing_and_later_copies_use_it():
    """``cuda.to_device(x, stream)`` becomes ``SmartArray(x, stream=stream)``: still lazy, and
    the upload that ``get('gpu')`` makes goes on that stream."""
    stream = cuda.stream()
    x = np.arange(8.0)
    with sa.trace() as t:
        a = sa.SmartArray(x, stream=stream)
    assert t.events == []
    with sa.trace() as t:
        a.get("gpu")
    stream.synchronize()
    assert [(e.direction, e.nbytes, e.stream) for e in t.events] == [("h2d", 64, _label(stream))]


def test_a_bad_stream_at_construction_is_refused_naming_it():
    with pytest.raises(ValueError, match="stream must be 0"):
        sa.SmartArray(np.zeros(3), stream=5)
    with pytest.raises(TypeError, match="stream must be 0"):
        sa.SmartArray(np.zeros(3), stream="s")


def test_a_numba_port_keeps_its_copy_to_host_and_moves_only_what_is_stale():
    """``d = cuda.to_device(x, stream); k[g, b, stream](d); d.copy_to_host(out, stream)`` with
    ``d = sa.SmartArray(x, stream=stream)``: the download happens once, when stale."""
    stream = cuda.stream()
    x = np.arange(16.0)
    out = np.empty_like(x)
    a = sa.SmartArray(x, stream=stream)
    with sa.trace() as t:
        a.copy_to_host(out, stream)  # current on the host: nothing moves
    assert t.events == []
    _twice[1, 16, stream](a)
    with sa.trace() as t:
        a.copy_to_host(out, stream)
        a.copy_to_host(out, stream)  # current again: nothing more
    stream.synchronize()
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", 128)]
    np.testing.assert_array_equal(out, 2.0 * x)
