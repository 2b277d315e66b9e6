"""A clear error where device work is first attempted without a CUDA target.

Without a GPU and without the simulator, numba.cuda fails at the first driver call with a long
``CudaSupportError`` ("Error at driver init: ...") that says nothing about the two ways out. Every
path to the device (a launch of any kernel, ``to_device``, pinned memory, streams, a
SmartArray's device copy) first asks numba's driver object for a driver function, through
``Driver.__getattr__``: that is the one chokepoint, so :func:`install` wraps it there and turns
numba's error into :class:`~smartarray.errors.NoDeviceError` (a subclass of it, numba's chained).
``Driver.__getattr__`` runs only the first time each driver function is asked for (numba then
caches the function on the instance), so a process with a GPU pays nothing per call.
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import NoDeviceError, _CudaSupportError

__all__ = ["install", "no_device_error"]

_WAYS_OUT = (
    "smartarray: no CUDA device is available, so device work (a kernel launch, to_device, "
    "pinned memory, a stream, a SmartArray's device copy) cannot run. Two ways out:\n"
    "  1. run on a machine with an NVIDIA GPU and its driver installed, or\n"
    "  2. use numba's CUDA simulator: set NUMBA_ENABLE_CUDASIM=1 (or SMARTARRAY_STRICT=1, the "
    "simulator with smartarray's strict checks) in the environment before numba.cuda is "
    "imported, e.g. `NUMBA_ENABLE_CUDASIM=1 python script.py`.\n"
    "numba.cuda said: "
)


def no_device_error(cause: BaseException) -> NoDeviceError:
    """The :class:`NoDeviceError` for numba's ``cause`` (chain it with ``raise ... from``)."""
    said = " ".join(str(cause).split())  # numba's message spans many lines
    return NoDeviceError(_WAYS_OUT + said)


def install() -> None:
    """Wrap numba-cuda's ``Driver.__getattr__`` once (real target only: the simulator has none)."""
    from numba.cuda.cudadrv import driver

    cls = getattr(driver, "Driver", None)
    if cls is None or getattr(cls.__getattr__, "_smartarray_no_device", False):
        return
    original = cls.__getattr__

    @functools.wraps(original)
    def __getattr__(self: Any, fname: str) -> Any:
        try:
            return original(self, fname)
        except NoDeviceError:
            raise
        except _CudaSupportError as exc:
            raise no_device_error(exc) from exc

    __getattr__._smartarray_no_device = True  # type: ignore[attr-defined]
    cls.__getattr__ = __getattr__
