"""What an analysis depended on: the globals, closure cells and attributes it resolved.

Numba reads a function's globals and closure cells when it builds the IR, so an analysis
describes the helpers bound *then*. :class:`Deps` records each binding the analysis resolved
(``fn.__globals__[name]``, a closure cell, ``obj.attr``) with the object it held, and
:meth:`Deps.current` says, cheaply, whether all of them still hold the same objects: when one was
rebound, the analysis must be redone (:mod:`.driver`).
"""

from __future__ import annotations

import types
from typing import Any

_MISSING = object()
_GLOBAL, _CELL, _ATTR = 0, 1, 2

# Attributes of these libraries' modules and objects are taken as never rebound (``np.sum``,
# ``cuda.atomic.add``, ``math.sqrt``): recording them would only slow every launch.
_LIBRARIES = ("numpy", "numba", "math", "cmath", "builtins", "smartarray")


def _is_library(obj: Any) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return isinstance(name, str) and name.split(".", 1)[0] in _LIBRARIES


class Deps:
    """The bindings one analysis (and the analyses of its callees) resolved.

    The objects are held strongly, as Numba's compiled code holds the globals it froze (a
    weak reference would cost a call per binding on every launch).
    """

    __slots__ = ("_globals", "_keys", "_others")

    def __init__(self) -> None:
        self._keys: set[tuple[int, int, Any]] = set()
        # (namespace dict, name, object): the common case, checked first and without branches
        self._globals: list[tuple[dict[str, Any], str, Any]] = []
        # (kind, cell or object, attribute name or None, object)
        self._others: list[tuple[int, Any, Any, Any]] = []

    def _add(self, kind: int, where: Any, name: Any, value: Any) -> None:
        key = (kind, id(where), name)
        if key not in self._keys:
            self._keys.add(key)
            if kind == _GLOBAL:
                self._globals.append((where, name, value))
            else:
                self._others.append((kind, where, name, value))

    def global_(self, fn: Any, name: str, value: Any) -> None:
        """``fn`` read the global ``name`` (or, missing there, the builtin) as ``value``."""
        namespace = fn.__globals__
        if namespace.get(name, _MISSING) is value:
            self._add(_GLOBAL, namespace, name, value)
        else:  # a builtin (or a name numba made up): a global of that name would shadow it
            self._add(_GLOBAL, namespace, name, _MISSING)

    def cell(self, fn: Any, index: int, value: Any) -> None:
        """``fn`` read its closure cell ``index`` as ``value``."""
        closure = fn.__closure__ or ()
        if index < len(closure):
            self._add(_CELL, closure[index], None, value)

    def attr(self, obj: Any, name: str, value: Any) -> None:
        """The analysis resolved ``obj.name`` as ``value`` (libraries' attributes skipped)."""
        if _is_library(obj):
            return
        if isinstance(obj, types.ModuleType):
            self._add(_GLOBAL, vars(obj), name, value)
        else:
            self._add(_ATTR, obj, name, value)

    def extend(self, other: Deps) -> None:
        """Add what a callee's analysis depended on."""
        for where, name, value in other._globals:
            self._add(_GLOBAL, where, name, value)
        for kind, where, name, value in other._others:
            self._add(kind, where, name, value)

    def current(self) -> bool:
        """Whether every recorded binding still holds the object the analysis saw."""
        for namespace, name, value in self._globals:
            if namespace.get(name, _MISSING) is not value:
                return False
        return not self._others or self._others_current()

    def _others_current(self) -> bool:
        for kind, where, name, value in self._others:
            if kind == _CELL:
                try:
                    now = where.cell_contents
                except ValueError:  # an empty cell
                    now = _MISSING
            else:
                now = getattr(where, name, _MISSING)
            if now is not value:
                return False
        return True

    def __len__(self) -> int:
        return len(self._globals) + len(self._others)
