"""The driver calls smartarray makes on its hot paths, through cuda-bindings directly.

numba-cuda's ``driver`` object wraps every call of the CUDA driver API: a debug log line, the
error code checked, the return tuple unpacked. On the fake driver that wrapper costs about as
much host time as the call itself through cuda-bindings (``bench_overhead.py``), and a host
read or a launch makes a few such calls. The functions here call the very functions numba-cuda
wraps (its module ``numba.cuda.cudadrv.driver`` imports cuda-bindings' driver module as
``binding``: the same entry points, the per-thread default stream resolved the same way) and
raise numba-cuda's ``CudaAPIError`` as its wrapper would. Everything else goes through
numba-cuda.

Off the simulator only (the simulator has no driver).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "context_of_thread",
    "event_record",
    "event_synchronize",
    "memcpy_dtoh",
    "memcpy_htod",
]

_binding: Any = None  # cuda-bindings' driver module, as numba-cuda imported it (see _driver)


def _driver() -> Any:
    global _binding
    if _binding is None:
        from numba.cuda.cudadrv import driver

        _binding = driver.binding
    return _binding


def _raise(name: str, error: Any) -> None:
    """Raise numba-cuda's error for a failed call, as its wrapper does."""
    from numba.cuda.cudadrv.driver import CudaAPIError

    raise CudaAPIError(error, f"Call to {name} results in {getattr(error, 'name', error)}")


def context_of_thread() -> int:
    """The calling thread's current context (``cuCtxGetCurrent``); 0: none."""
    error, context = (_binding or _driver()).cuCtxGetCurrent()
    if error:
        _raise("cuCtxGetCurrent", error)
    return int(context)


def event_record(event: Any, stream: int) -> None:
    """``cuEventRecord`` of numba-cuda's ``event`` on the stream whose handle is ``stream``
    (numba-cuda's ``_stream_handle``; 0: the default stream)."""
    (error,) = (_binding or _driver()).cuEventRecord(event.handle, stream)
    if error:
        _raise("cuEventRecord", error)


def event_synchronize(event: Any) -> None:
    """Block until numba-cuda's ``event`` happened (``cuEventSynchronize``)."""
    (error,) = (_binding or _driver()).cuEventSynchronize(event.handle)
    if error:
        _raise("cuEventSynchronize", error)


def memcpy_htod(device: int, host: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from host address ``host`` to device address ``device``: on the
    stream whose handle is ``stream`` (asynchronous), or with 0 synchronously as
    ``cuMemcpyHtoD`` (numba-cuda's rule for stream 0)."""
    _memcpy("cuMemcpyHtoD", device, host, nbytes, stream)


def memcpy_dtoh(host: int, device: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from device address ``device`` to host address ``host``, as
    :func:`memcpy_htod`."""
    _memcpy("cuMemcpyDtoH", host, device, nbytes, stream)


def _memcpy(name: str, target: int, source: int, nbytes: int, stream: int) -> None:
    if stream:
        name += "Async"
        (error,) = getattr(_binding or _driver(), name)(target, source, nbytes, stream)
    else:
        (error,) = getattr(_binding or _driver(), name)(target, source, nbytes)
    if error:
        _raise(name, error)
