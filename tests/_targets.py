"""The environment of a child process that must run on numba-cuda's real target.

Without a GPU, numba-cuda's real (non-simulator) code still types, compiles to PTX and
dispatches: tests check those paths in a child process, which must not inherit the
simulator's switch nor strict mode's (which selects the simulator itself).
"""

from __future__ import annotations

import os

# The fake driver too: these children check numba-cuda with no driver at all.
_SIMULATOR_SWITCHES = ("NUMBA_ENABLE_CUDASIM", "SMARTARRAY_STRICT", "SMARTARRAY_FAKE_GPU")


def real_target_env() -> dict[str, str]:
    """``os.environ`` without the switches that would put the child on the simulator."""
    return {k: v for k, v in os.environ.items() if k not in _SIMULATOR_SWITCHES}
