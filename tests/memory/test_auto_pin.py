"""The automatic page-lock policy: ``set_pinned_budget`` / ``pinned_budget``.

Runs in every mode (plain simulator, strict, fake driver); on the fake driver the driver's own
record of page-locked ranges is checked too, and with its clock the copies' rate.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu
from smartarray._engine import auto_pin as _auto_pin
from smartarray._fakegpu._clock import PCIE5
from tests._kernels import add_one

N = 256  # float64 elements: 2 KiB, one block of the kernel


@pytest.fixture(autouse=True)
def _fresh_policy(monkeypatch: pytest.MonkeyPatch):
    # A small threshold: the simulator runs a kernel's threads in Python (the derivation
    # itself: test_the_threshold_is_the_page_locking_cost_over_the_per_byte_saving).
    monkeypatch.setattr(_auto_pin, "threshold", lambda nbytes: 4 * nbytes)
    _auto_pin.reset()
    yield
    _auto_pin.reset()


def _round_trip(a: sa.SmartArray, stream: object = 0) -> None:
    """One upload (the kernel reads what the host wrote) and one download (the host reads)."""
    a[0:1] = a.get()[0:1]  # the download (the whole array), a host write: the device is stale
    add_one[1, N, stream](a)  # the upload


def _until_locked(a: sa.SmartArray) -> int:
    """Round trips until the policy page-locked ``a``'s host copy (at most 6); how many."""
    rounds = 0
    while not _auto_pin._policy.is_locked(a._buf) and rounds < 6:
        _round_trip(a)
        rounds += 1
    return rounds


def _host_bytes(a: sa.SmartArray) -> np.ndarray:
    return a._buf.host_bytes


def _driver_locked(a: sa.SmartArray) -> bool | None:
    """Whether the fake driver has the host copy page-locked (None off the fake driver)."""
    drv = _fakegpu.current()
    if drv is None:
        return None
    host = _host_bytes(a)
    return bool(drv.host.page_locked(host.ctypes.data, host.nbytes, 0))


def test_off_by_default_nothing_is_registered() -> None:
    assert sa.pinned_budget().budget is None
    a = sa.SmartArray(np.zeros(N))
    for _ in range(8):
        _round_trip(a)
    assert np.all(a.get() == 8)
    report = sa.pinned_budget()
    assert (report.arrays, report.used, report.registered_total) == (0, 0, 0)
    assert _driver_locked(a) in (None, False)


def test_an_array_moved_repeatedly_is_page_locked_once_its_staged_bytes_pass_the_threshold() -> (
    None
):
    sa.set_pinned_budget(1 << 20)
    a = sa.SmartArray(np.zeros(N))
    nbytes = a.nbytes
    _round_trip(a)  # one upload
    assert sa.pinned_budget().arrays == 0
    drv = _fakegpu.current()
    clock = getattr(drv, "clock", None)
    rounds = 1
    while sa.pinned_budget().arrays == 0 and rounds < 6:
        _round_trip(a)
        rounds += 1
    assert rounds in (3, 4)  # 4 * nbytes staged, then registered before the next copy
    since = len(clock.spans) if clock is not None else 0
    _round_trip(a)
    rounds += 1
    report = sa.pinned_budget()
    assert (report.arrays, report.used, report.registered_total) == (1, nbytes, 1)
    assert _driver_locked(a) in (None, True)
    for _ in range(3):
        _round_trip(a)
    assert sa.pinned_budget().registered_total == 1  # once
    assert np.all(a.get() == rounds + 3)
    if clock is not None:
        copies = [s for s in clock.spans[since:] if s.engine.endswith(("h2d", "d2h"))]
        assert copies and not any("pageable" in s.label for s in copies)
        for s in copies:  # the page-locked rate ("<op> <n> B")
            n = int(s.label.split()[-2])
            assert s.end - s.start == pytest.approx(
                clock.preset.copy_latency_s + n / clock.preset.h2d_Bps
            )
        assert any(s.label == "page-lock" for s in clock.spans if s.engine == "host")


def test_the_budget_is_respected_a_second_array_in_use_stays_pageable() -> None:
    a = sa.SmartArray(np.zeros(N))
    b = sa.SmartArray(np.zeros(N))
    sa.set_pinned_budget(a.nbytes)  # room for one
    for _ in range(6):
        _round_trip(a)
        _round_trip(b)
    report = sa.pinned_budget()
    assert (report.arrays, report.used, report.registered_total) == (1, a.nbytes, 1)
    assert _auto_pin._policy.is_locked(a._buf) and not _auto_pin._policy.is_locked(b._buf)
    assert _driver_locked(b) in (None, False)
    assert np.all(a.get() == 6) and np.all(b.get() == 6)


def test_an_idle_registration_makes_room_for_an_array_in_use() -> None:
    a = sa.SmartArray(np.zeros(N))
    b = sa.SmartArray(np.zeros(N))
    sa.set_pinned_budget(a.nbytes)
    rounds = _until_locked(a)
    assert _auto_pin._policy.is_locked(a._buf)
    for _ in range(6):  # a idle meanwhile
        _round_trip(b)
    assert _auto_pin._policy.is_locked(b._buf) and not _auto_pin._policy.is_locked(a._buf)
    assert _driver_locked(a) in (None, False)
    assert _driver_locked(b) in (None, True)
    report = sa.pinned_budget()
    assert (report.arrays, report.used, report.pending_unlock) == (1, b.nbytes, 0)
    _round_trip(a)
    assert np.all(a.get() == rounds + 1) and np.all(b.get() == 6)


def test_an_array_larger_than_the_budget_stays_pageable() -> None:
    a = sa.SmartArray(np.zeros(N))
    sa.set_pinned_budget(a.nbytes - 1)
    for _ in range(4):
        _round_trip(a)
    assert sa.pinned_budget().registered_total == 0
    assert _driver_locked(a) in (None, False)


def test_death_defers_the_unlock_until_every_device_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    sa.set_pinned_budget(1 << 20)
    a = sa.SmartArray(np.zeros(N))
    _until_locked(a)
    host = _host_bytes(a)
    assert sa.pinned_budget().arrays == 1
    stream = cuda.stream()
    a[0:1] = a.get()[0:1]
    add_one[1, N, stream](a)  # an upload from the page-locked copy, queued on a stream
    drv = _fakegpu.current()
    if drv is not None:
        assert drv.queue.ops  # the upload and the kernel still queued (the fake runs lazily)
    unlocked: list[bool] = []
    real_unpin = _auto_pin._pinning._unpin

    def unpin(pin: object) -> None:
        drv = _fakegpu.current()
        if drv is not None:  # every device waited for: nothing queued reads the memory
            unlocked.append(not drv.queue.ops)
        real_unpin(pin)

    monkeypatch.setattr(_auto_pin._pinning, "_unpin", unpin)
    del a
    gc.collect()
    report = sa.pinned_budget()
    assert (report.arrays, report.used, report.pending_unlock) == (0, 0, host.nbytes)
    drv = _fakegpu.current()
    if drv is not None:
        assert drv.host.page_locked(host.ctypes.data, host.nbytes, 0)  # still: deferred
    _auto_pin.reset()
    assert sa.pinned_budget().pending_unlock == 0
    if drv is not None:
        assert not drv.host.page_locked(host.ctypes.data, host.nbytes, 0)
        assert all(unlocked)


def test_reset_and_turning_off_unlock() -> None:
    sa.set_pinned_budget(1 << 20)
    a = sa.SmartArray(np.zeros(N))
    rounds = _until_locked(a)
    assert _driver_locked(a) in (None, True)
    sa.set_pinned_budget(None)
    assert sa.pinned_budget().arrays == 0
    assert _driver_locked(a) in (None, False)
    _round_trip(a)  # pageable again, the values right
    assert np.all(a.get() == rounds + 1)


@pytest.mark.parametrize(
    ("bad", "error"),
    [(-1, ValueError), ("1", TypeError), (1.5, TypeError), (True, TypeError)],
)
def test_bad_budgets_raise_before_anything_changes(bad: object, error: type) -> None:
    sa.set_pinned_budget(100)
    with pytest.raises(error, match="nbytes"):
        sa.set_pinned_budget(bad)  # type: ignore[arg-type]
    assert sa.pinned_budget().budget == 100


def test_pinned_true_and_adopted_host_copies_are_left_alone() -> None:
    sa.set_pinned_budget(1 << 20)
    a = sa.SmartArray(np.zeros(N), pinned=True)
    for _ in range(4):
        _round_trip(a)
    assert sa.pinned_budget().registered_total == 0
    assert np.all(a.get() == 4)


def test_the_threshold_is_the_page_locking_cost_over_the_per_byte_saving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.undo()  # the real threshold
    p = PCIE5
    assert (p.pin_latency_s, p.pin_Bps) == (_auto_pin.PIN_LATENCY_S, _auto_pin.PIN_BPS)
    assert (
        p.unlock_latency_s,
        p.unlock_Bps,
    ) == (_auto_pin.UNLOCK_LATENCY_S, _auto_pin.UNLOCK_BPS)
    assert (p.pageable_Bps, p.h2d_Bps) == (_auto_pin.PAGEABLE_BPS, _auto_pin.PAGE_LOCKED_BPS)
    n = 64 << 20
    cost = p.pin_latency_s + p.unlock_latency_s + n / p.pin_Bps + n / p.unlock_Bps
    saving = 1 / p.pageable_Bps - 1 / p.h2d_Bps
    assert _auto_pin.threshold(n) == pytest.approx(cost / saving)
    assert 10 * n < _auto_pin.threshold(n) < 12 * n  # about ten times the array


class AutoPinMachine(RuleBasedStateMachine):
    """Arrays moved, dropped, budgets changed: values stay right, the budget holds, and the
    fake driver's page-locked ranges are the policy's."""

    def __init__(self) -> None:
        super().__init__()
        _auto_pin.reset()
        self.arrays: list[tuple[sa.SmartArray, int]] = []

    @rule(budget=st.sampled_from([None, 0, 2048, 4096, 1 << 20]))
    def set_budget(self, budget: int | None) -> None:
        sa.set_pinned_budget(budget)

    @rule()
    def new_array(self) -> None:
        if len(self.arrays) < 3:
            self.arrays.append((sa.SmartArray(np.zeros(N)), 0))

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        if self.arrays:
            i = data.draw(st.integers(0, len(self.arrays) - 1))
            a, count = self.arrays[i]
            _round_trip(a)
            self.arrays[i] = (a, count + 1)

    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        if self.arrays:
            del self.arrays[data.draw(st.integers(0, len(self.arrays) - 1))]
            gc.collect()

    @invariant()
    def values_budget_and_driver_agree(self) -> None:
        report = sa.pinned_budget()
        if report.budget is not None:
            assert report.used <= report.budget
        else:
            assert report.used == 0
        locked = [a for a, _ in self.arrays if _auto_pin._policy.is_locked(a._buf)]
        assert report.arrays == len(locked)
        assert report.used == sum(a.nbytes for a in locked)
        for a, count in self.arrays:
            assert _driver_locked(a) in (None, _auto_pin._policy.is_locked(a._buf))
            assert np.all(a.get() == count)

    def teardown(self) -> None:
        self.arrays.clear()
        gc.collect()
        _auto_pin.reset()


AutoPinMachine.TestCase.settings = settings(max_examples=10, stateful_step_count=12, deadline=None)
test_auto_pin_machine = AutoPinMachine.TestCase
