"""The command line: ``python -m smartarray info``.

Being the entry point, it may choose the CUDA target before numba.cuda is first imported:
with no working CUDA driver it turns on the numba CUDA simulator and says so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

_SIMULATOR_REASON = "_SMARTARRAY_SIMULATOR_REASON"


def choose_target(argv: Sequence[str]) -> str:
    """Make sure a usable CUDA target runs; return a line saying which one.

    ``python -m smartarray`` imports the package (and so numba.cuda) before this code runs,
    and numba.cuda picks the simulator or the real target once, at import. With no usable GPU
    the command therefore starts itself again with ``NUMBA_ENABLE_CUDASIM=1``.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        reason = os.environ.get(_SIMULATOR_REASON, "NUMBA_ENABLE_CUDASIM=1 was set")
        return f"CUDA simulator ({reason})"
    from numba import cuda

    if cuda.is_available():
        return "CUDA GPU"
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env[_SIMULATOR_REASON] = "no usable CUDA GPU or driver found"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "smartarray", *argv], env)
    raise AssertionError("unreachable")  # pragma: no cover


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def info(target_line: str) -> dict[str, str]:
    """What this installation runs on, as label/value pairs."""
    import smartarray
    from smartarray import memory

    rows = {
        "smartarray": smartarray.__version__,
        "numba": _version("numba"),
        "numba-cuda": _version("numba-cuda"),
        "numpy": _version("numpy"),
        "wrapt": _version("wrapt"),
        "python": sys.version.split()[0],
        "target": target_line,
    }
    if memory.SIMULATOR:
        rows["device"] = "CUDA simulator (kernels run in Python threads)"
        rows["pinned memory"] = "emulated (ordinary host memory)"
        rows["mapped memory"] = "emulated (kernels address the host array directly)"
    else:
        from numba import cuda

        device = cuda.get_current_device()
        name = device.name.decode() if isinstance(device.name, bytes) else str(device.name)
        major, minor = device.compute_capability
        rows["device"] = f"{name} (compute capability {major}.{minor})"
        rows["pinned memory"] = "real (page-locked by the CUDA driver)"
        rows["mapped memory"] = "real (host memory mapped into the device address space)"
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m smartarray",
        description="smartarray: host and GPU copies of one array, kept coherent.",
    )
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser("info", help="versions, the CUDA target, and what memory is real")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    target = choose_target(argv)
    try:
        rows = info(target)
    except Exception as exc:  # a broken CUDA installation: say so, no traceback
        print(f"smartarray: cannot query the CUDA target: {exc}", file=sys.stderr)
        print("Set NUMBA_ENABLE_CUDASIM=1 to use the CUDA simulator instead.", file=sys.stderr)
        return 1
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
