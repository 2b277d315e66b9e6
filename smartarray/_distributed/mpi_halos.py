"""MPI point-to-point transfers and halo exchange for SmartArrays (the code behind
:mod:`smartarray.mpi`).

This module never imports mpi4py: it works with any object that has mpi4py's buffer methods
(``Send``, ``Recv``, ``Sendrecv``, ``Isend``, ``Irecv``, ``Get_rank``, ``Get_size``), so its
bookkeeping is tested without an MPI library. It uses SmartArray's public API only:

- a send reads the view on the host (``np.asarray(view)``): only the view's bytes that are
  stale on the host are downloaded, and nothing else of the array;
- a receive lands in a staging ndarray and what arrived is then assigned to the view
  (``view[...] = staged``): a host write of exactly those bytes, which uploads nothing now and
  makes only those bytes stale on the device (the next kernel uploads them). What arrived is
  what the receive's status counts (``Get_count``): nothing from ``MPI.PROC_NULL``, the first
  elements in C order of a message shorter than the view; the rest of the view keeps its
  values and their validity, as MPI leaves the rest of a receive buffer.

The staging buffers cost one host copy of the message (a halo row), never a transfer between
host and device; they are what makes non-blocking operations safe (see :class:`Request`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..array import SmartArray
from ..errors import SmartArrayWarning

__all__ = [
    "Request",
    "exchange_halos",
    "irecv",
    "isend",
    "recv",
    "send",
    "sendrecv",
    "waitall",
]


def _check_comm(comm: Any, *methods: str) -> None:
    missing = [m for m in methods if not callable(getattr(comm, m, None))]
    if missing:
        raise TypeError(
            "comm must be an mpi4py communicator (an object with "
            f"{', '.join(methods)}), got {type(comm).__name__} without {', '.join(missing)}"
        )


def _check_rank(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int (a rank, or MPI.PROC_NULL), got {value!r}")
    return int(value)


def _check_tag(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return int(value)


def _outgoing(buf: Any, copy: bool) -> Any:
    """The buffer MPI sends for ``buf``: a SmartArray is read on the host (its stale bytes
    only are downloaded); ``copy`` makes a private copy (non-blocking sends)."""
    if isinstance(buf, SmartArray):
        host = np.asarray(buf)  # syncs exactly this view's bytes to the host
        if copy or not host.flags.c_contiguous:
            # MPI takes contiguous buffers; a pending send must not see later writes (a held
            # host view is refreshed when a kernel writes the device copy).
            return np.array(host, order="C", copy=True)
        return host
    return buf


def _staging(buf: Any, name: str) -> np.ndarray | None:
    """A receive buffer for SmartArray ``buf`` (None: MPI receives into ``buf`` itself)."""
    if isinstance(buf, SmartArray):
        return np.empty(buf.shape, buf.dtype)
    if buf is None:
        raise TypeError(f"{name} must be a SmartArray or a writable buffer, got None")
    return None


def _status(comm: Any, status: Any) -> Any:
    """``status``, or a new status of ``comm``'s MPI module (mpi4py's ``MPI.Status``) to learn
    what a receive delivered; None where there is none (every element is then taken as
    received)."""
    if status is not None:
        return status
    make = getattr(sys.modules.get(type(comm).__module__), "Status", None)
    return make() if callable(make) else None


def _received(status: Any, staged: np.ndarray) -> int:
    """How many elements of ``staged`` (in C order) the receive wrote: ``Get_count`` in
    bytes, whole elements only (MPI's ``PROC_NULL`` delivers none; a shorter message than the
    buffer is legal)."""
    if status is None:
        return staged.size
    nbytes = int(status.Get_count())  # (mpi4py's default datatype: bytes)
    return min(staged.size, max(nbytes, 0) // max(staged.itemsize, 1))


def _land(target: SmartArray, staged: np.ndarray, count: int) -> None:
    """Write the first ``count`` elements (C order) of ``staged`` into ``target``.

    Host writes of exactly those elements: nothing moves now; those bytes (only) become stale
    on the device and go up with the next kernel that reads them. The rest of the view keeps
    its values and its validity (MPI leaves the rest of a receive buffer alone).
    """
    if count >= staged.size:
        target[...] = staged
        return
    # The first count elements in C order: whole slabs along the first axis, then the
    # first elements of the next slab, recursively (at most one write per axis).
    while count > 0:
        inner = staged[0].size if staged.ndim > 1 else 1
        whole = count // inner
        if whole:
            target[:whole] = staged[:whole]
        count -= whole * inner
        if count == 0:
            return
        target, staged = target[whole], staged[whole]


def send(comm: Any, buf: Any, dest: int, tag: int = 0) -> None:
    """Send ``buf`` (a SmartArray, a view of one, or any buffer) to rank ``dest``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator.
    buf : SmartArray or buffer
        What to send. For a SmartArray only the bytes of this view that are stale on the
        host are downloaded first; a strided view is sent as a contiguous copy.
    dest : int
        The receiving rank (``MPI.PROC_NULL``: nothing is sent).
    tag : int, optional
        The message tag.

    Raises
    ------
    TypeError
        ``comm`` is not a communicator; ``dest`` or ``tag`` not an int.
    """
    _check_comm(comm, "Send")
    dest, tag = _check_rank(dest, "dest"), _check_tag(tag, "tag")
    comm.Send(_outgoing(buf, copy=False), dest=dest, tag=tag)


def recv(comm: Any, buf: Any, source: int, tag: int = 0, status: Any = None) -> None:
    """Receive into ``buf`` (a SmartArray, a view of one, or any writable buffer).

    For a SmartArray nothing is downloaded or uploaded: the message is written into the host
    copy and recorded as a host write of exactly this view's bytes, which the next kernel
    that reads them uploads.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator.
    buf : SmartArray or buffer
        Where the message goes. A shorter message (legal in MPI) lands in the view's first
        elements in C order; from ``MPI.PROC_NULL`` nothing lands and the view is untouched.
    source : int
        The sending rank (``MPI.ANY_SOURCE``, ``MPI.PROC_NULL`` as in MPI).
    tag : int, optional
        The message tag (``MPI.ANY_TAG`` as in MPI).
    status : mpi4py.MPI.Status, optional
        Filled as by ``comm.Recv``.

    Raises
    ------
    TypeError
        ``comm`` is not a communicator; ``source`` or ``tag`` not an int; ``buf`` is None.
    """
    _check_comm(comm, "Recv")
    source, tag = _check_rank(source, "source"), _check_tag(tag, "tag")
    staged = _staging(buf, "buf")
    if staged is None:
        comm.Recv(buf, source=source, tag=tag, status=status)
        return
    status = _status(comm, status)
    comm.Recv(staged, source=source, tag=tag, status=status)
    _land(buf, staged, _received(status, staged))


def sendrecv(
    comm: Any,
    sendbuf: Any,
    dest: int,
    recvbuf: Any,
    source: int,
    sendtag: int = 0,
    recvtag: int | None = None,
    status: Any = None,
) -> None:
    """Send ``sendbuf`` to ``dest`` and receive ``recvbuf`` from ``source`` in one call.

    As :func:`send` and :func:`recv` together (``comm.Sendrecv``, deadlock-free): only the
    sent view's stale bytes are downloaded; the received view is recorded as a host write.
    The two may be views of the same SmartArray.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator.
    sendbuf, recvbuf : SmartArray or buffer
        What to send, and where the received message goes.
    dest, source : int
        The partner ranks (``MPI.PROC_NULL``: no message that way).
    sendtag : int, optional
        The tag of the message sent.
    recvtag : int, optional
        The tag of the message received (default: ``sendtag``).
    status : mpi4py.MPI.Status, optional
        Filled as by ``comm.Sendrecv``.

    Raises
    ------
    TypeError
        ``comm`` is not a communicator; a rank or tag is not an int; ``recvbuf`` is None.
    """
    _check_comm(comm, "Sendrecv")
    dest, source = _check_rank(dest, "dest"), _check_rank(source, "source")
    sendtag = _check_tag(sendtag, "sendtag")
    recvtag = sendtag if recvtag is None else _check_tag(recvtag, "recvtag")
    staged = _staging(recvbuf, "recvbuf")
    if staged is not None:
        status = _status(comm, status)
    comm.Sendrecv(
        _outgoing(sendbuf, copy=False),
        dest=dest,
        sendtag=sendtag,
        recvbuf=recvbuf if staged is None else staged,
        source=source,
        recvtag=recvtag,
        status=status,
    )
    if staged is not None:
        _land(recvbuf, staged, _received(status, staged))


class Request:
    """A pending non-blocking send or receive of :mod:`smartarray.mpi`.

    Returned by :func:`isend` and :func:`irecv`; complete it with :meth:`wait` (or
    :meth:`test`, or :func:`waitall`). mpi4py's request is :attr:`request`.

    A receive into a SmartArray lands in a private staging buffer, and is written into the
    array (recorded as a host write of exactly the view's bytes) when the request completes.
    Until then the view is untouched: reads see its earlier values, never half-received bytes,
    and kernels may keep using the array; a write to the view in between is overwritten when
    the request completes, exactly as if the receive had happened at :meth:`wait`. A send
    from a SmartArray sends a private copy taken when it was posted, so later writes to the
    array (by the host or a kernel) do not change what is sent.

    A receive request dropped before completion loses its message: a
    :class:`~smartarray.SmartArrayWarning` says so.
    """

    __slots__ = ("request", "_target", "_staged", "_done", "_comm")

    def __init__(
        self, request: Any, target: SmartArray | None, staged: Any, comm: Any = None
    ) -> None:
        self.request = request
        self._target = target
        self._staged = staged  # the staging (receive) or private copy (send): kept alive
        self._done = False
        self._comm = comm  # (a receive: where a status comes from, see _status)

    @property
    def done(self) -> bool:
        """bool: whether the request completed (and a received message landed)."""
        return self._done

    def _status(self, status: Any) -> Any:
        return status if self._target is None else _status(self._comm, status)

    def _complete(self, status: Any) -> None:
        self._done = True
        target, staged = self._target, self._staged
        self._target = self._staged = self._comm = None
        if target is not None:
            _land(target, staged, _received(status, staged))

    def wait(self, status: Any = None) -> None:
        """Block until the operation completes; a received message then lands in the array
        (what arrived: nothing from ``MPI.PROC_NULL``, the first elements of a shorter message).

        Parameters
        ----------
        status : mpi4py.MPI.Status, optional
            Filled as by ``request.Wait``.
        """
        if self._done:
            return
        status = self._status(status)
        self.request.Wait(status)
        self._complete(status)

    def test(self, status: Any = None) -> bool:
        """Return whether the operation completed, landing a received message if it did.

        Parameters
        ----------
        status : mpi4py.MPI.Status, optional
            Filled as by ``request.Test``.
        """
        if not self._done:
            status = self._status(status)
            if self.request.Test(status):
                self._complete(status)
        return self._done

    def __del__(self) -> None:
        if getattr(self, "_target", None) is not None and not self._done:
            warnings.warn(
                "a smartarray.mpi receive request was dropped before wait(): its message "
                "never lands in the array; call wait() (or waitall) on every request",
                SmartArrayWarning,
                stacklevel=2,
            )


def isend(comm: Any, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start sending ``buf`` to rank ``dest``; return a :class:`Request`.

    A SmartArray's view is read on the host now (only its stale bytes are downloaded) into
    a private copy, so the array may be written (by the host or by kernels) before the send
    completes. Other buffers are sent as mpi4py sends them (do not write them before
    :meth:`Request.wait`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator.
    buf : SmartArray or buffer
        What to send.
    dest : int
        The receiving rank.
    tag : int, optional
        The message tag.

    Returns
    -------
    Request
        Complete it with :meth:`Request.wait`.
    """
    _check_comm(comm, "Isend")
    dest, tag = _check_rank(dest, "dest"), _check_tag(tag, "tag")
    out = _outgoing(buf, copy=True)
    return Request(comm.Isend(out, dest=dest, tag=tag), None, out)


def irecv(comm: Any, buf: Any, source: int, tag: int = 0) -> Request:
    """Start receiving into ``buf``; return a :class:`Request` whose :meth:`~Request.wait`
    writes the message into it.

    For a SmartArray the message lands in a staging buffer first and is written into the
    view (a host write of exactly its bytes, nothing uploaded) when the request completes:
    the view keeps its earlier values until then (see :class:`Request`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator.
    buf : SmartArray or buffer
        Where the message goes.
    source : int
        The sending rank.
    tag : int, optional
        The message tag.

    Returns
    -------
    Request
        Complete it with :meth:`Request.wait` before reading ``buf``.
    """
    _check_comm(comm, "Irecv")
    source, tag = _check_rank(source, "source"), _check_tag(tag, "tag")
    staged = _staging(buf, "buf")
    if staged is None:
        return Request(comm.Irecv(buf, source=source, tag=tag), None, buf)
    return Request(comm.Irecv(staged, source=source, tag=tag), buf, staged, comm)


def waitall(requests: Iterable[Request]) -> None:
    """Wait for every request of ``requests`` (each received message then lands).

    Parameters
    ----------
    requests : iterable of Request
        From :func:`isend` and :func:`irecv`.

    Raises
    ------
    TypeError
        An item is not a :class:`Request`.
    """
    requests = list(requests)
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(
                f"requests must hold smartarray.mpi Request objects, got {type(r).__name__}"
            )
    for r in requests:
        r.wait()


def _slab(a: SmartArray, axis: int, lo: int, hi: int) -> SmartArray:
    index = [slice(None)] * a.ndim
    index[axis] = slice(lo, hi)
    return a[tuple(index)]


def _exchange(
    comm: Any, out: SmartArray, dest: int | None, into: SmartArray, source: int | None, tag: int
) -> None:
    """One direction of a halo exchange; a missing partner exchanges nothing (as PROC_NULL)."""
    if dest is not None and source is not None:
        sendrecv(comm, out, dest, into, source, sendtag=tag, recvtag=tag)
    elif dest is not None:
        send(comm, out, dest, tag)
    elif source is not None:
        recv(comm, into, source, tag)


def exchange_halos(
    comm: Any,
    a: SmartArray,
    axis: int = 0,
    width: int = 1,
    periodic: bool = False,
    tag: int = 0,
) -> None:
    """Exchange the halo layers of a block decomposed along ``axis`` with ranks ``rank - 1``
    and ``rank + 1``.

    ``a`` is this rank's block with ``width`` halo layers at each end of ``axis``: it sends
    its first and last ``width`` owned layers to its neighbours and receives theirs into its
    halo layers. Only those bytes move between host and device: the sent layers are
    downloaded if stale on the host, and the received layers are recorded as host writes,
    uploaded by the next kernel that reads them. Along ``axis=0`` of a C-ordered block the
    layers are whole rows (contiguous); along another axis each layer's bounding byte range
    is what moves (a column of a C-ordered block spans nearly all of it).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; ranks are ordered along ``axis``.
    a : SmartArray
        This rank's block, halo layers included.
    axis : int, optional
        The decomposed axis.
    width : int, optional
        Halo layers at each end.
    periodic : bool, optional
        Whether the first and last ranks are neighbours. Otherwise the outer halo layers of
        the first and last rank are left as they are (no message, as with ``MPI.PROC_NULL``).
    tag : int, optional
        Tags ``tag`` and ``tag + 1`` are used.

    Raises
    ------
    TypeError
        ``a`` is not a SmartArray; ``comm`` is not a communicator; ``axis``, ``width`` or
        ``tag`` is not an int.
    ValueError
        ``axis`` out of range; ``width`` below 1; the block has fewer than ``3 * width``
        layers along ``axis`` (two halos and at least ``width`` owned layers).
    """
    if not isinstance(a, SmartArray):
        raise TypeError(f"a must be a SmartArray, got {type(a).__name__}")
    _check_comm(comm, "Get_rank", "Get_size", "Send", "Recv", "Sendrecv")
    axis = _check_tag(axis, "axis")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(
            f"axis must be in [-{a.ndim}, {a.ndim}) for a {a.ndim}-d array, got {axis}"
        )
    axis %= a.ndim
    width = _check_tag(width, "width")
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    n = a.shape[axis]
    if n < 3 * width:
        raise ValueError(
            f"a has {n} layers along axis {axis}; width={width} needs at least {3 * width} "
            "(a halo at each end and at least width owned layers)"
        )
    tag = _check_tag(tag, "tag")
    rank, size = int(comm.Get_rank()), int(comm.Get_size())
    lower: int | None = rank - 1
    upper: int | None = rank + 1
    if periodic:
        lower, upper = (rank - 1) % size, (rank + 1) % size
    else:
        lower = lower if rank > 0 else None
        upper = upper if rank < size - 1 else None
    w = width
    # Towards rank - 1: my first owned layers go down, rank + 1's arrive in my upper halo.
    _exchange(comm, _slab(a, axis, w, 2 * w), lower, _slab(a, axis, n - w, n), upper, tag)
    # Towards rank + 1: my last owned layers go up, rank - 1's arrive in my lower halo.
    _exchange(comm, _slab(a, axis, n - 2 * w, n - w), upper, _slab(a, axis, 0, w), lower, tag + 1)
