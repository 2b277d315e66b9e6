"""The command line: ``smartarray info | demo | bench | run`` (or ``python -m smartarray ...``).

- ``--version``: the versions of smartarray, numba, numba-cuda and NumPy;
- ``info``: versions, the CUDA target, and which memory kinds are real (``--json`` for a
  machine-readable copy, e.g. to paste into a bug report);
- ``demo``: one iterative workload (2-D heat diffusion) run with numba's automatic copies,
  hand-written transfers and SmartArrays, with the bytes each moved (:mod:`smartarray._demo`);
- ``run SCRIPT [ARGS]``: run a script after smartarray is imported, so that
  ``SMARTARRAY_FAKE_GPU=1`` takes effect where the script imports numba first;
- ``bench``: the benchmark suite of a source checkout; the benchmarks own their runner
  (``python -m benchmarks``), which ``bench`` starts in a child process.

Being the entry point, it may choose the CUDA target before numba.cuda is first imported:
with no working CUDA driver it turns on the numba CUDA simulator and says so.
:func:`choose_target` and :func:`run_on_target` serve ``python -m benchmarks`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._cli import FAKE_DRIVER_TARGET, fake_driver_on
from ._platform import environment as _environment

_SIMULATOR_REASON = "_SMARTARRAY_SIMULATOR_REASON"

#: Where ``bench`` looks for the benchmarks' runner; by default ``benchmarks/`` next to the
#: package in a source checkout.
BENCHMARKS_ENV = "SMARTARRAY_BENCHMARKS_DIR"


def choose_target(argv: Sequence[str], module: str = "smartarray") -> str:
    """Make sure a usable CUDA target runs; return a line saying which one.

    ``python -m smartarray`` imports the package (and so numba.cuda) before this code runs,
    and numba.cuda picks the simulator or the real target once, at import. With no usable GPU
    the command therefore starts itself again with ``NUMBA_ENABLE_CUDASIM=1``.

    Parameters
    ----------
    argv : sequence of str
        The command's arguments, without the program name: the restart gets them again.
    module : str
        The module the command runs as (``python -m MODULE``), to restart it: ``"smartarray"``,
        or ``"benchmarks"`` for the benchmarks' runner.
    """
    if _environment.text("NUMBA_ENABLE_CUDASIM") == "1":
        reason = _environment.text(_SIMULATOR_REASON, "NUMBA_ENABLE_CUDASIM=1 was set")
        return f"CUDA simulator ({reason})"
    from numba import cuda

    if cuda.is_available():
        return FAKE_DRIVER_TARGET if fake_driver_on() else "CUDA GPU"
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env[_SIMULATOR_REASON] = "no usable CUDA GPU or driver found"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
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
        name = name.removesuffix(f" (cc {major}.{minor})")  # the fake driver's names say it
        rows["device"] = f"{name} (compute capability {major}.{minor})"
        if len(cuda.gpus) > 1:
            n = len(cuda.gpus)
            pairs = [f"{a}->{b}" for a, b in memory.peer_pairs()]
            rows["devices"] = f"{n} (each SmartArray keeps a copy per device that uses it)"
            rows["peer copies"] = ", ".join(pairs) or "none (copies go through the host)"
        if fake_driver_on():
            rows["pinned memory"] = (
                "emulated by the fake driver (ordinary host memory, not page-locked)"
            )
            rows["mapped memory"] = (
                "emulated by the fake driver (kernels read the host array; nothing is mapped)"
            )
        else:
            rows["pinned memory"] = "real (page-locked by the CUDA driver)"
            rows["mapped memory"] = "real (host memory mapped into the device address space)"
        rows["kernels"] = _kernel_compilation(major, minor)
    return rows


def _kernel_compilation(major: int, minor: int) -> str:
    """Whether numba-cuda compiles a kernel here: the first launch would fail otherwise, deep
    in numba-cuda (a NumPy newer than numba-cuda knows, say: numba-cuda 0.30.4 overloads
    ``np.row_stack``, which NumPy 2.5 removed)."""
    from numba import cuda

    def copy_one(x: Any) -> None:  # pragma: no cover - compiled, never called
        x[0] = x[1]

    try:
        cuda.compile_ptx(copy_one, "void(float64[:])", cc=(major, minor))
    except _toolkit_missing() as exc:
        first = str(exc).splitlines()[0][:120]
        return f"FAIL: CUDA toolkit libraries not found ({first}): install the cu13 extra"
    except Exception as exc:  # noqa: BLE001 - any failure is the check's answer
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        return f"FAIL: numba-cuda cannot compile a kernel ({text})"
    return f"compile (PTX for compute capability {major}.{minor})"


def _at_least(minimum: int) -> Any:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def benchmarks_dir() -> Path:
    """The ``benchmarks/`` folder of the source checkout this package runs from.

    ``$SMARTARRAY_BENCHMARKS_DIR`` overrides it. ``bench`` runs it as a package
    (``python -m benchmarks``) in the folder above it.
    """
    override = _environment.text(BENCHMARKS_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "benchmarks"


def _cuda_errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a missing or broken CUDA installation."""
    found: list[type[BaseException]] = []
    try:
        from numba.cuda.cudadrv import error

        for name in (
            "CudaSupportError",
            "CudaDriverError",
            "CudaRuntimeError",
            "NvvmError",
            "NvvmSupportError",
            "NvrtcError",
            "NvrtcSupportError",
            "CCSupportError",
        ):
            cls = getattr(error, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    except ImportError:  # the simulator has no driver errors to raise
        pass
    try:
        from numba.cuda.cudadrv.driver import CudaAPIError, LinkerError

        found += [CudaAPIError, LinkerError]
    except ImportError:
        pass
    return tuple(found)


def _toolkit_missing() -> tuple[type[BaseException], ...]:
    """The error of a CUDA toolkit library (NVRTC, NVVM, nvJitLink) not found: cuda.pathfinder's
    ``DynamicLibNotFoundError``, or nothing where cuda-pathfinder is absent."""
    try:
        from cuda.pathfinder import DynamicLibNotFoundError
    except ImportError:
        return ()
    return (DynamicLibNotFoundError,)


def _toolkit_failed(exc: BaseException) -> int:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(
        f"smartarray: numba-cuda's real target needs the CUDA toolkit libraries, not found "
        f"({first}): install them with the cu13 extra (from a clone of smartarray, "
        f"`pip install '.[cu13]'`; cu12 for a CUDA 12 driver), or set NUMBA_ENABLE_CUDASIM=1 "
        f"for the CUDA simulator",
        file=sys.stderr,
    )
    return 1


def _cuda_failed(exc: BaseException) -> int:
    print(f"smartarray: the CUDA target failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(
        "Check the CUDA driver and toolkit (`python -m smartarray info`), or set "
        "NUMBA_ENABLE_CUDASIM=1 to use the CUDA simulator instead.",
        file=sys.stderr,
    )
    return 1


def version_line() -> str:
    """``smartarray X (numba Y, numba-cuda Z, numpy W, python V)``, for ``--version``."""
    import smartarray

    deps = ", ".join(f"{d} {_version(d)}" for d in ("numba", "numba-cuda", "numpy"))
    return f"smartarray {smartarray.__version__} ({deps}, python {sys.version.split()[0]})"


class _VersionAction(argparse.Action):
    """``--version``: one unwrapped line (argparse's own action wraps it at the terminal width)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_line())
        parser.exit()


def _run_info(target: str, as_json: bool = False) -> int:
    try:
        rows = info(target)
    except Exception as exc:  # noqa: BLE001 - a broken CUDA installation: no traceback
        print(f"smartarray: cannot query the CUDA target: {exc}", file=sys.stderr)
        print("Set NUMBA_ENABLE_CUDASIM=1 to use the CUDA simulator instead.", file=sys.stderr)
        return 1
    if as_json:
        from smartarray import memory

        flags = {"simulator": bool(memory.SIMULATOR), "fake_driver": fake_driver_on()}
        print(json.dumps({**rows, **flags}, indent=2))
    else:
        width = max(len(k) for k in rows)
        for key, value in rows.items():
            print(f"{key:<{width}}  {value}")
    return 1 if any(value.startswith("FAIL") for value in rows.values()) else 0


#: Printed under the demo's table on the fake CUDA driver.
FAKE_DRIVER_TIMES_NOTE = (
    "* these seconds come from the fake CUDA driver (kernels run in Python):\n"
    "  they say nothing about a GPU. The transfers and bytes are what a GPU would move."
)


def _run_demo(args: argparse.Namespace, target: str) -> int:
    from smartarray import _demo

    traces: dict[str, Any] | None = {} if args.plot is not None else None
    report = _demo.run(
        size=args.size, steps=args.steps, every=args.every, progress=True, traces=traces
    )
    report = {"target": target, **report}
    if traces is not None:
        try:
            _demo.plot(traces, args.plot)
        except ImportError as exc:
            print(f"smartarray: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"smartarray: cannot write {args.plot}: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"smartarray demo: {report['workload']}")
        print(f"target: {target}")
        print()
        simulated = "simulator" in target.lower()
        fake = target == FAKE_DRIVER_TARGET
        print(_demo.format_table(report, simulator=simulated or fake))
        if simulated:
            print(_demo.SIMULATOR_TIMES_NOTE)
        elif fake:
            print(FAKE_DRIVER_TIMES_NOTE)
        print()
        verdict = "yes" if report["results_agree"] else "NO"
        print(
            f"results agree (np.allclose): {verdict} "
            f"(largest difference {report['max_difference']:.3g})"
        )
        if args.plot is not None:
            print(f"timelines drawn in {args.plot}")
    if not report["results_agree"]:
        print("smartarray: the three strategies computed different results", file=sys.stderr)
        return 1
    return 0


def _absolute_json(args: Sequence[str]) -> list[str]:
    """``args`` with the value of ``--json`` (or an abbreviation argparse accepts) made absolute:
    the runner runs in the checkout's root, and a relative path names a file where the user is."""
    out = list(args)
    for i, arg in enumerate(out):
        name, eq, value = arg.partition("=")
        if len(name) < 3 or not "--json".startswith(name):
            continue
        if eq and value:
            out[i] = f"{name}={os.path.abspath(value)}"
        elif not eq and i + 1 < len(out) and out[i + 1][:1] not in ("", "-"):  # a path
            out[i + 1] = os.path.abspath(out[i + 1])
    return out


def _delegate_bench(args: Sequence[str]) -> int:
    """``bench``: run ``python -m benchmarks ARGS`` in the checkout's root, in a child process
    (the same interpreter, this environment); return its exit status.

    The benchmarks own their runner and import each other as top-level modules: they stay out
    of this process (its ``sys.path`` and ``sys.modules``).
    """
    folder = benchmarks_dir()
    if not (folder / "__main__.py").is_file():
        print(
            f"smartarray: `bench` needs the benchmarks/ folder of a smartarray source checkout "
            f"(looked for {folder / '__main__.py'}). Clone the repository, install it with "
            f"`pip install -e .`, and run `python -m benchmarks` (or `smartarray bench`) from "
            f"there.",
            file=sys.stderr,
        )
        return 1
    root = folder.resolve().parent
    env = dict(os.environ)
    # The child imports the smartarray that runs this command, also when the folder is not
    # next to it ($SMARTARRAY_BENCHMARKS_DIR); in the checkout the root is the child's cwd.
    package_root = str(Path(__file__).resolve().parent.parent)
    if Path(package_root) != root:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", folder.name, *_absolute_json(args)]
    sys.stdout.flush()
    child = subprocess.Popen(command, cwd=root, env=env)
    try:
        status = child.wait()
    except KeyboardInterrupt:  # the child got the Ctrl-C too: it says so and exits
        status = child.wait()
    return 128 - status if status < 0 else status  # killed by a signal: as a shell says it


def run_on_target(
    argv: Sequence[str], body: Callable[[str], int], module: str = "smartarray"
) -> int:
    """Choose the CUDA target (:func:`choose_target`), then return ``body(target_line)``.

    A missing or broken CUDA installation raising from ``body`` is one message naming the
    ways out and exit status 1; Ctrl-C is ``interrupted`` and 130: no traceback. The commands
    that run kernels (``demo``, the benchmarks' runner) go through it.
    """
    target = choose_target(argv, module)
    errors = _cuda_errors()
    toolkit = _toolkit_missing()
    try:
        return body(target)
    except toolkit as exc:
        return _toolkit_failed(exc)
    except errors as exc:
        return _cuda_failed(exc)
    except KeyboardInterrupt:
        print("smartarray: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    """The command line's parser: ``info``, ``demo`` and ``bench``."""
    # The console command `smartarray` and `python -m smartarray` run the same main.
    prog = "smartarray" if Path(sys.argv[0]).name == "smartarray" else "python -m smartarray"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="smartarray: host and GPU copies of one array, kept coherent.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the versions of smartarray, numba, numba-cuda and NumPy, and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="command")
    info_cmd = commands.add_parser(
        "info", help="versions, the CUDA target, and what memory is real"
    )
    info_cmd.add_argument(
        "--json", action="store_true", help="print the same as a JSON object (for bug reports)"
    )
    demo = commands.add_parser(
        "demo",
        help="2-D heat diffusion three ways: numba's copies, hand-written, SmartArray",
        description=(
            "Run 2-D heat diffusion (a cuda.jit stencil, boundary rows set on the host every "
            "few steps) with numba's automatic copies, hand-written transfers and SmartArrays; "
            "check the results agree and print the transfers, bytes and time of each."
        ),
    )
    demo.add_argument(
        "--size",
        type=_at_least(3),
        default=48,
        metavar="N",
        help="grid of N x N float64 cells (default 48)",
    )
    demo.add_argument(
        "--steps", type=_at_least(1), default=100, metavar="K", help="kernel launches (default 100)"
    )
    demo.add_argument(
        "--every",
        type=_at_least(1),
        default=10,
        metavar="E",
        help="set the boundary rows on the host every E steps (default 10)",
    )
    demo.add_argument("--json", action="store_true", help="print the figures as JSON")
    demo.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help="draw the three strategies' transfer timelines side by side into PATH "
        "(e.g. out.png; needs matplotlib)",
    )
    run = commands.add_parser(
        "run",
        help="run a Python script after smartarray chose its target (SMARTARRAY_FAKE_GPU too)",
        usage=f"{prog} run SCRIPT [ARGS ...]",
        description=(
            "Run SCRIPT as `python SCRIPT ARGS` would (as __main__, with sys.argv set to "
            "SCRIPT ARGS), after smartarray was imported: SMARTARRAY_FAKE_GPU=1 and "
            "SMARTARRAY_STRICT=1 then take effect even where the script imports numba first."
        ),
    )
    run.add_argument("script", type=Path, help="the Python script to run")
    commands.add_parser(
        "bench",
        help="the benchmark suite: runs `python -m benchmarks` (a source checkout only)",
        usage=f"{prog} bench [--quick] [--json PATH] [--markdown]",
        description=(
            "Delegates to the benchmarks' own runner: runs `python -m benchmarks [options]` in "
            "the source checkout's root (the folder that holds benchmarks/, which "
            f"${BENCHMARKS_ENV} may name) as a child process, with this interpreter and "
            "environment, and exits with its status. The runner runs every workload of "
            "benchmarks/ under four transfer strategies (numba's automatic copies, "
            "hand-written, whole-array dirty flags, smartarray) and the overhead "
            "micro-benchmarks, and prints a table. The "
            "options are the runner's: --quick (CI-sized runs), --json PATH (also write the "
            "figures to PATH as JSON), --markdown (print the tables as Markdown); see "
            "`python -m benchmarks --help`."
        ),
    )
    return parser


def _run_script(script: str, args: Sequence[str]) -> int:
    """``run``: execute ``script`` as ``__main__`` with ``sys.argv = [script, *args]``.

    smartarray is imported already (``python -m smartarray`` imports the package first), so
    the fake driver or strict mode is chosen before the script's own imports.
    """
    import runpy

    if not os.path.isfile(script):
        print(f"smartarray run: no such script: {script}", file=sys.stderr)
        return 2
    sys.argv = [script, *args]
    # As `python script.py` does: the script's folder first on sys.path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and len(argv) > 1 and not argv[1].startswith("-"):
        return _run_script(argv[1], argv[2:])  # the script's own options are not ours
    # `bench` passes its options on to the benchmarks' runner, which parses them.
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "bench":  # the runner chooses the CUDA target in its own process
        return _delegate_bench(rest)
    if args.command == "run":  # `run --help`, or a script whose name starts with '-'
        return _run_script(str(args.script), rest)
    if args.command == "info":
        return _run_info(choose_target(argv), as_json=args.json)
    return run_on_target(argv, lambda target: _run_demo(args, target))


if __name__ == "__main__":
    sys.exit(main())
