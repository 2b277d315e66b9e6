"""Page-locking and mapping of host memory: the registry behind ``register`` and ``pinned``.

One registry per process (:data:`_registry`) knows the host memory ranges page-locked through
:func:`smartarray.register` / :func:`smartarray.pinned`, keyed by byte extent, and the memory
that was allocated page-locked (``pinned_array``, ``mapped_array``), which must not be locked
again. Unpinning waits for the device first: an asynchronous copy may still be using the memory.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numba import cuda

from .._platform import cuda_simulator as _sim
from ..errors import RegistrationError
from . import devices as _devices
from .checks import _byte_extent
from .counted import adopt


def _memory_owner(ary: np.ndarray) -> Any:
    """The object whose life is the life of ``ary``'s memory (the end of its base chain)."""
    owner: Any = ary
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner


class _Registry:
    """Host memory ranges page-locked through :func:`register`, keyed by byte extent.

    It also knows the memory that was allocated page-locked (:func:`pinned_array`,
    :func:`mapped_array`, so the host copy of ``SmartArray(pinned=True)`` too): page-locking it
    again fails on a GPU ("already registered"), so registering an array that lies in such an
    allocation does nothing, and deregistering it does nothing (it stays page-locked until it
    is freed). The simulator follows the same rules.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pins: dict[tuple[int, int], Any] = {}
        # Byte extents of live page-locked allocations (a count: freed memory can come back at
        # the same address before its finalizer's news is read).
        self._allocated: dict[tuple[int, int], int] = {}
        # Extents whose memory was freed. Finalizers run whenever the garbage collector does,
        # possibly inside a locked section of this thread: they only append here (atomic).
        self._freed: list[tuple[int, int]] = []

    def track_allocation(self, ary: Any) -> Any:
        """Remember that ``ary``'s memory was allocated page-locked (returns ``ary``)."""
        extent = _byte_extent(ary)
        if extent[0] == extent[1]:
            return ary
        with self._lock:
            self._allocated[extent] = self._allocated.get(extent, 0) + 1
        try:
            weakref.finalize(_memory_owner(ary), self._freed.append, extent)
        except TypeError:  # an owner without weak references: the array's own life, then
            weakref.finalize(ary, self._freed.append, extent)
        return ary

    def _page_locked_at_allocation(self, extent: tuple[int, int]) -> bool:
        """Whether ``extent`` lies in a live page-locked allocation (call with the lock held)."""
        while self._freed:
            gone = self._freed.pop()
            left = self._allocated.pop(gone, 1) - 1
            if left > 0:
                self._allocated[gone] = left
        # Linear in the live page-locked allocations: registration is not a fast path.
        return any(lo <= extent[0] and extent[1] <= hi for lo, hi in self._allocated)

    def is_registered(self, ary: np.ndarray) -> bool:
        with self._lock:
            extent = _byte_extent(ary)
            return extent in self._pins or (
                extent[0] != extent[1] and self._page_locked_at_allocation(extent)
            )

    def register(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Page-lock the arrays not registered yet; return those it registered."""
        with self._lock:
            todo: dict[tuple[int, int], np.ndarray] = {}
            for ary in arrays:
                extent = _byte_extent(ary)
                if extent in self._pins or extent in todo or extent[0] == extent[1]:
                    continue
                if self._page_locked_at_allocation(extent):
                    continue  # page-locked since its allocation: locking it again would fail
                for other in (*self._pins, *todo):
                    if extent[0] < other[1] and other[0] < extent[1]:
                        raise RegistrationError(
                            "the array overlaps a registered array without covering the same "
                            "bytes; register the base array once instead"
                        )
                todo[extent] = ary
            done = []
            try:
                for extent, ary in todo.items():
                    self._pins[extent] = _pin(ary, extent)
                    done.append(ary)
            except BaseException:
                for ary in done:
                    _unpin(self._pins.pop(_byte_extent(ary)))
                raise
            return done

    def deregister(self, arrays: Sequence[np.ndarray]) -> None:
        with self._lock:
            extents = []
            for ary in arrays:
                extent = _byte_extent(ary)
                if extent[0] == extent[1]:
                    continue
                if extent not in self._pins:
                    if self._page_locked_at_allocation(extent):
                        continue  # allocated page-locked: it stays so until it is freed
                    raise RegistrationError(
                        "cannot deregister an array that is not registered "
                        "(register it first, or check that it is the same array)"
                    )
                extents.append(extent)
            if extents:
                _wait_before_unpinning()
            for extent in dict.fromkeys(extents):
                _unpin(self._pins.pop(extent))


#: What :func:`_pin` returns for memory the driver reports as page-locked already.
_LOCKED_ELSEWHERE = object()


def _pin(ary: np.ndarray, extent: tuple[int, int], mapped: bool = False) -> Any:
    if _sim.emulates_page_locking():
        return None  # the plain simulator: page-locking is recorded, emulated
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:
        context = cuda.current_context()
        if _devices.count() > 1:
            return _pin_portable(context, ary, extent, mapped)
        return context.mempin(ary, extent[0], extent[1] - extent[0], mapped=mapped)
    except CudaAPIError as exc:
        # Memory page-locked outside this registry (numba.cuda.pinned_array, another
        # library): registered in name only, its deregistration unpins nothing.
        if getattr(exc.code, "name", exc.code) in _ALREADY_REGISTERED:
            return _LOCKED_ELSEWHERE
        raise


_ALREADY_REGISTERED = ("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", 712)


def _pin_portable(context: Any, ary: np.ndarray, extent: tuple[int, int], mapped: bool) -> Any:
    """Page-lock ``extent`` for every device's context (``CU_MEMHOSTREGISTER_PORTABLE``).

    numba-cuda's ``mempin`` registers for the current context only: another device's context
    then treats the memory as pageable (its copies are staged and synchronous) and a mapped
    range faults in its kernels. A range can be registered once, so with several devices it
    is registered portable, as numba-cuda's ``mempin`` would be with that flag (the same
    ``PinnedMemory`` / ``MappedMemory`` objects, the same immediate unregistration).
    """
    from numba.cuda.cudadrv import driver as numba_driver

    binding = numba_driver.binding
    flags = int(binding.CU_MEMHOSTREGISTER_PORTABLE)
    if mapped:
        flags |= int(binding.CU_MEMHOSTREGISTER_DEVICEMAP)
    pointer, size = extent[0], extent[1] - extent[0]
    manager = context.memory_manager
    numba_driver.driver.cuMemHostRegister(pointer, size, flags)
    finalizer = numba_driver._pin_finalizer(manager, pointer, pointer, mapped)
    owner = weakref.proxy(context)
    if mapped:
        mem = numba_driver.MappedMemory(owner, pointer, size, owner=ary, finalizer=finalizer)
        manager.allocations[pointer] = mem
        return mem.own()
    return numba_driver.PinnedMemory(owner, pointer, size, owner=ary, finalizer=finalizer)


def _wait_before_unpinning() -> None:
    """Wait for every device before memory stops being page-locked.

    An asynchronous copy from or to the memory (``to_device(a, stream=s)``,
    ``copy_to_host(a, stream=s)``) may still be queued, on any device's stream: the DMA engine
    reads page-locked memory directly, and unpinning under it is undefined. The driver's own
    wait at ``cuMemHostUnregister`` (undocumented) covers the unregistering context's device
    at most. Which streams used the memory is not known here, so this waits for every device
    that may have (all of them; deregistration is rare).
    """
    if _devices.count() == 1:
        cuda.synchronize()
        return
    for device in range(_devices.count()):
        with _devices.on(device):
            cuda.synchronize()


def _unpin(pin: Any) -> None:
    # numba's PinnedMemory has no free(): a weakref finalizer unregisters the memory when its
    # last reference goes, and the registry held the only one. Mapped pins do have free().
    free = getattr(pin, "free", None)
    if free is not None:
        free()


_registry = _Registry()


class _Registration:
    """What :func:`register` returns: usable as a context manager that deregisters on exit."""

    def __init__(self, arrays: tuple[np.ndarray, ...], registered: list[np.ndarray]) -> None:
        self.arrays = arrays
        self._registered = registered

    def __enter__(self) -> tuple[np.ndarray, ...]:
        return self.arrays

    def __exit__(self, *exc: object) -> None:
        # Only what this call registered (an array registered earlier stays registered), and
        # only what is still registered (the block may have deregistered some itself).
        _registry.deregister([a for a in self._registered if _registry.is_registered(a)])
        self._registered = []

    def __repr__(self) -> str:
        return f"<smartarray registration of {len(self.arrays)} array(s)>"


@contextlib.contextmanager
def _mapping(arrays: Sequence[np.ndarray], stream: Any) -> Iterator[Any]:
    """Map ``arrays`` into device memory for the block: one counted device array, or a list."""
    mapper = _sim.mapped if _sim.lacks_mapping() else cuda.mapped
    with mapper(*arrays, stream=stream) as devs:
        try:
            if len(arrays) == 1:
                yield adopt(devs)
            else:
                yield [adopt(d) for d in devs]
        finally:
            # numba unmaps on leaving its block: kernels launched in ours may still be using
            # the mapping (launches are asynchronous), so wait for them first.
            _wait_before_unpinning()


# What the automatic page-lock policy (smartarray._engine.auto_pin) uses.

memory_owner = _memory_owner


def is_registered(ary: np.ndarray) -> bool:
    """Whether ``ary``'s bytes are page-locked through this registry (or at allocation)."""
    return _registry.is_registered(ary)


def lock_portable(ary: np.ndarray) -> Any:
    """Page-lock ``ary`` in place for every device (PORTABLE, like ``pinned=True`` host
    copies); the pin (unlocked by :func:`unlock_after_waiting`), None on the plain simulator.

    Outside this registry: the caller owns the pin and keeps ``ary``'s memory alive with it.
    """
    extent = _byte_extent(ary)
    if _sim.SIMULATOR:  # (strict mode models mempin; the plain simulator emulates nothing)
        return _pin(ary, extent)
    return _pin_portable(cuda.current_context(), ary, extent, False)


def unlock_after_waiting(pins: Sequence[Any]) -> None:
    """Unlock pins from :func:`lock_portable`, after waiting for every device (a queued copy
    may still read or write their memory)."""
    if not any(pin is not None for pin in pins):
        return
    _wait_before_unpinning()
    for pin in pins:
        if pin is not None:
            _unpin(pin)
