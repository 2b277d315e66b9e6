"""What one launch recorded about one buffer: its writes, and refresh failures to report.

The engine keeps one :class:`LaunchWrites` per buffer and launch (keyed by the launch's
``retr`` list) while the launch's post-launch callbacks run; :class:`LaunchFailures` is the last
of those callbacks when a held host array's refresh failed.
"""

from __future__ import annotations

from typing import Any

from .errors import TransferError

__all__ = ["LaunchFailures", "LaunchWrites"]


class LaunchWrites:
    """The writes of one launch to one buffer (identified by the launch's ``retr`` list)."""

    __slots__ = ("retr", "pending", "ranges")

    def __init__(self, retr: list[Any]) -> None:
        self.retr = retr
        self.pending = 0  # argument callbacks still to run
        self.ranges: list[tuple[int, int]] = []


class LaunchFailures:
    """The last post-launch callback of a launch whose host refresh failed: raises then."""

    def __init__(self) -> None:
        self.errors: list[TransferError] = []

    def __call__(self) -> None:
        first = self.errors[0]
        raise TransferError(
            f"the kernel ran and its writes are recorded, but refreshing {len(self.errors)} "
            "held host array(s) failed; they are marked stale and the next host read "
            f"downloads again (do not launch again to retry): {first}"
        ) from first
