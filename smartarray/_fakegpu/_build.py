"""Building and loading the fake ``libcuda.so.1`` (the C shim of :mod:`smartarray._fakegpu`).

The shim is compiled on first use with the system's C compiler (``$CC``, else ``cc``/``gcc``)
into a cache directory keyed by a hash of its source, so an edited shim is rebuilt and a
cached one is reused. By hand::

    gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o libcuda.so.1 smartarray/_fakegpu/fake_cuda.c

then point ``SMARTARRAY_FAKE_GPU_LIB`` at the result.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .._platform import environment as _environment

__all__ = ["build", "load"]

_SOURCE = Path(__file__).with_name("fake_cuda.c")


def _cache_dir() -> Path:
    base = _environment.text("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "smartarray" / "fakegpu"


def _compiler() -> str:
    for name in (_environment.text("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise RuntimeError(
        "SMARTARRAY_FAKE_GPU needs a C compiler to build the fake CUDA driver: install gcc "
        "(or set CC), or build it by hand and set SMARTARRAY_FAKE_GPU_LIB to its path"
    )


def build() -> Path:
    """Path of the fake ``libcuda.so.1``, compiling it if no cached build matches the source."""
    override = _environment.text("SMARTARRAY_FAKE_GPU_LIB")
    if override:
        return Path(override)
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / key / "libcuda.so.1"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile to a temporary name and rename: two processes building at once both succeed.
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
    os.close(fd)
    cmd = [
        _compiler(),
        "-shared",
        "-fPIC",
        "-O1",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        tmp,
        str(_SOURCE),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"building the fake CUDA driver failed: {' '.join(cmd)}\n{done.stderr}")
    os.replace(tmp, target)
    return target


def load() -> ctypes.CDLL:
    """Load the shim globally under its soname, so a later ``dlopen("libcuda.so.1")`` finds it."""
    return ctypes.CDLL(str(build()), mode=ctypes.RTLD_GLOBAL)
