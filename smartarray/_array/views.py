"""SmartArray's views (transpose, reshape, ravel, ...) and indexing (``a[key]``, ``a[key] = v``).

Functions the :class:`~smartarray.array.SmartArray` class statement binds. A view shares
its base buffer and covers the bounding byte interval of its elements; its geometry is found by
applying NumPy's own indexing to a probe (an array of this geometry over one element), so it
never reads memory. A read makes the bytes it reads current on the host and a write records
what it wrote, through the base buffer's :meth:`~smartarray._engine.buffer.Buffer.acquire`. The
SmartArray class provides three hooks: ``_copy_of`` (a new array copying an ndarray),
``_adopt`` (a new array adopting a fresh ndarray) and ``_as_record`` (a record view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._engine.buffer import HOST, IN, NO_KEY, OUT
from .geometry import from_probe as _from_probe
from .geometry import probe as _probe
from .numpy_api import INT_KEYS as _INT_KEYS
from .numpy_api import NUMBERS as _NUMBERS
from .numpy_api import arrays_in as _arrays_in
from .numpy_api import locked as _locked
from .results import fresh as _fresh  # (no hook: a call less per result)

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray
    from ..array import SmartArray as _SmartArray
else:
    # What ``isinstance`` tests at run time: SmartArray's base class, whose only instances are
    # SmartArrays (this module is bound into the class statement, so cannot import the class).
    from .._numba.kernels import ArrayArgument as _SmartArray


__all__ = [
    "__getitem__",
    "__setitem__",
    "flatten",
    "ravel",
    "reshape",
    "squeeze",
    "swapaxes",
    "transpose",
]


def _is_basic_index(key: Any) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            continue
        if isinstance(item, (bool, np.bool_)):
            return False
        if isinstance(item, (int, np.integer)):
            continue
        return False
    return True


def transpose(self: SmartArray, *axes: Any) -> SmartArray:
    """A view with axes permuted, as ``numpy.ndarray.transpose``."""
    probe = _probe(self)
    return _from_probe(self, probe, probe.transpose(*axes))


def squeeze(self: SmartArray, axis: Any = None) -> SmartArray:
    """A view without length-one axes, as ``numpy.ndarray.squeeze``."""
    probe = _probe(self)
    return _from_probe(self, probe, probe.squeeze(axis))


def swapaxes(self: SmartArray, axis1: int, axis2: int) -> SmartArray:
    """A view with two axes swapped, as ``numpy.ndarray.swapaxes``."""
    probe = _probe(self)
    return _from_probe(self, probe, probe.swapaxes(axis1, axis2))


def reshape(self: SmartArray, *shape: Any, order: Literal["C", "F", "A"] = "C") -> SmartArray:
    """A view with a new shape where NumPy gives one, else a copy.

    Parameters
    ----------
    *shape : int or tuple of int
    order : {'C', 'F', 'A'}, optional
    """
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    probe = _probe(self)
    try:
        return _from_probe(self, probe, probe.reshape(shape, order=order, copy=False))
    except ValueError:
        # A bad shape (raised again here, reading no memory) or a copy is needed.
        as_strided(np.zeros(1, np.uint8), (self.size,), (0,)).reshape(shape)
    with self._buf.lock:
        return self._copy_of(self._host_ro().reshape(shape, order=order))


def ravel(self: SmartArray, order: Literal["C", "F", "A", "K"] = "C") -> SmartArray:
    """A flat view where NumPy gives one, else a flat copy."""
    if order not in ("C", "F", "A", "K"):
        raise ValueError(f"order must be 'C', 'F', 'A' or 'K', got {order!r}")
    probe = _probe(self)
    flags = probe.flags
    if order == "A":
        order = "F" if flags.f_contiguous and not flags.c_contiguous else "C"
    elif order == "K" and (flags.c_contiguous or flags.f_contiguous):
        order = "C" if flags.c_contiguous else "F"
    # NumPy's rule (PyArray_Ravel), decided on the geometry alone (ravelling the probe would
    # allocate a copy of its size): a view iff contiguous in the order asked, or for 'K'
    # iff the strides, sorted by size, tile the memory.
    if order == "K":
        view = True
        step = self._dtype.itemsize
        dims = sorted(zip(self._shape, self._strides, strict=True), key=lambda ds: abs(ds[1]))
        for d, s in dims:
            if d == 1:
                continue
            if s != step:
                view = False
                break
            step *= d
        if view:
            itemsize = self._dtype.itemsize
            return self._view(self._buf, self._offset, (self.size,), (itemsize,), self._dtype)
    elif flags.c_contiguous if order == "C" else flags.f_contiguous:
        return _from_probe(self, probe, probe.reshape(-1, order=order))
    with self._buf.lock:
        return self._copy_of(self._host_ro().ravel(order))


def flatten(self: SmartArray, order: Literal["C", "F", "A", "K"] = "C") -> SmartArray:
    """A flat copy."""
    with self._buf.lock:
        return self._copy_of(self._host_ro().flatten(order))


# -- indexing -----------------------------------------------------------------------------


def _element_offsets(self: SmartArray) -> np.ndarray:
    """Byte offset from ``_offset`` of every element, with this array's shape."""
    offs = np.zeros(self._shape, np.int64)
    for axis, (d, s) in enumerate(zip(self._shape, self._strides, strict=True)):
        shape = [1] * self.ndim
        shape[axis] = d
        offs += (np.arange(d, dtype=np.int64) * s).reshape(shape)
    return offs


def _basic(self: SmartArray, key: Any) -> tuple[SmartArray, bool]:
    """The view ``self[key]`` for a basic index, and whether NumPy would give a scalar."""
    probe = _probe(self)
    if isinstance(key, str):
        return _from_probe(self, probe, probe[key]), False
    items = key if isinstance(key, tuple) else (key,)
    has_ellipsis = any(item is Ellipsis for item in items)
    result = probe[items if has_ellipsis else (*items, Ellipsis)]
    view = _from_probe(self, probe, result)
    return view, (result.ndim == 0 and not has_ellipsis)


def _advanced(self: SmartArray, key: Any) -> tuple[np.ndarray, int, int]:
    """The touched offsets of an advanced index and their bounding byte interval."""
    key = key._host_ro() if isinstance(key, _SmartArray) else key
    if isinstance(key, tuple):
        key = tuple(k._host_ro() if isinstance(k, _SmartArray) else k for k in key)
    touched = _element_offsets(self)[key]
    if touched.size == 0:
        return touched, 0, 0
    lo = self._offset + int(touched.min())
    return touched, lo, self._offset + int(touched.max()) + self._dtype.itemsize


def __getitem__(self: SmartArray, key: Any) -> Any:
    """``self[key]``, as ``numpy.ndarray.__getitem__``; a view for a basic index.

    The host fast path: while this view's bytes stay current on the host (its ``_host_at`` is
    the buffer's ``host_stamp``: any transition that may make them stale moves the stamp), an
    integer index of a 1-D view (an integer per axis of an N-D one) reads the host ndarray
    directly, with no lock. The stamp is read
    again after the read (seqlock-style): a download into these bytes starts only after the
    transition that moved it.
    """
    stamp = self._host_at
    cls = key.__class__
    # (``int`` tested first, and the set of integer classes only for none of the classes
    # below: a set lookup costs a fifth of NumPy's whole ``x[i]``, a tenth of its ``x[1:5]``)
    if cls is int or (cls is not slice and cls is not np.ndarray and cls in _INT_KEYS):
        if stamp == self._buf.host_stamp:
            items = self._host_item
            if items is not None:
                value = items[key]
                if stamp == self._buf.host_stamp:
                    return value
    elif cls is slice and self._shape:
        # A view along the first axis, its geometry computed here (no probe, nothing read).
        shape = self._shape
        start, stop, step = key.indices(shape[0])
        if step == 1:
            n = stop - start if stop > start else 0
        else:
            n = len(range(start, stop, step))
        stride = self._strides[0]
        if n and len(shape) == 1:  # (the common case: its byte span known at once)
            offset = self._offset + start * stride
            stride *= step
            dtype = self._dtype
            # (SmartArray._init_host's stores, inline: one call less on a path NumPy takes in 70 ns)
            view = object.__new__(self.__class__)
            view._buf = self._buf
            view._offset = offset
            view._shape = (n,)
            view._strides = (stride,)
            view._dtype = dtype
            if stride >= 0:
                view._lo = offset
                view._hi = offset + (n - 1) * stride + dtype.itemsize
            else:
                view._lo = offset + (n - 1) * stride
                view._hi = offset + dtype.itemsize
            view._launch_cache = view._njit_view = view._njit_fast = None
            view._host_at = view._host_only_at = -1
            view._host_item = view._host_cells = view._host_nd = None
            view._host_key = NO_KEY
            return view
        offset = self._offset + start * stride if n else self._offset
        shape, strides = (n, *shape[1:]), (stride * step, *self._strides[1:])
        return self._view(self._buf, offset, shape, strides, self._dtype)
    elif cls is tuple and stamp == self._buf.host_stamp and _cell(self, key):
        value = self._host_cells[key]  # type: ignore[index]  # (_cell: not None; a scalar)
        if stamp == self._buf.host_stamp:
            return value
    elif cls is np.ndarray and stamp == self._buf.host_stamp:
        # A mask or an index array over a view current on the host: NumPy's own indexing of
        # the host data (no offset array of the view), then adopted (a fresh array).
        host = self._host_nd  # (made on a new result's first read: _readable)
        if host is not None or (host := self._readable()) is not None:
            result = host[key]
            if stamp == self._buf.host_stamp:
                if result.__class__ is not np.ndarray:
                    return result  # (an integer array of no axes: a scalar)
                # Of a 1-D view, an ndarray key's result is a fresh array; of an N-D one, a
                # 0-d integer key's is a view of the read-only host data (checked, copied).
                return _fresh(result) if len(self._shape) == 1 else self._adopt(result)
    return _getitem(self, key)


def __setitem__(self: SmartArray, key: Any, value: Any) -> None:
    """``self[key] = value``, as ``numpy.ndarray.__setitem__``, recorded on the host copy.

    The host fast path has two doors, each one test. While the host holds the only current
    copy of this view's bytes (its ``_host_only_at`` is the buffer's ``host_stamp``), a write
    at any key goes to the host ndarray directly (``_host_cells``, made whenever the stamp is)
    and needs no record: nothing else is current to go stale, and NumPy's indexing of the view
    writes none of the buffer's other bytes. NumPy checks the key and the value (its errors,
    its casts); a value that is itself a SmartArray is read through its own ``__array__``,
    under its own lock (this write holds none). The stamp is read again after the write
    (seqlock-style): if a transition began meanwhile (an upload moves the stamp before it
    reads the host bytes; a value's conversion that runs device work moves it too), the write
    is done again the slow way, under the lock, and recorded, so no old value is marked
    current elsewhere.

    The other door is the view's key (``_host_key``): the integer key of a write that needs
    no record until the next transition, which closes the key before anything moves
    (:meth:`Buffer._leave_host_only <smartarray._engine.buffer.Buffer._leave_host_only>`).
    A host-only view keeps the key of its first such write (:meth:`Buffer.keep_host_key
    <smartarray._engine.buffer.Buffer.keep_host_key>`); a used view (other bytes current on
    the device too) keeps the key of an element write made the slow way, once that element is
    current on the host only (:meth:`Buffer.open_host_key
    <smartarray._engine.buffer.Buffer.open_host_key>`). Writing the same element again (a
    boundary value, an accumulator) then tests the key by identity (a loop's constant, a
    variable) and reads the key again after the write, in place of the stamp: a transition
    that began meanwhile closed it, and the write is done again the slow way. A key equal but
    not identical is compared only when the stamp test fails, by class (an index array
    compared with the key would be ambiguous) and value. Each test costs about a sixth of
    NumPy's whole write, so each door tests one thing.
    """
    known = self._host_key
    if key is not known:
        buf = self._buf
        stamp = buf.host_stamp  # (read once before the write, once after: the seqlock's two reads)
        if self._host_only_at == stamp:
            self._host_cells[key] = value  # type: ignore[index]  # (a fresh stamp: made)
            if stamp != buf.host_stamp:
                _setitem(self, key, value)
            elif known is NO_KEY and key.__class__ in _INT_KEYS:
                _keep_key(self, key, stamp)
            return
        if key.__class__ is not known.__class__ or key != known:
            _setitem(self, key, value)
            return
    self._host_cells[key] = value  # type: ignore[index]  # (an open key: made)
    if self._host_key is not known:
        _setitem(self, key, value)


def _keep_key(self: SmartArray, key: Any, stamp: int) -> None:
    """Keep ``key``, just written with no record at ``stamp``, open for this host-only view's
    next writes (the write fast path's key door, see ``__setitem__``)."""
    buf = self._buf
    with buf.lock:
        if buf.keep_host_key(self, stamp):
            self._host_key = key


def _cell(self: SmartArray, key: tuple[Any, ...]) -> bool:
    """Whether ``key`` names one element of this N-D view of numbers by integers
    (``a[i, j]``), which the host fast path reads or writes directly."""
    if len(key) != len(self._shape) or self._host_cells is None:
        return False
    for k in key:  # noqa: SIM110 - the host fast path: all() over a generator costs more
        if k.__class__ not in _INT_KEYS:
            return False
    return True


def _element(self: SmartArray, key: Any) -> int:
    """The byte offset of element ``key`` (an integer) of this 1-D view; IndexError as NumPy."""
    n = self._shape[0]
    k = int(key)
    if k < -n or k >= n:
        raise IndexError(f"index {k} is out of bounds for axis 0 with size {n}")
    return self._offset + (k + n if k < 0 else k) * self._strides[0]


def _scalar_indexed(self: SmartArray, key: Any) -> bool:
    """Whether ``self[key]`` is one number of a 1-D view (what the fast path takes)."""
    return key.__class__ in _INT_KEYS and len(self._shape) == 1 and self._dtype.names is None


def _getitem(self: SmartArray, key: Any) -> Any:
    """``self[key]`` through the engine (and the host fast path opened for next time)."""
    if _scalar_indexed(self, key):
        lo = _element(self, key)
        hi = lo + self._dtype.itemsize
        buf = self._buf
        with buf.lock:
            buf.acquire(HOST, lo, hi, IN, "host read")
            value = np.ndarray((), self._dtype, buffer=buf.ensure_host(), offset=lo)[()]
            self._open_host()
            return value
    # Every array involved is locked up front, in the global order (a key's lock taken
    # while holding self's would deadlock against ``key[self]`` in another thread).
    with _locked(_arrays_in(self, key)):
        if _is_basic_index(key) or isinstance(key, str):
            view, scalar = _basic(self, key)
            if not scalar:
                return view
            if view._dtype.names is not None:
                # NumPy's record scalar (np.void) is a view: ``a[0]['x'] = 5`` writes the
                # array. A copy would drop that write silently; a record view lands it
                # and records it.
                return view._as_record()
            return view._host_ro().copy()[()]
        touched, lo, hi = _advanced(self, key)
        self._buf.acquire(HOST, lo, hi, IN, "host read")
        if self._host_at != self._buf.host_stamp:
            self._open_host()  # the next mask takes the fast path if the whole view is current
        # A fresh array nobody else holds: adopted, not an exported view.
        return self._adopt(self._host_view()[key])


def _setitem(self: SmartArray, key: Any, value: Any) -> None:
    """``self[key] = value`` through the engine (and the host fast path opened for next time)."""
    if value.__class__ in _NUMBERS and _scalar_indexed(self, key):
        lo = _element(self, key)
        hi = lo + self._dtype.itemsize
        staged = np.empty((), self._dtype)
        staged[()] = value  # validates (a cast NumPy refuses) before anything is touched
        buf = self._buf
        with buf.lock:
            buf.acquire(HOST, lo, hi, OUT, "host write gap")
            np.ndarray((), self._dtype, buffer=buf.ensure_host(), offset=lo)[()] = staged
            if buf.host_wrote(lo, hi, self._lo, self._hi) or self._host_at != buf.host_stamp:
                self._open_host()  # (the whole view current on the host only: fast from now)
            if self._host_item is not None and self._host_only_at != buf.host_stamp:
                # This element is current on the host only now (unless work in flight may
                # still read it): the next write of it needs no record until a transition
                # closes the key (the engine keeps the view to close it).
                self._host_key = key if buf.open_host_key(self, lo, hi) else NO_KEY
        return
    with _locked(_arrays_in(self, key, value)):
        if isinstance(value, _SmartArray):
            value = value._host_ro()
        if _is_basic_index(key) or isinstance(key, str):
            target, _ = _basic(self, key)
            staged = np.empty(target._shape, target._dtype)
            staged[...] = value  # validates (dtype, broadcast) before anything is touched
            hv = target._host_rw(full=False)
            hv[...] = staged
            target._changed(HOST, target._lo, target._hi)
            return
        touched, lo, hi = _advanced(self, key)
        staged = np.empty(touched.shape, self._dtype)
        staged[...] = value
        if lo == hi:
            return
        covers = np.unique(touched).size * self._dtype.itemsize == hi - lo
        self._buf.acquire(HOST, lo, hi, OUT, "host write gap", covers=covers)
        self._host_view()[key] = staged
        self._changed(HOST, lo, hi)
