"""A :class:`~smartarray.coherence.BufferState`'s locations: one added on first use (a
device's copy), one whose copy is given back (an eviction), and the order in which a target
takes bytes from the others.

Bound in ``BufferState``'s class body. Pure Python, standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._intervals import EMPTY_SET

if TYPE_CHECKING:  # pragma: no cover
    from ._state import BufferState

__all__ = ["add_location", "drop", "prefer", "sources"]


def add_location(self: BufferState, where: str) -> None:
    """Add the location ``where``, current nowhere yet (a device's copy, made on first use).

    It comes last in the order of preference as a copy source. Bytes never written since
    the state was made uninitialised are not valid there: a read copies them (garbage, but
    never stale data). Adding a location that exists does nothing.

    Raises
    ------
    TypeError
        ``where`` is not a str.
    """
    if not isinstance(where, str):
        raise TypeError(f"a location must be a str, got {where!r}")
    if where in self._valid:
        return
    self._valid[where] = EMPTY_SET
    self._locations = (*self._locations, where)
    self._version += 1


def prefer(self: BufferState, where: str, sources: Iterable[str]) -> None:
    """Make reads at ``where`` take bytes from ``sources`` first, in that order.

    The other locations follow, in :attr:`locations` order. (Several devices: a device
    reads from the devices it reaches peer to peer before the host.)

    Raises
    ------
    ValueError
        ``where`` or one of ``sources`` is not a location, or ``sources`` names
        ``where``.
    """
    if where not in self._valid:
        raise self._bad_where(where)
    order = tuple(sources)
    for loc in order:
        if loc not in self._valid or loc == where:
            raise ValueError(
                f"sources must name other locations than {where!r}: one of "
                f"{self._locations!r}; got {loc!r}"
            )
    self._prefer[where] = order


def sources(self: BufferState, where: str) -> tuple[str, ...]:
    """The locations reads at ``where`` take bytes from, in order of preference."""
    first = self._prefer.get(where)
    if not first:
        return self._locations
    return first + tuple(loc for loc in self._locations if loc not in first)


def drop(self: BufferState, where: str) -> None:
    """Record that the copy at ``where`` is gone (freed): nothing is current there.

    Allowed only when every byte current at ``where`` is also current at another
    location: dropping the only current copy of a byte would lose it. The bytes are
    copied again if ``where`` reads them later (as after :meth:`mark_changed` elsewhere).

    Parameters
    ----------
    where : str
        The location whose copy is given back.

    Raises
    ------
    ValueError
        If some byte is current at ``where`` only (download it first: :meth:`plan_read`
        at another location); the state is unchanged.
    """
    mine = self.valid(where)
    if not mine:
        return
    elsewhere = EMPTY_SET
    for loc, s in self._valid.items():
        if loc != where:
            elsewhere = elsewhere.union(s)
    lost = mine.difference(elsewhere)
    if lost:
        raise ValueError(
            f"dropping the copy at {where!r} would lose bytes {list(lost.runs)!r}, "
            "current there only; copy them to another location first"
        )
    self._valid[where] = EMPTY_SET
    self._version += 1
