"""SmartArray as a kernel and ``njit`` argument: typing, launch preparation, njit hooks.

Functions the :class:`~smartarray.array.SmartArray` class statement binds (under the same names,
but the public ``*_as`` forms, which it binds with a leading underscore, and ``to_device``, bound
as ``_prepare_launch`` too): the array layer's side of the glue's
:class:`~smartarray._numba.kernels.ArrayArgument` protocol (SmartArray's base class). numba-cuda's
dispatcher calls :func:`to_device` (the ArgHint protocol), the njit unbox hooks of
:mod:`smartarray._numba.njit` call ``_njit_enter`` / ``_njit_exit`` / ``_njit_abort``. The intent
wrappers of :mod:`smartarray.hints` call the ``*_as(view, intent)`` forms, ``to_device`` with
their intent and :data:`numba_in_type` here, the named interface of the layer above (the class
binds the same functions as ``_prepare_launch``, ``_njit_enter_as``, ...): no added call on
their path.
Each goes through its base buffer's :meth:`~smartarray._engine.buffer.Buffer.acquire` /
:meth:`~smartarray._engine.buffer.Buffer.release` with this view's byte range; a launch's arguments
gather in one :class:`smartarray._engine.launch.Launch`, whose callback records their writes. The
launch fast path reads the view's launch cache (``_launch_cache``: an engine object,
:class:`smartarray._engine.residency.LaunchCache`, which the engine makes, opens and closes: the
state's version at which this view was current on the device only, and current there; any
transition changes the version; the device view and what the kernel receives). Kept here is the
njit host ndarray (``_njit_view``, whose fast path the engine arms and disarms).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import memory
from .._engine import launch as _launch
from .._engine import residency as _residency
from .._engine.buffer import HOST, IN, INOUT
from .._engine.launch import LaunchWrites
from .._memory import devices as _devices
from .._numba import kernels as _numba_cuda
from .._numba import njit as _numba_cpu
from .._numba.njit import Layout
from ..errors import TransferError
from .geometry import address

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "_after_launch",
    "_njit_abort",
    "_njit_enter",
    "_njit_exit",
    "_numba_in_type_",
    "_numba_type",
    "_numba_type_",
    "njit_abort_as",
    "njit_enter_as",
    "njit_exit_as",
    "njit_owner",
    "numba_in_type",
    "register_njit_view",
    "to_device",
]


def _numba_type_(self: SmartArray) -> Any:
    """This array's Numba type, cached in the instance (both dispatchers read it directly).

    Layout as numba-cuda gives a device array: 'C' or 'F' when contiguous that way and not
    broadcast (a zero stride), 'A' otherwise.
    """
    return self._numba_type(readonly=False)


def _numba_in_type_(self: SmartArray) -> Any:
    """The Numba type of this array as an ``In`` argument (read only), cached likewise."""
    return self._numba_type(readonly=True)


#: The cached Numba type of a view as an ``In`` argument (``view._numba_in_type_``) for the intent
#: wrappers: an ``attrgetter`` runs in C, so numba's two reads per argument and launch add no
#: Python frame to what reading the attribute costs.
numba_in_type: Callable[[SmartArray], Any] = operator.attrgetter("_numba_in_type_")


def _numba_type(self: SmartArray, readonly: bool) -> Any:
    flags = self._probe().flags
    broadcast = 0 in self._strides and self.size != 0
    layout: Layout
    if flags.c_contiguous and not broadcast:
        layout = "C"
    elif flags.f_contiguous and not broadcast:
        layout = "F"
    else:
        layout = "A"
    return _numba_cpu.smartarray_type(
        self._dtype, self.ndim, layout, readonly, _aligned(self, flags.aligned)
    )


def _aligned(self: SmartArray, strides_aligned: bool) -> bool:
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
        and (host is None or address(host) % align == 0)
    )


def to_device(self: SmartArray, retr: list[Any], stream: Any = 0, intent: str = INOUT) -> Any:
    """Prepare this array as a kernel argument (numba-cuda's ArgHint protocol: the dispatcher's
    call is the only one; the class binds it as ``_prepare_launch`` too).

    Called by the dispatcher before a launch: makes the device copy current (only stale
    bytes move, on ``stream``) and returns the kernel's argument; the launch's callback in
    ``retr`` (see :mod:`smartarray._engine.launch`) records the kernel's write right after it.
    ``intent``: the access, ``InOut`` for a bare SmartArray; the hints of
    :mod:`smartarray.hints` pass theirs.
    """
    launch = _launch.current(retr, stream)
    buf = self._buf
    version = buf.state.version
    cache = self._launch_cache  # the engine's object (residency.LaunchCache), None at first
    if (
        cache is not None
        and (cache.gpu_only_at == version or (intent == IN and cache.device_at == version))
        and (arg := cache.arg) is not None  # read once: an eviction (another thread) drops it
        and buf.sole == launch.key
        and (not _devices.several or cache.device == _devices.current())
    ):
        # The loop-of-launches fast path: nothing changed since this view was found
        # current on the device only (or, for a read, current there), and all work in
        # flight on this buffer is on this launch's stream (ordered before it; the key says
        # which stream, device and, for a per-thread default stream, thread), so nothing
        # moves, nothing waits and no lock is needed (reading a version number and a key is
        # atomic). The launch's callback records the write only if the state moves
        # meanwhile (a host read before the kernel runs).
        launch.add(buf, self, intent, True)
        if not _residency.claiming:
            return arg
        # An allocation may evict (another thread's): claimed first, then checked again.
        # An eviction closes the fast path (under the lock) before it reads the claims, so
        # either it sees this claim, or this check sees the fast path closed.
        if cache.arg is arg and version in (cache.gpu_only_at, cache.device_at):
            return arg
        launch.entries.pop()  # evicted meanwhile: the slow path prepares it again
    try:
        return _prepare_launch_slow(self, launch, stream, intent)
    except BaseException:
        # The error leaves the dispatcher: the launch failed, no callback will run. Its
        # claims and arguments go now, not at this thread's next launch.
        launch.failed()
        raise


def _prepare_launch_slow(self: SmartArray, launch: _launch.Launch, stream: Any, intent: str) -> Any:
    """:func:`to_device` under the buffer's lock: what may move, moves."""
    buf = self._buf
    # (The fast path needs no type check: it is open only to a view prepared here before.)
    self._numba_type_  # noqa: B018 - an unsupported dtype raises here, before anything moves
    device = _devices.current()  # (a launch runs on the current device)
    where = _devices.location(device)
    # (A new cache if there was none, or it was another device's: this launch needs this one's.)
    cache = self._launch_cache = _residency.open_launch_cache(self._launch_cache, device)
    if cache.view is None:
        self._check_device_geometry()  # before anything moves
    _residency.preparing(launch)  # an allocation now keeps this launch's own claims
    try:
        with buf.lock:
            exclusive = buf.acquire(
                where,
                self._lo,
                self._hi,
                intent,
                "device use",
                covers=self._covers(),
                launch=stream,
            )
            if cache.view is None:
                devary = memory.device_view(
                    buf.ensure_device(where),
                    self._offset,
                    self._shape,
                    self._strides,
                    self._dtype,
                )
                arg = _numba_cuda.kernel_argument(devary)
                # Registered with the buffer: an eviction closes it, dropping the copy drops it.
                _residency.fill_launch_cache(buf, cache, devary, arg)
            state = buf.state
            if not exclusive and intent != IN:
                # A write recorded before the kernel (acquire) may have left the bytes current
                # on the device only (the solver's launch after a host read): then the callback
                # has nothing more to record, as for a loop's launch. Held host arrays that
                # show them must be refreshed after the kernel: those keep the callback's record.
                exclusive = state.is_exclusive(
                    where, self._lo, self._hi
                ) and not buf.held.any_stale(state.valid(HOST), self._lo, self._hi)
            if exclusive or state.is_valid(where, self._lo, self._hi):  # (Out uploads nothing)
                cache.open(state.version, exclusive)
            launch.add(buf, self, intent, exclusive)  # claimed until the launch ran
            return cache.arg
    finally:
        _residency.preparing(None)


def _after_launch(self: SmartArray, writes: LaunchWrites | None = None) -> TransferError | None:
    """Record the kernel's write (the launch's callback runs this right after the launch).

    See :meth:`Buffer.release`. A failed refresh must not stop the other arguments'
    records: it leaves those host bytes marked stale (which they are) and is returned,
    for the launch to raise after every argument recorded its write.
    """
    buf = self._buf
    lo, hi = self._lo, self._hi
    cache = self._launch_cache
    assert cache is not None  # (a launched argument was prepared: its cache was made)
    where = _devices.location(cache.device)  # (the launch's device)
    try:
        with buf.lock:
            buf.release(where, lo, hi, INOUT, writes=writes)
            state = buf.state
            # Open the launch fast path (which refreshes no held host array) only if no
            # held array shows these bytes: the refresh runs after the buffer's last
            # argument's record, which may fail after this one and leave them stale.
            if state.is_exclusive(where, lo, hi) and not buf.held.any_stale(
                state.valid(HOST), lo, hi
            ):
                cache.open(state.version, True)
    except TransferError as exc:
        if writes is None:
            raise
        return exc
    return None


def _njit_enter(self: SmartArray) -> np.ndarray:
    return self._njit_enter_as(INOUT)


def _njit_exit(self: SmartArray) -> None:
    self._njit_exit_as(INOUT)


def _njit_abort(self: SmartArray) -> None:
    self._njit_abort_as(INOUT)


def njit_enter_as(self: SmartArray, intent: str) -> np.ndarray:
    """The current host ndarray handed to an njit function (its exact type and layout)."""
    buf = self._buf
    with buf.lock:
        buf.acquire(HOST, self._lo, self._hi, intent, "njit argument", covers=self._covers())
        view = self._njit_view
        if view is None:
            view = self._njit_view = self._host_view()
            register_njit_view(self, view)
        return view


def njit_exit_as(self: SmartArray, intent: str) -> None:
    """Record the njit call's host write (later calls take the fast path while the
    bytes stay current on the host only: the engine arms and disarms it)."""
    buf = self._buf
    with buf.lock:
        buf.release(HOST, self._lo, self._hi, intent, view=self)


def njit_abort_as(self: SmartArray, intent: str) -> None:
    """The cleanup of an njit call that failed with a Python error pending.

    Numba runs it when a later argument failed to unbox (the function never ran), and in
    the rare case that the function itself left a Python error (an object-mode block).
    See :meth:`Buffer.abort`.
    """
    self._buf.abort(HOST, self._lo, self._hi, intent)


# -- njit results (see smartarray._numba.njit and SmartArray's _from_njit) --

# id(host ndarray handed to njit) -> the SmartArray it belongs to. numba keeps that ndarray as
# the ``parent`` of every view taken of the argument inside compiled code; the entry lives as
# long as the SmartArray (its ``_njit_view`` is created once).
_njit_owners: dict[int, weakref.ref[SmartArray]] = {}


def register_njit_view(owner: SmartArray, view: np.ndarray) -> None:
    key = id(view)
    owners = _njit_owners  # bound now: module globals are None at interpreter exit

    def forget(ref: weakref.ref[SmartArray]) -> None:  # takes no lock
        if owners.get(key) is ref:
            del owners[key]

    _njit_owners[key] = weakref.ref(owner, forget)


def njit_owner(ary: Any) -> SmartArray | None:
    """The SmartArray whose njit host ndarray is ``ary``, if any."""
    ref = _njit_owners.get(id(ary))
    owner = None if ref is None else ref()
    return owner if owner is not None and owner._njit_view is ary else None
