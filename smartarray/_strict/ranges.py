"""Address ranges of strict mode: live allocations and page-locked host memory.

A leaf module (NumPy only): the session's state (``state.py``) keeps two :class:`Ranges`,
and the modules that record and check memory (``devmem.py``, ``launch.py``, ``arrays.py``)
read them.
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["Ranges", "byte_extent", "pointer"]


def pointer(ary: np.ndarray) -> int:
    return int(ary.__array_interface__["data"][0])


def byte_extent(ary: np.ndarray) -> tuple[int, int]:
    if ary.size == 0:
        p = pointer(ary)
        return p, p
    low, high = np.lib.array_utils.byte_bounds(ary)
    return int(low), int(high)


class Ranges:
    """Live address ranges ``[start, stop)`` with a kind, kept sorted by start."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._entries: dict[int, tuple[int, str]] = {}

    def add(self, start: int, stop: int, kind: str) -> None:
        if start in self._entries:
            raise ValueError("range already recorded")
        bisect.insort(self._starts, start)
        self._entries[start] = (stop, kind)

    def remove(self, start: int) -> None:
        if self._entries.pop(start, None) is not None:
            i = bisect.bisect_left(self._starts, start)
            del self._starts[i]

    def find(self, lo: int, hi: int) -> tuple[int, int, str] | None:
        """The range that contains ``[lo, hi)``, if any."""
        i = bisect.bisect_right(self._starts, lo) - 1
        if i < 0:
            return None
        start = self._starts[i]
        stop, kind = self._entries[start]
        if lo >= start and hi <= stop and (hi > lo or lo < stop):
            return start, stop, kind
        return None

    def overlaps(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_left(self._starts, hi)
        for start in self._starts[max(0, i - 1) : i]:
            if start < hi and lo < self._entries[start][0]:
                return True
        return False
