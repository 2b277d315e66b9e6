"""Test session setup: pick the CUDA target before numba.cuda is first imported.

With no CUDA driver on the machine, the whole suite runs on the numba CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``); tests marked ``gpu`` need a real device and are skipped
there. An explicit ``NUMBA_ENABLE_CUDASIM`` in the environment always wins.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _cuda_driver_present() -> bool:
    """Whether a working CUDA driver and device are present.

    Asked in a child process: numba.cuda decides between the simulator and the real target
    once, on first import, so this process must not import it before the choice is made.
    A loadable ``libcuda`` alone is not enough (toolkits ship a stub).
    """
    probe = "from numba import cuda; print(cuda.is_available())"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip().endswith("True")


def _switched_on(name: str) -> bool:
    """An environment switch read as smartarray reads it (smartarray._platform.environment)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


#: What this file leaves for pytest-xdist's workers, which start after it removed
#: ``SMARTARRAY_FAKE_GPU`` (below); only a worker reads it (``PYTEST_XDIST_WORKER``).
_WORKERS_ON_FAKE_GPU = "SMARTARRAY_TEST_WORKERS_ON_FAKE_GPU"

#: The fake CUDA driver for the whole session (``SMARTARRAY_FAKE_GPU=1``): numba-cuda's real
#: target over smartarray's fake ``libcuda.so.1``, loaded before numba.cuda is imported.
FAKE_GPU = _switched_on("SMARTARRAY_FAKE_GPU") or (
    "PYTEST_XDIST_WORKER" in os.environ and os.environ.get(_WORKERS_ON_FAKE_GPU) == "1"
)
if FAKE_GPU:
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    os.environ["SMARTARRAY_FAKE_GPU"] = "1"  # (a worker: smartarray reads the switch)
    import smartarray  # noqa: F401  (loads the fake driver first)

    # This process has it; child processes the tests start choose their own target.
    del os.environ["SMARTARRAY_FAKE_GPU"]
    os.environ[_WORKERS_ON_FAKE_GPU] = "1"
elif "NUMBA_ENABLE_CUDASIM" not in os.environ and not _cuda_driver_present():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

#: Strict mode for the whole session (``SMARTARRAY_STRICT=1``): smartarray turns it on when it is
#: imported, on the simulator.
STRICT = _switched_on("SMARTARRAY_STRICT") and not FAKE_GPU
if STRICT:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"

#: Tests that fail in strict mode because smartarray has a defect a GPU would show (fixed on
#: other branches): marked xfail(strict=False) under SMARTARRAY_STRICT=1 only. Remove an entry
#: once its fix is merged.
STRICT_KNOWN_FAILURES: dict[str, str] = {}

#: Tests the fake CUDA driver cannot run, by the part of a GPU it does not model (skipped under
#: SMARTARRAY_FAKE_GPU=1 only, with the reason). Each names what is missing, never a defect.
FAKE_GPU_GAPS: dict[str, str] = {}

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
# On the fake driver every kernel (numba-cuda's own `d[:] = x` included) runs in Python, one
# thread per element: the state machines there check the real target's paths with fewer
# examples; the deep search runs in the simulator modes.
settings.register_profile(
    "fake_gpu",
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fake_gpu" if FAKE_GPU else "ci"))


@pytest.fixture(autouse=True)
def _strict_drain():
    """Under strict mode, run the device work a test left queued when it ends.

    A GPU runs queued work eventually; strict mode runs it when the host waits. Work nobody
    waited for runs here, so that a crash it causes is reported by the test that queued it.
    """
    yield
    if STRICT:
        from smartarray.testing import strict_state

        state = strict_state()
        if state is not None:
            state.scheduler.run_all()


@pytest.fixture(autouse=True)
def _fake_gpu_fault_cleared():
    """On the fake driver, a kernel fault is sticky as on a GPU: clear it after the test.

    A GPU process would have to restart; the session goes on instead, so that the fault fails
    only the test that caused it.
    """
    yield
    if FAKE_GPU:
        from smartarray import _fakegpu

        fake = _fakegpu.current()
        if fake is not None:
            with fake.lock:
                fake.clear_fault()


#: numba.cuda.random on the simulator warns by design (numba-cuda's own, expected): its
#: xoroshiro128p generator wraps uint64 arithmetic, which NumPy scalars report as overflow, and
#: its host-side state initialiser is compiled in object mode (``nopython=False``) there. The
#: kernels that draw numbers overflow the same way: tests/numba/test_numba_transfers.py and
#: tests/numba/test_ports.py mark those tests.
SIMULATOR_RANDOM_WARNINGS = (
    "ignore:overflow encountered in scalar:RuntimeWarning:numba.cuda.random",
    "ignore:The keyword argument 'nopython=False':numba.core.errors.NumbaDeprecationWarning",
    "ignore:\\s*Compilation is falling back to object mode:numba.core.errors.NumbaWarning",
)


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "error::smartarray.errors.SmartArrayWarning")
    if SIMULATOR:
        for line in SIMULATOR_RANDOM_WARNINGS:
            config.addinivalue_line("filterwarnings", line)
    if FAKE_GPU:
        # numba-cuda's real dispatcher warns of a grid under 128 blocks (GPU under-use): the
        # tests' grids are small on purpose (the fake driver runs kernels in Python).
        config.addinivalue_line(
            "filterwarnings", "ignore:Grid size \\d+ will likely result in GPU under-utilization"
        )


def pytest_report_header(config):
    if STRICT:
        seed = os.environ.get("SMARTARRAY_STRICT_SEED", "0")
        return (
            f"smartarray target: CUDA simulator in STRICT mode (SMARTARRAY_STRICT=1, seed {seed}); "
            f"gpu tests skipped; {len(STRICT_KNOWN_FAILURES)} known strict-mode failures xfailed"
        )
    if SIMULATOR:
        return "smartarray target: CUDA simulator (NUMBA_ENABLE_CUDASIM=1); gpu tests skipped"
    if FAKE_GPU:
        seed = os.environ.get("SMARTARRAY_FAKE_GPU_SEED", "0")
        return f"smartarray target: numba-cuda's real target on the FAKE CUDA driver (seed {seed})"
    return "smartarray target: real CUDA GPU"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the fake driver's seed at the end, also under ``-q`` (which hides the header):
    a failure of a stream test may show on one seed only."""
    if FAKE_GPU and "PYTEST_XDIST_WORKER" not in os.environ:
        seed = os.environ.get("SMARTARRAY_FAKE_GPU_SEED", "0")
        terminalreporter.write_line(
            f"fake CUDA driver: SMARTARRAY_FAKE_GPU_SEED={seed} (set it to rerun this order)"
        )


def pytest_collection_modifyitems(config, items):
    if not SIMULATOR:
        skip_strict = pytest.mark.skip(
            reason="turns strict mode on, which runs on numba's CUDA simulator only"
        )
        for item in items:
            # strict mode's own docstring examples turn it on, like the marked tests
            if item.get_closest_marker("strict_mode") is not None or item.nodeid.startswith(
                "smartarray/testing.py::"
            ):
                item.add_marker(skip_strict)
    if FAKE_GPU:
        for item in items:
            reason = FAKE_GPU_GAPS.get(item.nodeid)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=f"fake driver: {reason}"))
    else:
        # numba-cuda's own suite runs on the fake driver in a child whatever this session's
        # target: once per CI run (the fake-driver suite) is enough.
        skip_suite = pytest.mark.skip(
            reason="runs in the fake-driver suite (SMARTARRAY_FAKE_GPU=1)"
        )
        for item in items:
            if item.get_closest_marker("numba_suite") is not None:
                item.add_marker(skip_suite)
    if not SIMULATOR:
        return
    if STRICT:
        for item in items:
            reason = STRICT_KNOWN_FAILURES.get(item.nodeid)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=f"strict mode: {reason}", strict=False))
    skip_gpu = pytest.mark.skip(reason="needs a real CUDA GPU (running on the CUDA simulator)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)
