"""Threads and SmartArrays: no deadlock, no stale byte marked current."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numba
import numpy as np
import pytest
from numba import cuda
from numba.cuda import args as numba_args

import smartarray as sa
from smartarray import SmartArray
from smartarray._strict import state as _strict_state

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


# --- two threads' launches on one stream, registered in the other order -------------------------


class LockPausedInCallback:
    """A buffer's lock whose first acquisition by thread ``first`` inside a launch's callback
    (after the launch recorded its event, before it registered it) waits for ``go``."""

    def __init__(self, lock: Any, reached: threading.Event, go: threading.Event) -> None:
        self.lock, self.reached, self.go = lock, reached, go
        self.in_callback = threading.local()

    def __enter__(self) -> Any:
        if getattr(self.in_callback, "on", False) and not self.reached.is_set():
            self.reached.set()
            self.go.wait(TIMEOUT)
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lock, name)


def _launch_in_thread(
    view: SmartArray,
    stream: Any,
    errors: list[BaseException],
    after: threading.Event | None,
    done: threading.Event | None,
) -> None:
    """Launch ``add_one`` on ``view`` (once ``after`` is set); set ``done`` when it returned."""
    try:
        if after is not None:
            after.wait(TIMEOUT)
        add_one[1, 8, stream](view, 0)
    except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
        errors.append(exc)
    finally:
        if done is not None:
            done.set()


@pytest.mark.skipif(
    bool(numba.config.ENABLE_CUDASIM) and _strict_state.get() is None,
    reason="the plain simulator cannot run two launches at once",
)
def test_launches_of_two_threads_on_one_stream_are_both_waited_for(monkeypatch):
    """A launch records its event after its kernel, then registers it under the buffer's lock.
    Another thread's launch on the same stream may record its event later and register it
    first: the earlier record must not replace it, or a host read waits only for the first
    kernel and may read the second one's bytes before it wrote them."""
    from smartarray._engine.launch import Launch

    shared = cuda.stream()
    reached = threading.Event()  # the first thread's callback recorded its event
    second_done = threading.Event()  # the second thread's launch returned
    paused: list[LockPausedInCallback] = []
    original_call = Launch.__call__

    def callback(self: Launch) -> None:
        if threading.current_thread().name == "first":
            for lock in paused:
                lock.in_callback.on = True
        original_call(self)

    monkeypatch.setattr(Launch, "__call__", callback)
    for _ in range(6):  # (the fake driver runs ready work in a seeded order: several rounds)
        reached.clear()
        second_done.clear()
        a = SmartArray(np.zeros(16), where="gpu")
        add_one[1, 8, shared](a[:8], 0)  # (the kernel loaded before the threads start)
        a.get("gpu")
        cuda.synchronize()
        paused[:] = [LockPausedInCallback(a._buf.lock, reached, second_done)]
        a._buf.lock = paused[0]
        errors: list[BaseException] = []
        first = threading.Thread(
            target=_launch_in_thread, args=(a[:8], shared, errors, None, None), name="first"
        )
        second = threading.Thread(
            target=_launch_in_thread, args=(a[8:], shared, errors, reached, second_done)
        )
        first.start()
        second.start()
        first.join(TIMEOUT)
        second.join(TIMEOUT)
        assert not errors, errors
        assert reached.is_set() and second_done.is_set()
        np.testing.assert_array_equal(np.asarray(a), [2.0] * 8 + [1.0] * 8)
