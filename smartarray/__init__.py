"""smartarray: arrays with a host and a device copy, kept coherent down to byte ranges.

The low-level primitives have the signatures of numba.cuda's reference pages; every byte
they move is counted (:func:`stats`, :func:`trace`).
"""

from ._version import __version__
from .array import SmartArray
from .errors import (
    CoherenceError,
    PerformanceWarning,
    RegistrationError,
    SmartArrayError,
    SmartArrayWarning,
    TransferError,
    TransferGuardError,
)
from .guard import transfer_guard
from .hints import In, InOut, Out
from .memory import (
    deregister,
    device_array,
    device_array_like,
    mapped,
    mapped_array,
    pinned,
    pinned_array,
    register,
    stream,
    to_device,
)
from .stats import (
    Trace,
    TransferEvent,
    TransferStats,
    enable_nvtx,
    reset_stats,
    stats,
    trace,
)

__all__ = [
    "CoherenceError",
    "In",
    "InOut",
    "Out",
    "PerformanceWarning",
    "RegistrationError",
    "SmartArray",
    "SmartArrayError",
    "SmartArrayWarning",
    "Trace",
    "TransferError",
    "TransferEvent",
    "TransferGuardError",
    "TransferStats",
    "__version__",
    "deregister",
    "device_array",
    "device_array_like",
    "enable_nvtx",
    "mapped",
    "mapped_array",
    "pinned",
    "pinned_array",
    "register",
    "reset_stats",
    "stats",
    "stream",
    "to_device",
    "trace",
    "transfer_guard",
]
