"""Report the package's modules, classes and functions over the sizes a maintainer can hold in
their head: modules over 500 lines, class bodies over 400, functions over 80.

A report, never a gate: a size is a hint to look at a concept, not a reason to split it
(CONTRIBUTING.md, "The rules"). Run from the repository root::

    python tools/size_report.py
"""

from __future__ import annotations

import ast
import pathlib
import sys

MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 500, 400, 80
PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "smartarray"


def sizes(package: pathlib.Path) -> dict[str, int]:
    """Lines of what exceeds its size: ``path`` (a module), ``path:Name`` (a class or function)."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(package.parent).as_posix()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            found[where] = lines
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION_LINES
            else:
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found[f"{where}:{node.name}"] = length
    return found


def oversized(package: pathlib.Path) -> set[str]:
    """What exceeds the sizes (see :func:`sizes`)."""
    return set(sizes(package))


def main() -> int:
    found = sizes(PACKAGE)
    if not found:
        print("nothing over the sizes (modules 500, classes 400, functions 80 lines)")
    for where, lines in sorted(found.items()):
        print(f"{lines:5d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
