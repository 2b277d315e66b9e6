"""The transfer guard: refusals change nothing, modes, directions, threads, environment."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from tests._kernels import add_one
from tests._targets import with_checkout

guard_module = sys.modules["smartarray.guard"]
ROOT = Path(__file__).resolve().parents[2]


def _stale_on_device(n=8, name="x"):
    """A SmartArray current on both sides, then written on the host: the device is stale."""
    a = sa.SmartArray(np.arange(n, dtype=np.float64), name=name)
    a.gpu()
    a[2:4] = 10.0
    assert a.is_valid("host") and not a.is_valid("gpu")
    return a


def test_disallow_refuses_a_launch_upload_and_changes_nothing():
    a = _stale_on_device()
    before = sa.stats()
    with sa.transfer_guard("disallow"), pytest.raises(sa.TransferGuardError) as info:
        add_one[1, 8](a)  # line of the launch
    exc = info.value
    assert (exc.array, exc.direction, exc.reason) == ("x", "h2d", "device use")
    assert exc.nbytes == 16  # only the stale bytes [16, 32) would have moved
    assert exc.line == f"test_guard.py:{_inc_line()}"
    assert "x" in str(exc) and "h2d" in str(exc) and "16 B" in str(exc) and exc.line in str(exc)
    assert sa.stats() == before  # nothing moved
    assert a.is_valid("host") and not a.is_valid("gpu")
    expected = np.arange(8.0)
    expected[2:4] = 10.0
    np.testing.assert_array_equal(np.asarray(a), expected)
    add_one[1, 8](a)  # allowed again after the block
    np.testing.assert_array_equal(np.asarray(a), expected + 1)


def _inc_line() -> int:
    import inspect

    source, first = inspect.getsourcelines(
        test_disallow_refuses_a_launch_upload_and_changes_nothing
    )
    return first + next(i for i, s in enumerate(source) if "line of the launch" in s)


def test_a_refused_plan_moves_none_of_its_copies():
    """A read needing two separate copies is refused whole, before the first one."""
    a = sa.SmartArray(np.zeros(16), name="two")
    d = a.gpu()
    d[:] = 1.0
    a.gpu_changed()
    a[4:8] = 5.0  # host current on [32, 64) only: the read of all needs [0, 32) and [64, 128)
    with (
        sa.trace() as t,
        sa.transfer_guard("disallow", direction="d2h"),
        pytest.raises(sa.TransferGuardError),
    ):
        a.sum()
    assert t.events == []
    assert not a.is_valid("host") and not a.is_valid("gpu")
    assert a[4:8].is_valid("host") and a[:4].is_valid("gpu")
    assert float(a.sum()) == 12 * 1.0 + 4 * 5.0


def test_disallow_allows_explicit_transfers_and_disallow_explicit_refuses_them():
    a = _stale_on_device()
    with sa.transfer_guard("disallow"):
        a.gpu()  # explicit get
        d = sa.to_device(np.zeros(3))
        d.copy_to_host()
    assert a.is_valid("gpu")
    b = _stale_on_device(name="b")
    with sa.transfer_guard("disallow_explicit"):
        with pytest.raises(sa.TransferGuardError, match="explicit"):
            b.gpu()
        with pytest.raises(sa.TransferGuardError):
            sa.to_device(np.zeros(3))
        with pytest.raises(sa.TransferGuardError):
            d.copy_to_host()
    assert not b.is_valid("gpu")


def test_direction_limits_the_guard():
    a = _stale_on_device()
    with sa.transfer_guard("disallow", direction="d2h"):
        add_one[1, 8](a)  # an upload: allowed
        with pytest.raises(sa.TransferGuardError) as info:
            np.asarray(a)
    assert info.value.direction == "d2h"
    assert a.is_valid("gpu") and not a.is_valid("host")


def test_guards_nest_and_restore():
    a = _stale_on_device()
    with sa.transfer_guard("disallow"):
        with sa.transfer_guard("allow", direction="h2d"):
            add_one[1, 8](a)
        a.host()[0] = 3.0
        a.host_changed()
        with pytest.raises(sa.TransferGuardError):
            add_one[1, 8](a)


def test_guard_is_thread_local():
    a = _stale_on_device()
    errors = []

    def other():
        try:
            add_one[1, 8](a)  # not guarded in this thread
        except Exception as exc:  # pragma: no cover  # noqa: BLE001 - the failure tested
            errors.append(exc)

    with sa.transfer_guard("disallow"):
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert errors == [] and a.is_valid("gpu")


def test_refused_eager_refresh_is_refused_before_the_launch():
    """A held host array would be refreshed after the launch: refused before it, whole."""
    a = sa.SmartArray(np.zeros(8), name="held")
    b = sa.SmartArray(np.zeros(8), name="other")
    held = a.host()
    a.gpu()
    b.gpu()
    with (
        sa.transfer_guard("disallow", direction="d2h"),
        pytest.raises(sa.TransferGuardError) as info,
    ):
        _inc2[1, 8](b, a)
    assert info.value.reason == "eager refresh of an exported view"
    # The refused argument changed nothing: still current everywhere, its held array intact.
    assert a.valid_at == ("host", "gpu")
    np.testing.assert_array_equal(held, np.zeros(8))
    # The argument prepared before it was recorded as written on the device (a launch that
    # fails after preparing an argument may have run: see test_failures.py), with its values.
    assert b.valid_at == ("gpu",)
    np.testing.assert_array_equal(np.asarray(b), np.zeros(8))


@cuda.jit
def _inc2(x, y):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1
        y[i] += 1


def test_log_mode_logs_implicit_transfers_with_the_line(caplog):
    a = _stale_on_device(name="logged")
    with caplog.at_level(logging.WARNING, logger="smartarray"), sa.transfer_guard("log"):
        a.gpu()  # explicit: not logged
        a[0] = 1.0
        add_one[1, 8](a)  # implicit: logged
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "h2d 8 B logged (device use) test_guard.py:" in messages[0]
    np.testing.assert_array_equal(np.asarray(a)[:2], [2.0, 2.0])


def test_log_explicit_logs_explicit_transfers_too(caplog):
    with (
        caplog.at_level(logging.WARNING, logger="smartarray"),
        sa.transfer_guard("log_explicit"),
    ):
        sa.to_device(np.zeros(2))
    assert ["to_device" in r.getMessage() for r in caplog.records] == [True]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "never"}, "mode must be one of"),
        ({"mode": "disallow", "direction": "up"}, "direction must be"),
        ({"mode": "disallow", "direction": []}, "direction must be .* non-empty sequence"),
        ({"mode": "disallow", "direction": ()}, "direction must be .* non-empty sequence"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match), sa.transfer_guard(**kwargs):
        pass  # pragma: no cover


def test_a_direction_that_is_no_sequence_is_a_type_error():
    with (
        pytest.raises(TypeError, match="direction must be .* got int"),
        sa.transfer_guard("disallow", direction=5),
    ):
        pass  # pragma: no cover


def test_environment_variable_guards_a_whole_run():
    code = (
        "import numpy as np, smartarray as sa\n"
        "a = sa.SmartArray(np.zeros(4)); d = a.gpu(); a.gpu_changed()\n"
        "try:\n"
        "    a.sum()\n"
        "except sa.TransferGuardError as exc:\n"
        "    print('refused', exc.direction, exc.nbytes)\n"
        "with sa.transfer_guard('allow'):\n"
        "    print('allowed', float(a.sum()))\n"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", SMARTARRAY_TRANSFER_GUARD="disallow")
    with_checkout(env)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["refused d2h 32", "allowed 0.0"]
    env["SMARTARRAY_TRANSFER_GUARD"] = "sometimes"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0 and "SMARTARRAY_TRANSFER_GUARD" in out.stderr


def test_an_unarmed_guard_costs_one_check():
    assert not guard_module.armed()
    assert guard_module.check("h2d", 8, "device use", "x") is False


def test_njit_argument_construction_and_device_element_access_are_guarded():
    import numba

    @numba.njit
    def total(x):
        return x.sum()

    a = sa.SmartArray(np.arange(4.0), name="njit_arg")
    d = a.gpu()
    d[0] = 9.0
    a.gpu_changed()
    with sa.transfer_guard("disallow"):
        with pytest.raises(sa.TransferGuardError, match="njit argument"):
            total(a)
        dev = sa.to_device(np.arange(3.0))  # explicit
        with pytest.raises(sa.TransferGuardError, match="element read"):
            dev[1]
        with pytest.raises(sa.TransferGuardError, match="element write"):
            dev[1] = 7.0
    assert a.valid_at == ("gpu",) and float(total(a)) == 15.0
    np.testing.assert_array_equal(dev.copy_to_host(), [0.0, 1.0, 2.0])
    with (
        sa.transfer_guard("disallow_explicit"),
        pytest.raises(sa.TransferGuardError, match="construction"),
    ):
        sa.SmartArray(np.zeros(3), where="gpu")


# -- internal consolidation under a guard ------------------------------------------------------


@cuda.jit
def _set_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 1.0


def _slices_written(disallowed: str) -> sa.SmartArray:
    """Nine disjoint slices written where the other copy is current, under a guard refusing
    the direction that filling the other copy's gaps would take."""
    a = sa.SmartArray(np.zeros(100), name="sliced")
    if disallowed == "h2d":
        a.gpu()
        a.gpu_changed()  # current on the device only
    with sa.trace() as t, sa.transfer_guard("disallow", direction=disallowed):
        for k in range(9):
            if disallowed == "d2h":
                _set_one[1, 32](sa.Out(a[10 * k : 10 * k + 5]))
            else:
                a[10 * k : 10 * k + 5] = 1.0
    assert not [e for e in t.events if e.direction == disallowed]
    return a


@pytest.mark.parametrize("disallowed", ["d2h", "h2d"])
def test_consolidation_moves_nothing_the_guard_refuses_and_keeps_the_run_cap(disallowed):
    a = _slices_written(disallowed)
    state = a._buf.state
    assert all(len(state.valid(loc)) <= state.max_runs for loc in state.locations)
    expected = np.zeros(100)
    for k in range(9):
        expected[10 * k : 10 * k + 5] = 1.0
    np.testing.assert_array_equal(a.host(), expected)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), expected)


def test_a_consolidation_no_allowed_way_can_do_still_happens_and_keeps_the_run_cap():
    # Both directions disallowed: consolidation is bookkeeping, not the user's transfer; it
    # copies (counted, traced as 'consolidation') rather than leave the valid sets over the cap.
    a = sa.SmartArray(np.zeros(100), name="both")
    a.gpu()
    expected = np.zeros(100)
    with sa.trace() as t, sa.transfer_guard("disallow"):
        for k in range(9):
            _set_one[1, 32](sa.Out(a[10 * k : 10 * k + 5]))
            a[10 * k + 5 : 10 * k + 8] = 2.0
            expected[10 * k : 10 * k + 5] = 1.0
            expected[10 * k + 5 : 10 * k + 8] = 2.0
    assert {e.reason for e in t.events} <= {"consolidation"}
    state = a._buf.state
    assert all(len(state.valid(loc)) <= state.max_runs for loc in state.locations)
    np.testing.assert_array_equal(a.host(), expected)
    np.testing.assert_array_equal(a.gpu().copy_to_host(), expected)
