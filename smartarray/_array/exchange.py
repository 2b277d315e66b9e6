"""How outside code reads and writes a SmartArray: device-array copies, CUDA interface, DLPack.

Functions the :class:`~smartarray.array.SmartArray` class statement binds under the same names:
those through which other code reads or writes a SmartArray's data as its own kind of array:
numba.cuda device arrays' ``copy_to_host`` / ``copy_to_device`` (numba's helpers call them), the
CUDA Array Interface (``__cuda_array_interface__``, :func:`cuda_view`), whose logic is
:mod:`smartarray._interop.exports`'s, and ``copy`` (device to device when current on the device
only). The class binds DLPack's ``__dlpack__`` and ``__dlpack_device__`` straight from
:mod:`smartarray._interop.dlpack`. SmartArray's ``copy`` is this module's,
not :mod:`smartarray._array.ndarray`'s (which it calls for a host copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import memory
from .._engine import prefetch as _prefetch
from .._interop import exports as _interop
from .._interop import foreign as _foreign
from .._memory import devices as _devices
from .._memory import streams as _streams
from .._memory.checks import (
    _check_host_array,
    _check_stream,
    _copy_source,
    check_compatibility,
)
from .._memory.checks import (
    is_device_array as _is_device_array,
)
from .._memory.devices import HOST
from ..errors import TransferError
from .geometry import probe as _probe
from .ndarray import copy as _host_copy

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "__cuda_array_interface__",
    "copy",
    "copy_to_device",
    "copy_to_host",
    "cuda_view",
    "prefetch",
]


def copy_to_host(self: SmartArray, ary: np.ndarray | None = None, stream: Any = 0) -> np.ndarray:
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
    _check_stream(stream)
    if ary is not None:
        _check_host_array(ary, "ary")
        check_compatibility(_probe(self), ary)
    with self._buf.lock:
        host = self._host_ro("copy_to_host")
        if ary is None:
            return np.array(host, copy=True)
        np.copyto(ary, host)
        return ary


def copy_to_device(self: SmartArray, ary: Any, stream: Any = 0) -> None:
    """Overwrite this array with ``ary`` (host or device memory), as a device array's method.

    numba's helpers call it (``cuda.reduce(..., res=a)`` writes its result with
    ``res[:1].copy_to_device(partials[:1])``). numba.cuda's checks apply, in its order and
    with its messages. Device memory is copied device to device (counted ``d2d``) and
    recorded as a device write; host data is written to the host copy (as ``a[...] = ary``)
    and moves to the device when a kernel next needs it.
    """
    stream = _check_stream(stream)
    source = _copy_source(self, ary, "ary")
    if source is None:
        return
    if not _is_device_array(source):
        self[...] = source
        return
    buf = self._buf
    copy_stream = _streams.pending(stream)
    with buf.lock:
        # Earlier device work on this buffer must not overtake: ordered on the device.
        buf.order_before(copy_stream)
        here = _devices.here()
        dev = memory.device_view(
            buf.ensure_device(here), self._offset, self._shape, self._strides, self._dtype
        )
        try:
            dev.copy_to_device(source, stream=stream)
        except Exception as exc:
            # It may have written part of the bytes: where another copy (the host's
            # first, else another device's) is current it keeps the values and this
            # device's bytes are recorded stale.
            for other in buf.state.locations:
                if other != here and buf.state.is_valid(other, self._lo, self._hi):
                    buf.mark(other, self._lo, self._hi)
                    break
            raise TransferError(f"copy_to_device failed: {exc}") from exc
        buf.queued(copy_stream)  # host reads of this buffer wait for this copy
        self._changed(here, self._lo, self._hi)


# -- interop: CUDA Array Interface, DLPack, device-to-device copies (see _interop) ------------


def __cuda_array_interface__(self: SmartArray) -> dict[str, Any]:
    """The CUDA Array Interface (version 3) of the device copy, made current first.

    Because the consumer may write, a device write is recorded (the host copy becomes
    stale and is downloaded when next read). Share read-only with
    :meth:`cuda_view` ``(intent='in')``. The ``stream`` entry names the stream of pending
    device work on this array (None when there is none).

    Any read is the export, a probe such as ``hasattr(a, "__cuda_array_interface__")``
    included (consumers may read the dict without calling Python, so it cannot be
    lazy); ask :func:`smartarray.is_cuda_array` instead, which exports nothing.
    """
    return _interop.cuda_array_interface(self)


def cuda_view(self: SmartArray, intent: str = "inout") -> Any:
    """Share the device copy with a CUDA consumer (CuPy, PyTorch, numba), made current first.

    Parameters
    ----------
    intent : {'inout', 'in'}
        ``'in'``: read-only, nothing recorded. ``'inout'``: a device write is recorded now
        and again when a ``with`` block around the view exits (so host arrays held
        earlier show what the consumer wrote).

    Returns
    -------
    CudaView
        An object with ``__cuda_array_interface__``, usable as a context manager.
    """
    return _interop.cuda_view(self, intent)


def copy(self: SmartArray, order: str = "C") -> SmartArray:
    """A new array with this one's data: device to device when current on the device only."""
    return _foreign.copy(self, _host_copy, order)


def prefetch(self: SmartArray, where: str = "gpu", stream: Any = None) -> None:
    """Start making this array's data current at ``where``; return without waiting for it.

    The copies of the stale bytes are queued on ``stream`` and run while the host goes on
    (from and to ``pinned=True`` host copies; CUDA copies from and to pageable host memory
    synchronously, so then the call returns once they are done). Work queued later on any
    stream that uses this array is ordered after them on the device, and a host access of it
    waits for a download still in flight: start a download as soon as the kernel that writes
    the data is queued, and the host waits only where it reads (a host array you hold, read
    without smartarray seeing it, is waited for at once).

    To a device, the array's device copy is allocated there even when no byte needs to move
    (an array made without data, ``SmartArray(shape=, dtype=)``): prefetch before a loop
    allocates ahead, as a hand-written program allocates its device buffers before its
    pipeline (a device allocation synchronises: on a GPU, two streams' work issued before and
    after it does not overlap). Trade-off: the device memory is held from then on.

    Parameters
    ----------
    where : {'gpu', 'gpu:N', 'host'}
        Where the data is wanted next.
    stream : stream, 0 or None
        The stream the copies go on; ``None`` (default): the stream of this array's latest
        device work, else smartarray's own copy stream (never the default stream, which would
        wait for every other stream's work); ``0``: the default stream.

    Raises
    ------
    ValueError, TypeError
        For a bad ``where`` or ``stream``, before anything moves.
    DeviceMemoryError
        The device copy does not fit the device or its budget even after evicting other
        arrays' copies (as a launch would raise); the array is unchanged.
    TransferError
        A copy failed; nothing stale is marked current.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.arange(4.0), pinned=True)
    >>> a.prefetch("gpu")      # the upload runs while the host prepares the launch
    >>> a.prefetch("host")     # the download runs; a.host() waits for it
    >>> a.host()
    array([0., 1., 2., 3.])
    """
    where = _devices.resolve(where)
    if stream is not None:
        stream = _check_stream(stream)
    if where == HOST:
        _prefetch.prefetch(self._buf, where, self._lo, self._hi, stream)
        return
    self._check_device_geometry()  # (refused before anything moves, as get('gpu'))
    with _devices.at(where):
        _prefetch.prefetch(self._buf, where, self._lo, self._hi, stream)
