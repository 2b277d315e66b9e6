"""Command-line helpers of the scripts in ``examples/``: the CUDA target and sizes.

Every example takes the same options (``--n`` elements, ``--steps`` iterations, plus its own)
with help texts, and runs as written on a machine without a GPU: numba.cuda picks the
simulator or the real target once, when it is first imported, so a script that finds no
usable GPU starts itself again with ``NUMBA_ENABLE_CUDASIM=1`` (as ``python -m smartarray``
does) and then uses simulator-sized defaults, saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._platform import environment as _environment

__all__ = [
    "FAKE_DRIVER_TARGET",
    "Option",
    "fake_driver_on",
    "parse_example_args",
    "run_on_a_working_target",
]

# The same variable as smartarray.__main__: why the simulator was chosen.
_SIMULATOR_REASON = "_SMARTARRAY_SIMULATOR_REASON"


#: How the target is named where the fake CUDA driver runs numba-cuda's real target.
FAKE_DRIVER_TARGET = (
    "fake CUDA driver (SMARTARRAY_FAKE_GPU: numba-cuda's real target, kernels run in Python; "
    "no GPU)"
)


def fake_driver_on() -> bool:
    """Whether smartarray loaded its fake CUDA driver (``SMARTARRAY_FAKE_GPU``) in this process.

    Asked of the loaded module only: this never loads the fake driver.
    """
    fakegpu = sys.modules.get("smartarray._fakegpu")
    return fakegpu is not None and fakegpu.current() is not None


@dataclass(frozen=True)
class Option:
    """One command-line option of an example: ``--name``, with a GPU and a simulator default.

    Parameters
    ----------
    name : str
        The option (``--name``) and the attribute of the parsed arguments.
    help : str
        What it sets.
    gpu, simulator : int
        The default on a GPU and on the CUDA simulator or the fake CUDA driver (kernels run in
        Python there).
    aliases : tuple of str
        Other accepted spellings (earlier names of the option).
    """

    name: str
    help: str
    gpu: int
    simulator: int
    aliases: tuple[str, ...] = ()


def run_on_a_working_target(argv: Sequence[str] | None = None) -> str:
    """Make sure this script runs on a usable CUDA target; return a line saying which.

    With ``NUMBA_ENABLE_CUDASIM=1`` set, the simulator. Otherwise a working GPU, or, when there
    is none, the script (``sys.argv``, or ``argv``) is started again with
    ``NUMBA_ENABLE_CUDASIM=1``: numba.cuda cannot switch targets once imported.
    """
    if _environment.text("NUMBA_ENABLE_CUDASIM") == "1":
        reason = _environment.text(_SIMULATOR_REASON, "NUMBA_ENABLE_CUDASIM=1 was set")
        return f"CUDA simulator ({reason})"
    from numba import cuda

    if cuda.is_available():
        return FAKE_DRIVER_TARGET if fake_driver_on() else "CUDA GPU"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env[_SIMULATOR_REASON] = "no usable CUDA GPU or driver found"
    args = list(sys.argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args], env)
    raise AssertionError("unreachable")  # pragma: no cover


def _quiet_small_grids() -> None:
    """numba-cuda warns of a grid under 128 blocks (GPU under-use): the fake driver's sizes are
    small on purpose (kernels run in Python), so the warning says nothing there."""
    try:
        from numba.cuda.core import config  # type: ignore[import-not-found]  # redirected at run time
    except ImportError:  # a numba-cuda without that module warns as before
        return
    config.CUDA_LOW_OCCUPANCY_WARNINGS = False


def parse_example_args(
    doc: str, options: Sequence[Option], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse an example's command line, pick the CUDA target, fill in defaults for it.

    Options left out get the GPU default on a GPU and the (small) simulator default on the
    simulator and the fake CUDA driver; the target and the sizes chosen are printed first.
    """
    parser = argparse.ArgumentParser(
        description=doc.strip().splitlines()[0],
        epilog=(
            "Runs on a CUDA GPU when one works, else restarts itself on the numba CUDA "
            "simulator (NUMBA_ENABLE_CUDASIM=1) with small defaults."
        ),
    )
    for opt in options:
        parser.add_argument(
            f"--{opt.name}",
            *(f"--{a}" for a in opt.aliases),
            dest=opt.name,
            type=int,
            default=None,
            metavar=opt.name.upper(),
            help=f"{opt.help} (default: {opt.gpu} on a GPU, {opt.simulator} on the simulator "
            "and the fake CUDA driver)",
        )
    args = parser.parse_args(None if argv is None else list(argv))
    target = run_on_a_working_target()
    simulator = target.startswith("CUDA simulator")
    fake = target == FAKE_DRIVER_TARGET
    chosen: dict[str, Any] = {}
    for opt in options:
        if getattr(args, opt.name) is None:
            value = opt.simulator if simulator or fake else opt.gpu
            setattr(args, opt.name, value)
            chosen[opt.name] = value
    if fake:
        _quiet_small_grids()
    print(f"target: {target}")
    if chosen:
        kind = "simulator-sized" if simulator else "fake-driver-sized" if fake else "GPU-sized"
        sizes = " ".join(f"--{k} {v}" for k, v in chosen.items())
        print(f"defaults ({kind}): {sizes}")
    return args
