"""ctypes prototypes of driver entry points, read from cuda-bindings' own ``cydriver.pxd``.

Reading the declarations the bindings were compiled against keeps every callback's argument
sizes right (an ``unsigned int`` flag, a 64-bit ``CUdeviceptr``, a ``size_t``) without a second,
hand-written copy of the CUDA headers.
"""

from __future__ import annotations

import ctypes
import functools
import re
from pathlib import Path

__all__ = ["prototype"]

_SCALARS = {
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "unsigned char": ctypes.c_ubyte,
    "unsigned short": ctypes.c_ushort,
    "short": ctypes.c_short,
    "size_t": ctypes.c_size_t,
    "unsigned long long": ctypes.c_ulonglong,
    "long long": ctypes.c_longlong,
    "cuuint64_t": ctypes.c_uint64,
    "cuuint32_t": ctypes.c_uint32,
    "float": ctypes.c_float,
    "CUdeviceptr": ctypes.c_uint64,
    "CUdevice": ctypes.c_int,
}


@functools.cache
def _declarations() -> tuple[dict[str, str], set[str]]:
    import cuda.bindings

    text = (Path(cuda.bindings.__file__).parent / "cydriver.pxd").read_text()
    decls = {
        m.group(1): m.group(2) for m in re.finditer(r"cdef CUresult (cu\w+)\((.*?)\) except", text)
    }
    handles = set(re.findall(r"ctypedef \w+\* (\w+)", text))
    handles |= set(re.findall(r"ctypedef void \(\*(\w+)\)", text))  # callbacks
    return decls, handles


def _ctype(decl: str, handles: set[str]) -> type:
    decl = decl.replace("const ", "").strip()
    if "*" in decl or "[" in decl:
        return ctypes.c_void_p
    words = decl.split()
    base = " ".join(words[:-1]) if len(words) > 1 else words[0]
    if base in _SCALARS:
        return _SCALARS[base]
    if base in handles or base.endswith(("Fn", "Callback")):
        return ctypes.c_void_p
    if base.startswith("CU"):  # an enum
        return ctypes.c_int
    raise TypeError(f"fake CUDA driver: no ctypes mapping for parameter {decl!r}")


@functools.cache
def prototype(name: str) -> type | None:
    """The ``CFUNCTYPE`` of driver entry ``name`` (``None`` when the bindings do not declare it)."""
    decls, handles = _declarations()
    params = decls.get(name)
    if params is None:
        return None
    argtypes = [_ctype(p, handles) for p in params.split(",") if p.strip() and p.strip() != "void"]
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)
