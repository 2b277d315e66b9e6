"""The command line, run as a user runs it: in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_cli(*args: str, simulator: bool | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "smartarray", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("simulator", [True, None])
def test_info_lists_versions_and_target(simulator):
    out = run_cli("info", simulator=simulator)
    assert out.returncode == 0, out.stderr
    for label in ("smartarray", "numba", "numba-cuda", "numpy", "wrapt", "target", "device"):
        assert any(line.split()[0] == label for line in out.stdout.splitlines()), label
    if simulator or "CUDA simulator" in out.stdout:
        assert "pinned memory  emulated" in out.stdout
        assert "mapped memory  emulated" in out.stdout
    else:  # a real GPU: its name and compute capability
        assert "compute capability" in out.stdout


def test_no_command_prints_help_and_fails():
    out = run_cli(simulator=True)
    assert out.returncode == 2 and "info" in out.stdout


def test_unknown_command_is_a_clear_error():
    out = run_cli("frobnicate", simulator=True)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr and "Traceback" not in out.stderr
