"""SmartArray: one logical array with a host and a device copy, kept coherent by byte range.

A :class:`SmartArray` is a view (offset, shape, strides, dtype) of a shared base buffer. The
base buffer owns a host copy (NumPy memory, allocated lazily), a device copy (numba.cuda memory,
allocated lazily) and a :class:`~smartarray.coherence.BufferState` recording which bytes of
each copy are current. Every consumer makes its copy current first (moving only stale bytes,
through :mod:`smartarray.memory`, so every byte is counted); every producer marks its copy
changed, which makes the other copy stale.

Choices made here (see ``docs/user_guide.rst``):

- A host write while the device holds newer bytes never loses them: a write that covers its
  byte interval contiguously needs no sync (it overwrites every byte), any other write
  (strided view, advanced index, ``fill`` of a strided view, ...) first syncs the host over the
  bounding interval of what it writes, so the gaps between elements stay current.
- ``np.asarray(a)`` / ``a.__array__()`` returns a **read-only** view of the current host data.
  It is tracked as an exported view, so it is refreshed at once when the device copy changes;
  a write through it raises NumPy's read-only error instead of going silently stale. Use
  ``a.host()`` (then ``a.host_changed()``) or item assignment to write.
- ``a[i]`` of a structured array returns a record view (a 0-d SmartArray), as NumPy returns a
  record (``np.void``) that is a view: ``a[0]['x'] = 5`` writes the array and is recorded.
- ``mark_changed`` on a view that does not cover its byte interval contiguously requires the
  gaps to be current where the write happened (``get(where)`` first); otherwise it raises
  :class:`~smartarray.errors.CoherenceError`.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from . import memory
from ._array import arguments as _arguments
from ._array import copies as _copies
from ._array import exchange as _exchange
from ._array import geometry as _geometry
from ._array import ndarray as _ndarray
from ._array import numpy_api as _numpy_api
from ._array import protocols as _protocols
from ._array import results as _results
from ._array import views as _views

# (old pickles name smartarray.array._rebuild; njit results come back through _from_njit)
from ._array.results import _from_njit, _rebuild  # noqa: F401
from ._engine import array_classes as _array_classes
from ._engine import residency as _residency
from ._engine.buffer import HOST, INOUT
from ._engine.buffer import NO_KEY as _NO_KEY
from ._engine.buffer import Buffer as _Buffer
from ._interop import dlpack as _dlpack
from ._interop import foreign as _foreign
from ._memory import devices as _devices
from ._memory.checks import _check_array_dtype, _check_shape, _check_stream
from ._numba import njit as _numba_cpu
from ._numba.kernels import ArrayArgument

if TYPE_CHECKING:  # pragma: no cover
    from ._engine.residency import LaunchCache

__all__ = ["SmartArray"]

_ORDERS = (None, "C", "F", "A", "K")
_NUMBER_KINDS = "biufc"  # dtype kinds a SmartArray holds with no further check


def _check_where(where: Any) -> str:
    """The location ``where`` names ('host', 'gpu': the current device, 'gpu:N')."""
    return _devices.resolve(where)


def _check_name(name: Any) -> str | None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    return name


class SmartArray(ArrayArgument):
    """An array with a host (NumPy) and a device (numba.cuda) copy, kept coherent by byte range.

    Parameters
    ----------
    obj : array_like or SmartArray, optional
        The initial data, copied (a C- or F-contiguous ndarray of an accepted dtype is adopted
        as the host copy when ``copy=False``; it stays in sync with the array). A SmartArray's
        current data is copied. Device memory (an object with ``__cuda_array_interface__``:
        CuPy, PyTorch, numba device arrays) is copied device to device.
    copy : bool, optional
        ``False`` adopts a suitable ndarray ``obj`` instead of copying it, or device memory
        ``obj`` as the device copy (its owner kept alive).
    shape : int or tuple of int, optional
        The shape of an uninitialised array (when ``obj`` is None), or a check on ``obj``'s.
    dtype : dtype, optional
        The element type (``obj`` is cast to it). Default float64 for ``shape``.
    order : {None, 'C', 'F', 'A', 'K'}, optional
        Memory layout of the new base buffer.
    where : {'host', 'gpu'}, optional
        Where the first copy lives. ``'gpu'`` uploads ``obj`` at once.
    pinned : bool, optional
        Keep the host copy in page-locked memory.
    name : str, optional
        The name transfer events, summaries and guard errors show for this array (and its
        views). Default: a short automatic name, ``'a0'``, ``'a1'``, ...
    stream : int or Stream, optional
        The stream this array's copies that name none go on (``get``, ``gpu()``, host reads)
        while no device work is queued on it, as ``numba.cuda.to_device(x, stream)`` puts its
        upload on ``stream``; nothing moves at construction (a launch moves what it needs, on
        its own stream). 0, the default: the default stream.

    Raises
    ------
    ValueError
        Unknown ``where`` or ``order``; ``shape`` conflicts with ``obj``; ``obj`` is ragged.
    TypeError
        Neither ``obj`` nor ``shape``; an object or string dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from smartarray import SmartArray
    >>> a = SmartArray(np.arange(4.0))
    >>> a[1:3] = 7
    >>> a
    SmartArray([0., 7., 7., 3.], valid='host')
    >>> d = a.gpu()  # uploads; a kernel may now run on d, then a.gpu_changed()
    >>> float(a.sum())
    17.0
    """

    __slots__ = (
        "_buf",
        "_offset",
        "_shape",
        "_strides",
        "_dtype",
        "_lo",
        "_hi",
        "_launch_cache",
        "_njit_view",
        "_njit_fast",
        "_host_at",
        "_host_only_at",
        "_host_item",
        "_host_cells",
        "_host_nd",
        "_host_key",
    )  # weak references and the instance dict (``_numba_type_``'s cache) come from ArgHint

    __hash__ = None  # type: ignore[assignment]
    intent = INOUT

    def __init__(
        self,
        obj: Any = None,
        copy: bool = True,
        shape: Any = None,
        dtype: Any = None,
        order: Literal["C", "F", "A", "K"] | None = None,
        where: str = "host",
        pinned: bool = False,
        name: str | None = None,
        stream: Any = 0,
    ) -> None:
        if (
            obj.__class__ is np.ndarray
            and copy is True
            and shape is None
            and dtype is None
            and order is None
            and where == HOST
            and not pinned
            and name is None
            and stream.__class__ is int
            and stream == 0  # (the default; a stream given is checked and kept below)
        ):
            # The common case, ``SmartArray(x)`` of an ndarray: one copy, adopted as the host
            # copy, with no argument to check but x's dtype (before anything is copied).
            if obj.dtype.kind not in _NUMBER_KINDS:
                _check_array_dtype(obj.dtype, "obj's dtype")
            if obj.ndim == 1:
                # A 1-D copy is contiguous in any order: ndarray.copy skips np.array's
                # keyword parsing (about half of NumPy's whole copy of a few elements).
                ary = obj.copy()
            else:
                ary = np.array(obj, order="K", copy=True)
                flags = ary.flags
                if not (flags.c_contiguous or flags.f_contiguous):
                    ary = np.ascontiguousarray(ary)
            self._init_host(ary, None)
            return
        where = _check_where(where)
        name = _check_name(name)
        stream = _check_stream(stream)
        if order not in _ORDERS:
            raise ValueError(f"order must be None, 'C', 'F', 'A' or 'K', got {order!r}")
        dt = None if dtype is None else _check_array_dtype(self._dtype_of(dtype))
        dims = None if shape is None else _check_shape(shape)
        if obj is None:
            if dims is None:
                raise TypeError("SmartArray() needs obj (array-like data) or shape (and dtype)")
            dt = np.dtype(np.float64) if dt is None else dt
            _check_shape(shape, itemsize=dt.itemsize)  # exact: no int64 wrap-around
            self._init_empty(dims, dt, order, pinned, name)
            self._buf.use_stream(stream)
            return
        # -- interop: device memory is copied device to device; see _foreign --
        if _foreign.is_device_object(obj):
            src, dims, dt, layout = _foreign.device_source(obj, copy, dims, dt, order, bool(pinned))
            _check_shape(dims, itemsize=_check_array_dtype(dt).itemsize)
            self._init_empty(dims, dt, layout, pinned, name)  # then filled, current on the device
            self._buf.use_stream(stream)
            _foreign.fill_from_device(self, src, copy)
            return
        obj = _foreign.host_dlpack(obj)  # an object that speaks DLPack only
        # -- end interop --
        if isinstance(obj, SmartArray):
            obj = obj._host_ro()
        adopt = (
            not copy
            and isinstance(obj, np.ndarray)
            and type(obj) is np.ndarray
            and (dt is None or dt == obj.dtype)
            and obj.flags.writeable
            and (obj.flags.c_contiguous or obj.flags.f_contiguous)
            and (order != "C" or obj.flags.c_contiguous)
            and (order != "F" or obj.flags.f_contiguous)
            and not pinned
        )
        if adopt:
            ary = obj
        else:
            try:
                ary = np.array(obj, dtype=dt, order="K" if order is None else order, copy=True)
            except (ValueError, TypeError) as exc:
                if isinstance(exc, ValueError) and "could not convert" not in str(exc):
                    raise ValueError(f"obj cannot be turned into an array: {exc}") from None
                raise TypeError(f"obj cannot be turned into an array: {exc}") from None
        _check_array_dtype(ary.dtype, "obj's dtype")
        if dims is not None and dims != ary.shape:
            raise ValueError(f"shape {dims} conflicts with obj's shape {ary.shape}")
        if not (ary.flags.c_contiguous or ary.flags.f_contiguous):
            ary = np.ascontiguousarray(ary)
        layout = "F" if ary.flags.f_contiguous and not ary.flags.c_contiguous else "C"
        strides = _geometry.contiguous_strides(ary.shape, ary.dtype.itemsize, layout)
        valid_at = HOST if (where == HOST or adopt) else where
        buf = _Buffer(ary.nbytes, valid_at, bool(pinned), name)
        raw = ary.ravel(order="K").view(np.uint8) if ary.size else np.empty(0, np.uint8)
        if adopt:
            buf.adopt_host(raw)
            # The user holds the array this one is a view of (``x`` of ``x[2:6]``), and every
            # view of it has that owner as its ``.base``: track the owner.
            owner = obj
            while isinstance(owner.base, np.ndarray):
                owner = owner.base
            buf.held.track(owner, 0, ary.nbytes)
        elif where == HOST and not pinned:
            buf.adopt_host(raw)  # a fresh copy nobody else holds: no second copy
        elif where == HOST:
            buf.ensure_host()[:] = raw  # (page-locked memory)
        self._init(buf, 0, ary.shape, strides, ary.dtype)
        buf.use_stream(stream)
        if where != HOST:
            _copies.upload_initial(self, raw, where, adopt)

    def _init_empty(
        self, dims: tuple[int, ...], dt: np.dtype, order: str | None, pinned: bool, name: str | None
    ) -> None:
        """Make this a new uninitialised array (its bytes valid everywhere: never copied)."""
        strides = _geometry.contiguous_strides(dims, dt.itemsize, "F" if order == "F" else "C")
        nbytes = math.prod(dims) * dt.itemsize
        self._init(_Buffer(nbytes, None, bool(pinned), name), 0, dims, strides, dt)

    @staticmethod
    def _dtype_of(dtype: Any) -> np.dtype:
        try:
            return np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype must be something np.dtype() accepts: {exc}") from None

    def _init(
        self,
        buf: _Buffer,
        offset: int,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: np.dtype,
    ) -> None:
        self._buf = buf
        self._offset = int(offset)
        self._shape = tuple(map(int, shape))
        self._strides = tuple(map(int, strides))
        self._dtype = dtype
        # (annotated: what mypy reads as the slots' types) The launch fast path's cache
        # (smartarray._array.arguments): the engine's object, made at the first slow path.
        self._launch_cache: LaunchCache | None = None
        self._njit_view: np.ndarray | None = None
        self._njit_fast: Any = None
        # The host fast path (smartarray._array.views): the buffer's host stamp at which this
        # view's bytes were current on the host, and current there only; the writable host
        # ndarray of a 1-D view of numbers that scalar indexing reaches then, the same of a view
        # of any shape (what a write reaches: set whenever the fast path opens, so that a
        # fresh ``_host_only_at`` implies it), and the read-only one NumPy's methods and
        # ufuncs read (made from the writable one on its first read, see ``_readable``; None
        # with the writable one None too: they take the slow path).
        self._host_at = self._host_only_at = -1
        self._host_item: np.ndarray | None = None
        self._host_cells: np.ndarray | None = None
        self._host_nd: np.ndarray | None = None
        # A key of this 1-D view whose element the host holds as its only current copy (a
        # write recorded, or found recorded): later writes of it need no record until the
        # next transition, which closes it (Buffer.open_host_key; smartarray._array.views).
        self._host_key: Any = _NO_KEY
        if 0 in self._shape:
            # No bytes: the offset means nothing, and one past the buffer's end (a column of a
            # (0, 4) array) would make every host or device view of it invalid.
            self._offset = self._lo = self._hi = 0
        elif len(self._shape) == 1:  # (the common case, without the loop)
            end = self._offset + (self._shape[0] - 1) * self._strides[0]
            lo, hi = (self._offset, end) if end >= self._offset else (end, self._offset)
            self._lo, self._hi = lo, hi + dtype.itemsize
        else:
            lo = hi = self._offset
            for d, s in zip(self._shape, self._strides, strict=True):
                if s < 0:
                    lo += (d - 1) * s
                else:
                    hi += (d - 1) * s
            self._lo, self._hi = lo, hi + dtype.itemsize

    @classmethod
    def _view(
        cls, buf: _Buffer, offset: int, shape: Any, strides: Any, dtype: np.dtype
    ) -> SmartArray:
        self = object.__new__(cls)
        self._init(buf, offset, shape, strides, dtype)
        return self

    def _init_host(self, ary: np.ndarray, name: str | None) -> None:
        """Make this a new array adopting ``ary`` (a contiguous ndarray nobody else holds) as
        its host copy, current there only, its host fast path open.

        Every slot of :meth:`_init` is stored once from what is known (no geometry to derive:
        offset 0, the whole buffer). New arrays of NumPy's 1-D results make the same stores
        inline (smartarray._array.results.fresh), and so does a slice of a 1-D view
        (smartarray._array.views.__getitem__): a slot added here goes there
        (tests/array/test_host_fast_path.py reads every slot of arrays made every way).
        """
        dtype = ary.dtype
        shape = ary.shape
        numbers = dtype.names is None
        if len(shape) == 1:
            # (the common case: the array is its own flat copy, its strides known at once)
            self._buf = buf = _Buffer.host_only(ary, name)
            self._strides = (dtype.itemsize,)
            self._host_item = ary if numbers else None
        else:
            self._host_item = None
            fortran = ary.flags.f_contiguous and not ary.flags.c_contiguous
            flat = ary.reshape(-1, order="F") if fortran else ary.reshape(-1)
            self._buf = buf = _Buffer.host_only(flat, name)
            self._strides = _geometry.contiguous_strides(
                shape, dtype.itemsize, "F" if fortran else "C"
            )
        self._offset = self._lo = 0
        self._hi = buf.nbytes
        self._shape = shape
        self._dtype = dtype
        self._launch_cache = self._njit_view = self._njit_fast = None
        self._host_key = _NO_KEY
        if numbers:
            # A new buffer current on the host only, nothing in flight: what
            # Buffer.host_ready finds, known here without asking (a new buffer's stamp is 0).
            self._host_cells = ary
            self._host_nd = None  # (made on its first read: see SmartArray._readable)
            self._host_at = self._host_only_at = 0
        else:
            self._host_cells = self._host_nd = None
            self._host_at = self._host_only_at = -1

    # -- public API ---------------------------------------------------------------------------

    def get(self, where: str = "host") -> Any:
        """Return the current data at ``where``, moving only stale bytes.

        Parameters
        ----------
        where : {'host', 'gpu', 'gpu:N'}
            ``'gpu'`` is the device current in the calling thread (``cuda.select_device``,
            ``with cuda.gpus[N]:``), ``'gpu:N'`` device ``N`` (see "Several GPUs" in the
            documentation).

        Returns
        -------
        numpy.ndarray or device array
            A writable view of that copy. After writing through it, call
            :meth:`mark_changed` with the same ``where``. A host array stays current: it is
            refreshed as soon as the device copy is marked changed. A device array may be
            used on any stream: device work still queued on this array's memory (uploads,
            kernels, on any stream) has finished when it is returned.
        """
        if where != HOST:
            where = _check_where(where)
            if where != HOST:
                with _devices.at(where):
                    return self._device_handout(wait=True, where=where)
        buf = self._buf
        with buf.lock:
            # Current on the host with nothing in flight (this view's host fast path open, no
            # device work recorded): nothing to move or wait for.
            if self._host_at != buf.host_stamp or buf.work:
                buf.ensure(where)
                # A writable view (the caller may write, then mark_changed): on the host, an
                # upload from this memory may still be in flight (pinned memory, a launch's
                # stream), and the caller's write would race it, so the access waits for it.
                buf.acquire(where, self._lo, self._hi, INOUT, "explicit get")
                self._open_host()  # (later scalar reads and writes take the fast path)
            return self._export(readonly=False)

    def _device_handout(self, wait: bool, where: str | None = None) -> Any:
        """A writable device array over this view's current device bytes (see :meth:`get`).

        ``wait``: block until the device work queued on this buffer finished (the caller may
        use the array on any stream, or a late upload would overwrite what its kernel writes).
        Without it, the caller orders its work after the buffer's itself (the CUDA Array
        Interface names the stream to order after: see smartarray._interop.exports). ``where``: the
        device location (default: the current device's), which must be current.
        """
        self._check_device_geometry()  # before anything moves
        if where is None:
            where = _devices.location(_devices.current())
        with self._buf.lock:
            self._buf.ensure(where)
            self._buf.acquire(where, self._lo, self._hi, INOUT, "explicit get")
            if wait:
                self._buf.wait_for_device()
            dev, token = memory.handout_view(
                self._buf.device_copy(where), self._offset, self._shape, self._strides, self._dtype
            )
            # Not evicted while the user holds it or any view of it (a slice keeps the token).
            _residency.handed_out(self._buf, token)
            return dev

    def host(self) -> np.ndarray:
        """Return the current host data, as ``get('host')``."""
        return self.get("host")

    def gpu(self, device: int | None = None) -> Any:
        """Return the current device data, as ``get('gpu')``; ``device=N``: on device N, as
        ``get('gpu:N')``."""
        if device is None:
            return self.get("gpu")
        if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
            raise TypeError(f"device must be an int (a CUDA device) or None, got {device!r}")
        name = f"gpu:{int(device)}"
        _devices.resolve(name, "device")  # (refused naming the argument, before anything moves)
        return self.get(name)

    # -- hooks of the view and indexing methods (smartarray._array.views) ----------------------

    _copy_of = staticmethod(_results.copy_of)  # a new SmartArray holding a copy of an ndarray
    _adopt = staticmethod(_results._owning)  # a new SmartArray adopting a fresh ndarray

    def _as_record(self) -> SmartArray:
        """This 0-d view of a structured array as a record view (see :class:`_Record`)."""
        record = _array_classes.record_view_class()  # registered by smartarray._array.record
        return record._view(self._buf, self._offset, self._shape, self._strides, self._dtype)

    # -- the concept modules' functions (module-level functions, ``self`` a SmartArray) ----------

    # the host copy as this view sees it, and the array's name (smartarray._array.copies)
    name = property(_copies.name, _copies.set_name)
    _desc = _copies._desc
    _changed = _copies._changed
    _host_view = _copies._host_view
    _open_host = _copies._open_host
    _readable = _copies._readable
    _export = _copies._export
    _host_ro = _copies._host_ro
    _host_rw = _copies._host_rw
    mark_changed = _copies.mark_changed
    host_changed, gpu_changed = _copies.host_changed, _copies.gpu_changed
    is_valid = _copies.is_valid
    valid_at = property(_copies.valid_at)

    # geometry: ndarray attributes, read from the view's geometry (smartarray._array.geometry)
    shape = property(_geometry.shape)
    dtype = property(_geometry.dtype)
    ndim = property(_geometry.ndim)
    size = property(_geometry.size)
    strides = property(_geometry.strides)
    itemsize = property(_geometry.itemsize)
    nbytes = property(_geometry.nbytes)
    flags = property(_geometry.flags)
    T = property(_geometry.T)
    _probe, _covers = _geometry.probe, _geometry.covers
    _check_device_geometry = _geometry.check_device_geometry

    # views and indexing (smartarray._array.views)
    transpose = _views.transpose
    squeeze = _views.squeeze
    swapaxes = _views.swapaxes
    reshape = _views.reshape
    ravel = _views.ravel
    flatten = _views.flatten
    __getitem__ = _views.__getitem__
    __setitem__ = _views.__setitem__

    # Python's protocols (smartarray._array.protocols), two to a line; pickling (.results)
    __len__, __iter__ = _protocols.__len__, _protocols.__iter__
    __reversed__, __contains__ = _protocols.__reversed__, _protocols.__contains__
    __bool__, __index__ = _protocols.__bool__, _protocols.__index__
    __int__, __float__ = _protocols.__int__, _protocols.__float__
    __complex__, __repr__ = _protocols.__complex__, _protocols.__repr__
    __str__, __format__ = _protocols.__str__, _protocols.__format__
    __copy__, __deepcopy__ = _protocols.__copy__, _protocols.__deepcopy__
    __reduce__ = _results.__reduce__
    _wrap = staticmethod(_results.wrap)  # NumPy's results as SmartArrays

    # device-array copies and the interop protocols (smartarray._array.exchange)
    copy_to_host = _exchange.copy_to_host
    copy_to_device = _exchange.copy_to_device
    prefetch = _exchange.prefetch
    __cuda_array_interface__ = property(_exchange.__cuda_array_interface__)
    cuda_view = _exchange.cuda_view
    __dlpack__ = _dlpack.__dlpack__  # (the interop layer's own: no forwarding call)
    __dlpack_device__ = _dlpack.__dlpack_device__
    copy = _exchange.copy  # device to device when current there only; else ndarray.copy's

    # NumPy's protocols (smartarray._array.numpy_api)
    __array__ = _numpy_api.__array__
    __array_ufunc__ = _numpy_api.__array_ufunc__
    __array_function__ = _numpy_api.__array_function__

    # numpy.ndarray's methods (smartarray._array.ndarray), several to a line, on the host data
    all, any, argmax, argmin = _ndarray.all, _ndarray.any, _ndarray.argmax, _ndarray.argmin
    argpartition, argsort, astype = _ndarray.argpartition, _ndarray.argsort, _ndarray.astype
    choose, clip, compress, conj = _ndarray.choose, _ndarray.clip, _ndarray.compress, _ndarray.conj
    conjugate, cumprod, cumsum = _ndarray.conjugate, _ndarray.cumprod, _ndarray.cumsum
    diagonal, dot, dump, dumps = _ndarray.diagonal, _ndarray.dot, _ndarray.dump, _ndarray.dumps
    item, max, mean, min = _ndarray.item, _ndarray.max, _ndarray.mean, _ndarray.min
    nonzero, prod, ptp, repeat = _ndarray.nonzero, _ndarray.prod, _ndarray.ptp, _ndarray.repeat
    round, searchsorted, std = _ndarray.round, _ndarray.searchsorted, _ndarray.std
    sum, take, tobytes, tofile = _ndarray.sum, _ndarray.take, _ndarray.tobytes, _ndarray.tofile
    tolist, trace, var = _ndarray.tolist, _ndarray.trace, _ndarray.var
    # in place on the host copy (or refused: a SmartArray's buffer cannot grow)
    fill, sort, put, partition = _ndarray.fill, _ndarray.sort, _ndarray.put, _ndarray.partition
    byteswap, resize, setflags = _ndarray.byteswap, _ndarray.resize, _ndarray.setflags

    # Python's operators, as numpy.lib.mixins.NDArrayOperatorsMixin's (smartarray._array.ndarray)
    __lt__ = _ndarray.binary(np.less, "lt")
    __le__ = _ndarray.binary(np.less_equal, "le")
    __eq__ = _ndarray.binary(np.equal, "eq")  # elementwise, as NumPy's
    __ne__ = _ndarray.binary(np.not_equal, "ne")  # elementwise
    __gt__ = _ndarray.binary(np.greater, "gt")
    __ge__ = _ndarray.binary(np.greater_equal, "ge")
    __add__, __radd__, __iadd__ = _ndarray.numeric(np.add, "add")
    __sub__, __rsub__, __isub__ = _ndarray.numeric(np.subtract, "sub")
    __mul__, __rmul__, __imul__ = _ndarray.numeric(np.multiply, "mul")
    __matmul__, __rmatmul__, __imatmul__ = _ndarray.numeric(np.matmul, "matmul")
    __truediv__, __rtruediv__, __itruediv__ = _ndarray.numeric(np.true_divide, "truediv")
    __floordiv__, __rfloordiv__, __ifloordiv__ = _ndarray.numeric(np.floor_divide, "floordiv")
    __mod__, __rmod__, __imod__ = _ndarray.numeric(np.remainder, "mod")
    __divmod__ = _ndarray.binary(np.divmod, "divmod")
    __rdivmod__ = _ndarray.reflected(np.divmod, "divmod")
    __pow__, __rpow__, __ipow__ = _ndarray.numeric(np.power, "pow")
    __lshift__, __rlshift__, __ilshift__ = _ndarray.numeric(np.left_shift, "lshift")
    __rshift__, __rrshift__, __irshift__ = _ndarray.numeric(np.right_shift, "rshift")
    __and__, __rand__, __iand__ = _ndarray.numeric(np.bitwise_and, "and")
    __xor__, __rxor__, __ixor__ = _ndarray.numeric(np.bitwise_xor, "xor")
    __or__, __ror__, __ior__ = _ndarray.numeric(np.bitwise_or, "or")
    __neg__ = _ndarray.unary(np.negative, "neg")
    __pos__ = _ndarray.unary(np.positive, "pos")
    __abs__ = _ndarray.unary(np.absolute, "abs")
    __invert__ = _ndarray.unary(np.invert, "invert")

    # a kernel or njit argument: typing, launch, njit hooks (smartarray._array.arguments)
    _numba_type_ = functools.cached_property(_arguments._numba_type_)
    _numba_in_type_ = functools.cached_property(_arguments._numba_in_type_)
    _numba_type = _arguments._numba_type
    to_device = _arguments.to_device  # (the ArgHint protocol; bare arrays: InOut)
    _prepare_launch = _arguments.to_device
    _after_launch = _arguments._after_launch
    _njit_enter, _njit_enter_as = _arguments._njit_enter, _arguments.njit_enter_as
    _njit_exit, _njit_exit_as = _arguments._njit_exit, _arguments.njit_exit_as
    _njit_abort, _njit_abort_as = _arguments._njit_abort, _arguments.njit_abort_as


# The classes the layers below construct through (smartarray._engine.array_classes), and the njit
# results adapter (smartarray._array.results): registered where the class they make exists. What
# builds on the class without being bound into it (the record view, smartarray._array.record;
# jit, _like, _distributed) imports this module; the package imports them all.
_array_classes.register(SmartArray)
_numba_cpu.set_result_adapter(_from_njit)

_ndarray.add_unsupported_hints(SmartArray)  # ndarray attributes SmartArray lacks fail with a hint
