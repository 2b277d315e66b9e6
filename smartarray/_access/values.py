"""The abstract values of the analysis: aliases of parameters with levels, and index kinds.

Owns the model: per IR variable, the parameters whose memory it may reference, each at a
*level* (dimensions removed by indexing; :data:`~smartarray._access.results.NEG`: unknown rank),
with the lattice operations on it (:func:`_shift`, :func:`_union`, :func:`_containers`, widened
at :data:`_FLOOR`); and the *kinds* of index values (scalar, tuple of ints, slice, range, ...)
that say how many dimensions an index removes (:meth:`_Values.removal`), computed as a greatest
fixpoint (:func:`_meet`, :data:`_TOP`). :class:`_Values` holds one function's state and the
queries on it (static resolution of globals and ``numba.cuda`` paths, kinds, aliases); the
transfer rules (:mod:`.transfer`) and the driver (:mod:`.driver`) build on it.
"""

from __future__ import annotations

import builtins
import linecache
from typing import Any

import numpy as np

from .deps import Deps
from .known import _CUDA_INDEX_OBJECTS, _SCALAR_ATTRS, _cuda_paths, _is_prange
from .results import NEG, Write

#: Levels below this are widened to NEG (keeps the fixpoint finite: ``t = (t,)`` in a loop).
_FLOOR = -16

_UNRESOLVED = object()
_TOP = ("top",)  # kinds: the optimistic start of the greatest fixpoint


def _meet(a: Any, b: Any) -> Any:
    if a == _TOP:
        return b
    if b == _TOP or a == b:
        return a
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "ints":
        return ("ints", min(a[1], b[1]))
    return None


def _shift(aliases: dict[int, int], by: int) -> dict[int, int]:
    if by <= NEG:
        return dict.fromkeys(aliases, NEG)
    out = {}
    for p, lvl in aliases.items():
        lvl = lvl + by
        out[p] = NEG if lvl < _FLOOR else lvl
    return out


def _containers(aliases: dict[int, int]) -> dict[int, int]:
    return {p: lvl for p, lvl in aliases.items() if lvl < 0}


def _union(into: dict[int, int], other: dict[int, int]) -> bool:
    changed = False
    for p, lvl in other.items():
        old = into.get(p)
        if old is None or lvl < old:
            into[p] = lvl
            changed = True
    return changed


class _Values:
    """One function's analysis state: its IR definitions, kinds and aliases."""

    def __init__(
        self, fn: Any, stack: tuple[Any, ...], arg_kinds: tuple[Any, ...] = (), cuda: bool = False
    ) -> None:
        from numba.core import ir

        self.cuda = cuda
        self.arg_kinds = arg_kinds
        self.ir = ir
        self.fn = fn
        self.stack = stack + (fn,)
        self.filename = fn.__code__.co_filename
        self.defs: dict[str, list[Any]] = {}
        self.aliases: dict[str, dict[int, int]] = {}
        self.kinds: dict[str, Any] = {}
        self.events: list[tuple[int, Write]] = []
        self.returns: dict[int, int] = {}
        self._array_values: set[str] | None = None  # see ``_Transfer.is_array_value``
        self.deps = Deps()  # the bindings this analysis resolved (and its callees')

    # -- helpers --------------------------------------------------------------------------------

    def src(self, loc: Any) -> str:
        line = linecache.getline(self.filename, loc.line).strip() if loc else ""
        return f"`{line}`" if line else "(no source)"

    def write(self, p: int, level: int, loc: Any, reason: str, returned: bool = False) -> None:
        line = loc.line if loc else 0
        self.events.append((p, Write(level, line, self.filename, reason, returned)))

    def write_var(self, var: Any, by: int, loc: Any, reason: str, returned: bool = False) -> None:
        for p, lvl in _shift(self.aliases.get(var.name, {}), by).items():
            self.write(p, lvl, loc, reason, returned)

    def resolve(self, var: Any, depth: int = 0) -> Any:
        """The Python object a variable statically holds (globals and their attributes)."""
        ir = self.ir
        defs = self.defs.get(var.name, ())
        if len(defs) != 1 or depth > 8:
            return _UNRESOLVED
        value = defs[0]
        if isinstance(value, (ir.Global, ir.FreeVar)):
            return value.value
        if isinstance(value, ir.Var):
            return self.resolve(value, depth + 1)
        if isinstance(value, ir.Expr) and value.op == "getattr":
            base = self.resolve(value.value, depth + 1)
            if base is _UNRESOLVED:
                return _UNRESOLVED
            try:
                got = getattr(base, value.attr)
            except Exception:  # noqa: BLE001 - a user object's attribute may raise anything
                return _UNRESOLVED
            self.deps.attr(base, value.attr, got)
            return got
        return _UNRESOLVED

    def cuda_path(self, var: Any) -> tuple[str, ...] | None:
        obj = self.resolve(var)
        if obj is _UNRESOLVED:
            # ``cuda.threadIdx.x`` on the simulator resolves to a descriptor: follow names
            defs = self.defs.get(var.name, ())
            if len(defs) == 1 and isinstance(defs[0], self.ir.Expr) and defs[0].op == "getattr":
                base = self.cuda_path(defs[0].value)
                return None if base is None else base + (defs[0].attr,)
            return None
        path = _cuda_paths().get(id(obj))
        if path is None:
            defs = self.defs.get(var.name, ())
            if len(defs) == 1 and isinstance(defs[0], self.ir.Expr) and defs[0].op == "getattr":
                base = self.cuda_path(defs[0].value)
                return None if base is None else base + (defs[0].attr,)
        return path

    def name_of(self, var: Any) -> str:
        obj = self.resolve(var)
        if obj is not _UNRESOLVED:
            return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
        defs = self.defs.get(var.name, ())
        if len(defs) == 1 and isinstance(defs[0], self.ir.Expr) and defs[0].op == "getattr":
            return f"{self.name_of(defs[0].value)}.{defs[0].attr}"
        return var.name

    # -- kinds of index values (greatest fixpoint) -------------------------------------------

    def kind_of_value(self, value: Any) -> Any:
        ir = self.ir
        if isinstance(value, ir.Var):
            return self.kinds.get(value.name, None)
        if isinstance(value, ir.Arg):
            # the caller's kind of the argument (a device function called with an index)
            return self.arg_kinds[value.index] if value.index < len(self.arg_kinds) else None
        if isinstance(value, (ir.Const, ir.Global, ir.FreeVar)):
            return self.kind_of_const(value.value)
        if not isinstance(value, ir.Expr):
            return None
        op = value.op
        if op in ("binop", "inplace_binop"):
            ks = [self.kinds.get(value.lhs.name), self.kinds.get(value.rhs.name)]
            return "scalar" if all(k in ("scalar", _TOP) for k in ks) else None
        if op == "unary":
            k = self.kinds.get(value.value.name)
            return "scalar" if k in ("scalar", _TOP) else None
        if op == "cast":
            return self.kinds.get(value.value.name)
        if op == "getattr":
            if value.attr in _SCALAR_ATTRS:
                return "scalar"
            if value.attr in ("shape", "strides"):
                return ("ints", 0)
            path = self.cuda_path(value.value)
            if path and len(path) == 2 and path[1] in _CUDA_INDEX_OBJECTS:
                return "scalar"
            return None
        if op == "call":
            func = value.func
            path = self.cuda_path(func)
            if path in (("cuda", "grid"), ("cuda", "gridsize")):
                n = self.resolve_const(value.args[0]) if len(value.args) == 1 else None
                if n == 1:
                    return "scalar"
                return ("ints", n if isinstance(n, int) and n > 0 else 1)
            if path in (("cuda", "laneid"), ("cuda", "warpsize")):
                return "scalar"
            obj = self.resolve(func)
            if obj is builtins.slice:
                return "slice"
            if obj is builtins.range or _is_prange(obj):
                return "range"
            if obj in (builtins.len, builtins.int, builtins.round, builtins.hash):
                return "scalar"
            return None
        if op == "getiter":
            return "rangeiter" if self.kinds.get(value.value.name) == "range" else None
        if op == "iternext":
            return "rangepair" if self.kinds.get(value.value.name) == "rangeiter" else None
        if op == "pair_first":
            return "scalar" if self.kinds.get(value.value.name) == "rangepair" else None
        if op == "exhaust_iter":
            k = self.kinds.get(value.value.name)
            return k if isinstance(k, tuple) and k[0] == "ints" else None
        if op in ("static_getitem", "getitem"):
            k = self.kinds.get(value.value.name)
            if isinstance(k, tuple) and k[0] == "ints":
                idx = value.index if op == "static_getitem" else None
                if isinstance(idx, int) or (
                    op == "getitem" and self.kinds.get(value.index.name) in ("scalar", _TOP)
                ):
                    return "scalar"
            return None
        if op == "build_tuple":
            ks = [self.kinds.get(v.name) for v in value.items]
            if all(k in ("scalar", _TOP) for k in ks):
                return ("ints", len(ks))
            return None
        return None

    @staticmethod
    def kind_of_const(c: Any) -> Any:
        if isinstance(c, bool):
            return None
        if isinstance(c, (int, float, np.integer, np.floating)):
            return "scalar"
        if c is None:
            return "none"
        if c is Ellipsis:
            return "ellipsis"
        if isinstance(c, slice):
            return "slice"
        return None

    def resolve_const(self, var: Any) -> Any:
        defs = self.defs.get(var.name, ())
        if len(defs) == 1 and isinstance(defs[0], (self.ir.Const, self.ir.Global)):
            return defs[0].value
        return None

    def removal(self, var: Any, depth: int = 0) -> int:
        """A lower bound on the dimensions that indexing with ``var`` removes (NEG: unknown)."""
        k = self.kinds.get(var.name)
        if k == "scalar":
            return 1
        if isinstance(k, tuple) and k[0] == "ints":
            return k[1]
        if k in ("slice", "ellipsis"):
            return 0
        if k == "none":
            return -1
        defs = self.defs.get(var.name, ())
        if (
            depth < 4
            and defs
            and all(isinstance(d, self.ir.Expr) and d.op == "build_tuple" for d in defs)
        ):
            return min(sum(self.removal(v, depth + 1) for v in d.items) for d in defs)
        return NEG

    @staticmethod
    def static_removal(index: Any) -> int:
        if isinstance(index, bool):
            return NEG
        if isinstance(index, (int, np.integer)):
            return 1
        if isinstance(index, slice) or index is Ellipsis:
            return 0
        if index is None:
            return -1
        if isinstance(index, tuple):
            total = 0
            for i in index:
                r = _Values.static_removal(i)
                if r <= NEG:
                    return NEG
                total += r
            return total
        return NEG  # a field name, an array: unknown rank

    # -- aliases ------------------------------------------------------------------------------

    def alias_of_var(self, var: Any) -> dict[int, int]:
        return self.aliases.get(var.name, {})

    def tuple_item(self, expr: Any) -> Any:
        """``(a, b)[0]`` with a constant index: the item itself (else None)."""
        defs = self.defs.get(expr.value.name, ())
        if len(defs) == 1 and isinstance(defs[0], self.ir.Expr) and defs[0].op == "exhaust_iter":
            defs = self.defs.get(defs[0].value.name, ())  # ``p, q = (a, b)``
        if not defs or not all(isinstance(d, self.ir.Expr) and d.op == "build_tuple" for d in defs):
            return None
        index = expr.index if expr.op == "static_getitem" else self.resolve_const(expr.index)
        if isinstance(index, bool) or not isinstance(index, int):
            return None
        items = {d.items[index].name for d in defs if -len(d.items) <= index < len(d.items)}
        if len(items) != 1 or len(defs) != 1:
            return None
        return defs[0].items[index]

    def union_vars(self, vars_: Any, by: int = 0) -> dict[int, int]:
        out: dict[int, int] = {}
        for v in vars_:
            _union(out, _shift(self.alias_of_var(v), by))
        return out
