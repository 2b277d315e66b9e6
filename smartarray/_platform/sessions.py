"""The test double's session, when one is on: all that production code knows of it.

Strict mode (``smartarray/_strict/``, turned on by :func:`smartarray.testing.strict`) runs
one session at a time and announces it here, from its side, so that code below never imports
the test double (``tests/structure/test_layers.py`` checks it). Production code asks three things:

- the session itself, for identity: streams and events made in one session belong to its
  scheduler, not to the next session's (``smartarray/_memory/streams.py``);
- whether a host array lies in page-locked memory, which only the session knows of the
  memory it page-locked (:meth:`Session.is_page_locked`, ``smartarray/jit.py``);
- whether handle 0 names each thread's own stream (per-thread default streams) in it
  (``smartarray/_memory/streams.py``).

State derived from whether a session is on subscribes to :data:`on_change` and is derived
again on each announcement, each in one place (``smartarray/_engine/residency.py``: whether
launches claim their arguments; ``smartarray/_memory/streams.py``: whether handle 0 names each
thread's own stream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Session", "announce", "current", "on_change"]


class Session(Protocol):
    """What production code may ask a test double's session."""

    def is_page_locked(self, ary: Any) -> bool:
        """Whether the host array ``ary`` lies in page-locked memory of this session."""
        ...

    @property
    def per_thread_default_streams(self) -> bool:
        """Whether stream handle 0 names the calling thread's own stream in this session."""
        ...


_current: Session | None = None

#: Called, in order, after a session starts or ends.
on_change: list[Callable[[], None]] = []


def current() -> Session | None:
    """The session that is on, or ``None``."""
    return _current


def announce(session: Session | None) -> None:
    """Make ``session`` the current one (``None``: none is on), then tell the listeners."""
    global _current
    _current = session
    for listener in on_change:
        listener()
