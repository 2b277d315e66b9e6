"""Which array parameters a function may write: a sound analysis of Numba's IR.

:func:`analyse` reads the untyped Numba IR of a Python function (``numba.core.compiler.
run_frontend``: the same on the CUDA simulator and on a GPU, no compilation, no GPU) and says,
per parameter, whether the function may write the memory of the array passed there.

The analysis is *sound*: whatever it cannot prove read-only counts as written. It is flow
insensitive (the IR is not in SSA form: every definition of a name counts wherever the name is
used, and the statements are iterated to a fixpoint), so conditional writes and loops are
covered without path reasoning.

What it tracks, per variable: the parameters whose memory the variable may reference, each with
a *level*: how many dimensions indexing removed since the parameter (``x`` is level 0, ``x[i]``
level 1, ``x[i, j]`` level 2, ``x[1:]`` level 0, ``x[None]`` level -1; a tuple ``(x, y)`` is one
level *below* its items, so ``(x, y)[0]`` is ``x`` again). A value at a level at least the
array's number of dimensions is an element: a copy, which the function may change freely
(``acc = x[i]; acc += 1`` does not write a 1-d ``x``). Anything whose rank is unknown
(``x.reshape(...)``, an index the analysis cannot classify) gets level :data:`NEG`: it may be
the array itself.

Writes (events) at level ``k`` on parameter ``p`` write ``p``'s array when ``k < ndim``:

- ``v[...] = ...``, ``v.attr = ...``, ``del v[...]`` on an alias: always (a record element
  ``x[i]`` is a reference into the array, so no level is trusted there);
- ``v += ...`` (in place): at ``v``'s level;
- a call: ``cuda.atomic.*`` writes its first argument; device functions and njit functions
  are analysed in turn (a recursion guard counts a function that calls itself as writing);
  known read-only functions (``math``, ``cuda`` intrinsics, a whitelist of NumPy functions and
  array methods) write nothing; any other call receiving an alias writes it;
- an alias stored into something (``lst[0] = x``), returned or yielded escapes: written at its
  level (storing an element copies it).

The result is a threshold per parameter: the least level of any write. A parameter whose
array has ``1 <= ndim <= threshold`` elements and no record fields is read only; a parameter
with no write at all is read only whatever is passed.
"""

from __future__ import annotations

import builtins
import cmath
import inspect
import linecache
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["NEG", "Access", "ParamAccess", "Write", "analyse"]

#: The level of a value whose rank is unknown: it may be the whole array.
NEG = -(10**6)
#: Levels below this are widened to NEG (keeps the fixpoint finite: ``t = (t,)`` in a loop).
_FLOOR = -16
#: The threshold of a parameter that is never written.
NEVER = float("inf")


@dataclass(frozen=True)
class Write:
    """One way a function may write a parameter's array.

    Attributes
    ----------
    level : int
        Dimensions removed by indexing before the write; it writes the array when
        ``level < ndim`` (:data:`NEG`: always).
    line : int
        Source line of the write (in ``filename``).
    filename : str
        The file of the function that writes.
    reason : str
        What happens there, in words.
    """

    level: int
    line: int
    filename: str
    reason: str
    returned: bool = False

    def describe(self) -> str:
        """``"written at line 12: `out[i] = x`"``-style text."""
        return self.reason


@dataclass
class ParamAccess:
    """What a function does with one parameter.

    Attributes
    ----------
    name : str
        The parameter's name.
    writes : list of Write
        Every way it may be written, least level first (empty: read only).
    """

    name: str
    writes: list[Write] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        """The least level of any write (``inf``: never written)."""
        return self.writes[0].level if self.writes else NEVER

    def read_only_for(self, ndim: int, record: bool = False) -> bool:
        """Whether an array of ``ndim`` dimensions (record dtype: ``record``) is only read."""
        thr = self.threshold
        if thr == NEVER:
            return True
        return not record and 1 <= ndim <= thr

    def describe(self) -> str:
        """One line: what was inferred and why."""
        thr = self.threshold
        if thr == NEVER:
            return "read only"
        first = self.writes[0]
        if thr < 1:
            return first.reason
        plural = "s" if thr > 1 else ""
        return (
            f"read only for arrays of 1 to {thr} dimension{plural} without record fields; "
            f"with more dimensions: {first.reason}"
        )


@dataclass
class Access:
    """The analysis of one function: one :class:`ParamAccess` per parameter.

    Attributes
    ----------
    name : str
        The function's qualified name.
    params : list of ParamAccess
        In parameter order.
    returns : dict
        Parameter index to the least level of any alias of it the function returns.
    """

    name: str
    params: list[ParamAccess]
    returns: dict[int, int] = field(default_factory=dict)

    def explain(self) -> str:
        """Per parameter, what was inferred and why (one line each)."""
        lines = [f"{self.name}:"]
        lines += [f"  {p.name}: {p.describe()}" for p in self.params]
        return "\n".join(lines)


# -- what is known about callees ----------------------------------------------------------------

# Array methods that write neither the array nor their arguments, with the number of positional
# arguments that are inputs (more are outputs, e.g. ``a.sum(axis, dtype, out)``), and what the
# result is: "fresh" (a new value), "same" (a view of the same rank), "view" (a view of unknown
# rank).
_METHODS: dict[str, tuple[int, str]] = {
    **{
        m: (2, "fresh")
        for m in ("sum", "prod", "mean", "std", "var", "cumsum", "cumprod", "searchsorted")
    },
    **{
        m: (1, "fresh")
        for m in ("min", "max", "argmin", "argmax", "all", "any", "copy", "astype", "argsort")
    },
    **{m: (0, "fresh") for m in ("nonzero", "conj", "conjugate", "tolist", "tobytes", "flatten")},
    "item": (99, "fresh"),
    "dot": (1, "fresh"),
    "transpose": (99, "same"),
    "reshape": (99, "view"),
    "ravel": (1, "view"),
    "view": (1, "view"),
    "squeeze": (1, "view"),
    "swapaxes": (2, "same"),
}
# Attributes of an array that are plain values, and those that are views of the same rank.
_VALUE_ATTRS = frozenset(
    ("shape", "strides", "size", "ndim", "dtype", "itemsize", "nbytes", "flags")
)
_SAME_RANK_ATTRS = frozenset(("T", "real", "imag"))
_SCALAR_ATTRS = frozenset(("size", "ndim", "itemsize", "nbytes"))

_PURE_BUILTINS = frozenset(
    getattr(builtins, n)
    for n in (
        "len range abs min max int float bool complex round print divmod pow slice "
        "isinstance hash sum any all"
    ).split()
)
_ITER_BUILTINS = {builtins.iter: 0, builtins.reversed: 0, builtins.list: 0, builtins.tuple: 0}
_PAIR_BUILTINS = frozenset((builtins.enumerate, builtins.zip))

# NumPy functions that write none of their arguments (beyond the given number of positional
# inputs come outputs), and whether the result may be a view of an argument.
_NUMPY_FRESH: dict[str, int] = {
    **{
        n: 1
        for n in (
            "sum prod mean std var median min max amin amax argmin argmax all any cumsum "
            "cumprod copy array empty_like zeros_like ones_like sort argsort unique isnan "
            "isinf isfinite nonzero count_nonzero flatnonzero"
        ).split()
    },
    **{n: 2 for n in "dot vdot inner outer allclose array_equal searchsorted full_like".split()},
    **{n: 3 for n in "where clip".split()},
    **{n: 99 for n in "empty zeros ones full arange linspace eye identity".split()},
}
_NEW_ARRAYS = frozenset(
    "empty zeros ones full empty_like zeros_like ones_like full_like copy array arange "
    "linspace".split()
)
_NUMPY_VIEW = frozenset(
    (
        "asarray ascontiguousarray asfortranarray transpose reshape ravel squeeze expand_dims "
        "atleast_1d atleast_2d atleast_3d broadcast_to swapaxes moveaxis diagonal"
    ).split()
)

# numba.cuda attributes (paths from the module) that read their arguments only.
_CUDA_PURE = frozenset(
    (
        "grid gridsize syncthreads syncthreads_count syncthreads_and syncthreads_or "
        "threadfence threadfence_block threadfence_system syncwarp selp fma popc brev clz "
        "ffs cbrt all_sync any_sync eq_sync ballot_sync shfl_sync shfl_up_sync "
        "shfl_down_sync shfl_xor_sync match_any_sync match_all_sync activemask lanemask_lt "
        "nanosleep laneid warpsize"
    ).split()
)
_CUDA_PURE_PATHS = frozenset(
    [("cuda", n) for n in _CUDA_PURE]
    + [("cuda", "shared", "array"), ("cuda", "local", "array"), ("cuda", "const", "array_like")]
)
_CUDA_INDEX_OBJECTS = frozenset(("threadIdx", "blockIdx", "blockDim", "gridDim"))

_cuda_paths_cache: dict[int, tuple[str, ...]] | None = None


def _cuda_paths() -> dict[int, tuple[str, ...]]:
    """``id(obj) -> ('cuda', ...)`` for numba.cuda's public objects (resolves imported names)."""
    global _cuda_paths_cache
    if _cuda_paths_cache is None:
        from numba import cuda

        paths: dict[int, tuple[str, ...]] = {id(cuda): ("cuda",)}
        for name in dir(cuda):
            if name.startswith("_"):
                continue
            obj = getattr(cuda, name, None)
            if obj is None or isinstance(obj, (int, float, str, bool)):
                continue
            paths.setdefault(id(obj), ("cuda", name))
            if name in ("atomic", "shared", "local", "const", "fp16"):
                for sub in dir(obj):
                    if not sub.startswith("_"):
                        paths.setdefault(id(getattr(obj, sub, None)), ("cuda", name, sub))
        paths.pop(id(None), None)
        _cuda_paths_cache = paths
    return _cuda_paths_cache


def _py_func(obj: Any) -> Any:
    """The Python function behind a Numba dispatcher (njit, cuda.jit, simulator, ours), or None."""
    try:
        inner = inspect.unwrap(obj) if not inspect.isfunction(obj) else obj
    except Exception:
        inner = obj
    for candidate in (obj, inner):
        try:
            fn = getattr(candidate, "py_func", None)
        except Exception:
            fn = None
        if inspect.isfunction(fn) and _is_dispatcher(candidate):
            return fn
    return None


def _is_dispatcher(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith(("numba.", "smartarray.")) or hasattr(obj, "_smartarray_access")


# -- the analysis -------------------------------------------------------------------------------

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


class _Analyser:
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
                return getattr(base, value.attr)
            except Exception:
                return _UNRESOLVED
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
                r = _Analyser.static_removal(i)
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
                return {}
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
                for v in args[obj.nin :]:
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

    def device_call(
        self, py_func: Any, args: list, kws: list, loc: Any, emit: bool
    ) -> dict[int, int] | None:
        if py_func in self.stack:
            return None  # recursion: counted as an unknown function
        try:
            names = list(inspect.signature(py_func).parameters)
        except (TypeError, ValueError):
            return None
        bound: dict[int, Any] = dict(enumerate(args))
        for k, v in kws:
            if k not in names:
                return None
            bound[names.index(k)] = v
        if any(j >= len(names) for j in bound):
            return None
        # The callee's parameters used as indexes are classified with the caller's arguments.
        arg_kinds = tuple(
            self.kinds.get(bound[j].name) if j in bound else None for j in range(len(names))
        )
        arg_kinds = tuple(None if k == _TOP else k for k in arg_kinds)
        callee = _analyse(py_func, self.stack, arg_kinds, self.cuda)
        line = loc.line if loc else 0
        if emit:
            for j, v in bound.items():
                for w in callee.params[j].writes:
                    if w.returned:
                        continue  # what it returns is followed as the call's result
                    why = (
                        f"passed to {py_func.__qualname__} at line {line} ({self.src(loc)}), "
                        f"which writes its parameter {names[j]!r}: {w.reason}"
                    )
                    self.write_var(v, w.level, loc, why)
        out: dict[int, int] = {}
        for j, lvl in callee.returns.items():
            if j in bound:
                _union(out, _shift(self.alias_of_var(bound[j]), lvl))
        return out

    # -- driver -------------------------------------------------------------------------------

    def run(self) -> Access:
        from numba.core.compiler import run_frontend

        fn = self.fn
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        self.nparams = len(names)
        kinds = {p.kind for p in sig.parameters.values()}
        if inspect.Parameter.VAR_POSITIONAL in kinds or inspect.Parameter.VAR_KEYWORD in kinds:
            return self.everything(names, "the function takes *args or **kwargs: not analysed")
        try:
            func_ir = run_frontend(fn)
        except Exception as exc:  # bytecode numba cannot read: nothing is proven
            return self.everything(names, f"its code could not be analysed ({exc})")
        ir = self.ir
        stmts = [(s, blk) for blk in func_ir.blocks.values() for s in blk.body]
        for s, _ in stmts:
            if isinstance(s, ir.Assign):
                self.defs.setdefault(s.target.name, []).append(s.value)
        # kinds: greatest fixpoint
        self.kinds = {name: _TOP for name in self.defs}
        for _ in range(100):
            changed = False
            for name, values in self.defs.items():
                k = _TOP
                for v in values:
                    k = _meet(k, self.kind_of_value(v))
                if k == _TOP:
                    k = None
                if k != self.kinds[name]:
                    self.kinds[name] = k
                    changed = True
            if not changed:
                break
        else:  # pragma: no cover - kinds only descend a short lattice
            self.kinds = dict.fromkeys(self.defs)
        # aliases: least fixpoint
        for _ in range(1000):
            changed = False
            for s, _blk in stmts:
                if isinstance(s, ir.Assign):
                    got = self.transfer(s.value, s.loc, emit=False)
                    if got:
                        changed |= _union(self.aliases.setdefault(s.target.name, {}), got)
            if not changed:
                break
        else:  # pragma: no cover - levels only descend to a floor
            return self.everything(names, "the analysis did not converge")
        # writes
        for s, _blk in stmts:
            self.statement(s)
        params = [ParamAccess(n) for n in names]
        for p, w in self.events:
            if 0 <= p < len(params):
                params[p].writes.append(w)
        for pa in params:
            pa.writes.sort(key=lambda w: (w.level, w.line))
        return Access(fn.__qualname__, params, self.returns)

    def everything(self, names: list[str], reason: str) -> Access:
        line = self.fn.__code__.co_firstlineno
        params = [ParamAccess(n, [Write(NEG, line, self.filename, reason)]) for n in names]
        return Access(self.fn.__qualname__, params, dict.fromkeys(range(len(names)), NEG))

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
        elif isinstance(s, (ir.Del, ir.Jump, ir.Branch, ir.Print, ir.PopBlock)):
            pass
        elif isinstance(s, (ir.StaticRaise, ir.DynamicRaise, ir.TryRaise)):
            pass
        elif type(s).__name__ in ("StaticTryRaise", "DynamicTryRaise"):
            pass
        else:
            self.write_all(loc, f"`{type(s).__name__}` at line {line}: not analysed")


def _is_math(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None)
    if mod in ("math", "cmath"):
        return True
    name = getattr(obj, "__name__", None)
    return bool(name) and (getattr(math, name, None) is obj or getattr(cmath, name, None) is obj)


def _is_prange(obj: Any) -> bool:
    try:
        import numba

        return obj is numba.prange
    except Exception:  # pragma: no cover
        return False


# function -> {kinds of its arguments (a device function's indexes): analysis}
_cache: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Access]] = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def _analyse(
    fn: Any, stack: tuple[Any, ...], arg_kinds: tuple[Any, ...] = (), cuda: bool = False
) -> Access:
    with _lock:
        per_fn = _cache.get(fn)
        if per_fn is None:
            per_fn = _cache[fn] = {}
        key = (cuda, arg_kinds)
        got = per_fn.get(key)
        if got is None:
            # A callee analysed while a caller is on the stack saw calls back into that caller
            # as unknown (written): conservative, so its result is still sound to keep.
            got = per_fn[key] = _Analyser(fn, stack, arg_kinds, cuda).run()
        return got


def analyse(func: Any, cuda: bool | None = None) -> Access:
    """The access analysis of a Python function or a Numba dispatcher (cached per function).

    Parameters
    ----------
    func : function or dispatcher
        A plain Python function, or what ``numba.njit``, ``numba.cuda.jit``,
        :func:`smartarray.jit` or :func:`smartarray.njit` returned.
    cuda : bool, optional
        Whether the function runs as a CUDA kernel or device function (its parameters are
        then arrays, scalars, records or tuples, never mutable containers, so storing into an
        array parameter copies). By default: whether ``func`` is a ``cuda.jit`` dispatcher.

    Returns
    -------
    Access
        One :class:`ParamAccess` per parameter.

    Raises
    ------
    TypeError
        If ``func`` is neither a Python function nor a Numba dispatcher.
    """
    fn = func if inspect.isfunction(func) else _py_func(func)
    if fn is None:
        raise TypeError(
            f"analyse() takes a Python function or a Numba dispatcher, not {type(func).__name__}"
        )
    if cuda is None:
        cuda = _is_cuda_dispatcher(func)
    return _analyse(fn, (), (), cuda)


def _is_cuda_dispatcher(func: Any) -> bool:
    mods = {type(func).__module__ or ""}
    wrapped = getattr(func, "__wrapped__", None)
    if wrapped is not None and not inspect.isfunction(wrapped):
        mods.add(type(wrapped).__module__ or "")
    return any(m.startswith("numba.cuda") or m.startswith("numba_cuda") for m in mods)
