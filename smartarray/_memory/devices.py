"""Which CUDA devices a SmartArray's copies live on, and how locations name them.

A buffer's coherence state (:class:`smartarray.coherence.BufferState`) has one location per
copy: ``"host"``, and one per device that holds a copy. Device 0's location is ``"gpu"`` and
device ``N``'s is ``"gpu:N"``, so a process that uses one device sees exactly the two locations
it always did. What users write is resolved here (:func:`resolve`), at the boundary:

- ``"gpu"``: the device current in the calling thread (``cuda.select_device``,
  ``with cuda.gpus[N]:``), as numba-cuda binds its own device arrays to the current context;
- ``"gpu:N"``: device ``N``, whichever is current.

So the two vocabularies differ on one word: inside the engine ``"gpu"`` is device 0, to users the
current device. A location never goes back to a public method (``get``, ``mark_changed``,
``is_valid``): code above the engine names a device ``f"gpu:{n}"``.

With one device visible (always on the simulator and in strict mode) :data:`several` is false
and nothing here asks the driver anything per call: :func:`current` is 0, :func:`resolve` is a
dictionary lookup. With several, :func:`current` asks numba-cuda for the current context.

Copies between devices go peer to peer where the target device can access the source's memory
(:func:`peer`), else through the host copy (see :meth:`smartarray._engine.buffer.Buffer._copy`).
"""

from __future__ import annotations

import threading
from typing import Any, Final

from numba import cuda

from .._platform import cuda_simulator as _sim
from . import driver_calls as _driver_calls

__all__ = [
    "GPU",
    "HOST",
    "at",
    "count",
    "current",
    "ensure_context",
    "here",
    "location",
    "ordinal",
    "owner",
    "peer",
    "reach",
    "reset",
    "resolve",
]

HOST: Final = "host"
GPU: Final = "gpu"  # device 0's location (and, as a user writes it, the current device)

#: Whether more than one device is visible: the per-call device checks run only then.
several = False
_count: int | None = None
_first_touch = threading.Lock()  # (see count)
_peer: dict[tuple[int, int], bool] = {}
_names: dict[int, str] = {0: GPU}
_ordinals: dict[str, int] = {GPU: 0}


def count() -> int:
    """How many CUDA devices this process sees (1 on the simulator, or without a driver).

    smartarray's first touch of the driver, made once, under a lock, whichever thread comes
    first: numba-cuda's lazy driver initialisation is not safe from two threads at once (it
    marks the driver initialised before ``cuInit`` returned, so a second thread's call fails
    with ``CUDA_ERROR_NOT_INITIALIZED``, and this count would be taken for 1).
    """
    global _count, several
    if _count is None:
        with _first_touch:
            if _count is None:
                n = 1
                if not _sim.SIMULATOR:
                    try:
                        n = max(1, len(cuda.gpus))
                    except Exception:  # noqa: BLE001 - no driver: device work fails later
                        n = 1
                several = n > 1  # (before _count: who sees the count sees this too)
                _count = n
    return _count


def reset() -> None:
    """The topology as a fresh process knows it, for tests (between them: no launch in flight).

    What was asked of the driver is asked again at next use: the device count (and so
    :data:`several`), which pairs of devices can reach each other and whether peer access was
    enabled (enabling it again is no error), each context's device. What the driver keeps
    stays known: the primary contexts made (see :class:`on`), and the location names.
    """
    global _count, several
    with _first_touch:
        several = False
        _count = None
        _peer.clear()
        _reached.clear()
        _context_devices.clear()


def location(device: int) -> str:
    """The coherence location of ``device``'s copy: ``"gpu"`` for 0, ``"gpu:N"`` for N."""
    name = _names.get(device)
    if name is None:
        name = _names[device] = f"gpu:{device}"
        _ordinals[name] = device
    return name


def ordinal(where: str) -> int:
    """The device of a device location (see :func:`location`)."""
    return _ordinals[where]


def current() -> int:
    """The device current in the calling thread (0 when only one is visible)."""
    if _count is None:
        count()  # (the first touch of the driver)
    if not several:
        return 0
    return int(cuda.current_context().device.id)


def ensure_context() -> None:
    """Make a CUDA context current in the calling thread when none is.

    A context is current per thread: a new thread has none, and ``with cuda.gpus[n]:`` pops
    the one it pushed. numba-cuda's own calls make one current first (``require_context``);
    smartarray's copies, events and waits on the default stream need one too, or the driver
    refuses them (``CUDA_ERROR_INVALID_CONTEXT``). As numba-cuda does, the context made
    current is device 0's primary one, and it stays current. Called where device work is
    about to be queued from the host (a copy, a host wait), not per launch: a launch runs
    in numba-cuda's context.
    """
    if _sim.SIMULATOR:
        return
    if _count is None:
        count()  # (the first touch of the driver)
    if not _driver_calls.context_of_thread():
        cuda.current_context()


def here() -> str:
    """The location of the current device's copy."""
    return location(current())


def resolve(where: object, argument: str = "where") -> str:
    """The location a user's ``where`` names: ``"host"``, ``"gpu"`` or ``"gpu:N"``.

    Raises
    ------
    ValueError
        ``where`` is none of those, or ``N`` is not a visible device.
    """
    if where == HOST:
        return HOST
    if where == GPU:
        return location(current())
    if isinstance(where, str) and where.startswith("gpu:"):
        n = count()
        digits = where[4:]
        # A device number in ASCII decimal digits, without leading zeros: str.isdigit alone
        # takes '²' (which int() refuses) and full-width digits (which int() reads). (A
        # negative number is well formed: no such device, said below.)
        plain = digits[1:] if digits.startswith("-") else digits
        if not (plain.isascii() and plain.isdecimal() and (digits == "0" or plain[0] != "0")):
            raise ValueError(
                f"{argument} must be 'host', 'gpu' (the current device) or 'gpu:N' with N a "
                f"device number in ASCII decimal digits without leading zeros ('gpu:0' to "
                f"'gpu:{n - 1}' here), got {where!r}"
            )
        if digits == plain and int(digits) < n:
            return location(int(digits))
        raise ValueError(
            f"{argument} names device {digits!r}, but this process sees {n} CUDA device(s): "
            f"use 'gpu:0' to 'gpu:{n - 1}', 'gpu' (the current device) or 'host'"
        )
    raise ValueError(
        f"{argument} must be 'host', 'gpu' (the current device) or 'gpu:N' (device N), "
        f"got {where!r}"
    )


def owner(pointer: int) -> int:
    """The device whose memory ``pointer`` (a device address) is in; the current device when
    only one is visible or the driver cannot say (memory it does not know).

    Another library's array says where its memory is only through its pointer: numba's
    ``as_cuda_array`` binds any pointer to the current context. The pointer's context is
    asked, then that context's device: cuda-bindings 13.2.0 to 13.4.1 answer the
    ``DEVICE_ORDINAL`` attribute with 0 whatever the driver wrote (NVIDIA/cuda-python#2928).
    """
    if not pointer or (not several and (_count is not None or count() == 1)):
        return current()
    from cuda.bindings import driver as binding

    attribute = binding.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT
    try:
        err, context = binding.cuPointerGetAttribute(attribute, pointer)
    except Exception:  # pragma: no cover  # noqa: BLE001 - a driver without the query
        return current()
    if err != binding.CUresult.CUDA_SUCCESS or not int(context):
        return current()
    device = _context_devices.get(int(context))
    if device is None:
        device = _context_devices[int(context)] = _device_of(binding, context)
    return current() if device < 0 else device


def _device_of(binding: Any, context: Any) -> int:
    """The device of a CUDA context (-1 if the driver does not say), asked with the context
    current for a moment: the calling thread's context stack is as it was afterwards."""
    (err,) = binding.cuCtxPushCurrent(context)
    if err != binding.CUresult.CUDA_SUCCESS:
        return -1
    try:
        err, device = binding.cuCtxGetDevice()
    finally:
        binding.cuCtxPopCurrent()
    return int(device) if err == binding.CUresult.CUDA_SUCCESS else -1


#: The device of each context a pointer named (a context's device never changes).
_context_devices: dict[int, int] = {}


def public(where: str, here: int) -> str:
    """How a location is shown to a user whose current device is ``here``: ``"gpu"`` for the
    current device's copy, ``"gpu:N"`` for another device's."""
    if where == HOST:
        return HOST
    device = _ordinals[where]
    return GPU if device == here else f"gpu:{device}"


def peer(source: int, target: int) -> bool:
    """Whether ``target`` can read ``source``'s memory directly (a peer-to-peer copy)."""
    key = (source, target)
    known = _peer.get(key)
    if known is None:
        known = False
        if source != target and not _sim.SIMULATOR:
            # Asked of the driver directly: no context is made current (see ``on``).
            from cuda.bindings import driver as binding
            from numba.cuda.cudadrv.driver import driver

            try:
                known = bool(
                    driver.cuDeviceCanAccessPeer(binding.CUdevice(target), binding.CUdevice(source))
                )
            except Exception:  # pragma: no cover  # noqa: BLE001 - no such query: via the host
                known = False
        _peer[key] = known
    return known


def reach(source: int, target: int) -> None:
    """Let ``target`` access ``source``'s memory before a copy between them, once per pair.

    Without peer access enabled (``cuCtxEnablePeerAccess``, which numba-cuda never calls)
    CUDA stages a copy between two devices through the host (CUDA's programming guide,
    "Peer-to-Peer Memory Copy"). A pair that cannot reach each other is left as it is: its
    copies work, through the host. A refusal other than "already enabled" (too many peers,
    say) makes the pair one that cannot: the copy under way is staged by the driver, later
    ones are planned through the host copy.
    """
    key = (source, target)
    if key in _reached:
        return
    _reached.add(key)
    if not several or not peer(source, target):
        return
    from numba.cuda.cudadrv.driver import CudaAPIError

    _primary_context(source)
    handle = cuda.gpus[source].get_primary_context().handle
    with on(target):
        try:
            cuda.current_context().enable_peer_access(handle)
        except CudaAPIError as exc:
            if exc.code != _CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:  # (by the user: as wanted)
                _peer[key] = False


_reached: set[tuple[int, int]] = set()
_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


class on:  # noqa: N801 - used as ``with on(device):``, like numba's ``with cuda.gpus[n]:``
    """Make ``device`` current for a block (nothing to do when it already is).

    The first time a device's primary context is made (numba-cuda 0.30's
    ``Device.get_primary_context``), cuda.core's ``Device.set_current`` replaces the current
    context on the thread's stack (``cuCtxSetCurrent``) and numba then pops what it put
    there: the context that was current is gone from the stack, and the user's enclosing
    ``with cuda.gpus[n]:`` fails when it exits. It is put back here.
    """

    __slots__ = ("_device", "_entered")

    def __init__(self, device: int) -> None:
        self._device = device
        self._entered: object = None

    def __enter__(self) -> None:
        if several and self._device >= 0 and self._device != current():
            gpu = cuda.gpus[self._device]
            _primary_context(self._device)
            gpu.__enter__()
            self._entered = gpu

    def __exit__(self, *exc: object) -> None:
        gpu, self._entered = self._entered, None
        if gpu is not None:
            gpu.__exit__(*exc)  # type: ignore[attr-defined]


def at(where: str) -> on:
    """Make the device of location ``where`` current for a block (the host: nothing to do)."""
    return on(-1 if where == HOST else _ordinals[where])


def _primary_context(device: int) -> None:
    """Make ``device``'s primary context once, keeping the thread's context stack (see ``on``)."""
    if _primaries.get(device):
        return
    from numba.cuda.cudadrv.driver import driver

    before = driver.cuCtxGetCurrent()
    cuda.gpus[device].get_primary_context()
    if int(before) and int(driver.cuCtxGetCurrent()) != int(before):
        driver.cuCtxPushCurrent(before)
    _primaries[device] = True


_primaries: dict[int, bool] = {}
