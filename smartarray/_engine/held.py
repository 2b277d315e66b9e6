"""The host arrays of one buffer that the user holds: which bytes each shows, for how long.

A SmartArray hands out ndarrays over its host copy (``a.host()``, ``np.asarray(a)``, an adopted
``SmartArray(x, copy=False)`` whose ``x`` the user keeps). Whatever the user holds must keep
showing current values: after a device write, the engine (:class:`smartarray._engine.buffer.Buffer`)
downloads the bytes these arrays show at once. This module only keeps the book: it knows
which byte ranges are held, and for how long; it moves nothing.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..coherence import IntervalSet

__all__ = ["HeldHostArrays"]


class _Holder:
    """The base object of a host array handed out (see :meth:`HeldHostArrays.view`)."""

    __slots__ = ("__array_interface__", "host", "__weakref__")
    __array_interface__: dict[str, Any]
    host: np.ndarray


class HeldHostArrays:
    """The host arrays handed out from one buffer, each with the byte range ``[lo, hi)`` it
    shows, held weakly: an entry lives exactly as long as the user holds the array (or any
    array NumPy derived from it).

    An array handed to a consumer that writes without telling (a host DLPack export:
    ``np.from_dlpack(a)``; DLPack has no call for "I wrote") is ``unannounced``: its bytes may
    change on the host at any moment while it lives, so the engine records a host write of
    them each time it refreshes them (see :meth:`unannounced`).
    """

    __slots__ = ("_entries", "_host", "_address")

    def __init__(self) -> None:
        self._entries: list[tuple[weakref.ref, int, int, bool]] = []
        # The host copy of the latest view and its address (asking NumPy builds a dict).
        self._host: np.ndarray | None = None
        self._address = 0

    def __bool__(self) -> bool:
        """Whether the user holds any array (the entries of dropped ones are let go here: a
        dead entry would make a prefetched download wait, and a launch refresh, for nobody)."""
        if not self._entries:
            return False
        self._entries = [e for e in self._entries if e[0]() is not None]
        return bool(self._entries)

    def track(self, ary: Any, lo: int, hi: int, unannounced: bool = False) -> None:
        """Track ``ary`` (alive as long as the user holds it) as showing bytes ``[lo, hi)``;
        ``unannounced``: its holder writes without calling ``mark_changed``."""
        self._entries = [e for e in self._entries if e[0]() is not None]
        self._entries.append((weakref.ref(ary), lo, hi, unannounced))

    def forget(self) -> None:
        """Stop tracking every held array (nobody outside holds them)."""
        self._entries.clear()

    def view(
        self,
        host: np.ndarray,
        shape: tuple[int, ...],
        dtype: np.dtype,
        offset: int,
        strides: tuple[int, ...],
        lo: int,
        hi: int,
        readonly: bool,
        unannounced: bool = False,
    ) -> np.ndarray:
        """A tracked ndarray over the host copy ``host``, to hand out to the user.

        NumPy collapses the ``.base`` of every view derived from an ndarray (``h[2:5]``,
        ``h.T``, ``h.reshape(..)``, a field) to the first array that owns its memory or whose
        base is of another type. Over the host buffer directly, that is the buffer: a weak
        reference to ``h`` dies while ``row = h[2:5]`` lives on, and ``row`` is never
        refreshed. So the handed-out array is built over a small holder object (not an
        ndarray): every derived view keeps the holder alive, and the weak reference to the
        holder lives exactly as long as anything that shows these bytes. A read-only export
        gets a read-only holder: NumPy then refuses ``flags.writeable = True`` on it and
        its views, and ``np.asarray(h.base)`` is read-only too. ``unannounced``: see the
        class's text.
        """
        holder = _Holder()
        holder.host = host
        if host is not self._host:
            self._host, self._address = host, host.__array_interface__["data"][0]
        address = self._address
        if dtype.fields is None and dtype.subdtype is None:
            holder.__array_interface__ = {
                "shape": shape,
                "typestr": dtype.str,
                "strides": strides,
                "data": (address + offset, readonly),
                "version": 3,
            }
            view = np.asarray(holder)
        else:  # records and subarrays: the exact dtype through a byte view of [lo, hi)
            holder.__array_interface__ = {
                "shape": (hi - lo,),
                "typestr": "|u1",
                "data": (address + lo, readonly),
                "version": 3,
            }
            raw = np.asarray(holder)
            view = np.ndarray(shape, dtype, buffer=raw, offset=offset - lo, strides=strides)
        self.track(holder, lo, hi, unannounced)
        return view

    def shown(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` that held arrays show, one per array (may overlap).

        Drops the entries of arrays nobody holds any more.
        """
        if not self._entries or lo >= hi:
            return []
        live = [e for e in self._entries if e[0]() is not None]
        self._entries = live
        return [(max(lo, e[1]), min(hi, e[2])) for e in live if max(lo, e[1]) < min(hi, e[2])]

    def unannounced(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` that live unannounced writers show (may overlap)."""
        return [
            (max(lo, elo), min(hi, ehi))
            for ref, elo, ehi, unannounced in self._entries
            if unannounced and max(lo, elo) < min(hi, ehi) and ref() is not None
        ]

    def any_stale(self, host_valid: IntervalSet, lo: int, hi: int) -> bool:
        """Whether a held array shows bytes of ``[lo, hi)`` outside ``host_valid``."""
        if not self._entries:
            return False
        for ref, elo, ehi, _ in self._entries:
            a, b = max(lo, elo), min(hi, ehi)
            if a < b and ref() is not None and not host_valid.contains(a, b):
                return True
        return False

    def any_writable(self, lo: int, hi: int) -> bool:
        """Whether a held array the user may write through shows bytes of ``[lo, hi)``."""
        for ref, elo, ehi, _ in self._entries:
            if max(lo, elo) < min(hi, ehi):
                held = ref()
                if held is None:
                    continue
                if isinstance(held, _Holder):
                    if not held.__array_interface__["data"][1]:  # (pointer, read-only)
                        return True
                elif getattr(getattr(held, "flags", None), "writeable", True):
                    return True  # an adopted ndarray the user keeps
        return False
