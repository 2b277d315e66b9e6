"""Tests of smartarray._platform.no_device: device work without a CUDA target fails with a clear
error.

Each entry point runs in a child process on numba-cuda's real target (no simulator, no strict
mode, see ``tests/_targets.py``). On a machine with a GPU there is nothing to show: skipped.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests._targets import real_target_env

# The ways a user first attempts device work.
ENTRY_POINTS = {
    "cuda.jit launch": """
        from numba import cuda
        @cuda.jit
        def k(x):
            x[0] = 1
        k[1, 1](sa.SmartArray(np.zeros(3)))
    """,
    "smartarray.jit launch": """
        @sa.jit
        def k(x):
            x[0] = 1
        k[1, 1](sa.SmartArray(np.zeros(3)))
    """,
    "to_device": "sa.to_device(np.zeros(3))",
    "device_array": "sa.device_array(3)",
    "pinned=True": "sa.SmartArray(np.zeros(3), pinned=True)",
    "pinned_array": "sa.pinned_array(3)",
    "stream()": "sa.stream()",
    "a.gpu()": "sa.SmartArray(np.zeros(3)).gpu()",
    "where='gpu'": "sa.SmartArray(np.zeros(3), where='gpu')",
    "numba's own cuda.to_device": "from numba import cuda; cuda.to_device(np.zeros(3))",
}

CHILD = """
import warnings
warnings.simplefilter("ignore")
import numpy as np
import smartarray as sa
from numba import cuda
from numba.cuda.cudadrv.error import CudaSupportError
if cuda.is_available():
    print("gpu present")
    raise SystemExit(0)
try:
{body}
except BaseException as exc:
    print("type", type(exc).__name__)
    print("smartarray", isinstance(exc, sa.SmartArrayError))
    print("numba", isinstance(exc, CudaSupportError))
    print("cause", type(exc.__cause__).__name__)
    print("message", " ".join(str(exc).split()))
else:
    print("no error")
"""


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_device_work_without_a_target_names_both_ways_out(entry: str) -> None:
    body = textwrap.indent(textwrap.dedent(ENTRY_POINTS[entry]).strip(), "    ")
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(body=body)],
        env=real_target_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.startswith("gpu present"):
        pytest.skip("a CUDA device is present: device work succeeds")
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines.get("type") == "NoDeviceError", out.stdout
    assert lines["smartarray"] == "True"
    assert lines["numba"] == "True"  # what users of numba.cuda already catch
    assert lines["cause"] == "CudaSupportError"  # numba's error, chained
    message = lines["message"]
    assert "NVIDIA GPU and its driver" in message
    assert "NUMBA_ENABLE_CUDASIM=1" in message
    assert "SMARTARRAY_STRICT=1" in message
    assert "before numba.cuda is imported" in message


def test_is_available_still_answers_false_without_a_target() -> None:
    script = "import smartarray, numba.cuda as c; print(c.is_available())"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=real_target_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    if out.stdout.strip() == "True":
        pytest.skip("a CUDA device is present")
    assert out.stdout.strip() == "False"
