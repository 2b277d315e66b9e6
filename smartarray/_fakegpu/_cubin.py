"""What a loaded cubin says of its kernels: the ``cuFuncGetAttribute`` values a driver reads.

numba-cuda links each kernel to a cubin (an ELF image for the device) with the CUDA toolkit's
own linker, on the host, and loads that. A driver answers kernel-property queries from it;
so does the fake: registers (``EIATTR_REGCOUNT``) and the local frame (``EIATTR_FRAME_SIZE``)
from ``.nv.info``, launch bounds (``EIATTR_MAX_THREADS``, from ``launch_bounds=``) from the
kernel's ``.nv.info.<name>``, static shared memory from ``.nv.shared.<name>`` (less the 1 KiB
that devices of compute capability 8.0 and later reserve in each block's window, which the
query does not count), and constant memory from the ``.nv.constant<bank>`` sections other
than bank 0 (the parameters).
"""

from __future__ import annotations

import struct

__all__ = ["elf_size", "function_attributes", "global_symbol"]

_ELF_MAGIC = b"\x7fELF"
_EIATTR_MAX_THREADS = 0x05
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04
_RESERVED_SHARED = 1024  # CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK (cc >= 8.0)
_SHT_SYMTAB = 2
_SHT_NOBITS = 8

#: CUfunction_attribute values answered from the image.
MAX_THREADS_PER_BLOCK, SHARED_SIZE_BYTES, CONST_SIZE_BYTES, LOCAL_SIZE_BYTES, NUM_REGS = range(5)


def elf_size(header: bytes) -> int | None:
    """Bytes of a 64-bit little-endian ELF image from its first 64 bytes (its section header
    table ends it), or ``None`` when ``header`` does not start one (PTX text, say)."""
    if len(header) < 64 or not header.startswith(_ELF_MAGIC) or header[4] != 2 or header[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", header, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
    return shoff + shentsize * shnum


def _sections(image: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of each section."""
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]

    def name(offset: int) -> str:
        start = names + offset
        return image[start : image.index(b"\0", start)].decode()

    return [(name(h[0]), h[1], h[4], h[5], h[6]) for h in raw]


def _records(data: bytes) -> list[tuple[int, bytes]]:
    """(attribute, value) of each ``EIATTR`` record: 4-byte headers (format, attribute, and a
    16-bit value, or a 16-bit size before that many bytes of value for ``EIFMT_SVAL``)."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr, short = struct.unpack_from("<BBH", data, pos)
        pos += 4
        if fmt == _EIFMT_SVAL:
            out.append((attr, data[pos : pos + short]))
            pos += short
        else:
            out.append((attr, struct.pack("<H", short)))
    return out


def function_attributes(image: bytes, name: str) -> dict[int, int]:
    """The attributes of kernel ``name`` that ``image`` (a cubin) records; empty when the
    image is not one this reads."""
    if elf_size(image[:64]) is None:
        return {}
    try:
        sections = _sections(image)
        symbol = _symbol_index(image, sections, name)
        found: dict[int, int] = {}
        for sname, _, offset, size, _ in sections:
            data = image[offset : offset + size]
            if sname == ".nv.info":  # per-function records: (symbol index, value)
                for attr, value in _records(data):
                    if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(value) == 8:
                        sym, amount = struct.unpack("<II", value)
                        if sym == symbol:
                            key = NUM_REGS if attr == _EIATTR_REGCOUNT else LOCAL_SIZE_BYTES
                            found[key] = amount
            elif sname == f".nv.info.{name}":
                for attr, value in _records(data):
                    if attr == _EIATTR_MAX_THREADS and len(value) == 12:
                        x, y, z = struct.unpack("<III", value)
                        found[MAX_THREADS_PER_BLOCK] = x * y * z
            elif sname == f".nv.shared.{name}":
                reserved = any(s[0].startswith(".nv.shared.reserved") for s in sections)
                found[SHARED_SIZE_BYTES] = max(0, size - (_RESERVED_SHARED if reserved else 0))
            elif sname.startswith(".nv.constant") and not sname.startswith(".nv.constant0"):
                bank = sname[len(".nv.constant") :]
                if "." not in bank or bank.endswith(f".{name}"):
                    found[CONST_SIZE_BYTES] = found.get(CONST_SIZE_BYTES, 0) + size
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return {}  # not a layout this reads: the driver's defaults answer
    found.setdefault(SHARED_SIZE_BYTES, 0)
    found.setdefault(CONST_SIZE_BYTES, 0)
    found.setdefault(LOCAL_SIZE_BYTES, 0)
    return found


def _symbol_index(image: bytes, sections: list[tuple[str, int, int, int, int]], name: str) -> int:
    """Index of symbol ``name`` in the image's symbol table (-1 if absent)."""
    for _, stype, offset, size, link in sections:
        if stype != _SHT_SYMTAB:
            continue
        strings = sections[link][2]
        for index in range(size // 24):
            (st_name,) = struct.unpack_from("<I", image, offset + index * 24)
            start = strings + st_name
            if image[start : image.index(b"\0", start)].decode() == name:
                return index
    return -1


def global_symbol(image: bytes, name: str) -> bytes | None:
    """The initial bytes of module global ``name`` (zeros for an uninitialised one), or
    ``None`` when ``image`` defines no such symbol (or is not a cubin)."""
    if elf_size(image[:64]) is None:
        return None
    try:
        sections = _sections(image)
        index = _symbol_index(image, sections, name)
        if index < 0:
            return None
        symtab = next(s for s in sections if s[1] == _SHT_SYMTAB)
        _, _, _, shndx, value, size = struct.unpack_from("<IBBHQQ", image, symtab[2] + 24 * index)
        if not 0 < shndx < len(sections) or size == 0:
            return None
        _, stype, offset, _, _ = sections[shndx]
        if stype == _SHT_NOBITS:
            return bytes(size)
        return image[offset + value : offset + value + size]
    except (struct.error, ValueError, IndexError, StopIteration, UnicodeDecodeError):
        return None
