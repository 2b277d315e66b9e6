"""SmartArray: one logical array with a host and a device copy, kept coherent by byte range.

A :class:`SmartArray` is a view (offset, shape, strides, dtype) of a shared base buffer. The
base buffer owns a host copy (NumPy memory, allocated lazily), a device copy (numba.cuda memory,
allocated lazily) and a :class:`~smartarray.coherence.BufferState` recording which bytes of
each copy are current. Every consumer makes its copy current first (moving only stale bytes,
through :mod:`smartarray.memory`, so every byte is counted); every producer marks its copy
changed, which makes the other copy stale.

Choices made here (see ``DESIGN.md``):

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
import operator
import weakref
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index
from numpy.lib.mixins import NDArrayOperatorsMixin
from numpy.lib.stride_tricks import as_strided

from . import _numba_cpu, _numba_cuda, _perf, _streams, guard, memory
from ._engine import GPU, HOST, IN, INOUT, LOCATIONS, OUT, LaunchFailures, LaunchWrites
from ._engine import Buffer as _Buffer
from .errors import CoherenceError, TransferError

__all__ = ["SmartArray"]

_WHERE = LOCATIONS
_ORDERS = (None, "C", "F", "A", "K")


def _check_where(where: Any) -> str:
    if where not in _WHERE:
        raise ValueError(f"where must be 'host' or 'gpu', got {where!r}")
    return where


def _check_dtype(dt: np.dtype, name: str = "dtype") -> np.dtype:
    if dt.hasobject:
        raise TypeError(
            f"{name} {dt} holds Python objects, which device memory cannot hold; "
            "use a numeric, boolean or structured dtype"
        )
    if dt.kind in "US":
        raise TypeError(f"{name} {dt} is a string dtype; SmartArray holds numbers and records")
    return dt


def _contiguous_strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = itemsize
    dims = range(len(shape)) if order == "F" else reversed(range(len(shape)))
    for i in dims:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def _address(ary: np.ndarray) -> int:
    return ary.__array_interface__["data"][0]


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


def _check_name(name: Any) -> str | None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    return name


class SmartArray(NDArrayOperatorsMixin, _numba_cuda.KernelArgument):
    """An array with a host (NumPy) and a device (numba.cuda) copy, kept coherent by byte range.

    Parameters
    ----------
    obj : array_like or SmartArray, optional
        The initial data, copied (a C- or F-contiguous ndarray of an accepted dtype is adopted
        as the host copy when ``copy=False``; it stays in sync with the array). A SmartArray's
        current data is copied.
    copy : bool, optional
        ``False`` adopts a suitable ndarray ``obj`` instead of copying it.
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
        "_gpu_only_at",
        "_fast_check",
        "__weakref__",
    )

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
        dt = None if dtype is None else _check_dtype(self._dtype_of(dtype))
        dims = None if shape is None else memory._check_shape(shape)
        if obj is None:
            if dims is None:
                raise TypeError("SmartArray() needs obj (array-like data) or shape (and dtype)")
            dt = np.dtype(np.float64) if dt is None else dt
            memory._check_shape(shape, itemsize=dt.itemsize)  # exact: no int64 wrap-around
            strides = _contiguous_strides(dims, dt.itemsize, "F" if order == "F" else "C")
            nbytes = math.prod(dims) * dt.itemsize
            self._init(_Buffer(nbytes, None, bool(pinned), name), 0, dims, strides, dt)
            return
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
        _check_dtype(ary.dtype, "obj's dtype")
        if dims is not None and dims != ary.shape:
            raise ValueError(f"shape {dims} conflicts with obj's shape {ary.shape}")
        if not (ary.flags.c_contiguous or ary.flags.f_contiguous):
            ary = np.ascontiguousarray(ary)
        layout = "F" if ary.flags.f_contiguous and not ary.flags.c_contiguous else "C"
        strides = _contiguous_strides(ary.shape, ary.dtype.itemsize, layout)
        valid_at = "host" if (where == "host" or adopt) else "gpu"
        buf = _Buffer(ary.nbytes, valid_at, bool(pinned), name)
        raw = ary.ravel(order="K").view(np.uint8) if ary.size else np.empty(0, np.uint8)
        if adopt:
            buf.host_bytes = raw
            # The user holds the array this one is a view of (``x`` of ``x[2:6]``), and every
            # view of it has that owner as its ``.base``: track the owner.
            owner = obj
            while isinstance(owner.base, np.ndarray):
                owner = owner.base
            buf.export(owner, 0, ary.nbytes)
        elif where == "host":
            buf.ensure_host()[:] = raw
        self._init(buf, 0, ary.shape, strides, ary.dtype)
        if where == "gpu":
            if ary.nbytes:
                guard.check("h2d", ary.nbytes, "construction", buf.name)  # before anything moves
            dev = buf.ensure_device()
            try:
                memory.copy_range("h2d", raw, dev, 0, ary.nbytes, 0, "construction", self._desc())
            except Exception as exc:
                raise TransferError(f"uploading the initial data failed: {exc}") from exc
            buf.stream = _streams.DEFAULT  # a staged synchronous upload: see SmartArray._copy
            if adopt:
                buf.state.apply(buf.state.plan_read("gpu", 0, ary.nbytes))

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
        self._gpu_only_at = -1  # state version at which this view was current on the gpu only
        self._fast_check: Any = None  # see _make_fast_check
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

    # -- geometry ---------------------------------------------------------------------------

    def _probe(self) -> np.ndarray:
        """An array with this geometry over one element: indexing it never reads memory."""
        return as_strided(np.zeros(1, self._dtype), self._shape, self._strides)

    def _from_probe(self, probe: np.ndarray, result: np.ndarray) -> SmartArray:
        offset = self._offset + _address(result) - _address(probe)
        return self._view(self._buf, offset, result.shape, result.strides, result.dtype)

    def _covers(self) -> bool:
        """Whether the elements tile the byte interval (a write needs no sync first)."""
        return self._hi - self._lo == self.size * self._dtype.itemsize

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

    def _export(self, readonly: bool) -> np.ndarray:
        """This view's host data as an ndarray handed out (tracked; no sync)."""
        return self._buf.export_view(
            self._shape, self._dtype, self._offset, self._strides, self._lo, self._hi, readonly
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
        where : {'host', 'gpu'}

        Returns
        -------
        numpy.ndarray or device array
            A writable view of that copy. After writing through it, call
            :meth:`mark_changed` with the same ``where``. A host array stays current: it is
            refreshed as soon as the device copy is marked changed.
        """
        where = _check_where(where)
        if where == "gpu":
            self._check_device_geometry()  # before anything moves
        with self._buf.lock:
            self._buf.ensure(where)
            # A writable view (the caller may write, then mark_changed): on the host, an upload
            # from this memory may still be in flight (pinned memory, a launch's stream), and
            # the caller's write would race it, so the access waits for it.
            self._buf.acquire(where, self._lo, self._hi, INOUT, "explicit get")
            if where == HOST:
                return self._export(readonly=False)
            return memory.device_view(
                self._buf.device_bytes, self._offset, self._shape, self._strides, self._dtype
            )

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

    def gpu(self) -> Any:
        """Return the current device data, as ``get('gpu')``."""
        return self.get("gpu")

    def mark_changed(self, where: str = "host") -> None:
        """Record that this array's elements were written at ``where``.

        The other copy becomes stale over this array's byte interval; host arrays handed out
        earlier are refreshed at once when ``where='gpu'``.

        Raises
        ------
        CoherenceError
            This view has gaps between its elements that are stale at ``where``; call
            ``get(where)`` before writing there.
        """
        where = _check_where(where)
        with self._buf.lock:
            self._buf.ensure(where)
            if not self._covers() and not self._buf.state.is_valid(where, self._lo, self._hi):
                raise CoherenceError(
                    f"this strided view's gaps are not current on the {where} copy; call "
                    f"get({where!r}) before writing through it, then mark_changed({where!r})"
                )
            self._changed(where, self._lo, self._hi)
            if where == "host":
                _perf.host_marked(self._buf, self._lo, self._hi)

    def host_changed(self) -> None:
        """Record that the host copy was written, as ``mark_changed('host')``."""
        self.mark_changed("host")

    def gpu_changed(self) -> None:
        """Record that the device copy was written, as ``mark_changed('gpu')``."""
        self.mark_changed("gpu")

    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
        """Copy the current data into ``ary`` or a new ndarray, as a device array's method.

        Code written for numba.cuda device arrays calls it; only stale bytes are downloaded.

        Parameters
        ----------
        ary : numpy.ndarray, optional
            Filled and returned; dtype, shape and strides must match (numba.cuda's checks).
        stream : int or Stream, optional
            Accepted as numba.cuda does; the copy waits for this array's own device work.

        Returns
        -------
        numpy.ndarray
            ``ary``, or a new writable array (a copy: writing it changes nothing here).
        """
        memory._check_stream(stream)
        if ary is not None:
            memory._check_host_array(ary, "ary")
            memory.check_compatibility(self._probe(), ary)
        with self._buf.lock:
            host = self._host_ro("copy_to_host")
            if ary is None:
                return np.array(host, copy=True)
            np.copyto(ary, host)
            return ary

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        """Overwrite this array with ``ary`` (host or device memory), as a device array's method.

        numba's helpers call it (``cuda.reduce(..., res=a)`` writes its result with
        ``res[:1].copy_to_device(partials[:1])``). numba.cuda's checks apply, in its order and
        with its messages. Device memory is copied device to device (counted ``d2d``) and
        recorded as a device write; host data is written to the host copy (as ``a[...] = ary``)
        and moves to the device when a kernel next needs it.
        """
        stream = memory._check_stream(stream)
        source = memory._copy_source(self, ary, "ary")
        if source is None:
            return
        if not memory._is_device_array(source):
            self[...] = source
            return
        buf = self._buf
        copy_stream = _streams.pending(stream)
        with buf.lock:
            if buf.stream != 0 and not _streams.same(buf.stream, copy_stream):
                # Earlier device work on this buffer must not overtake: ordered on the device.
                _streams.order(buf.stream, copy_stream)
            dev = memory.device_view(
                buf.ensure_device(), self._offset, self._shape, self._strides, self._dtype
            )
            try:
                dev.copy_to_device(source, stream=stream)
            except Exception as exc:
                # It may have written part of the bytes: where the host copy is current it
                # keeps the values and the device bytes are recorded stale.
                if buf.state.is_valid("host", self._lo, self._hi):
                    buf.mark(HOST, self._lo, self._hi)
                raise TransferError(f"copy_to_device failed: {exc}") from exc
            buf.stream = copy_stream  # host reads of this buffer wait for this stream
            self._changed("gpu", self._lo, self._hi)

    def is_valid(self, where: str = "host") -> bool:
        """Return whether every byte of this array is current at ``where``."""
        where = _check_where(where)
        with self._buf.lock:
            return self._buf.state.is_valid(where, self._lo, self._hi)

    # -- Numba integration (see _numba_cuda and _numba_cpu) -------------------------------------

    @functools.cached_property
    def _numba_type_(self) -> Any:
        """This array's Numba type, cached in the instance (both dispatchers read it directly).

        Layout as numba-cuda gives a device array: 'C' or 'F' when contiguous that way and not
        broadcast (a zero stride), 'A' otherwise.
        """
        return self._numba_type(readonly=False)

    def _numba_type(self, readonly: bool) -> Any:
        flags = self._probe().flags
        broadcast = 0 in self._strides and self.size != 0
        if flags.c_contiguous and not broadcast:
            layout = "C"
        elif flags.f_contiguous and not broadcast:
            layout = "F"
        else:
            layout = "A"
        return _numba_cpu.smartarray_type(
            self._dtype, self.ndim, layout, readonly, self._aligned(flags.aligned)
        )

    def _aligned(self, strides_aligned: bool) -> bool:
        """Whether every element sits at a multiple of its dtype's alignment, on both copies.

        A field view of packed records (offset 1, stride 9 for ``('i1', 'f8')``) does not: typed
        aligned, a kernel would load it with a misaligned ``ld.f64``. ``strides_aligned`` is
        NumPy's verdict on the strides (the probe's element 0 is aligned); the base buffers are
        (device allocations, NumPy's and pinned allocations), except an adopted ndarray's.
        """
        align = self._dtype.alignment
        host = self._buf.host_bytes
        return (
            strides_aligned
            and self._offset % align == 0
            and (host is None or _address(host) % align == 0)
        )

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        """Prepare this array as a kernel argument (numba-cuda's ArgHint protocol).

        Called by the dispatcher before a launch: makes the device copy current (only stale
        bytes move, on ``stream``), returns the kernel's argument, and appends to ``retr`` the
        callback that records the kernel's write right after the launch.
        """
        return self._prepare_launch(retr, stream, INOUT)

    def _prepare_launch(self, retr: list[Any], stream: Any, intent: str) -> Any:
        """Make the device copy current for a launch on ``stream``; record the write after it."""
        self._numba_type_  # noqa: B018 - an unsupported dtype raises here, before anything moves
        buf = self._buf
        if (
            self._gpu_only_at == buf.state.version
            and buf.stream is _streams.pending(stream)
            and self._device_view is not None
        ):
            # The loop-of-launches fast path: nothing changed since this view was found current
            # on the device only, and the latest work on this buffer is on this launch's stream
            # (ordered before it), so nothing moves, nothing waits and no lock is needed
            # (reading a version number is atomic). A host read before the kernel runs (another
            # thread, a later argument's preparation) would make the host "current" with
            # pre-kernel values: a cached callback re-checks the version after the launch.
            if intent != IN:
                retr.append(self._fast_check or self._make_fast_check())
            return _numba_cuda.launch_argument(self._device_view, retr, stream)
        if self._device_view is None:
            self._check_device_geometry()  # before anything moves
        with buf.lock:
            exclusive = buf.acquire(
                GPU, self._lo, self._hi, intent, "device use", covers=self._covers(), launch=stream
            )
            devary = self._device_view
            if devary is None:
                devary = self._device_view = memory.device_view(
                    buf.ensure_device(), self._offset, self._shape, self._strides, self._dtype
                )
            arg = _numba_cuda.launch_argument(devary, retr, stream)
            if exclusive:
                self._gpu_only_at = buf.state.version
                if intent != IN:
                    retr.append(self._fast_check or self._make_fast_check())
            elif intent != IN:
                # One record of the writes to this buffer per launch: its held host arrays
                # are refreshed once, after the last argument's write is recorded (one array
                # passed twice, or overlapping views, must not download the overlap twice).
                writes = buf.launch_writes_for(retr)
                retr.append(functools.partial(self._after_launch, writes))
            return arg

    def _make_fast_check(self) -> Any:
        """The post-launch check of the fast path, made once per view (cached in a slot, so a
        launch allocates nothing for it). It holds this view weakly (no reference cycle).
        """
        ref = weakref.ref(self)
        state = self._buf.state

        def check() -> None:
            # The state moved since preparation found this view current on the device only
            # (a host read made the host current with pre-kernel values): record the write.
            view = ref()
            if view is not None and view._gpu_only_at != state.version:
                view._after_launch()

        self._fast_check = check
        return check

    def _after_launch(self, writes: LaunchWrites | None = None) -> None:
        """Record the kernel's write (the dispatcher runs this right after the launch).

        See :meth:`Buffer.release`. A failed refresh must not stop the dispatcher's loop over
        ``retr`` (the later arguments' writes would go unrecorded): it leaves those host bytes
        marked stale (which they are), and the error is raised by a callback appended to the
        end of ``retr``, after every argument recorded its write.
        """
        buf = self._buf
        lo, hi = self._lo, self._hi
        try:
            with buf.lock:
                buf.release(GPU, lo, hi, INOUT, writes=writes)
                if buf.state.is_exclusive(GPU, lo, hi):  # and no held array is stale
                    self._gpu_only_at = buf.state.version
        except TransferError as exc:
            retr = None if writes is None else writes.retr
            if retr is None:
                raise
            if not (retr and isinstance(retr[-1], LaunchFailures)):
                retr.append(LaunchFailures())
            retr[-1].errors.append(exc)

    def _njit_enter(self) -> np.ndarray:
        return self._njit_enter_as(INOUT)

    def _njit_exit(self) -> None:
        self._njit_exit_as(INOUT)

    def _njit_abort(self) -> None:
        self._njit_abort_as(INOUT)

    def _njit_enter_as(self, intent: str) -> np.ndarray:
        """The current host ndarray handed to an njit function (its exact type and layout)."""
        buf = self._buf
        with buf.lock:
            buf.acquire(HOST, self._lo, self._hi, intent, "njit argument", covers=self._covers())
            view = self._njit_view
            if view is None:
                view = self._njit_view = self._host_view()
                _register_njit_view(self, view)
            return view

    def _njit_exit_as(self, intent: str) -> None:
        """Record the njit call's host write (later calls take the fast path while the
        bytes stay current on the host only: the engine arms and disarms it)."""
        buf = self._buf
        with buf.lock:
            buf.release(HOST, self._lo, self._hi, intent, view=self)

    def _njit_abort_as(self, intent: str) -> None:
        """The cleanup of an njit call that failed with a Python error pending.

        Numba runs it when a later argument failed to unbox (the function never ran), and in
        the rare case that the function itself left a Python error (an object-mode block).
        See :meth:`Buffer.abort`.
        """
        self._buf.abort(HOST, self._lo, self._hi, intent)

    # -- attributes ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """tuple of int: the array's dimensions."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the element type."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """int: the number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """int: the number of elements."""
        return math.prod(self._shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """tuple of int: bytes to step in each dimension."""
        return self._strides

    @property
    def itemsize(self) -> int:
        """int: bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """int: bytes taken by the elements."""
        return self.size * self._dtype.itemsize

    @property
    def flags(self) -> Any:
        """Layout flags of the host view (``c_contiguous``, ``f_contiguous``, ...)."""
        return self._probe().flags

    @property
    def T(self) -> SmartArray:  # noqa: N802 - numpy's name
        """The transposed view."""
        return self.transpose()

    @property
    def valid_at(self) -> tuple[str, ...]:
        """tuple of str: where every byte of this array is current."""
        with self._buf.lock:
            return tuple(w for w in _WHERE if self._buf.state.is_valid(w, self._lo, self._hi))

    # -- views --------------------------------------------------------------------------------

    def transpose(self, *axes: Any) -> SmartArray:
        """A view with axes permuted, as ``numpy.ndarray.transpose``."""
        probe = self._probe()
        return self._from_probe(probe, probe.transpose(*axes))

    def squeeze(self, axis: Any = None) -> SmartArray:
        """A view without length-one axes, as ``numpy.ndarray.squeeze``."""
        probe = self._probe()
        return self._from_probe(probe, probe.squeeze(axis))

    def swapaxes(self, axis1: int, axis2: int) -> SmartArray:
        """A view with two axes swapped, as ``numpy.ndarray.swapaxes``."""
        probe = self._probe()
        return self._from_probe(probe, probe.swapaxes(axis1, axis2))

    def reshape(self, *shape: Any, order: str = "C") -> SmartArray:
        """A view with a new shape where NumPy gives one, else a copy.

        Parameters
        ----------
        *shape : int or tuple of int
        order : {'C', 'F', 'A'}, optional
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        probe = self._probe()
        try:
            return self._from_probe(probe, probe.reshape(shape, order=order, copy=False))
        except ValueError:
            # A bad shape (raised again here, reading no memory) or a copy is needed.
            as_strided(np.zeros(1, np.uint8), (self.size,), (0,)).reshape(shape)
        with self._buf.lock:
            return SmartArray(self._host_ro().reshape(shape, order=order))

    def ravel(self, order: str = "C") -> SmartArray:
        """A flat view where NumPy gives one, else a flat copy."""
        if order not in ("C", "F", "A", "K"):
            raise ValueError(f"order must be 'C', 'F', 'A' or 'K', got {order!r}")
        probe = self._probe()
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
            return self._from_probe(probe, probe.reshape(-1, order=order))
        with self._buf.lock:
            return SmartArray(self._host_ro().ravel(order))

    def flatten(self, order: str = "C") -> SmartArray:
        """A flat copy."""
        with self._buf.lock:
            return SmartArray(self._host_ro().flatten(order))

    # -- indexing -----------------------------------------------------------------------------

    def _element_offsets(self) -> np.ndarray:
        """Byte offset from ``_offset`` of every element, with this array's shape."""
        offs = np.zeros(self._shape, np.int64)
        for axis, (d, s) in enumerate(zip(self._shape, self._strides, strict=True)):
            shape = [1] * self.ndim
            shape[axis] = d
            offs += (np.arange(d, dtype=np.int64) * s).reshape(shape)
        return offs

    def _basic(self, key: Any) -> tuple[SmartArray, bool]:
        """The view ``self[key]`` for a basic index, and whether NumPy would give a scalar."""
        probe = self._probe()
        if isinstance(key, str):
            return self._from_probe(probe, probe[key]), False
        items = key if isinstance(key, tuple) else (key,)
        has_ellipsis = any(item is Ellipsis for item in items)
        result = probe[items if has_ellipsis else (*items, Ellipsis)]
        view = self._from_probe(probe, result)
        return view, (result.ndim == 0 and not has_ellipsis)

    def _advanced(self, key: Any) -> tuple[np.ndarray, int, int]:
        """The touched offsets of an advanced index and their bounding byte interval."""
        key = key._host_ro() if isinstance(key, SmartArray) else key
        if isinstance(key, tuple):
            key = tuple(k._host_ro() if isinstance(k, SmartArray) else k for k in key)
        touched = self._element_offsets()[key]
        if touched.size == 0:
            return touched, 0, 0
        lo = self._offset + int(touched.min())
        return touched, lo, self._offset + int(touched.max()) + self._dtype.itemsize

    def __getitem__(self, key: Any) -> Any:
        # Every array involved is locked up front, in the global order (a key's lock taken
        # while holding self's would deadlock against ``key[self]`` in another thread).
        with _locked(_arrays_in(self, key)):
            if _is_basic_index(key) or isinstance(key, str):
                view, scalar = self._basic(key)
                if not scalar:
                    return view
                if view._dtype.names is not None:
                    # NumPy's record scalar (np.void) is a view: ``a[0]['x'] = 5`` writes the
                    # array. A copy would drop that write silently; a record view lands it
                    # and records it.
                    return _Record._view(
                        view._buf, view._offset, view._shape, view._strides, view._dtype
                    )
                return view._host_ro().copy()[()]
            touched, lo, hi = self._advanced(key)
            self._buf.sync(HOST, lo, hi, "host read")
            # A fresh array nobody else holds: adopted, not an exported view.
            return _owning(self._host_view()[key])

    def __setitem__(self, key: Any, value: Any) -> None:
        with _locked(_arrays_in(self, key, value)):
            if isinstance(value, SmartArray):
                value = value._host_ro()
            if _is_basic_index(key) or isinstance(key, str):
                target, _ = self._basic(key)
                staged = np.empty(target._shape, target._dtype)
                staged[...] = value  # validates (dtype, broadcast) before anything is touched
                hv = target._host_rw(full=False)
                hv[...] = staged
                target._changed("host", target._lo, target._hi)
                return
            touched, lo, hi = self._advanced(key)
            staged = np.empty(touched.shape, self._dtype)
            staged[...] = value
            if lo == hi:
                return
            covers = np.unique(touched).size * self._dtype.itemsize == hi - lo
            if not covers:
                self._buf.sync(HOST, lo, hi, "host write gap")
            self._buf.wait_for_device()
            self._host_view()[key] = staged
            self._changed("host", lo, hi)

    # -- Python protocols ---------------------------------------------------------------------

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    def __iter__(self) -> Iterator[Any]:
        if not self._shape:
            raise TypeError("iteration over a 0-d array")
        for i in range(self._shape[0]):
            yield self[i]

    def __contains__(self, value: Any) -> bool:
        with _locked(_arrays_in(self, value)):
            return value in self._host_ro()

    def __bool__(self) -> bool:
        # Truthy by length, as numba's device arrays and Numba's SmartArray (which define
        # __len__ only): numba's own helpers test ``if not b:``. Reads no data. A 0-d array
        # has no length: its value decides, as in NumPy.
        if self._shape:
            return self._shape[0] != 0
        with self._buf.lock:
            return bool(self._host_ro())

    def __int__(self) -> int:
        with self._buf.lock:
            return int(self._host_ro())

    def __float__(self) -> float:
        with self._buf.lock:
            return float(self._host_ro())

    def __complex__(self) -> complex:
        with self._buf.lock:
            return complex(self._host_ro())

    def __index__(self) -> int:
        with self._buf.lock:
            return operator.index(self._host_ro())

    def __repr__(self) -> str:
        with self._buf.lock:
            valid = ",".join(self.valid_at)
            text = repr(self._host_ro("repr"))
        body = text[len("array(") : -1].replace("\n" + " " * 6, "\n" + " " * 11)
        return f"SmartArray({body}, valid='{valid}')"

    def __str__(self) -> str:
        with self._buf.lock:
            return str(self._host_ro("str"))

    def __format__(self, spec: str) -> str:
        with self._buf.lock:
            return format(self._host_ro("format"), spec)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        with self._buf.lock:
            data = np.array(self._host_ro("pickle"), copy=True)
        return (_rebuild, (data,))

    def __copy__(self) -> SmartArray:
        return SmartArray(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> SmartArray:
        return SmartArray(self)

    def resize(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: a SmartArray's buffer cannot grow in place."""
        raise TypeError(
            "SmartArray.resize is not supported (views share the buffer); "
            "use SmartArray(np.resize(a, new_shape)) for a resized copy"
        )

    def setflags(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: SmartArray has no settable flags."""
        raise TypeError(
            "SmartArray.setflags is not supported; use np.asarray(a) for a read-only view or "
            "a.host() for a writable one"
        )

    # -- NumPy protocols ----------------------------------------------------------------------

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The current host data as a read-only view, tracked so it stays current.

        A writable view would let an untracked write go silently stale (the device copy
        would never learn of it), so the view is read-only: writing raises NumPy's
        read-only error. It is refreshed eagerly when the device copy is marked changed.
        ``copy=True`` (or a different ``dtype``) returns a plain writable copy instead.
        """
        with self._buf.lock:
            if copy or (dtype is not None and np.dtype(dtype) != self._dtype):
                return np.array(self._host_ro("__array__"), dtype=dtype, copy=True)
            self._buf.sync(HOST, self._lo, self._hi, "__array__")
            return self._export(readonly=True)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        outs = kwargs.get("out", ())
        if not isinstance(outs, tuple):
            outs = (outs,)
        targets = [o for o in outs if isinstance(o, SmartArray)]
        if method == "at" and isinstance(inputs[0], SmartArray):
            targets.append(inputs[0])
        if method == "__call__" and ufunc.signature is None:
            _check_broadcast(inputs, outs, kwargs.get("where", True))  # before anything moves
        arrays = [x for x in (*inputs, *outs) if isinstance(x, SmartArray)]
        with _locked(arrays):
            hosts: list[np.ndarray] = []
            ins = []
            for i, x in enumerate(inputs):
                if isinstance(x, SmartArray):
                    if method == "at" and i == 0:
                        x = x._host_rw(full=True)
                    else:
                        x = x._host_ro()
                    hosts.append(x)
                ins.append(x)
            if outs:
                new_outs = []
                # With where=, unselected elements keep their old values: they must be current.
                partial = kwargs.get("where", True) is not True
                for o in outs:
                    if isinstance(o, SmartArray):
                        o = o._host_rw(full=partial)
                        hosts.append(o)
                    new_outs.append(o)
                kwargs["out"] = tuple(new_outs)
            try:
                result = getattr(ufunc, method)(*ins, **kwargs)
            except BaseException:
                # NumPy keeps what it wrote before failing (a floating-point error under
                # errstate='raise', a bad index of ufunc.at): record it.
                _failed_host_write(targets)
                raise
            for t in targets:
                t._changed("host", t._lo, t._hi)
            if method == "at":
                return None
            if outs:
                if len(outs) == 1:
                    return outs[0] if isinstance(outs[0], SmartArray) else result
                return tuple(
                    o if isinstance(o, SmartArray) else r for o, r in zip(outs, result, strict=True)
                )
            return SmartArray._wrap(result, tuple(hosts))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        first = args[0] if args else None
        if isinstance(first, SmartArray):
            if func is np.reshape:
                return _call_reshape(*args, **kwargs)
            if func is np.transpose:
                return first.transpose(*(a for a in args[1:2] + tuple(kwargs.values())))
            if func is np.ravel:
                return first.ravel(*args[1:], **kwargs)
            if func is np.shape:
                return first.shape
            if func is np.ndim:
                return first.ndim
            if func is np.size and len(args) == 1 and not kwargs:
                return first.size
            if func is np.squeeze:
                return first.squeeze(*args[1:], **kwargs)
        arrays: list[SmartArray] = []
        _collect(args, arrays)
        _collect(kwargs, arrays)
        mutated = first if func in _MUTATING and isinstance(first, SmartArray) else None
        full = True  # whether the old values of ``mutated`` are read (or kept): sync them
        if mutated is not None and func is np.copyto:
            src = args[1] if len(args) > 1 else kwargs.get("src")
            _check_broadcast((src,), (mutated,), True)  # before anything moves
            where = args[3] if len(args) > 3 else kwargs.get("where", True)
            # No mask: every element is overwritten, so nothing needs downloading first
            # (_host_rw still syncs the gaps of a strided destination).
            full = not (isinstance(where, (bool, np.bool_)) and where)
        with _locked(arrays):
            hosts: list[np.ndarray] = []
            new_args = _convert(args, hosts, mutated, full)
            new_kwargs = _convert(kwargs, hosts, mutated, full)
            try:
                result = func(*new_args, **new_kwargs)
            except BaseException:
                if mutated is not None:
                    _failed_host_write([mutated])
                raise
            if mutated is not None:
                mutated._changed("host", mutated._lo, mutated._hi)
                return result
            return SmartArray._wrap(result, tuple(hosts))


class _Record(SmartArray):
    """One element of a structured SmartArray, as ``a[i]`` returns it.

    NumPy returns a record (``np.void``) that is a view of the array: assigning a field
    through it (``a[0]['x'] = 5``) writes the array. This 0-d SmartArray view does the same
    and records the write, so the device copy never keeps a stale value. Reading a field
    (by name or position) gives a NumPy scalar, as a record does (a copy of the current
    value; a subarray field gives a SmartArray view, a nested record another record view).
    ``a[i][()]`` gives a plain ``np.void`` copy.
    """

    __slots__ = ()

    def _field(self, key: Any) -> str:
        names = self._dtype.names
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            try:
                return names[key]
            except IndexError:
                raise IndexError(
                    f"record field index {key} out of range for {len(names)} fields"
                ) from None
        return key

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple) and not key:
            with self._buf.lock:
                return self._host_ro().copy()[()]  # the plain record, a copy
        if not isinstance(key, (str, int, np.integer)):
            return SmartArray.__getitem__(self, key)
        name = self._field(key)
        with self._buf.lock:
            probe = self._probe()
            result = probe[name]
            offset = self._offset + _address(result) - _address(probe)
            field = SmartArray._view(self._buf, offset, result.shape, result.strides, result.dtype)
            if field.ndim:
                return field
            if field._dtype.names is not None:
                return _Record._view(self._buf, offset, (), (), field._dtype)
            return field._host_ro().copy()[()]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, np.integer)):
            key = self._field(key)
        SmartArray.__setitem__(self, key, value)

    def __len__(self) -> int:
        return len(self._dtype.names)

    def __iter__(self) -> Iterator[Any]:
        for name in self._dtype.names:
            yield self[name]

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self[()] == (other[()] if isinstance(other, SmartArray) else other)

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self[()] != (other[()] if isinstance(other, SmartArray) else other)


# NumPy functions that write into their first argument.
_MUTATING = {np.copyto, np.put, np.place, np.putmask, np.fill_diagonal, np.put_along_axis}


def _failed_host_write(targets: list[SmartArray]) -> None:
    """Record what a NumPy call that raised may have written into writable host views.

    NumPy keeps a partial write (``a.put([0, 99], v)`` writes index 0, then fails). Where the
    host bytes were current when the view was handed out, they are recorded as written
    (conservative: the device copy becomes stale there); bytes that were stale (a pure
    overwrite skips the download) keep the device's value.
    """
    for t in targets:
        t._buf.abort(HOST, t._lo, t._hi, INOUT)


def _call_reshape(a: SmartArray, *args: Any, **kwargs: Any) -> SmartArray:
    shape = kwargs.pop("shape", kwargs.pop("newshape", None))
    if args:
        shape, args = args[0], args[1:]
    order = args[0] if args else kwargs.pop("order", "C")
    return a.reshape(shape, order=order)


def _collect(obj: Any, found: list[SmartArray]) -> None:
    if isinstance(obj, SmartArray):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect(x, found)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect(x, found)


def _convert(
    obj: Any, hosts: list[np.ndarray], mutated: SmartArray | None, full: bool = True
) -> Any:
    if isinstance(obj, SmartArray):
        view = obj._host_rw(full=full) if obj is mutated else obj._host_ro()
        hosts.append(view)
        return view
    if isinstance(obj, tuple):
        return tuple(_convert(x, hosts, mutated, full) for x in obj)
    if isinstance(obj, list):
        return [_convert(x, hosts, mutated, full) for x in obj]
    if isinstance(obj, dict):
        return {k: _convert(v, hosts, mutated, full) for k, v in obj.items()}
    return obj


def _shape_of(x: Any) -> tuple[int, ...] | None:
    """The shape of an operand known without reading it, or None (NumPy will judge)."""
    if isinstance(x, (SmartArray, np.ndarray, np.generic)):
        return tuple(x.shape)
    if isinstance(x, (bool, int, float, complex)):
        return ()
    return None


def _check_broadcast(inputs: tuple[Any, ...], outs: tuple[Any, ...], where: Any) -> None:
    """NumPy's broadcasting checks of an elementwise call, on shapes alone (nothing moves).

    The inputs (and ``where``) broadcast together, and into each output's shape unchanged.
    """
    shapes = [_shape_of(x) for x in (*inputs, where)]
    if any(shape is None for shape in shapes):
        return
    try:
        full = np.broadcast_shapes(*shapes)
    except ValueError:
        text = " ".join(str(shape) for shape in shapes)
        raise ValueError(f"operands could not be broadcast together with shapes {text}") from None
    for out in outs:
        shape = None if out is None else _shape_of(out)
        if shape is None:
            continue
        try:
            fits = np.broadcast_shapes(full, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"non-broadcastable output operand with shape {shape} doesn't match the "
                f"broadcast shape {full}"
            )


def _arrays_in(*objs: Any) -> list[SmartArray]:
    """The SmartArrays in ``objs`` (and in their lists, tuples and dicts), to lock together."""
    found: list[SmartArray] = []
    _collect(objs, found)
    return found


class _locked:  # noqa: N801 - used like a function
    """Hold the locks of several arrays' buffers, taken in a fixed order (no deadlock)."""

    def __init__(self, arrays: list[SmartArray]) -> None:
        bufs = {id(a._buf): a._buf for a in arrays}
        self._locks = [bufs[k].lock for k in sorted(bufs)]
        self._stack = ExitStack()

    def __enter__(self) -> None:
        for lock in self._locks:
            self._stack.enter_context(lock)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


def _owning(ary: np.ndarray) -> SmartArray:
    """A SmartArray adopting a fresh ndarray that nobody else holds.

    Unlike a user's ``SmartArray(obj, copy=False)``, nothing outside keeps ``ary``, so it is no
    exported view: device changes must not be downloaded eagerly on its account.
    """
    result = SmartArray(ary, copy=False)
    result._buf.exports.clear()
    return result


def _rebuild(data: np.ndarray) -> SmartArray:
    return _owning(data)


# -- njit results (see smartarray._numba_cpu: SmartArrayType's copy, __array_ufunc__, box) --

# id(host ndarray handed to njit) -> the SmartArray it belongs to. numba keeps that ndarray as
# the ``parent`` of every view taken of the argument inside compiled code; the entry lives as
# long as the SmartArray (its ``_njit_view`` is created once).
_njit_owners: dict[int, weakref.ref[SmartArray]] = {}


def _register_njit_view(owner: SmartArray, view: np.ndarray) -> None:
    key = id(view)

    def forget(ref: weakref.ref[SmartArray]) -> None:
        if _njit_owners.get(key) is ref:
            del _njit_owners[key]

    _njit_owners[key] = weakref.ref(owner, forget)


def _njit_owner(ary: Any) -> SmartArray | None:
    """The SmartArray whose njit host ndarray is ``ary``, if any."""
    ref = _njit_owners.get(id(ary))
    owner = None if ref is None else ref()
    return owner if owner is not None and owner._njit_view is ary else None


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
    owner = _njit_owner(ary)
    if owner is not None:
        return owner
    parent = getattr(ary.base, "parent", ary)  # numba's MemInfo object has ``parent``
    if parent is None:
        return _owning(ary) if ary.flags.writeable else SmartArray(ary)
    owner = _njit_owner(parent)
    if owner is None:
        return ary
    offset = owner._offset + _address(ary) - _address(parent)
    view = SmartArray._view(owner._buf, offset, ary.shape, ary.strides, ary.dtype)
    if view._lo < 0 or view._hi > owner._buf.nbytes:
        return ary  # cannot happen for numba's views; never record bytes outside the buffer
    if view._offset == owner._offset and view._shape == owner._shape:
        if view._strides == owner._strides and view._dtype == owner._dtype:
            return owner
    if ary.flags.writeable:
        view._changed("host", view._lo, view._hi)
    return view


_numba_cpu.set_result_adapter(_from_njit)


# -- NumPy methods ----------------------------------------------------------------------------

_READERS = (
    "all",
    "any",
    "argmax",
    "argmin",
    "argpartition",
    "argsort",
    "astype",
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
    "item",
    "max",
    "mean",
    "min",
    "nonzero",
    "prod",
    "ptp",
    "repeat",
    "round",
    "searchsorted",
    "std",
    "sum",
    "take",
    "tobytes",
    "tofile",
    "tolist",
    "trace",
    "var",
)

# Mutating methods: name -> whether they read the old values (sync all) or only write.
_WRITERS = {"fill": False, "sort": True, "put": True, "partition": True}


def _reader(name: str) -> Any:
    def method(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
        with _locked(_arrays_in(self, args, kwargs)):
            hosts: list[np.ndarray] = []
            host = _convert(self, hosts, None)
            result = getattr(host, name)(
                *_convert(args, hosts, None), **_convert(kwargs, hosts, None)
            )
            return SmartArray._wrap(result, tuple(hosts))

    method.__name__ = name
    method.__qualname__ = f"SmartArray.{name}"
    method.__doc__ = f"As ``numpy.ndarray.{name}``, on the current host data."
    return method


def _check_sort_args(self: SmartArray, name: str, args: Any, kwargs: Any) -> None:
    """Validate ``sort`` / ``partition`` arguments on a tiny stand-in (nothing moves)."""
    if _arrays_in(args, kwargs):
        return  # SmartArray arguments: NumPy judges them after conversion
    tiny = np.zeros(tuple(min(d, 1) for d in self._shape), self._dtype)
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


def _writer(name: str, reads: bool) -> Any:
    def method(self: SmartArray, *args: Any, **kwargs: Any) -> Any:
        if name in ("sort", "partition"):
            _check_sort_args(self, name, args, kwargs)
        with _locked(_arrays_in(self, args, kwargs)):
            hosts: list[np.ndarray] = []
            args = _convert(args, hosts, None)
            kwargs = _convert(kwargs, hosts, None)
            host = self._host_rw(full=reads)
            try:
                result = getattr(host, name)(*args, **kwargs)
            except BaseException:
                _failed_host_write([self])  # e.g. put: index 0 written, then index 99 fails
                raise
            self._changed("host", self._lo, self._hi)
            return result

    method.__name__ = name
    method.__qualname__ = f"SmartArray.{name}"
    method.__doc__ = (
        f"As ``numpy.ndarray.{name}``, in place on the host copy (the device copy goes stale)."
    )
    return method


for _name in _READERS:
    setattr(SmartArray, _name, _reader(_name))
for _name, _reads in _WRITERS.items():
    setattr(SmartArray, _name, _writer(_name, _reads))
del _name, _reads


def _byteswap(self: SmartArray, inplace: bool = False) -> SmartArray | None:
    """As ``numpy.ndarray.byteswap``; ``inplace=True`` marks the host copy changed."""
    with _locked([self]):
        if inplace:
            host = self._host_rw(full=True)
            host.byteswap(inplace=True)
            self._changed("host", self._lo, self._hi)
            return self
        return SmartArray(self._host_ro().byteswap())


SmartArray.byteswap = _byteswap  # type: ignore[attr-defined]


def _not_supported(name: str) -> property:
    def fail(self: SmartArray) -> Any:
        raise AttributeError(
            f"SmartArray has no attribute {name!r}; use a.host().{name} on the host copy "
            "(then a.host_changed() if it writes)"
        )

    return property(fail)


# ndarray attributes SmartArray does not have fail with a hint. Properties rather than a
# __getattr__ hook: a class with __getattr__ makes every attribute read slower, and Numba's
# dispatchers read two attributes per call (``_numba_type_``, ``_njit_fast``).
for _name in dir(np.ndarray):
    if not _name.startswith("_") and not hasattr(SmartArray, _name):
        setattr(SmartArray, _name, _not_supported(_name))
del _name
