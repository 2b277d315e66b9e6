"""The transfer rules: what each IR statement and expression aliases and writes.

Owns, per statement (:meth:`_Transfer.statement`: ``v[...] = ...``, attribute stores, deletes,
returns) and per expression (:meth:`_Transfer.transfer`: indexing, attributes, tuples,
arithmetic, in-place updates, yields), the aliases of the result and, with ``emit``, the writes
it makes; for calls (:meth:`_Transfer.call`, :meth:`_Transfer.known_call`): methods of an
alias, ``cuda.atomic.*``, read-only intrinsics, builtins, NumPy functions and ufuncs (outputs
written), and unknown callees (everything they receive written). Calls to Numba-compiled
functions are handed to ``device_call``, which the driver (:mod:`.driver`) provides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .known import (
    _CUDA_PURE_PATHS,
    _ITER_BUILTINS,
    _METHODS,
    _NEW_ARRAYS,
    _NUMPY_FRESH,
    _NUMPY_VIEW,
    _PAIR_BUILTINS,
    _PURE_BUILTINS,
    _SAME_RANK_ATTRS,
    _VALUE_ATTRS,
    _is_math,
    _is_prange,
    _py_func,
)
from .results import NEG
from .values import _UNRESOLVED, _containers, _shift, _union, _Values


class _Transfer(_Values):
    """The transfer rules on top of :class:`~.values._Values` (``device_call``: the driver)."""

    nparams: int  # the analysed function's parameter count (the driver sets it)

    def device_call(
        self, py_func: Any, args: list, kws: list, loc: Any, emit: bool
    ) -> dict[int, int] | None:
        """The aliases a call of the device function ``py_func`` returns (the driver's)."""
        raise NotImplementedError

    def transfer(self, value: Any, loc: Any, emit: bool) -> dict[int, int]:
        """The aliases of ``value``; with ``emit``, record the writes it makes."""
        ir = self.ir
        if isinstance(value, ir.Arg):
            return {value.index: 0}
        if isinstance(value, ir.Var):
            return dict(self.alias_of_var(value))
        if isinstance(value, (ir.Const, ir.Global, ir.FreeVar)):
            return {}
        if isinstance(value, ir.Yield):
            if emit:
                self.write_var(value.value, 0, loc, f"yielded at line {loc.line}: {self.src(loc)}")
            return {}
        if not isinstance(value, ir.Expr):
            if emit:
                self.write_all(loc, f"unsupported statement at line {loc.line}")
            return {}
        op = value.op
        if op in ("getitem", "static_getitem"):
            item = self.tuple_item(value)
            if item is not None:
                return dict(self.alias_of_var(item))
        if op == "getitem":
            return _shift(self.alias_of_var(value.value), self.removal(value.index))
        if op == "static_getitem":
            by = self.static_removal(value.index)
            if by <= NEG and value.index_var is not None:
                by = self.removal(value.index_var)
            return _shift(self.alias_of_var(value.value), by)
        if op == "typed_getitem":
            return _shift(self.alias_of_var(value.value), self.removal(value.index))
        if op == "getattr":
            if value.attr in _VALUE_ATTRS:
                # An array's shape, size, ... are plain values; but a record may have a field
                # of that name (``x[i].shape`` is then a nested array inside ``x``): an
                # element (level >= 1) or a value of unknown rank keeps its alias.
                return {
                    p: lvl
                    for p, lvl in self.alias_of_var(value.value).items()
                    if lvl >= 1 or lvl <= NEG
                }
            if value.attr in _SAME_RANK_ATTRS:
                return dict(self.alias_of_var(value.value))
            return _shift(self.alias_of_var(value.value), NEG)
        if op in ("build_tuple", "build_list", "build_set"):
            return self.union_vars(value.items, -1)
        if op == "build_map":
            return self.union_vars([v for kv in value.items for v in kv], -1)
        if op in ("binop", "inplace_binop"):
            if op == "inplace_binop" and emit:
                self.write_var(
                    value.lhs, 0, loc, f"updated in place at line {loc.line}: {self.src(loc)}"
                )
            # Arithmetic on an array or an element (level >= 0) gives a new value; only
            # containers (``[x] + [y]``, ``(x,) * 2``: level < 0) carry their items along.
            return _containers(self.union_vars([value.lhs, value.rhs]))
        if op == "unary":
            return _containers(self.alias_of_var(value.value))
        if op in ("cast", "getiter", "iternext", "exhaust_iter"):
            return dict(self.alias_of_var(value.value))
        if op == "pair_first":
            return _shift(self.alias_of_var(value.value), 1)
        if op == "pair_second":
            return {}
        if op == "phi":
            return self.union_vars(value.incoming_values)
        if op == "call":
            return self.call(value, loc, emit)
        if op in ("null", "undefined", "dummy"):
            return {}
        if op == "make_function":
            if emit:
                self.write_all(loc, f"defines an inner function at line {loc.line}: not analysed")
            return {}
        # Anything else: everything it touches may be written, and its result is anything.
        used = list(value.list_vars())
        if emit:
            for v in used:
                self.write_var(v, NEG, loc, f"used by `{op}` at line {loc.line}: not analysed")
        return self.union_vars(used, NEG)

    def is_array(self, var: Any) -> bool:
        """Whether ``var`` is surely an array (or a record): storing into it copies the value.

        True when every definition of ``var`` is a new array (``cuda.shared.array``,
        ``numpy.empty``, ...) or, in a CUDA kernel, a parameter or something indexing one (level
        >= 0): a kernel's parameters are arrays, scalars, records or immutable tuples, never
        mutable containers (an ``njit`` function may take a list).
        """
        defs = self.defs.get(var.name, ())
        if not defs:
            return False
        for d in defs:
            if self.is_new_array(d):
                continue
            if not self.cuda:
                return False
            got = self.transfer(d, None, emit=False)
            if not got or min(got.values()) < 0:
                return False
        return True

    def is_array_value(self, var: Any) -> bool:
        """Whether ``var`` is surely an array or an element of one, never a container.

        A greatest fixpoint over the definitions (computed once): parameters (the hints only
        ever reach arrays), new arrays, and what indexing, ``.T``/``.real``/``.imag`` or a
        view-giving method or NumPy function makes of such a value. Anything else (a list, a
        dict, an unknown call's result, arithmetic, which may concatenate lists) may be a
        container.
        """
        if self._array_values is None:
            self._array_values = self._array_value_fixpoint()
        return var.name in self._array_values

    def _array_value_fixpoint(self) -> set[str]:
        ir = self.ir
        names = set(self.defs)

        def ok(d: Any) -> bool:
            if isinstance(d, ir.Arg):
                return True
            if isinstance(d, ir.Var):
                return d.name in names
            if not isinstance(d, ir.Expr):
                return False
            if d.op in ("getitem", "static_getitem"):
                item = self.tuple_item(d)
                return (item if item is not None else d.value).name in names
            if d.op == "getattr":
                return d.attr in _SAME_RANK_ATTRS and d.value.name in names
            if d.op == "cast":
                return d.value.name in names
            if d.op == "phi":
                return all(v.name in names for v in d.incoming_values)
            if d.op != "call":
                return False
            if self.is_new_array(d):
                return True
            fdefs = self.defs.get(d.func.name, ())
            if len(fdefs) == 1 and isinstance(fdefs[0], ir.Expr) and fdefs[0].op == "getattr":
                known = _METHODS.get(fdefs[0].attr)
                return (
                    known is not None
                    and known[1] in ("same", "view")
                    and fdefs[0].value.name in names
                )
            obj = self.resolve(d.func)
            name = getattr(obj, "__name__", None) if obj is not _UNRESOLVED else None
            return bool(name) and name in _NUMPY_VIEW and getattr(np, name, None) is obj

        changed = True
        while changed:
            changed = False
            for name in list(names):
                if not all(ok(d) for d in self.defs[name]):
                    names.discard(name)
                    changed = True
        return names

    def is_new_array(self, value: Any) -> bool:
        if not (isinstance(value, self.ir.Expr) and value.op == "call"):
            return False
        path = self.cuda_path(value.func)
        if path in (("cuda", "shared", "array"), ("cuda", "local", "array")):
            return True
        obj = self.resolve(value.func)
        name = getattr(obj, "__name__", None) if obj is not _UNRESOLVED else None
        return bool(name) and name in _NEW_ARRAYS and getattr(np, name, None) is obj

    def write_all(self, loc: Any, reason: str) -> None:
        for i in range(self.nparams):
            self.write(i, NEG, loc, reason)

    def call(self, expr: Any, loc: Any, emit: bool) -> dict[int, int]:
        """Writes and result of one call."""
        args = list(expr.args)
        kws = list(expr.kws)
        extra = [v for v in (expr.vararg, expr.varkwarg) if v is not None]
        every = args + [v for _, v in kws] + extra
        line = loc.line if loc else 0
        func = expr.func
        fdefs = self.defs.get(func.name, ())

        def written(v: Any, by: int, why: str) -> None:
            if emit:
                self.write_var(v, by, loc, why)

        # A method of an alias (``x.sum()``, ``x.fill(0)``, ``lst.append(x)``).
        if (
            len(fdefs) == 1
            and isinstance(fdefs[0], self.ir.Expr)
            and fdefs[0].op == "getattr"
            and self.alias_of_var(fdefs[0].value)
        ):
            obj, name = fdefs[0].value, fdefs[0].attr
            known = _METHODS.get(name)
            if known is None or extra:
                why = f"method .{name}() called at line {line}: {self.src(loc)}: counted as written"
                written(obj, NEG, why)
                for v in every:
                    written(v, NEG, why)
                return self.union_vars([obj, *every], NEG)
            if name == "copy" and not self.is_array_value(obj):
                # ``list.copy`` / ``dict.copy`` are shallow: the copy's items are the
                # receiver's (only an array's ``copy`` is new memory).
                return dict(self.alias_of_var(obj))
            inputs, result = known
            why = f"passed as an output of .{name}() at line {line}: {self.src(loc)}"
            for v in args[inputs:]:
                written(v, NEG, why)
            for k, v in kws:
                if k == "out":
                    written(v, NEG, why)
            if result == "fresh":
                return {}
            return self.union_vars([obj], 0 if result == "same" else NEG)

        path = self.cuda_path(func)
        if path is not None:
            if len(path) == 3 and path[1] == "atomic":
                if args:
                    written(args[0], NEG, f"atomic update at line {line}: {self.src(loc)}")
                return {}
            if path in _CUDA_PURE_PATHS:
                return {}
        obj = self.resolve(func)
        if obj is not _UNRESOLVED:
            effect = self.known_call(obj, expr, args, kws, extra, loc, emit)
            if effect is not None:
                return effect
        # Unknown: everything it receives may be written, and it may return any of it.
        why = (
            f"passed to unknown function {self.name_of(func)} at line {line}: "
            f"{self.src(loc)}: counted as written"
        )
        for v in [*every, func]:
            written(v, NEG, why)
        return self.union_vars([*every, func], NEG)

    def known_call(
        self, obj: Any, expr: Any, args: list, kws: list, extra: list, loc: Any, emit: bool
    ) -> dict[int, int] | None:
        line = loc.line if loc else 0
        try:
            hash(obj)
        except TypeError:
            return None
        if obj in _PURE_BUILTINS and not extra:
            return {}
        if obj in _ITER_BUILTINS and not extra:
            return self.union_vars(args)
        if obj in _PAIR_BUILTINS and not extra:
            return self.union_vars(args, -1)
        if _is_prange(obj) or _is_math(obj):
            return {}
        from numba.core import types

        if isinstance(obj, types.Type) or (isinstance(obj, type) and issubclass(obj, np.generic)):
            return {}
        if isinstance(obj, np.ufunc) and not extra:
            if emit:
                why = f"passed as an output of {obj.__name__} at line {line}: {self.src(loc)}"
                for v in args[obj.nin :]:  # codespell:ignore nin
                    self.write_var(v, NEG, loc, why)
                for k, v in kws:
                    if k == "out":
                        self.write_var(v, NEG, loc, why)
            return {}
        name = getattr(obj, "__name__", None)
        if name and getattr(np, name, None) is obj and not extra:
            if name in _NUMPY_VIEW:
                return self.union_vars(args + [v for _, v in kws], NEG)
            inputs = _NUMPY_FRESH.get(name)
            if inputs is not None:
                if emit:
                    why = f"passed as an output of numpy.{name} at line {line}: {self.src(loc)}"
                    for v in args[inputs:]:
                        self.write_var(v, NEG, loc, why)
                    for k, v in kws:
                        if k == "out":
                            self.write_var(v, NEG, loc, why)
                return {}
        py_func = _py_func(obj)
        if py_func is not None and not extra:
            return self.device_call(py_func, args, kws, loc, emit)
        return None

    def statement(self, s: Any) -> None:
        ir = self.ir
        loc = s.loc
        line = loc.line if loc else 0
        if isinstance(s, ir.Assign):
            self.transfer(s.value, loc, emit=True)
        elif isinstance(s, (ir.SetItem, ir.StaticSetItem)):
            self.write_var(s.target, NEG, loc, f"written at line {line}: {self.src(loc)}")
            if not self.is_array(s.target):
                self.write_var(
                    s.value, 0, loc, f"stored at line {line}: {self.src(loc)}: counted as written"
                )
        elif isinstance(s, ir.SetAttr):
            self.write_var(s.target, NEG, loc, f"written at line {line}: {self.src(loc)}")
            self.write_var(
                s.value, 0, loc, f"stored at line {line}: {self.src(loc)}: counted as written"
            )
        elif isinstance(s, (ir.DelItem, ir.DelAttr)):
            self.write_var(s.target, NEG, loc, f"deleted from at line {line}: {self.src(loc)}")
        elif isinstance(s, ir.Return):
            why = f"returned at line {line}: {self.src(loc)}: counted as written"
            self.write_var(s.value, 0, loc, why, returned=True)
            _union(self.returns, self.alias_of_var(s.value))
        elif isinstance(
            s,
            (ir.Del, ir.Jump, ir.Branch, ir.Print, ir.PopBlock)  # control flow
            + (ir.StaticRaise, ir.DynamicRaise, ir.TryRaise),  # raises: nothing written
        ) or type(s).__name__ in ("StaticTryRaise", "DynamicTryRaise"):
            pass
        else:
            self.write_all(loc, f"`{type(s).__name__}` at line {line}: not analysed")
