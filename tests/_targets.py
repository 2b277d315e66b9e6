"""The environment of a child process: on numba-cuda's real target, and importing this checkout.

Without a GPU, numba-cuda's real (non-simulator) code still types, compiles to PTX and
dispatches: tests check those paths in a child process, which must not inherit the
simulator's switch nor strict mode's (which selects the simulator itself).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout's root: a child process imports this smartarray (and tests/) from it.
ROOT = Path(__file__).resolve().parent.parent

# The fake driver too: these children check numba-cuda with no driver at all (and the note
# tests/conftest.py leaves pytest-xdist's workers, for a child that runs pytest).
_SIMULATOR_SWITCHES = (
    "NUMBA_ENABLE_CUDASIM",
    "SMARTARRAY_STRICT",
    "SMARTARRAY_FAKE_GPU",
    "SMARTARRAY_TEST_WORKERS_ON_FAKE_GPU",
    "PYTEST_XDIST_WORKER",
)


def real_target_env() -> dict[str, str]:
    """``os.environ`` without the switches that would put the child on the simulator."""
    return {k: v for k, v in os.environ.items() if k not in _SIMULATOR_SWITCHES}


def with_checkout(env: dict[str, str]) -> dict[str, str]:
    """``env`` (changed in place, and returned) with the checkout's root first on PYTHONPATH,
    what was there kept after it (an environment whose packages come from PYTHONPATH)."""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env
