"""The benchmark suite of a source checkout: ``python -m benchmarks [--quick] [--json PATH]
[--markdown]``, run from the checkout's root (``smartarray bench`` runs it so, in a child).

The runner picks the CUDA target first (a GPU, else the simulator; ``SMARTARRAY_FAKE_GPU=1``
for the fake driver) with smartarray's own logic (:func:`smartarray.__main__.run_on_target`),
then runs every workload of :mod:`workloads` under every strategy of :mod:`strategies`, then
the micro-benchmarks (``bench_*.py``, each also runnable as a script), and prints the tables.
See ``suite.py`` for the JSON layout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smartarray.__main__ import run_on_target

HERE = Path(__file__).resolve().parent
#: The package this runner is (``benchmarks``), for the restart on the simulator.
PACKAGE = __spec__.parent if __spec__ is not None else HERE.name


def _json_path(text: str) -> Path:
    """An argparse type: a file path whose folder exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(path.parent)!r} does not exist")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Run every workload of benchmarks/ under four transfer strategies (numba's "
            "automatic copies, hand-written, whole-array dirty flags, smartarray) and the "
            "overhead micro-benchmarks; print a table."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="CI-sized runs (under a minute)")
    parser.add_argument(
        "--json", type=_json_path, metavar="PATH", help="also write the figures to PATH as JSON"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the tables as Markdown (to paste into an issue or a pull request)",
    )
    return parser


def _load_suite() -> Any:
    """Import ``suite.py`` of this folder."""
    # The benchmark modules import each other as top-level modules, as when run as scripts.
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import suite

    return suite


def _run(args: argparse.Namespace, target: str) -> int:
    suite = _load_suite()
    # A full run prints nothing for a while (its tables come at the end): say so up front.
    duration = "under a minute" if args.quick else "about 40 s on the simulator, longer on 2 cores"
    print(
        f"smartarray bench: running every workload under four strategies, then the overhead "
        f"micro-benchmarks; this takes {duration} before the tables print",
        file=sys.stderr,
        flush=True,
    )
    report = suite.run(quick=args.quick, target=target, progress=True)
    if args.markdown:
        print(suite.format_markdown(report))
    else:
        print(suite.format_report(report))  # says under its table if seconds are simulated
    if args.json is not None:
        try:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            print(f"smartarray: cannot write {args.json}: {exc}", file=sys.stderr)
            return 1
        print(f"\nfigures written to {args.json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; return the exit status (1 when the CUDA target fails, with the
    same message as ``python -m smartarray``; 130 on Ctrl-C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    return run_on_target(argv, lambda target: _run(args, target), module=PACKAGE)


if __name__ == "__main__":
    sys.exit(main())
