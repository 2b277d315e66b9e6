"""The lock whose weakref-callback work is deferred to its next holder
(smartarray._engine.deferred_lock)."""

from __future__ import annotations

import threading

from smartarray._engine.deferred_lock import DeferringLock


def test_deferred_work_runs_when_the_lock_is_next_entered_not_before():
    lock, done = DeferringLock(), []
    lock.defer(lambda: done.append(1))
    assert done == []
    with lock:
        assert done == [1]  # run before the holder's own work
    with lock:
        assert done == [1]  # once


def test_defer_never_waits_for_a_holder_in_another_thread():
    lock, done = DeferringLock(), []
    holding, release, deferred = threading.Event(), threading.Event(), threading.Event()

    def hold():
        with lock:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    other = threading.Thread(target=lambda: (lock.defer(lambda: done.append(1)), deferred.set()))
    other.start()
    try:
        assert deferred.wait(10)
    finally:
        release.set()
        holder.join(30)
        other.join(30)
    with lock:
        assert done == [1]


def test_the_lock_is_reentrant_and_released_when_deferred_work_fails():
    lock = DeferringLock()

    def fail():
        raise RuntimeError("deferred")

    lock.defer(fail)
    try:
        with lock:
            raise AssertionError("not reached")  # pragma: no cover
    except RuntimeError:
        pass
    acquired = []

    def take_and_give_back():
        acquired.append(lock._lock.acquire(timeout=5))
        if acquired[-1]:
            lock._lock.release()

    t = threading.Thread(target=take_and_give_back)
    t.start()
    t.join(30)
    assert acquired == [True]
    with lock, lock:
        pass
