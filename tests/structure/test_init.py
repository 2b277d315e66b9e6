"""The public namespace: one surface, pinned."""

from __future__ import annotations

import smartarray as sa

PUBLIC = [
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


def test_all_is_sorted_and_pinned():
    assert sa.__all__ == sorted(sa.__all__)
    assert sa.__all__ == PUBLIC


def test_every_public_name_exists_and_is_documented():
    for name in sa.__all__:
        obj = getattr(sa, name)
        if name != "__version__":
            assert obj.__doc__, name


def test_errors_subclass_what_users_catch():
    assert issubclass(sa.RegistrationError, ValueError)
    assert issubclass(sa.TransferError, RuntimeError)
    assert issubclass(sa.CoherenceError, RuntimeError)
    assert issubclass(sa.TransferGuardError, RuntimeError)
    for cls in (sa.RegistrationError, sa.TransferError, sa.CoherenceError, sa.TransferGuardError):
        assert issubclass(cls, sa.SmartArrayError)
    assert issubclass(sa.SmartArrayWarning, UserWarning)
    assert issubclass(sa.PerformanceWarning, sa.SmartArrayWarning)
