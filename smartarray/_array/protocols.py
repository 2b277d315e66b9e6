"""SmartArray's Python protocols: length, iteration, conversions, text, pickling and copying.

Functions the :class:`~smartarray.array.SmartArray` class statement binds under the same names.
Those that read data read the current host data (made current first, only stale bytes moving)
under the buffer's lock. ``copy.copy`` and ``copy.deepcopy`` are ``a.copy()`` (device to device
when the data is current on the device only). Pickling is :mod:`smartarray._array.results`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._engine.buffer import HOST, IN
from .numpy_api import NUMBERS as _NUMBERS
from .numpy_api import arrays_in as _arrays_in
from .numpy_api import locked as _locked

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "__bool__",
    "__complex__",
    "__contains__",
    "__copy__",
    "__deepcopy__",
    "__float__",
    "__format__",
    "__index__",
    "__int__",
    "__iter__",
    "__len__",
    "__repr__",
    "__reversed__",
    "__str__",
]


def __len__(self: SmartArray) -> int:
    if not self._shape:
        raise TypeError("len() of unsized object")
    return self._shape[0]


def __iter__(self: SmartArray) -> Iterator[Any]:
    if self._host_at == self._buf.host_stamp and self._host_item is not None:
        # Current on the host already: a few elements through the scalar fast path, with no
        # lock and nothing to sync (see _few).
        n = self._shape[0]
        if n <= _FEW:
            return _few(self, range(n))
    return _elements(self, False)


def __reversed__(self: SmartArray) -> Iterator[Any]:
    return _elements(self, True)


def __contains__(self: SmartArray, value: Any) -> bool:
    stamp = self._host_at
    if stamp == self._buf.host_stamp and value.__class__ in _NUMBERS:
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            found = value in host  # NumPy's C loop over the current host data
            if stamp == self._buf.host_stamp:
                return found
    with _locked(_arrays_in(self, value)):
        return value in self._host_ro()


def __bool__(self: SmartArray) -> bool:
    # Truthy by length, as numba's device arrays and Numba's SmartArray (which define
    # __len__ only): numba's own helpers test ``if not b:``. Reads no data. A 0-d array
    # has no length: its value decides, as in NumPy.
    if self._shape:
        return self._shape[0] != 0
    with self._buf.lock:
        return bool(self._host_ro())


def __int__(self: SmartArray) -> int:
    with self._buf.lock:
        return int(self._host_ro())


def __float__(self: SmartArray) -> float:
    with self._buf.lock:
        return float(self._host_ro())


def __complex__(self: SmartArray) -> complex:
    with self._buf.lock:
        return complex(self._host_ro())


def __index__(self: SmartArray) -> int:
    with self._buf.lock:
        return operator.index(self._host_ro())


def __repr__(self: SmartArray) -> str:
    with self._buf.lock:
        valid = ",".join(self.valid_at)
        text = repr(self._host_ro("repr"))
    body = text[len("array(") : -1].replace("\n" + " " * 6, "\n" + " " * 11)
    return f"SmartArray({body}, valid='{valid}')"


def __str__(self: SmartArray) -> str:
    with self._buf.lock:
        return str(self._host_ro("str"))


def __format__(self: SmartArray, spec: str) -> str:
    with self._buf.lock:
        return format(self._host_ro("format"), spec)


def __copy__(self: SmartArray) -> SmartArray:
    # As ``a.copy()`` (device to device when the data is current on the device only),
    # keeping the layout as ``ndarray.__copy__`` does.
    return self.copy(order="K")


def __deepcopy__(self: SmartArray, memo: dict[int, Any]) -> SmartArray:
    return self.copy(order="K")  # numbers only: nothing deeper to copy


def _iterable(a: SmartArray) -> SmartArray:
    """``a``, checked when ``iter()`` is called (as NumPy does), not at the first ``next()``."""
    if not a._shape:
        raise TypeError("iteration over a 0-d array")
    return a


def _elements(a: SmartArray, backwards: bool) -> Iterator[Any]:
    """The iterator of ``a`` (``backwards``: reversed), making the host copy current once first.

    Without the first step each element (or row) would sync on its own: ``max(a)`` of an array
    current on the device made one download per element. Iteration stays lazy, as NumPy's: an
    element is read when it is reached, so a device write between two steps is seen. A 1-D
    array of numbers is iterated by NumPy itself over a host array handed out (tracked: a
    device write refreshes it at once, as any held host array); an N-D array yields its rows,
    SmartArray views made from the known geometry.
    """
    n = len(_iterable(a))
    buf = a._buf
    if len(a._shape) == 1 and a._dtype.names is None:
        with buf.lock:
            if n:
                buf.acquire(HOST, a._lo, a._hi, IN, "iteration")
            if n <= _FEW:
                if a._host_at != buf.host_stamp:
                    a._open_host()
                return _few(a, range(n - 1, -1, -1) if backwards else range(n))
            host = a._export(readonly=True)
        return iter(host[::-1] if backwards else host)
    if n:
        with buf.lock:
            buf.acquire(HOST, a._lo, a._hi, IN, "iteration")
    return _rows(a, range(n - 1, -1, -1) if backwards else range(n))


# Up to this many elements a 1-D iteration reads through the host fast path, element by
# element (handing out a tracked host array costs more than the loop).
_FEW = 32


def _few(a: SmartArray, indices: range) -> Iterator[Any]:
    """Yield ``a[i]`` for ``i`` in ``indices``, through the host fast path while it holds."""
    buf, items, stamp = a._buf, a._host_item, a._host_at
    for i in indices:
        if items is not None and stamp == buf.host_stamp:
            value = items[i]
            if stamp == buf.host_stamp:
                yield value
                continue
        yield a[i]  # (synced; it opens the fast path again where it can)
        items, stamp = a._host_item, a._host_at


def _rows(a: SmartArray, indices: range) -> Iterator[Any]:
    """Yield ``a[i]`` for ``i`` in ``indices``: rows as views (or record views, 1-D records)."""
    if len(a._shape) == 1:  # records: a[i] is a record view
        for i in indices:
            yield a[i]
        return
    buf, offset, step, dtype = a._buf, a._offset, a._strides[0], a._dtype
    shape, strides = a._shape[1:], a._strides[1:]
    view = a._view
    for i in indices:
        yield view(buf, offset + i * step, shape, strides, dtype)
