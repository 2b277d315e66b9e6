"""The driver: one function's IR, the fixpoints, the recursion into callees, the cache.

Owns :func:`analyse` (the entry point used by :mod:`smartarray.jit`) and :class:`_Analyser`,
which gets the untyped IR (``numba.core.compiler.run_frontend``), computes the index kinds
(greatest fixpoint) and the aliases (least fixpoint), then applies the transfer rules once more
to record the writes; and ``device_call``, which analyses a called Numba function with the
caller's index kinds and maps its writes and returned aliases back to the caller's arguments
(cached per function and argument kinds; a function on the stack counts as unknown). Each
cached analysis keeps what it depended on (:class:`~.deps.Deps`): a rebound global or closure
cell makes the next look-up analyse again, and :func:`analysis` merges every analysis of a
function so far (Numba may still run code compiled with an old helper).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Any

from .deps import Deps
from .known import _py_func
from .results import NEG, Access, ParamAccess, Write
from .transfer import _Transfer
from .values import _TOP, _meet, _shift, _union


class _Analyser(_Transfer):
    """One function's analysis: :meth:`run` gives its :class:`~.results.Access`."""

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
        callee, deps = _analyse(py_func, self.stack, arg_kinds, self.cuda)
        self.deps.extend(deps)
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
        except Exception as exc:  # noqa: BLE001 - code numba cannot read: nothing proven
            return self.everything(names, f"its code could not be analysed ({exc})")
        ir = self.ir
        stmts = [(s, blk) for blk in func_ir.blocks.values() for s in blk.body]
        for s, _ in stmts:
            if isinstance(s, ir.Assign):
                self.defs.setdefault(s.target.name, []).append(s.value)
                if isinstance(s.value, ir.Global):
                    self.deps.global_(fn, s.value.name, s.value.value)
                elif isinstance(s.value, ir.FreeVar):
                    self.deps.cell(fn, s.value.index, s.value.value)
        # kinds: greatest fixpoint
        self.kinds: dict[str, Any] = {name: _TOP for name in self.defs}
        for _ in range(100):
            changed = False
            for name, values in self.defs.items():
                k: Any = _TOP
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


# function -> {(cuda, kinds of its arguments): (analysis, what it depended on)}
_cache: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[Access, Deps]]]
_cache = weakref.WeakKeyDictionary()
# function -> {cuda: (every analysis so far, merged; what the newest depended on)}
_seen: weakref.WeakKeyDictionary[Any, dict[bool, tuple[Access, Deps]]]
_seen = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def _analyse(
    fn: Any, stack: tuple[Any, ...], arg_kinds: tuple[Any, ...] = (), cuda: bool = False
) -> tuple[Access, Deps]:
    with _lock:
        per_fn = _cache.get(fn)
        if per_fn is None:
            per_fn = _cache[fn] = {}
        key = (cuda, arg_kinds)
        got = per_fn.get(key)
        if got is None or not got[1].current():
            # A callee analysed while a caller is on the stack saw calls back into that caller
            # as unknown (written): conservative, so its result is still sound to keep.
            analyser = _Analyser(fn, stack, arg_kinds, cuda)
            got = per_fn[key] = (analyser.run(), analyser.deps)
        return got


def analysis(fn: Any, cuda: bool) -> tuple[Access, Deps]:
    """The analysis of the Python function ``fn`` and what it depended on (cached).

    When a binding it depended on changed (a global helper rebound), ``fn`` is analysed again
    and the result merged with every earlier one: Numba keeps the code it compiled with the
    old helper for the signatures it compiled then (and compiles new signatures with the new
    one), so whatever any of them writes may be written.
    """
    with _lock:
        per_fn = _seen.get(fn)
        if per_fn is None:
            per_fn = _seen[fn] = {}
        got = per_fn.get(cuda)
        if got is not None and got[1].current():
            return got
        access, deps = _analyse(fn, (), (), cuda)
        if got is not None and got[0] is not access:
            access = _merge(got[0], access)
        got = per_fn[cuda] = (access, deps)
        return got


def _merge(old: Access, new: Access) -> Access:
    params = []
    for a, b in zip(old.params, new.params, strict=True):
        writes = list(dict.fromkeys(a.writes + b.writes))
        writes.sort(key=lambda w: (w.level, w.line))
        params.append(ParamAccess(b.name, writes))
    returns = dict(old.returns)
    _union(returns, new.returns)
    return Access(new.name, params, returns)


def analyse(func: Any, cuda: bool | None = None) -> Access:
    """The access analysis of a Python function or a Numba dispatcher (cached per function).

    Analysed again when a global, closure cell or attribute it resolved was rebound since; the
    result then also holds the writes of every earlier analysis (see :func:`analysis`).

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
    return analysis(fn, cuda)[0]


def _is_cuda_dispatcher(func: Any) -> bool:
    mods = {type(func).__module__ or ""}
    wrapped = getattr(func, "__wrapped__", None)
    if wrapped is not None and not inspect.isfunction(wrapped):
        mods.add(type(wrapped).__module__ or "")
    return any(m.startswith(("numba.cuda", "numba_cuda")) for m in mods)
