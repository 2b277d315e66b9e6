"""numpy.ndarray's methods and Python's operators for SmartArray, on the current host data.

Functions the :class:`~smartarray.array.SmartArray` class statement binds under the same names.
A method that reads runs ``numpy.ndarray``'s own on the current host data (:func:`_read`; the
reductions, ``tolist`` and ``item`` without arguments read the host ndarray directly while the
view's host fast path is open, see :mod:`smartarray._array.views`); one
that writes in place runs it on the host copy and records the write (:func:`_write`: the device
copy goes stale). The operators (``+``, ``<``, ...) are NumPy's ``NDArrayOperatorsMixin``'s,
made by :func:`binary`, :func:`numeric` and :func:`unary` with ``self`` typed as a SmartArray:
each calls the ufunc, which comes back through ``__array_ufunc__``
(:mod:`smartarray._array.numpy_api`). Methods NumPy arrays have and SmartArray does not fail with a
hint (:func:`add_unsupported_hints`).

Every method is written out (not generated) so readers and type tools see it, under
``numpy.ndarray``'s name: ``all``, ``any``, ``max``, ``min``, ``round`` and ``sum`` hide the
builtins in this module, which names them ``builtins.min`` where it needs them.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from .._engine.buffer import HOST
from .numpy_api import NUMBERS, _convert, _failed_host_write, arrays_in, locked
from .results import fresh as _fresh  # (no hook: a call less per result)

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "add_unsupported_hints",
    "all",
    "any",
    "argmax",
    "argmin",
    "argpartition",
    "argsort",
    "astype",
    "binary",
    "byteswap",
    "choose",
    "clip",
    "compress",
    "conj",
    "conjugate",
    "copy",
    "cumprod",
    "cumsum",
    "diagonal",
    "dot",
    "dump",
    "dumps",
    "fill",
    "inplace",
    "item",
    "max",
    "mean",
    "min",
    "nonzero",
    "numeric",
    "partition",
    "prod",
    "ptp",
    "put",
    "reflected",
    "repeat",
    "resize",
    "round",
    "searchsorted",
    "setflags",
    "sort",
    "std",
    "sum",
    "take",
    "tobytes",
    "tofile",
    "tolist",
    "trace",
    "unary",
    "var",
]

Method = Callable[["SmartArray", Any], Any]


def resize(self: SmartArray, *args: Any, **kwargs: Any) -> None:
    """Not supported: a SmartArray's buffer cannot grow in place."""
    raise TypeError(
        "SmartArray.resize is not supported (views share the buffer); "
        "use SmartArray(np.resize(a, new_shape)) for a resized copy"
    )


def setflags(self: SmartArray, *args: Any, **kwargs: Any) -> None:
    """Not supported: SmartArray has no settable flags."""
    raise TypeError(
        "SmartArray.setflags is not supported; use np.asarray(a) for a read-only view or "
        "a.host() for a writable one"
    )


# -- ndarray methods that read (on the current host data) -------------------------------


def all(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.all``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.all()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "all", args, kwargs)


def any(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.any``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.any()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "any", args, kwargs)


def argmax(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.argmax``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.argmax()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "argmax", args, kwargs)


def argmin(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.argmin``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.argmin()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "argmin", args, kwargs)


def argpartition(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.argpartition``, on the current host data."""
    return _read(self, "argpartition", args, kwargs)


def argsort(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.argsort``, on the current host data."""
    return _read(self, "argsort", args, kwargs)


def astype(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.astype``, on the current host data."""
    return _read(self, "astype", args, kwargs)


def choose(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.choose``, on the current host data."""
    return _read(self, "choose", args, kwargs)


def clip(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.clip``, on the current host data."""
    return _read(self, "clip", args, kwargs)


def compress(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.compress``, on the current host data."""
    return _read(self, "compress", args, kwargs)


def conj(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.conj``, on the current host data."""
    return _read(self, "conj", args, kwargs)


def conjugate(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.conjugate``, on the current host data."""
    return _read(self, "conjugate", args, kwargs)


def copy(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.copy``, on the current host data."""
    return _read(self, "copy", args, kwargs)


def cumprod(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.cumprod``, on the current host data."""
    return _read(self, "cumprod", args, kwargs)


def cumsum(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.cumsum``, on the current host data."""
    return _read(self, "cumsum", args, kwargs)


def diagonal(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.diagonal``, on the current host data."""
    return _read(self, "diagonal", args, kwargs)


def dot(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.dot``, on the current host data."""
    return _read(self, "dot", args, kwargs)


def dump(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.dump``, on the current host data."""
    return _read(self, "dump", args, kwargs)


def dumps(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.dumps``, on the current host data."""
    return _read(self, "dumps", args, kwargs)


def item(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.item``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.item()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "item", args, kwargs)


def max(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.max``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.max()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "max", args, kwargs)


def mean(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.mean``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.mean()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "mean", args, kwargs)


def min(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.min``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.min()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "min", args, kwargs)


def nonzero(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.nonzero``, on the current host data."""
    return _read(self, "nonzero", args, kwargs)


def prod(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.prod``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.prod()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "prod", args, kwargs)


def ptp(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.ptp``, on the current host data."""
    return _read(self, "ptp", args, kwargs)


def repeat(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.repeat``, on the current host data."""
    return _read(self, "repeat", args, kwargs)


def round(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.round``, on the current host data."""
    return _read(self, "round", args, kwargs)


def searchsorted(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.searchsorted``, on the current host data."""
    return _read(self, "searchsorted", args, kwargs)


def std(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.std``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.std()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "std", args, kwargs)


def sum(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.sum``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.sum()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "sum", args, kwargs)


def take(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.take``, on the current host data."""
    return _read(self, "take", args, kwargs)


def tobytes(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.tobytes``, on the current host data."""
    return _read(self, "tobytes", args, kwargs)


def tofile(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.tofile``, on the current host data."""
    return _read(self, "tofile", args, kwargs)


def tolist(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.tolist``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.tolist()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "tolist", args, kwargs)


def trace(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.trace``, on the current host data."""
    return _read(self, "trace", args, kwargs)


def var(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.var``, on the current host data."""
    stamp = self._host_at
    if stamp == self._buf.host_stamp and not args and not kwargs:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host.var()
            if stamp == self._buf.host_stamp:  # (no device write began meanwhile)
                return result
    return _read(self, "var", args, kwargs)


# -- ndarray methods that write in place (on the host copy) ----------------------------


def fill(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.fill``, in place on the host copy.

    The device copy goes stale over this array\'s bytes.
    """
    return _write(self, "fill", False, args, kwargs)


def sort(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.sort``, in place on the host copy.

    The device copy goes stale over this array\'s bytes.
    """
    return _write(self, "sort", True, args, kwargs)


def put(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.put``, in place on the host copy.

    The device copy goes stale over this array\'s bytes.
    """
    return _write(self, "put", True, args, kwargs)


def partition(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
    """As ``numpy.ndarray.partition``, in place on the host copy.

    The device copy goes stale over this array\'s bytes.
    """
    return _write(self, "partition", True, args, kwargs)


def byteswap(self: SmartArray, inplace: bool = False) -> Any:
    """As ``numpy.ndarray.byteswap``; ``inplace=True`` marks the host copy changed."""
    with locked([self]):
        if inplace:
            host = self._host_rw(full=True)
            host.byteswap(inplace=True)
            self._changed(HOST, self._lo, self._hi)
            return self
        return self._copy_of(self._host_ro().byteswap())


def _check_sort_args(self: SmartArray, name: str, args: Any, kwargs: Any) -> None:
    """Validate ``sort`` / ``partition`` arguments on a tiny stand-in (nothing moves)."""
    if arrays_in(args, kwargs):
        return  # SmartArray arguments: NumPy judges them after conversion
    tiny = np.zeros(tuple(builtins.min(d, 1) for d in self._shape), self._dtype)
    if name == "sort":
        tiny.sort(*args, **kwargs)  # axis, kind and order, checked by NumPy itself
        return
    rest = dict(kwargs)
    kth = args[0] if args else rest.pop("kth", None)
    axis = args[1] if len(args) > 1 else rest.pop("axis", -1)
    tiny.partition(0, axis, *args[2:], **rest)  # axis, kind and order
    if axis is not None:
        n = self._shape[normalize_axis_index(axis, self.ndim)]
        ks = np.asarray(kth)
        if ks.dtype.kind in "iu" and ks.size and (ks.min() < -n or ks.max() >= n):
            raise ValueError(f"kth(={kth!r}) out of bounds ({n})")


def _read(self: SmartArray, name: str, args: Any, kwargs: Any) -> Any:
    """Call ``numpy.ndarray.<name>`` on the current host data (and of SmartArray arguments)."""
    with locked(arrays_in(self, args, kwargs)):
        hosts: list[np.ndarray] = []
        host = _convert(self, hosts, None)
        result = getattr(host, name)(*_convert(args, hosts, None), **_convert(kwargs, hosts, None))
        return self._wrap(result, tuple(hosts))


def _write(self: SmartArray, name: str, reads: bool, args: Any, kwargs: Any) -> Any:
    """Call ``numpy.ndarray.<name>`` in place on the host copy and record the write.

    ``reads``: whether the method reads the old values (synced in full first) or only writes.
    """
    if name in ("sort", "partition"):
        _check_sort_args(self, name, args, kwargs)
    with locked(arrays_in(self, args, kwargs)):
        hosts: list[np.ndarray] = []
        args = _convert(args, hosts, None)
        kwargs = _convert(kwargs, hosts, None)
        host = self._host_rw(full=reads)
        try:
            result = getattr(host, name)(*args, **kwargs)
        except BaseException:
            _failed_host_write([self])  # e.g. put: index 0 written, then index 99 fails
            raise
        self._changed(HOST, self._lo, self._hi)
        return result


def _not_supported(name: str) -> property:
    def fail(self: SmartArray) -> Any:
        raise AttributeError(
            f"SmartArray has no attribute {name!r}; use a.host().{name} on the host copy "
            "(then a.host_changed() if it writes)"
        )

    fail.__name__ = fail.__qualname__ = name
    fail.__doc__ = f"Not supported: use ``a.host().{name}`` (``numpy.ndarray.{name}``)."
    return property(fail)


def add_unsupported_hints(cls: type) -> None:
    """Make every public ``numpy.ndarray`` attribute ``cls`` lacks fail with a hint.

    Properties rather than a ``__getattr__`` hook: a class with ``__getattr__`` makes every
    attribute read slower, and Numba's dispatchers read two attributes per call
    (``_numba_type_``, ``_njit_fast``). The list depends on the NumPy version, so it is made
    at import.
    """
    for name in dir(np.ndarray):
        if not name.startswith("_") and not hasattr(cls, name):
            setattr(cls, name, _not_supported(name))


# -- operators (as numpy.lib.mixins.NDArrayOperatorsMixin's) -----------------------------------


def _defers(other: Any) -> bool:
    """Whether ``other`` opts out of NumPy's ufuncs (``__array_ufunc__ = None``): Python then
    tries its reflected operator."""
    try:
        return other.__array_ufunc__ is None
    except AttributeError:
        return False


def binary(ufunc: np.ufunc, name: str) -> Method:
    """``self <op> other`` as ``ufunc(self, other)`` (``__<name>__``)."""

    def method(self: SmartArray, other: Any) -> Any:
        if other.__class__ in NUMBERS:
            # The host fast path (see SmartArray.__array_ufunc__), without NumPy's dispatch.
            stamp, host = self._host_at, self._host_nd
            if host is None:
                host = self._readable()  # (a new result's, made on its first read)
            if host is not None and stamp == self._buf.host_stamp:
                result = ufunc(host, other)
                if stamp == self._buf.host_stamp:
                    if result.__class__ is np.ndarray:
                        return _fresh(result, self._shape)  # (elementwise, a number: its shape)
                    return self._wrap(result)  # (divmod's two arrays, or a 0-d view's scalar)
        elif _defers(other):
            return NotImplemented
        return ufunc(self, other)

    method.__name__ = method.__qualname__ = f"__{name}__"
    method.__doc__ = f"``numpy.{ufunc.__name__}(self, other)``, on the current host data."
    return method


def reflected(ufunc: np.ufunc, name: str) -> Method:
    """``other <op> self`` as ``ufunc(other, self)`` (``__r<name>__``)."""

    def method(self: SmartArray, other: Any) -> Any:
        if other.__class__ in NUMBERS:
            # The host fast path (see SmartArray.__array_ufunc__), without NumPy's dispatch.
            stamp, host = self._host_at, self._host_nd
            if host is None:
                host = self._readable()  # (a new result's, made on its first read)
            if host is not None and stamp == self._buf.host_stamp:
                result = ufunc(other, host)
                if stamp == self._buf.host_stamp:
                    if result.__class__ is np.ndarray:
                        return _fresh(result, self._shape)  # (elementwise, a number: its shape)
                    return self._wrap(result)  # (divmod's two arrays, or a 0-d view's scalar)
        elif _defers(other):
            return NotImplemented
        return ufunc(other, self)

    method.__name__ = method.__qualname__ = f"__r{name}__"
    method.__doc__ = f"``numpy.{ufunc.__name__}(other, self)``, on the current host data."
    return method


def inplace(ufunc: np.ufunc, name: str) -> Method:
    """``self <op>= other`` as ``ufunc(self, other, out=(self,))`` (``__i<name>__``)."""

    def method(self: SmartArray, other: Any) -> Any:
        return ufunc(self, other, out=(self,))

    method.__name__ = method.__qualname__ = f"__i{name}__"
    method.__doc__ = f"``numpy.{ufunc.__name__}(self, other, out=self)``, on the host copy."
    return method


def numeric(ufunc: np.ufunc, name: str) -> tuple[Method, Method, Method]:
    """The forward, reflected and in-place operators of ``ufunc``."""
    return binary(ufunc, name), reflected(ufunc, name), inplace(ufunc, name)


def unary(ufunc: np.ufunc, name: str) -> Callable[[SmartArray], Any]:
    """``<op> self`` as ``ufunc(self)`` (``__<name>__``)."""

    def method(self: SmartArray) -> Any:
        return ufunc(self)

    method.__name__ = method.__qualname__ = f"__{name}__"
    method.__doc__ = f"``numpy.{ufunc.__name__}(self)``, on the current host data."
    return method
