"""The host arrays of one buffer that the user holds: which bytes each shows, for how long.

A SmartArray hands out ndarrays over its host copy (``a.host()``, ``np.asarray(a)``, an adopted
``SmartArray(x, copy=False)`` whose ``x`` the user keeps). Whatever the user holds must keep
showing current values: after a device write, the engine (:class:`smartarray._engine.buffer.Buffer`)
downloads the bytes these arrays show at once. This module only keeps the book: it knows
which byte ranges are held, and for how long; it moves nothing.
"""

from __future__ import annotations

import sys
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


class _Export:
    """A host array handed out again and again, as views of one ``template`` built once over
    a :class:`_Holder` (building an ndarray over a holder costs NumPy a parse of its interface
    dict: several microseconds a host read).

    NumPy sets the base of a view of the template, and of every view derived from one, to the
    template (the first ndarray whose base is not an ndarray), so the user holds one of those
    arrays exactly while anything but this object refers to the template. Called as a weak
    reference is: the template while held, else ``None``.
    """

    __slots__ = ("template",)

    def __init__(self, template: np.ndarray) -> None:
        self.template = template

    def __call__(self) -> np.ndarray | None:
        return self.template if sys.getrefcount(self.template) > _UNHELD else None


def _unheld() -> int:
    """A template's references when only its _Export refers to it, counted as
    ``_Export.__call__`` counts them (measured: what an interpreter counts for an argument
    differs between versions)."""
    export = _Export(np.empty(0))
    return sys.getrefcount(export.template)


_UNHELD = _unheld()
# Templates kept per buffer (one per view geometry a program reads): beyond it, those nobody
# holds are dropped.
_EXPORTS_KEPT = 16


class HeldHostArrays:
    """The host arrays handed out from one buffer, each with the byte range ``[lo, hi)`` it
    shows, held weakly: an entry counts exactly as long as the user holds the array (or any
    array NumPy derived from it).

    An array handed to a consumer that writes without telling (a host DLPack export:
    ``np.from_dlpack(a)``; DLPack has no call for "I wrote") is ``unannounced``: its bytes may
    change on the host at any moment while it lives, so the engine records a host write of
    them each time it refreshes them (see :meth:`unannounced`).
    """

    __slots__ = ("_entries", "_exports", "_host", "_address")

    def __init__(self) -> None:
        # (a weak reference or an _Export, lo, hi, unannounced); an _Export's entry stays
        # while its template is kept (in _exports), held or not.
        self._entries: list[tuple[Any, int, int, bool]] = []
        # The templates of the arrays handed out, by geometry (see _Export).
        self._exports: dict[tuple[Any, ...], _Export] = {}
        # The host copy of the latest view and its address (asking NumPy builds a dict).
        self._host: np.ndarray | None = None
        self._address = 0

    def __bool__(self) -> bool:
        """Whether the user holds any array (the entries of dropped ones count for nothing: a
        dead entry would make a prefetched download wait, and a launch refresh, for nobody;
        they are let go when an array is tracked or the held ranges are asked for)."""
        for e in self._entries:  # (a loop, not any(): a generator is a call per entry)  # noqa: SIM110
            if e[0]() is not None:
                return True
        return False

    def _prune(self) -> None:
        """Let go of the entries of arrays nobody holds (a kept template's stays)."""
        self._entries = [
            e for e in self._entries if e[0].__class__ is _Export or e[0]() is not None
        ]

    def track(self, ary: Any, lo: int, hi: int, unannounced: bool = False) -> None:
        """Track ``ary`` (alive as long as the user holds it) as showing bytes ``[lo, hi)``;
        ``unannounced``: its holder writes without calling ``mark_changed``."""
        self._prune()
        self._entries.append((weakref.ref(ary), lo, hi, unannounced))

    def forget(self) -> None:
        """Stop tracking every held array (nobody outside holds them)."""
        self._entries.clear()
        self._exports.clear()

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

        An array over a holder is built once per geometry (its template, kept while the
        host copy stays); each hand-out is a view of it, which NumPy bases on the template,
        so that is what stays referenced while anything shows these bytes (see
        :class:`_Export`). Records and subarrays are built anew each time.
        """
        if host is not self._host:
            self._host, self._address = host, host.__array_interface__["data"][0]
            self._drop_exports()  # (views of the previous host copy)
        address = self._address
        if dtype.fields is None and dtype.subdtype is None:
            # A view of this geometry's template (made at its first hand-out), tracked while
            # anything refers to the template (see _Export).
            key = (offset, shape, strides, dtype, readonly, unannounced)
            export = self._exports.get(key)
            if export is None:
                holder = _Holder()
                holder.host = host
                holder.__array_interface__ = {
                    "shape": shape,
                    "typestr": dtype.str,
                    "strides": strides,
                    "data": (address + offset, readonly),
                    "version": 3,
                }
                if len(self._exports) >= _EXPORTS_KEPT:
                    self._drop_exports(held_too=False)
                export = self._exports[key] = _Export(np.asarray(holder))
                self._prune()
                self._entries.append((export, lo, hi, unannounced))
            return export.template.view()
        # Records and subarrays: the exact dtype through a byte view of [lo, hi), built anew.
        holder = _Holder()
        holder.host = host
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

    def _drop_exports(self, held_too: bool = True) -> None:
        """Stop keeping templates (``held_too=False``: those nobody holds). A held one's entry
        becomes a plain weak one, so that it is tracked while held, and let go after."""
        dropped = [k for k, export in self._exports.items() if held_too or export() is None]
        if not dropped:
            return
        gone = {id(self._exports.pop(k)) for k in dropped}
        entries = []
        for ref, lo, hi, unannounced in self._entries:
            if id(ref) in gone:
                template = ref()
                if template is None:
                    continue
                ref = weakref.ref(template)
            entries.append((ref, lo, hi, unannounced))
        self._entries = entries

    def shown(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` that held arrays show, one per array (may overlap).

        Drops the entries of arrays nobody holds any more.
        """
        if not self._entries or lo >= hi:
            return []
        self._prune()
        live = [e for e in self._entries if e[0]() is not None]
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
