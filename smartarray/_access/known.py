"""What the analysis knows about callees and attributes without reading their code.

Owns the tables of read-only array methods, attributes, builtins, NumPy functions and
``numba.cuda`` intrinsics (with how many of their positional arguments are inputs and what their
result aliases), and the lookups that recognise them: :func:`_cuda_paths` (numba.cuda's public
objects by identity), :func:`_py_func` (the Python function behind a dispatcher),
:func:`_is_math`, :func:`_is_prange`. Anything not listed here counts as writing what it receives.
"""

from __future__ import annotations

import builtins
import cmath
import inspect
import math
from typing import Any, Protocol

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
    except Exception:  # noqa: BLE001 - unwrap runs user code (__wrapped__, cycles)
        inner = obj
    for candidate in (obj, inner):
        try:
            fn = getattr(candidate, "py_func", None)
        except Exception:  # noqa: BLE001 - a user object's attribute may raise anything
            fn = None
        if inspect.isfunction(fn) and _is_dispatcher(candidate):
            return fn
    return None


class AnalysedDispatcher(Protocol):
    """What marks a dispatcher wrapper of a layer above (:func:`smartarray.jit`'s) as one whose
    Python function this analysis may follow, whatever module its class says it is from."""

    @property
    def _smartarray_access(self) -> Any: ...  # the wrapped function's access analysis


def _is_dispatcher(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith(("numba.", "smartarray.")) or hasattr(obj, "_smartarray_access")


def _is_math(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None)
    if mod in ("math", "cmath"):
        return True
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or not name:
        return False
    return getattr(math, name, None) is obj or getattr(cmath, name, None) is obj


def _is_prange(obj: Any) -> bool:
    try:
        import numba

        return obj is numba.prange
    except ImportError:  # pragma: no cover
        return False
