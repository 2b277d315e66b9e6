"""A re-entrant lock whose work from weakref callbacks is deferred to its next holder.

A weakref callback or finalizer runs in whatever thread collected the object, at any
allocation: maybe one that holds a lock the registry lock's holder waits for (``sa.stats()``
allocating under the stats lock while an eviction download waits for it to count its bytes),
or at interpreter exit, when module globals are already None. Such a callback must take no
lock: it queues its work with :meth:`DeferringLock.defer` (``deque.append``
is atomic and takes no lock), and whoever enters the lock next runs the queued work first.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any


class DeferringLock:
    """An ``RLock`` that runs the work deferred by :meth:`defer` on entering."""

    __slots__ = ("_lock", "_deferred")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._deferred: collections.deque[Callable[[], Any]] = collections.deque()

    def defer(self, work: Callable[[], Any]) -> None:
        """Queue ``work`` for the next holder of the lock; safe in any callback (no lock)."""
        self._deferred.append(work)

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            while self._deferred:
                self._deferred.popleft()()
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()
