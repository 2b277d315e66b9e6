"""SmartArrays over ndarrays made elsewhere: NumPy results, pickled data and njit results.

Each adopts a fresh ndarray nobody else holds (:func:`_owning`) where it can, instead of copying
it. :func:`_from_njit` is the adapter :mod:`smartarray._numba.njit` applies to what an njit
function returns for a value of SmartArrayType (the array layer registers it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._engine.array_classes import SMARTARRAY as _CLASS  # (registered: see fresh)
from .._engine.array_classes import smartarray_class as _smart  # registered by smartarray.array
from .._engine.buffer import HOST, NO_KEY, Buffer
from .._memory.checks import _check_array_dtype
from .arguments import njit_owner
from .geometry import address

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray
    from ..array import SmartArray as _SmartArray
else:
    # What ``isinstance`` tests at run time: SmartArray's base class, whose only instances are
    # SmartArrays (this module is bound into the class statement, so cannot import the class).
    from .._numba.kernels import ArrayArgument as _SmartArray

__all__ = ["__reduce__", "_from_njit", "_owning", "_rebuild", "copy_of", "fresh", "wrap"]


def _owning(ary: np.ndarray) -> SmartArray:
    """A SmartArray adopting a fresh ndarray that nobody else holds.

    Unlike a user's ``SmartArray(obj, copy=False)``, nothing outside keeps ``ary``, so it is no
    exported view: device changes must not be downloaded eagerly on its account. A contiguous
    ndarray of numbers (what NumPy's calls return) is adopted with what is known of it (no
    argument checks): a new buffer current on the host only, its host fast path open.
    """
    if ary.__class__ is np.ndarray:
        flags = ary.flags
        if flags.writeable and (flags.c_contiguous or flags.f_contiguous):
            if ary.dtype.kind not in "biufc":  # (numbers need no further check)
                if ary.dtype.names is not None:
                    return _adopting(ary)
                _check_array_dtype(ary.dtype, "a result's dtype")
            result = object.__new__(_smart())
            result._init_host(ary, None)
            return result
    return _adopting(ary)


def fresh(ary: np.ndarray, shape: tuple[int, ...] | None = None) -> SmartArray:
    """:func:`_owning` of an ndarray NumPy has just made from a SmartArray's host data of
    numbers (a ufunc's result with no ``out``, an advanced index's copy), which the host
    fast paths call directly (not through a hook of the class: one attribute read less).

    Such an array is writable, of numbers, and contiguous when 1-D (NumPy allocates it), so
    a 1-D one is adopted with nothing to check, SmartArray._init_host's stores made here
    inline (one call less: on a few elements, checks and calls cost as much as NumPy's whole
    ufunc; a slot added there goes here). Any other goes through :func:`_owning`. ``shape``:
    ``ary``'s, where the caller knows it (an elementwise result of a view: the view's tuple,
    shared, instead of a new one NumPy makes per read of ``ary.shape``). The caller
    guarantees both: an array of numbers (never NumPy's object arrays, from
    ``np.frompyfunc``) and ``shape`` its own (never a generalized ufunc's, whose core
    dimensions change it).
    """
    if shape is None:
        shape = ary.shape
    if len(shape) != 1:
        return _owning(ary)
    dtype = ary.dtype
    # (The class's slot read, not smartarray_class() called: called by a SmartArray's fast
    # path, the class is registered.)
    result = object.__new__(_CLASS[0])
    result._buf = buf = Buffer.host_only(ary, None)
    result._offset = result._lo = 0
    result._hi = buf.nbytes
    result._shape = shape
    result._strides = (dtype.itemsize,)
    result._dtype = dtype
    result._launch_cache = result._njit_view = result._njit_fast = None
    result._host_key = NO_KEY
    # A new buffer current on the host only, nothing in flight (its stamp 0): the host fast
    # path open, its read-only ndarray made on the first read (SmartArray._readable).
    result._host_item = result._host_cells = ary
    result._host_nd = None
    result._host_at = result._host_only_at = 0
    return result


def _adopting(ary: np.ndarray) -> SmartArray:
    """:func:`_owning`'s general case: the constructor's checks, its copy where it needs one."""
    result = _smart()(ary, copy=False)
    result._buf.held.forget()
    return result


def wrap(result: Any, sources: tuple[np.ndarray, ...] = ()) -> Any:
    """Wrap a NumPy result: ndarrays become SmartArrays (copied if they alias a source)."""
    if isinstance(result, np.ndarray) and not isinstance(result, _SmartArray):
        if result.dtype.hasobject or result.dtype.kind in "US":
            return result
        shares = any(np.may_share_memory(result, s) for s in sources)
        if shares or not result.flags.writeable:
            return _smart()(result)
        return _owning(result)
    if isinstance(result, tuple):
        return tuple(wrap(r, sources) for r in result)
    if isinstance(result, list):
        return [wrap(r, sources) for r in result]
    return result


def copy_of(ary: np.ndarray) -> SmartArray:
    """A new SmartArray holding a copy of ``ary`` (``SmartArray._copy_of``)."""
    return _smart()(ary)


def _rebuild(data: np.ndarray) -> SmartArray:
    """Unpickle a SmartArray (see :func:`__reduce__`)."""
    return _owning(data)


def __reduce__(self: SmartArray) -> tuple[Any, tuple[Any, ...]]:
    """Pickle a SmartArray as a copy of its current host data (``SmartArray.__reduce__``)."""
    with self._buf.lock:
        data = np.array(self._host_ro("pickle"), copy=True)
    return (_rebuild, (data,))


# -- njit results (see smartarray._numba.njit: SmartArrayType's copy, __array_ufunc__, box) --


def _from_njit(ary: Any) -> Any:
    """What an njit function returns for a value of SmartArrayType (numba boxed ``ary``).

    - a SmartArray argument's host ndarray itself: that SmartArray;
    - a view of it (``.base`` is numba's MemInfo whose ``parent`` is that ndarray): a
      SmartArray view of the same base buffer at the same bytes. The function may have written
      through it, so a host write of its bytes is recorded (they are current on the host:
      the argument was synced before the call) unless numba typed it read-only;
    - a new array (numba allocated it: no parent): a SmartArray adopting it, current on the
      host only;
    - anything else (a plain ndarray that reached a SmartArray version): as numba gives it.
    """
    if type(ary) is not np.ndarray:
        return ary
    owner = njit_owner(ary)
    if owner is not None:
        return owner
    parent = getattr(ary.base, "parent", ary)  # numba's MemInfo object has ``parent``
    if parent is None:
        return _owning(ary) if ary.flags.writeable else _smart()(ary)
    owner = njit_owner(parent)
    if owner is None:
        return ary
    offset = owner._offset + address(ary) - address(parent)
    view = _smart()._view(owner._buf, offset, ary.shape, ary.strides, ary.dtype)
    if view._lo < 0 or view._hi > owner._buf.nbytes:
        return ary  # cannot happen for numba's views; never record bytes outside the buffer
    if (
        view._offset == owner._offset
        and view._shape == owner._shape
        and view._strides == owner._strides
        and view._dtype == owner._dtype
    ):
        return owner
    if ary.flags.writeable:
        view._changed(HOST, view._lo, view._hi)
    return view
