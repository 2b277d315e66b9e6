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

import math
from typing import Any

import numpy as np

from . import _devices, _numba_cpu, _perf, _residency, _streams, guard, memory
from ._arguments import ArgumentMethods
from ._checks import _check_array_dtype, _check_shape
from ._engine import HOST, IN, INOUT, OUT
from ._engine import Buffer as _Buffer
from ._exchange import ExchangeMethods
from ._geometry import GeometryMethods
from ._mixins import flatten
from ._numba_cuda import ArrayArgument
from ._numpy_api import NumPyMethods, add_unsupported_hints
from ._protocols import ProtocolMethods
from ._results import (
    _from_njit,
    _owning,
    _rebuild,  # noqa: F401 - old pickles name smartarray.array._rebuild
)
from ._views import ViewMethods
from .errors import CoherenceError, TransferError

__all__ = ["SmartArray"]

_ORDERS = (None, "C", "F", "A", "K")


def _check_where(where: Any) -> str:
    """The location ``where`` names ('host', 'gpu': the current device, 'gpu:N')."""
    return _devices.resolve(where)


def _written_on_default_stream(buf: _Buffer) -> None:
    """Several devices: a write ``mark_changed`` records at a device is taken to be queued on
    that device's default stream (on one device, copies there follow it): reads from another
    device then wait for that stream on the host, as for a DLPack consumer's. Earlier work on
    the buffer is ordered before that stream first. Call with that device current."""
    if buf.stream != 0 and not buf.works_on(_streams.DEFAULT):
        buf.order_before(0)
    buf.consumer_queued(_streams.DEFAULT)


def _contiguous_strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = itemsize
    dims = range(len(shape)) if order == "F" else reversed(range(len(shape)))
    for i in dims:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def _check_name(name: Any) -> str | None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    return name


# One class at run time, its mixins merged in: numba's dispatchers walk an argument's MRO about
# nine times per njit call (1.14 x -> 1.08 x numba's floor; see smartarray._mixins).
@flatten(keep=ArrayArgument)
class SmartArray(
    GeometryMethods,
    ViewMethods,
    ProtocolMethods,
    ExchangeMethods,
    NumPyMethods,
    ArgumentMethods,
):
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
        "_device_view",
        "_njit_view",
        "_njit_fast",
        "_device_arg",
        "_gpu_only_at",
        "_device_at",
        "_device_on",
    )  # weak references and the instance dict (``_numba_type_``'s cache) come from ArgHint

    __hash__ = None  # type: ignore[assignment]
    intent = INOUT

    def __init__(
        self,
        obj: Any = None,
        copy: bool = True,
        shape: Any = None,
        dtype: Any = None,
        order: str | None = None,
        where: str = "host",
        pinned: bool = False,
        name: str | None = None,
    ) -> None:
        where = _check_where(where)
        name = _check_name(name)
        if order not in _ORDERS:
            raise ValueError(f"order must be None, 'C', 'F', 'A' or 'K', got {order!r}")
        dt = None if dtype is None else _check_array_dtype(self._dtype_of(dtype))
        dims = None if shape is None else _check_shape(shape)
        if obj is None:
            if dims is None:
                raise TypeError("SmartArray() needs obj (array-like data) or shape (and dtype)")
            dt = np.dtype(np.float64) if dt is None else dt
            _check_shape(shape, itemsize=dt.itemsize)  # exact: no int64 wrap-around
            strides = _contiguous_strides(dims, dt.itemsize, "F" if order == "F" else "C")
            nbytes = math.prod(dims) * dt.itemsize
            self._init(_Buffer(nbytes, None, bool(pinned), name), 0, dims, strides, dt)
            return
        # -- interop (issue 16): device memory is copied device to device; see _interop --
        if _interop.is_device_object(obj):
            _interop.init_from_device(self, obj, copy, dims, dt, order, bool(pinned), name)
            return
        obj = _interop.host_dlpack(obj)  # an object that speaks DLPack only
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
            and (order not in ("C", "F") or obj.flags[f"{order}_CONTIGUOUS"])
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
        strides = _contiguous_strides(ary.shape, ary.dtype.itemsize, layout)
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
        elif where == HOST:
            buf.ensure_host()[:] = raw
        self._init(buf, 0, ary.shape, strides, ary.dtype)
        if where != HOST:
            if ary.nbytes:
                guard.check("h2d", ary.nbytes, "construction", buf.name)  # before anything moves
            with _devices.at(where):
                dev = buf.ensure_device(where)
                try:
                    memory.copy_range(
                        "h2d", raw, dev, 0, ary.nbytes, 0, "construction", self._desc(), where
                    )
                except Exception as exc:
                    raise TransferError(f"uploading the initial data failed: {exc}") from exc
                buf.queued(0)  # a staged synchronous upload: see Buffer._copy
            if adopt:
                buf.state.apply(buf.state.plan_read(where, 0, ary.nbytes))

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
        self._shape = tuple(int(d) for d in shape)
        self._strides = tuple(int(s) for s in strides)
        self._dtype = dtype
        self._device_view = self._njit_view = self._njit_fast = None
        self._device_arg: Any = None  # what a kernel receives for _device_view
        # The launch fast path (smartarray._arguments): the state's version at which this
        # view was current on the device only, and at which it was current there.
        self._gpu_only_at = self._device_at = -1
        self._device_on = 0  # the device of the cached device view (several devices)
        if 0 in self._shape:
            # No bytes: the offset means nothing, and one past the buffer's end (a column of a
            # (0, 4) array) would make every host or device view of it invalid.
            self._offset = self._lo = self._hi = 0
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

    @classmethod
    def _wrap(cls, result: Any, sources: tuple[np.ndarray, ...] = ()) -> Any:
        """Wrap a NumPy result: ndarrays become SmartArrays (copied if they alias a source)."""
        if isinstance(result, np.ndarray) and not isinstance(result, SmartArray):
            if result.dtype.hasobject or result.dtype.kind in "US":
                return result
            shares = any(np.may_share_memory(result, s) for s in sources)
            if shares or not result.flags.writeable:
                return cls(result)
            return _owning(result)
        if isinstance(result, tuple):
            return tuple(cls._wrap(r, sources) for r in result)
        if isinstance(result, list):
            return [cls._wrap(r, sources) for r in result]
        return result

    # -- naming -------------------------------------------------------------------------------

    def _desc(self) -> str:
        return self._buf.name

    @property
    def name(self) -> str:
        """str: the array's name in transfer events (shared by its views; assignable)."""
        return self._buf.name

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"name must be a str, got {type(value).__name__}")
        self._buf.name = value

    # -- core operations ----------------------------------------------------------------------

    def _changed(self, where: str, lo: int, hi: int) -> None:
        """Record a write of bytes ``[lo, hi)`` at ``where`` (see :meth:`Buffer.changed`)."""
        self._buf.changed(where, lo, hi)

    def _host_view(self) -> np.ndarray:
        """The writable host view (no sync; host memory allocated)."""
        host = self._buf.ensure_host()
        return np.ndarray(
            self._shape, self._dtype, buffer=host, offset=self._offset, strides=self._strides
        )

    def _export(self, readonly: bool, unannounced: bool = False) -> np.ndarray:
        """This view's host data as an ndarray handed out (tracked; no sync); ``unannounced``:
        to a consumer that writes without calling ``mark_changed`` (see ``_held``)."""
        buf = self._buf
        return buf.held.view(
            buf.ensure_host(),
            self._shape,
            self._dtype,
            self._offset,
            self._strides,
            self._lo,
            self._hi,
            readonly,
            unannounced,
        )

    def _host_ro(self, reason: str = "host read") -> np.ndarray:
        """A synced read-only host view (not tracked)."""
        buf = self._buf
        with buf.lock:
            buf.acquire(HOST, self._lo, self._hi, IN, reason)
            view = self._host_view()
            if buf.perf is not None and buf.perf.pending:
                _perf.emit(buf)  # after the read is complete and recorded
        view.flags.writeable = False
        return view

    def _host_rw(self, full: bool) -> np.ndarray:
        """A writable host view before a write: synced in full, or only its gaps when needed."""
        if full:
            self._buf.acquire(HOST, self._lo, self._hi, INOUT, "host read")
        else:
            self._buf.acquire(
                HOST, self._lo, self._hi, OUT, "host write gap", covers=self._covers()
            )
        return self._host_view()

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
        where = _check_where(where)
        if where != HOST:
            with _devices.at(where):
                return self._device_handout(wait=True, where=where)
        with self._buf.lock:
            self._buf.ensure(where)
            # A writable view (the caller may write, then mark_changed): on the host, an upload
            # from this memory may still be in flight (pinned memory, a launch's stream), and
            # the caller's write would race it, so the access waits for it.
            self._buf.acquire(where, self._lo, self._hi, INOUT, "explicit get")
            return self._export(readonly=False)

    def _device_handout(self, wait: bool, where: str | None = None) -> Any:
        """A writable device array over this view's current device bytes (see :meth:`get`).

        ``wait``: block until the device work queued on this buffer finished (the caller may
        use the array on any stream, or a late upload would overwrite what its kernel writes).
        Without it, the caller orders its work after the buffer's itself (the CUDA Array
        Interface names the stream to order after: see smartarray._interop). ``where``: the
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

    def _check_device_geometry(self) -> None:
        """Refuse a device view that numba cannot take (negative strides), moving nothing."""
        if any(s < 0 for s in self._strides):
            raise ValueError(
                f"device views take no negative strides, got {self._strides!r}; "
                "make a contiguous copy first (e.g. SmartArray(a))"
            )

    def host(self) -> np.ndarray:
        """Return the current host data, as ``get('host')``."""
        return self.get("host")

    def gpu(self, device: int | None = None) -> Any:
        """Return the current device data, as ``get('gpu')``; ``device=N``: on device N, as
        ``get('gpu:N')``."""
        return self.get("gpu" if device is None else f"gpu:{device}")

    def mark_changed(self, where: str = "host") -> None:
        """Record that this array's elements were written at ``where``.

        ``where``: ``'host'``, ``'gpu'`` (the current device) or ``'gpu:N'``. The other copies
        become stale over this array's byte interval; host arrays handed out earlier are
        refreshed at once after a device write.

        Raises
        ------
        CoherenceError
            This view has gaps between its elements that are stale at ``where``; call
            ``get(where)`` before writing there.
        """
        where = _check_where(where)
        with _devices.at(where), self._buf.lock:
            self._buf.ensure(where)
            if not self._covers() and not self._buf.state.is_valid(where, self._lo, self._hi):
                raise CoherenceError(
                    f"this strided view's gaps are not current on the {where} copy; call "
                    f"get({where!r}) before writing through it, then mark_changed({where!r})"
                )
            if where != HOST and _devices.several:
                _written_on_default_stream(self._buf)
            self._changed(where, self._lo, self._hi)
            if where == HOST:
                _perf.host_marked(self._buf, self._lo, self._hi)

    def host_changed(self) -> None:
        """Record that the host copy was written, as ``mark_changed('host')``."""
        self.mark_changed("host")

    def gpu_changed(self) -> None:
        """Record that the device copy was written, as ``mark_changed('gpu')``."""
        self.mark_changed("gpu")

    def is_valid(self, where: str = "host") -> bool:
        """Return whether every byte of this array is current at ``where`` (``'host'``,
        ``'gpu'``: the current device, or ``'gpu:N'``)."""
        where = _check_where(where)
        with self._buf.lock:
            state = self._buf.state
            return where in state.locations and state.is_valid(where, self._lo, self._hi)

    @property
    def valid_at(self) -> tuple[str, ...]:
        """tuple of str: where every byte of this array is current: ``'host'``, ``'gpu'``
        (the current device) and, with several devices, ``'gpu:N'`` for each other device."""
        here = _devices.current()
        with self._buf.lock:
            state = self._buf.state
            found = {
                _devices.public(w, here)
                for w in state.locations
                if state.is_valid(w, self._lo, self._hi)
            }
        return tuple(sorted(found, key=lambda w: (w != HOST, w != "gpu", w)))

    # -- hooks of the view and indexing methods (smartarray._views) ----------------------------

    @staticmethod
    def _copy_of(ary: np.ndarray) -> SmartArray:
        """A new SmartArray holding a copy of ``ary``."""
        return SmartArray(ary)

    @staticmethod
    def _adopt(ary: np.ndarray) -> SmartArray:
        """A new SmartArray adopting ``ary``, a fresh ndarray nobody else holds."""
        return _owning(ary)

    def _as_record(self) -> SmartArray:
        """This 0-d view of a structured array as a record view (see :class:`_Record`)."""
        return _Record._view(self._buf, self._offset, self._shape, self._strides, self._dtype)


# The njit results adapter (smartarray._results): registered where the class it makes exists.
_numba_cpu.set_result_adapter(_from_njit)

add_unsupported_hints(SmartArray)  # ndarray attributes SmartArray lacks fail with a hint

# The interop logic (smartarray/_interop.py) and the record view (smartarray/_record.py) build
# on SmartArray, so they are imported last.
from . import _interop  # noqa: E402
from ._record import _Record  # noqa: E402
