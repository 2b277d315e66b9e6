"""Failures halfway (a later argument, a copy, a kernel, a NumPy call): nothing lost, nothing stale.

Each test makes an operation fail after it started and checks what a user relies on: the values
read afterwards, and that every byte marked valid in either copy holds the array's value.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import memory
from smartarray.array import SmartArray
from smartarray.testing import is_strict


def assert_coherent(a: SmartArray) -> None:
    """Every byte of ``a``'s buffer marked valid in a copy holds the same value in both."""
    buf = a._buf
    state = buf.state
    host = buf.host_bytes
    dev = None
    if buf.device_bytes is not None:  # read without counting a transfer
        dev = memory._Uncounted(buf.device_bytes).copy_to_host()
    for i in range(buf.nbytes):
        assert state.is_valid("host", i, i + 1) or state.is_valid("gpu", i, i + 1), i
        if (
            dev is not None
            and host is not None
            and state.is_valid("host", i, i + 1)
            and state.is_valid("gpu", i, i + 1)
        ):
            assert host[i] == dev[i], f"byte {i} valid on both copies with different values"


def fail_on_call(monkeypatch, n: int, direction: str | None = None) -> list[int]:
    """Make the ``n``-th call of ``memory.copy_range`` (1-based; of ``direction`` if given) fail."""
    real = memory.copy_range
    calls = [0]

    def flaky(d, *args, **kwargs):
        if direction is None or d == direction:
            calls[0] += 1
            if calls[0] == n:
                raise RuntimeError("injected copy fault")
        return real(d, *args, **kwargs)

    monkeypatch.setattr(memory, "copy_range", flaky)
    return calls


def fail_every_download(monkeypatch) -> None:
    """Make every device-to-host ``memory.copy_range`` fail (until ``monkeypatch.undo()``)."""
    real = memory.copy_range

    def no_download(d, *args, **kwargs):
        if d == "d2h":
            raise RuntimeError("injected copy fault")
        return real(d, *args, **kwargs)

    monkeypatch.setattr(memory, "copy_range", no_download)


# --- njit: a later argument fails to unbox ---------------------------------------------------


@cuda.jit
def set_index(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = i + 10.0


def on_device_only(n: int) -> SmartArray:
    """An array whose current values (10, 11, ...) are on the device; the host holds zeros."""
    a = SmartArray(np.zeros(n))
    set_index[1, 32](sa.Out(a))
    assert a.valid_at == ("gpu",)
    return a


@numba.njit
def copy_second_into_first(x, y):
    for i in range(x.size):
        x[i] = y[i]


@numba.njit
def write_then_raise(x):
    x[0] = 5.0
    raise ValueError("raised after a write")


@pytest.mark.parametrize("hint", [sa.Out, sa.InOut, None])
def test_njit_later_argument_fails_to_unbox_loses_nothing(hint):
    a = on_device_only(4)
    arg = a if hint is None else hint(a)
    with pytest.raises(TypeError):
        copy_second_into_first(arg, sa.In(np.ones(4)))  # an intent of an ndarray: no unbox
    assert_coherent(a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0) + 10)


def test_njit_Out_then_a_transient_download_failure_of_the_next_argument(monkeypatch):
    a = on_device_only(4)
    b = SmartArray(np.full(4, 7.0), where="gpu")
    fail_on_call(monkeypatch, 1)  # b's download
    with pytest.raises(sa.TransferError):
        copy_second_into_first(sa.Out(a), b)
    monkeypatch.undo()
    assert_coherent(a)
    assert_coherent(b)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0) + 10)
    copy_second_into_first(sa.Out(a), b)  # the retry works
    np.testing.assert_array_equal(np.asarray(a), np.full(4, 7.0))


@pytest.mark.parametrize("hint", [sa.Out, sa.InOut, None])
def test_njit_function_raising_after_a_write_records_the_write(hint):
    a = SmartArray(np.zeros(3), where="gpu")
    a.host()  # current on both copies
    with pytest.raises(ValueError, match="after a write"):
        write_then_raise(a if hint is None else hint(a))
    assert_coherent(a)
    assert a[0] == 5.0
    np.testing.assert_array_equal(a.gpu().copy_to_host(), [5.0, 0, 0])


# --- kernels: a failed eager refresh during the post-launch callbacks --------------------------


@cuda.jit
def add_one_to_both(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0
        y[i] += 1.0


def test_failed_eager_refresh_still_records_the_later_arguments_writes(monkeypatch):
    a = SmartArray(np.zeros(4))
    b = SmartArray(np.zeros(4))
    held = a.host()  # refreshed eagerly after a kernel writes a
    fail_on_call(monkeypatch, 1, "d2h")
    with pytest.raises(sa.TransferError):
        add_one_to_both[1, 32](a, b)
    monkeypatch.undo()
    for x in (a, b):
        assert_coherent(x)
        np.testing.assert_array_equal(np.asarray(x), np.ones(4))
    np.testing.assert_array_equal(held, np.ones(4))  # refreshed by the host read above


def test_failed_refreshes_of_two_arguments_raise_once_after_both_recorded(monkeypatch):
    a = SmartArray(np.zeros(4))
    b = SmartArray(np.zeros(4))
    held = (a.host(), b.host())
    fail_every_download(monkeypatch)
    with pytest.raises(sa.TransferError, match="2 held"):
        add_one_to_both[1, 32](a, b)
    monkeypatch.undo()
    assert not a.is_valid("host") and not b.is_valid("host")  # stale, and marked so
    for x, h in zip((a, b), held, strict=True):
        assert_coherent(x)
        np.testing.assert_array_equal(np.asarray(x), np.ones(4))
        np.testing.assert_array_equal(h, np.ones(4))


# --- kernels that raise after writing ------------------------------------------------------------


@cuda.jit(debug=True, opt=False)  # a GPU reports kernel exceptions with debug only
def write_then_fail(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 7.0
        if i == 0:
            raise ValueError("kernel failed after writing")


@pytest.mark.parametrize("hint", [None, sa.InOut, sa.Out])
def test_kernel_raising_after_a_write_leaves_no_stale_valid_byte(hint):
    a = SmartArray(np.zeros(4))
    a.gpu()  # current on both copies
    with pytest.raises(ValueError, match="after writing"):
        write_then_fail[1, 32](a if hint is None else hint(a))
    assert_coherent(a)
    assert a[0] == 7.0  # the write before the raise is kept, as NumPy would


def test_kernel_Out_failing_before_it_ran_keeps_host_only_data(monkeypatch):
    a = SmartArray(np.arange(4.0))  # current on the host only: Out uploads nothing
    b = SmartArray(np.zeros(4))
    fail_on_call(monkeypatch, 1, "h2d")  # b's upload fails: the kernel never runs
    with pytest.raises(sa.TransferError):
        add_one_to_both[1, 32](sa.Out(a), b)
    monkeypatch.undo()
    for x in (a, b):
        assert_coherent(x)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(b), np.zeros(4))


def test_kernel_In_failing_records_nothing():
    a = SmartArray(np.zeros(4))
    a.gpu()

    @cuda.jit(debug=True, opt=False)  # a GPU reports kernel exceptions with debug only
    def read_then_fail(x):
        if cuda.grid(1) == 0 and x[0] == 0.0:
            raise ValueError("read and failed")

    with pytest.raises(ValueError, match="read and failed"):
        read_then_fail[1, 32](sa.In(a))
    assert a.valid_at == ("host", "gpu")


# --- in-place NumPy calls that raise after a partial write -----------------------------------


def both_valid(values) -> SmartArray:
    a = SmartArray(np.array(values, dtype=np.float64))
    a.gpu()
    return a


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda a: a.put([0, 99], [5.0, 6.0]), IndexError),
        (lambda a: np.put(a, [0, 99], [5.0, 6.0]), IndexError),
        (lambda a: np.divide(a, 0, out=a), FloatingPointError),
        (lambda a: np.divide(a[:2], 0, out=a[:2]), FloatingPointError),
    ],
    ids=["method put", "np.put", "ufunc out", "ufunc out view"],
)
def test_numpy_call_raising_after_a_partial_write_records_it(call, error):
    a = both_valid([1.0, 2.0, 3.0, 4.0])
    expected = np.array([1.0, 2.0, 3.0, 4.0])
    with np.errstate(all="raise"):
        with pytest.raises(error):
            call(a)
        with pytest.raises(error):
            call(expected)  # NumPy's own partial write
    assert_coherent(a)
    np.testing.assert_array_equal(np.asarray(a), expected)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), expected)


def test_failed_overwrite_keeps_the_device_values_it_did_not_download():
    # out= of a whole covering view skips the download: a failure leaves the device's value.
    a = on_device_only(4)
    with np.errstate(all="raise"), pytest.raises(FloatingPointError):
        np.divide(np.ones(4), 0, out=a)
    assert_coherent(a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0) + 10)


def test_next_launch_refreshes_a_held_array_left_stale_by_a_failure(monkeypatch):
    a = SmartArray(np.zeros(4))
    held = a.host()
    fail_on_call(monkeypatch, 1, "d2h")
    with pytest.raises(sa.TransferError):
        add_one_to_both[1, 32](a, SmartArray(np.zeros(4)))
    monkeypatch.undo()
    assert a.valid_at == ("gpu",)  # held is stale, and marked so
    add_one_to_both[1, 32](a, SmartArray(np.zeros(4)))  # current on the device only
    np.testing.assert_array_equal(held, np.full(4, 2.0))  # refreshed: no fast path skipped it


def test_next_launch_refreshes_a_held_array_that_a_later_views_failed_refresh_left_stale(
    monkeypatch,
):
    """Two views of one array in one launch: the first view's callback records its write, the
    second's refreshes the held host array and fails. The first view must not then take the
    launch fast path (which refreshes nothing): the held array shows its bytes, stale."""
    a = SmartArray(np.zeros(8))
    held = a.host()
    first, second = a[:4], a[4:]
    fail_every_download(monkeypatch)
    with pytest.raises(sa.TransferError):
        add_one_to_both[1, 32](first, second)
    monkeypatch.undo()
    with sa.trace() as t:
        add_one_to_both[1, 32](first, SmartArray(np.zeros(4)))
    np.testing.assert_array_equal(held[:4], [2, 2, 2, 2])  # refreshed after this launch
    assert t.stats.d2h_bytes == 32
    np.testing.assert_array_equal(np.asarray(a), [2, 2, 2, 2, 1, 1, 1, 1])
    np.testing.assert_array_equal(held, [2, 2, 2, 2, 1, 1, 1, 1])  # the rest on the host read


# --- a device write recorded by the user after a failed launch --------------------------------


def _fail_second_argument(monkeypatch, a, b):
    """A launch whose second argument cannot be prepared (its upload fails)."""
    fail_on_call(monkeypatch, 1, "h2d")
    with pytest.raises(sa.TransferError):
        add_one_to_both[1, 32](a, b)
    monkeypatch.undo()


def _kernel_raises(monkeypatch, a, b):
    with pytest.raises(ValueError, match="after writing"):
        write_then_fail[1, 32](a)


@pytest.mark.parametrize("failure", [_fail_second_argument, _kernel_raises])
@pytest.mark.parametrize("how", ["gpu_changed", "mark_changed"])
def test_device_write_after_a_failed_launch_refreshes_held_host_arrays(monkeypatch, failure, how):
    """After a failed launch the device copy is current there only and a held host array is
    stale: a user's device write recorded then returned early, leaving it stale for good."""
    a = SmartArray(np.zeros(4))
    a.gpu()  # current on both copies
    h = a.host()  # held
    failure(monkeypatch, a, SmartArray(np.zeros(4)))
    d = a.gpu()
    d.copy_to_device(np.full(4, 3.0))
    a.gpu_changed() if how == "gpu_changed" else a.mark_changed("gpu")
    np.testing.assert_array_equal(h, np.full(4, 3.0))
    assert_coherent(a)


@pytest.mark.skipif(
    memory.SIMULATOR and not is_strict(),
    reason="the plain simulator runs any block size (strict mode and the fake driver refuse)",
)
@pytest.mark.parametrize("config", [(1, 2048), (1, (32, 32, 2)), (1, (1, 1, 65))])
def test_a_launch_configuration_a_gpu_refuses_fails_and_loses_nothing(config):
    """More than 1024 threads per block (or a block dimension over its limit) fails at the
    launch on a GPU (CUDA_ERROR_INVALID_VALUE): strict mode and the fake driver refuse it too,
    after the arguments were prepared; the kernel never ran and the data is intact."""

    @cuda.jit
    def fill(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = -1.0

    a = sa.SmartArray(np.arange(8.0))
    with pytest.raises(Exception, match="CUDA_ERROR_INVALID_VALUE|CUDA_ERROR_1|acceptable range"):
        fill[config](a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(8.0))
