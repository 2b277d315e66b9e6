"""Strict mode: numba's CUDA simulator made to behave like a GPU (see :mod:`smartarray.testing`).

One module per concept: :mod:`.scheduler` (streams, events, the queue of device work),
:mod:`.devmem` (finite device memory, page-locked host memory, mapped arrays), :mod:`.arrays`
(the device-array surface), :mod:`.launch` (launches and crash checks). This package and
``smartarray._platform.cuda_simulator`` (the memory layer's simulator gaps) are the only code that
touches the simulator's internals.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import state as _state

__all__ = ["disable", "enable", "select_simulator"]

_MISSING = object()
_saved: list[tuple[Any, str, Any]] = []
_stack: list[Any] = []


def select_simulator() -> None:
    """Choose numba's CUDA simulator before numba.cuda is imported (``SMARTARRAY_STRICT=1``)."""
    config = sys.modules.get("numba.cuda.core.config")
    if "numba.cuda" in sys.modules and not getattr(config, "ENABLE_CUDASIM", 0):
        raise RuntimeError(
            "SMARTARRAY_STRICT=1 needs numba's CUDA simulator, but numba.cuda was already "
            "imported for a real GPU; import smartarray first, or set NUMBA_ENABLE_CUDASIM=1 "
            "before numba.cuda is imported"
        )
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    for name in ("numba.core.config", "numba.cuda.core.config"):
        config = sys.modules.get(name)
        if config is not None:
            # (numba's config sets its options at run time: no type checker sees them)
            config.ENABLE_CUDASIM = 1  # type: ignore[attr-defined]


def _patch(obj: Any, name: str, value: Any) -> None:
    _saved.append((obj, name, obj.__dict__.get(name, _MISSING)))
    setattr(obj, name, value)


def _install() -> None:
    import numba.cuda as cuda
    from numba.cuda import simulator
    from numba.cuda.simulator import api
    from numba.cuda.simulator.cudadrv import devicearray, devices
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    from . import arrays, devmem, launch
    from .scheduler import StrictEvent, StrictStream

    def stream() -> StrictStream:
        return StrictStream(_state.current().scheduler)

    def default_stream() -> StrictStream:
        return _state.current().default_stream

    def legacy_default_stream() -> StrictStream:
        return _state.current().legacy_default_stream

    def per_thread_default_stream() -> StrictStream:
        return _state.current().per_thread_default_stream

    def external_stream(ptr: int) -> StrictStream:
        # Another library's stream, named by its handle: strict mode's stream of that handle
        # (a new one for a handle no stream has), as numba wraps a CUstream on a GPU.
        scheduler = _state.current().scheduler
        found = scheduler.streams.get(int(ptr))
        # A handle no strict stream has is another library's stream: modelled non-blocking
        # (CuPy's, PyTorch's and JAX's side streams are), so nothing orders it with stream 0.
        if found is not None:
            return found
        return StrictStream(scheduler, handle=int(ptr), nonblocking=True)

    def synchronize() -> None:
        _state.current().scheduler.host_wait_all()

    def event(timing: bool = True) -> StrictEvent:
        return StrictEvent(_state.current().scheduler, timing)

    functions = {
        "stream": stream,
        "default_stream": default_stream,
        "legacy_default_stream": legacy_default_stream,
        "per_thread_default_stream": per_thread_default_stream,
        "external_stream": external_stream,
        "synchronize": synchronize,
        "event": event,
        "Event": event,
        "to_device": devmem.to_device,
        "device_array": devmem.device_array,
        "device_array_like": devmem.device_array_like,
        "auto_device": devmem.auto_device,
        "pinned": devmem.pinned,
        "pinned_array": devmem.pinned_array,
        "pinned_array_like": devmem.pinned_array_like,
        "mapped_array": devmem.mapped_array,
        "mapped": devmem.mapped,
    }
    for module in (cuda, simulator, api, devicearray):
        for name, fn in functions.items():
            if module is devicearray and name in ("stream", "synchronize", "event", "Event"):
                continue
            if name in module.__dict__ or module is cuda:
                _patch(module, name, fn)
    for name, fn in {
        "memalloc": devmem.memalloc,
        "memhostalloc": devmem.memhostalloc,
        "mempin": devmem.mempin,
        "get_memory_info": devmem.get_memory_info,
    }.items():
        _patch(devices.FakeCUDAContext, name, fn)
    _patch(devicearray, "MappedNDArray", devmem.StrictMappedNDArray)
    for name, value in arrays.PATCHES.items():
        _patch(devicearray.FakeCUDAArray, name, value)
    _patch(FakeCUDAKernel, "__getitem__", launch.kernel_getitem)
    _patch(FakeCUDAKernel, "forall", launch.kernel_forall)


def _uninstall() -> None:
    while _saved:
        obj, name, value = _saved.pop()
        if value is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, value)


def enable(
    seed: int | None = None, device_memory: int | None = None, per_thread: bool = False
) -> Any:
    """Turn strict mode on (again, nested) with a fresh state; return the state."""
    import numba

    if not numba.config.ENABLE_CUDASIM:  # type: ignore[attr-defined]  # (set at run time)
        raise RuntimeError(
            "strict mode runs on numba's CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 (or "
            "SMARTARRAY_STRICT=1) before numba.cuda is first imported"
        )
    if device_memory is not None and device_memory < 0:
        raise ValueError(f"device_memory must be a number of bytes >= 0, got {device_memory!r}")
    previous = _state.get()
    if previous is not None:
        previous.scheduler.run_all()
    else:
        _install()
    _stack.append(previous)
    st = _state.StrictState(seed, device_memory, per_thread)
    _state.set_current(st)
    return st


def disable() -> None:
    """Run the work still queued, then restore the previous mode."""
    st = _state.get()
    try:
        if st is not None:
            st.scheduler.run_all()
    finally:
        previous = _stack.pop()
        _state.set_current(previous)
        if previous is None:
            _uninstall()
