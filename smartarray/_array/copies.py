"""A SmartArray view's side of its two copies: host views, recorded writes, validity, its name.

Functions the :class:`~smartarray.array.SmartArray` class statement binds under the same names
(``name`` is a property of :func:`name` and :func:`set_name`). Every access goes through the base
buffer (:class:`~smartarray._engine.buffer.Buffer`) with this view's byte interval ``[_lo, _hi)``:
``acquire`` makes bytes current before a read or a write, ``changed`` records a write. What a
caller gets is a host ndarray over the view's elements: synced and read-only
(:func:`_host_ro`), writable after the gaps a write leaves are synced (:func:`_host_rw`), or
handed out and tracked so a device write refreshes it (:func:`_export`). ``get``, ``host`` and
``gpu`` (the hand-outs) are SmartArray's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import guard, memory
from .._engine.buffer import HOST, IN, INOUT, OUT
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._observe import performance as _perf
from ..errors import CoherenceError, TransferError

if TYPE_CHECKING:  # pragma: no cover
    from .._engine.buffer import Buffer
    from ..array import SmartArray

__all__ = [
    "_changed",
    "_desc",
    "_export",
    "_host_ro",
    "_host_rw",
    "_host_view",
    "_open_host",
    "_readable",
    "gpu_changed",
    "host_changed",
    "is_valid",
    "mark_changed",
    "name",
    "set_name",
    "upload_initial",
    "valid_at",
]


def _desc(self: SmartArray) -> str:
    """The array's name, as transfer events and errors show it."""
    return self._buf.name


def name(self: SmartArray) -> str:
    """str: the array's name in transfer events (shared by its views; assignable)."""
    return self._buf.name


def set_name(self: SmartArray, value: str) -> None:
    """Rename the array (and its views): ``a.name = value``."""
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, got {type(value).__name__}")
    self._buf.name = value


# -- the host copy as this view sees it --------------------------------------------------------


def _changed(self: SmartArray, where: str, lo: int, hi: int) -> None:
    """Record a write of bytes ``[lo, hi)`` at ``where`` (see :meth:`Buffer.changed`)."""
    self._buf.changed(where, lo, hi)


def _host_view(self: SmartArray) -> np.ndarray:
    """The writable host view (no sync; host memory allocated)."""
    host = self._buf.ensure_host()
    return np.ndarray(
        self._shape, self._dtype, buffer=host, offset=self._offset, strides=self._strides
    )


def _open_host(self: SmartArray) -> None:
    """Open this view's host fast path where its bytes are ready now (see
    :meth:`Buffer.host_ready <smartarray._engine.buffer.Buffer.host_ready>`). Call with the
    buffer's lock held."""
    buf = self._buf
    at = buf.host_ready(self._lo, self._hi)
    if at != -1 and self._host_cells is None:
        if self._dtype.names is not None or self._dtype.subdtype is not None:
            return  # records: a[i] is a record view, made the slow way
        host = self._host_view()
        if len(self._shape) == 1:
            self._host_item = host
        self._host_cells = host  # (every shape: what the write fast path writes)
        host = host.view()
        host.setflags(False)  # what NumPy reads may not write untracked
        self._host_nd = host
    self._host_at = at
    self._host_only_at = buf.host_ready(self._lo, self._hi, only=True) if at != -1 else -1


def _readable(self: SmartArray) -> np.ndarray | None:
    """The read-only host ndarray the host fast paths of NumPy's methods and ufuncs read
    (``_host_nd``), made from the writable one (``_host_cells``) on its first read, or None
    where that is not made either (the fast path not open: those paths go the slow way).

    A new array of a NumPy result leaves it unmade (SmartArray._init_host): most results are
    read once, or not at all, and dropped; the view and its flag cost as much as NumPy's
    whole ufunc on a few elements. ``_host_cells`` is never unset once made (the host memory
    it views stays), so the view made here stays right; two threads making it at once make
    two equal views, either kept.
    """
    cells = self._host_cells
    if cells is None:
        return None
    host = cells.view()
    host.setflags(False)  # what NumPy reads may not write untracked (positional: see _init_host)
    self._host_nd = host
    return host


def _export(self: SmartArray, readonly: bool, unannounced: bool = False) -> np.ndarray:
    """This view's host data as an ndarray handed out (tracked; no sync); ``unannounced``:
    to a consumer that writes without calling ``mark_changed`` (``smartarray/_engine/held.py``).
    """
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


def _host_ro(self: SmartArray, reason: str = "host read") -> np.ndarray:
    """A synced read-only host view (not tracked)."""
    buf = self._buf
    with buf.lock:
        buf.acquire(HOST, self._lo, self._hi, IN, reason)
        if self._host_at != buf.host_stamp:
            self._open_host()  # later reads take the fast path
        view = self._host_view()
        if buf.perf is not None and buf.perf.pending:
            _perf.emit(buf)  # after the read is complete and recorded
    view.setflags(False)  # type: ignore[call-arg]  # (positional: NumPy parses a keyword in 0.1 us more)
    return view


def _host_rw(self: SmartArray, full: bool) -> np.ndarray:
    """A writable host view before a write: synced in full, or only its gaps when needed."""
    if full:
        self._buf.acquire(HOST, self._lo, self._hi, INOUT, "host read")
    else:
        self._buf.acquire(HOST, self._lo, self._hi, OUT, "host write gap", covers=self._covers())
    return self._host_view()


def mark_changed(self: SmartArray, where: str = "host") -> None:
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
    where = _devices.resolve(where)
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


def _written_on_default_stream(buf: Buffer) -> None:
    """Several devices: a write ``mark_changed`` records at a device is taken to be queued on
    that device's default stream (on one device, copies there follow it): reads from another
    device then wait for that stream on the host, as for a DLPack consumer's. Earlier work on
    the buffer is ordered before that stream first. Call with that device current."""
    buf.order_before(0)
    buf.consumer_queued(_streams.DEFAULT)


def host_changed(self: SmartArray) -> None:
    """Record that the host copy was written, as ``mark_changed('host')``."""
    self.mark_changed("host")


def gpu_changed(self: SmartArray) -> None:
    """Record that the device copy was written, as ``mark_changed('gpu')``."""
    self.mark_changed("gpu")


def is_valid(self: SmartArray, where: str = "host") -> bool:
    """Return whether every byte of this array is current at ``where`` (``'host'``,
    ``'gpu'``: the current device, or ``'gpu:N'``)."""
    where = _devices.resolve(where)
    with self._buf.lock:
        state = self._buf.state
        return where in state.locations and state.is_valid(where, self._lo, self._hi)


def valid_at(self: SmartArray) -> tuple[str, ...]:
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


def upload_initial(a: SmartArray, raw: np.ndarray, where: str, adopted: bool) -> None:
    """Copy new array ``a``'s data ``raw`` to its device copy at ``where`` (construction with
    ``where='gpu'``); ``adopted``: ``raw`` is the adopted host copy, which holds it too."""
    buf = a._buf
    if raw.nbytes:
        guard.check("h2d", raw.nbytes, "construction", buf.name)  # before anything moves
    with _devices.at(where):
        dev = buf.ensure_device(where)
        try:
            memory.copy_range("h2d", raw, dev, 0, raw.nbytes, 0, "construction", a._desc(), where)
        except Exception as exc:
            raise TransferError(f"uploading the initial data failed: {exc}") from exc
        buf.queued(0)  # a staged synchronous upload: see Buffer._copy
    if adopted:  # the adopted host memory holds the data too
        buf.state.apply(buf.state.plan_read(where, 0, raw.nbytes))
