"""Threads and SmartArrays: no deadlock, no stale byte marked current."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from numba import cuda
from numba.cuda import args as numba_args

import smartarray as sa
from smartarray import SmartArray

# Outcomes depend on the fake driver's adversarial order: CI runs them over several seeds.
pytestmark = pytest.mark.seeds


TIMEOUT = float(os.environ.get("SMARTARRAY_DEADLOCK_TIMEOUT", "30"))


@contextmanager
def fast_thread_switching() -> Iterator[None]:
    """Switch threads as often as possible, so lock-order races show up in a few rounds."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_opposite(
    op: Callable[[Any, Any], Any], x: Any, y: Any, rounds: int = 2000, timeout: float = TIMEOUT
) -> None:
    """Run ``op(x, y)`` and ``op(y, x)`` in two threads, ``rounds`` times each; fail, never hang,
    when they deadlock (daemon threads, joined with a timeout)."""
    errors: list[BaseException] = []

    def worker(first: Any, second: Any) -> None:
        try:
            for _ in range(rounds):
                op(first, second)
        except BaseException as exc:  # noqa: BLE001 - reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=pair, daemon=True) for pair in ((x, y), (y, x))]
    with fast_thread_switching():
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    if any(t.is_alive() for t in threads):
        # No traceback: pytest would repr the frames' arguments, whose locks are held forever.
        pytest.fail(f"deadlock: {rounds} rounds in two threads did not finish", pytrace=False)
    if errors:
        raise errors[0]


def _setitem_fancy(x: SmartArray, y: SmartArray) -> None:
    x[y] = 1


def _setitem_all(x: SmartArray, y: SmartArray) -> None:
    x[...] = y


OPPOSITE_OPS = {
    "dot": lambda x, y: x.dot(y),
    "getitem": lambda x, y: x[y],
    "setitem": _setitem_fancy,
    "setitem_all": _setitem_all,
    "take": lambda x, y: x.take(y),
    "put": lambda x, y: x.put(y, 0),
    "contains": lambda x, y: y in x,
    "ufunc": lambda x, y: np.add(x, y, out=x),
    "copyto": lambda x, y: np.copyto(x, y),
}


@pytest.mark.parametrize("name", sorted(OPPOSITE_OPS))
def test_opposite_order_two_array_operations_do_not_deadlock(name):
    ia = SmartArray(np.array([0, 1, 2, 3]))
    ib = SmartArray(np.array([3, 2, 1, 0]))
    run_opposite(OPPOSITE_OPS[name], ia, ib)
    for x in (ia, ib):  # both copies agree afterwards
        np.testing.assert_array_equal(x.gpu().copy_to_host(), np.asarray(x))


def test_opposite_order_on_views_of_device_data_do_not_deadlock():
    a = SmartArray(np.arange(8.0), where="gpu")
    b = SmartArray(np.arange(8.0), where="gpu")
    run_opposite(lambda x, y: x[2:6].dot(y[:4]), a, b, rounds=500)
    np.testing.assert_array_equal(a.host(), np.arange(8.0))
    np.testing.assert_array_equal(b.host(), np.arange(8.0))


# --- a host read between argument preparation and the kernel body ------------------------------


@cuda.jit
def add_one(x, unused):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


class ReadsHostWhenPrepared(numba_args.In):
    """A later kernel argument whose preparation reads ``target``'s host copy, as another
    thread or a pre-launch hook may do after ``target`` was prepared."""

    def __init__(self, target: SmartArray) -> None:
        super().__init__(sa.to_device(np.zeros(1)))
        self.target = target

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        np.asarray(self.target)  # downloads: the host copy becomes current (pre-kernel values)
        return super().to_device(retr, stream)


@pytest.mark.parametrize("view", [False, True])
def test_host_read_after_preparation_does_not_leave_stale_host_current(view):
    base = SmartArray(np.zeros(6), where="gpu")  # current on the device only
    a = base[1:5] if view else base
    expect = np.zeros(4 if view else 6)
    for _ in range(3):  # first launch: found device-only; later ones: the loop fast path
        add_one[1, 8](a, ReadsHostWhenPrepared(a))
        expect += 1
        np.testing.assert_array_equal(a.host(), expect)
        a.get("gpu")
        add_one[1, 8](a, ReadsHostWhenPrepared(a))  # host read after a launch in between
        expect += 1
        np.testing.assert_array_equal(np.asarray(a), expect)
        base.get("gpu")
        add_one[1, 8](a, 0)  # a plain launch again
        expect += 1
    np.testing.assert_array_equal(a.host(), expect)
