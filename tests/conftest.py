"""Test session setup: pick the CUDA target before numba.cuda is first imported.

With no CUDA driver on the machine, the whole suite runs on the numba CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``); tests marked ``gpu`` need a real device and are skipped
there. An explicit ``NUMBA_ENABLE_CUDASIM`` in the environment always wins.
"""

from __future__ import annotations

import ctypes
import os

import pytest


def _cuda_driver_present() -> bool:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _cuda_driver_present():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "thorough",
    max_examples=5000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header(config):
    if SIMULATOR:
        return "smartarray target: CUDA simulator (NUMBA_ENABLE_CUDASIM=1); gpu tests skipped"
    return "smartarray target: real CUDA GPU"


def pytest_collection_modifyitems(config, items):
    if not SIMULATOR:
        return
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU (running on the CUDA simulator)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
