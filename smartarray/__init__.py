"""smartarray: arrays with a host and a device copy, kept coherent down to byte ranges.

The low-level primitives have the signatures of numba.cuda's reference pages; every byte
they move is counted (:func:`stats`, :func:`trace`).
"""

from ._platform.environment import flag as _flag

if _flag("SMARTARRAY_FAKE_GPU"):
    # The fake CUDA driver must be loaded before numba.cuda picks its target and driver.
    from ._fakegpu import enable as _enable_fake_gpu

    _enable_fake_gpu()
elif _flag("SMARTARRAY_STRICT"):
    # Strict mode runs on the CUDA simulator, which must be chosen before numba.cuda loads.
    from ._strict import select_simulator as _select_simulator

    _select_simulator()

from ._array import record as _record  # noqa: F401 - registers the record view class
from ._distributed.partition import DeviceBlock, decompose
from ._engine.auto_pin import pinned_budget, set_pinned_budget
from ._engine.budget import device_budget, empty_cache, resident, set_device_budget
from ._interop.foreign import as_cuda_array, is_cuda_array
from ._like import empty_like, zeros_like
from ._numba.copy_counting import count_all_transfers
from ._platform import no_device as _no_device
from ._version import __version__
from .array import SmartArray
from .coherence import NVLINK_C2C, PCIE5_X16, TransferCost, set_transfer_cost, transfer_cost
from .errors import (
    CoherenceError,
    DeviceMemoryError,
    NoDeviceError,
    PerformanceWarning,
    RegistrationError,
    SmartArrayError,
    SmartArrayWarning,
    TransferError,
    TransferGuardError,
)
from .guard import transfer_guard
from .hints import In, InOut, Out
from .jit import explain, jit, njit
from .memory import (
    deregister,
    device_array,
    device_array_like,
    mapped,
    mapped_array,
    peer_pairs,
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

# Where numba.cuda finds no target, device work fails with a smartarray error naming the ways out.
_no_device.install()

if _flag("SMARTARRAY_STRICT"):
    from .testing import _enable_from_environment

    _enable_from_environment()

__all__ = [
    "CoherenceError",
    "DeviceBlock",
    "DeviceMemoryError",
    "In",
    "InOut",
    "NVLINK_C2C",
    "NoDeviceError",
    "Out",
    "PCIE5_X16",
    "PerformanceWarning",
    "RegistrationError",
    "SmartArray",
    "SmartArrayError",
    "SmartArrayWarning",
    "Trace",
    "TransferCost",
    "TransferError",
    "TransferEvent",
    "TransferGuardError",
    "TransferStats",
    "__version__",
    "as_cuda_array",
    "count_all_transfers",
    "decompose",
    "deregister",
    "device_array",
    "device_array_like",
    "device_budget",
    "empty_cache",
    "empty_like",
    "enable_nvtx",
    "explain",
    "is_cuda_array",
    "jit",
    "mapped",
    "mapped_array",
    "njit",
    "peer_pairs",
    "pinned",
    "pinned_array",
    "pinned_budget",
    "register",
    "reset_stats",
    "resident",
    "set_device_budget",
    "set_pinned_budget",
    "set_transfer_cost",
    "stats",
    "stream",
    "to_device",
    "trace",
    "transfer_cost",
    "transfer_guard",
    "zeros_like",
]
