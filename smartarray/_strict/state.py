"""The state of the strict mode that is on: queues, memory budget, recorded ranges."""

from __future__ import annotations

from typing import Any, cast

from .._platform import sessions as _sessions

__all__ = ["StrictState", "current", "get"]

#: Device memory when the test sets none: a 16 GiB device.
DEFAULT_DEVICE_MEMORY = 16 * 2**30


class StrictState:
    """The state of one strict session, yielded by :func:`smartarray.testing.strict`.

    Attributes
    ----------
    seed : int or None
        The seed of the order in which work on different streams runs.
    scheduler : Scheduler
        The queues of device work.
    device_memory : int
        Size of the simulated device in bytes.
    device_used : int
        Bytes of device memory allocated and alive.
    launches : int
        Kernel launches so far.
    """

    def __init__(
        self, seed: int | None, device_memory: int | None, per_thread_default_stream: bool = False
    ) -> None:
        from .ranges import Ranges
        from .scheduler import Scheduler, StrictStream

        self.seed = seed
        self.scheduler = Scheduler(seed, per_thread_default_stream)
        self.default_stream = StrictStream(self.scheduler, default=True)  # handle 0
        self.legacy_default_stream = StrictStream(self.scheduler, default=True, handle=1)
        self.per_thread_default_stream = StrictStream(self.scheduler, default=True, handle=2)
        self.device_memory = DEFAULT_DEVICE_MEMORY if device_memory is None else device_memory
        self.device_used = 0
        self.device_ranges = Ranges()
        self.host_ranges = Ranges()
        self.launches = 0

    @property
    def host_syncs(self) -> int:
        """How many times the host waited for device work (synchronize calls, sync copies)."""
        return self.scheduler.host_syncs

    @property
    def log(self) -> list[str]:
        """Labels of the device work run so far, in the order it ran."""
        return self.scheduler.log

    @property
    def per_thread_default_streams(self) -> bool:
        """Whether handle 0 names the calling thread's own stream in this session."""
        return self.scheduler.per_thread

    def is_page_locked(self, ary: Any) -> bool:
        """Whether the host array ``ary`` lies in page-locked (pinned or mapped) memory."""
        from .ranges import byte_extent

        lo, hi = byte_extent(ary)
        return self.host_ranges.find(lo, hi) is not None

    def pending(self) -> int:
        """How many pieces of device work are queued and have not run."""
        return self.scheduler.pending()


def current() -> StrictState:
    """The strict session that is on (announced in ``smartarray/_platform/sessions.py``)."""
    session = _sessions.current()
    if session is None:
        raise RuntimeError("strict mode is not on")
    return cast(StrictState, session)  # (strict mode announces StrictStates only)


def get() -> StrictState | None:
    return cast("StrictState | None", _sessions.current())


def set_current(st: StrictState | None) -> None:
    """Announce ``st`` as the session that is on, to the code that derives state from it."""
    _sessions.announce(st)
