"""Write the intersphinx inventories of NumPy, numba and numba-cuda that the docs link to.

The documentation builds offline (CI has no network), so Sphinx reads these small vendored
inventories instead of downloading ``objects.inv`` from each project: only the objects the
pages name, with the addresses those projects' documentation gives them. Add a line below
when a page links to a new object, then run ``python docs/_inventories/make.py``;
``tests/structure/test_docs.py`` checks the files are what this script writes.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: project: (title, version, [(name, "domain:type", uri)]); ``$`` in a uri is the name.
INVENTORIES: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "numpy": (
        "NumPy",
        "2.1",
        [
            ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$"),
            ("numpy.asarray", "py:function", "reference/generated/numpy.asarray.html#$"),
            ("numpy.allclose", "py:function", "reference/generated/numpy.allclose.html#$"),
            ("numpy.empty", "py:function", "reference/generated/numpy.empty.html#$"),
        ],
    ),
    "numba": (
        "Numba",
        "0.61",
        [
            ("numba.jit", "py:function", "reference/jit-compilation.html#$"),
        ],
    ),
    "numba-cuda": (
        "Numba CUDA",
        "0.26",
        [
            ("numba.cuda.jit", "py:function", "reference/kernel.html#$"),
            ("numba.cuda.to_device", "py:function", "reference/memory.html#$"),
            ("numba.cuda.device_array", "py:function", "reference/memory.html#$"),
            ("numba.cuda.pinned_array", "py:function", "reference/memory.html#$"),
            ("numba.cuda.mapped_array", "py:function", "reference/memory.html#$"),
            (
                "numba.cuda.cudadrv.devicearray.DeviceNDArray",
                "py:class",
                "reference/memory.html#$",
            ),
        ],
    ),
}


def inventory(title: str, version: str, entries: list[tuple[str, str, str]]) -> bytes:
    """A Sphinx inventory (version 2): a text header, then zlib-compressed object lines."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {title}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{name} {kind} 1 {uri} -\n" for name, kind, uri in entries)
    return header.encode() + zlib.compress(body.encode(), 9)


def main(argv: list[str]) -> int:
    """Write the inventories (``--check``: only compare them with the committed files)."""
    stale = []
    for name, spec in INVENTORIES.items():
        data, path = inventory(*spec), HERE / f"{name}.inv"
        if "--check" in argv:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(path.name)
        else:
            path.write_bytes(data)
    for name in stale:
        print(f"docs/_inventories/{name} is out of date: run its make.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
