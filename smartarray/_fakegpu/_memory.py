"""Device memory and host page-locking of the fake CUDA driver.

Each device's memory comes from an anonymous mapping of its own, apart from every host
allocation and from the other devices' memory, so a device pointer is never a valid host
pointer, nor another device's, by accident. Freed blocks are poisoned (``0xDB``) and
leave the table of live allocations, so a copy or a kernel that touches them fails with
``CUDA_ERROR_ILLEGAL_ADDRESS`` / ``CUDA_ERROR_INVALID_VALUE`` instead of reading stale bytes.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap

from .._platform import environment as _environment
from ._errors import (
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_OUT_OF_MEMORY,
    CudaError,
)

__all__ = ["DeviceHeap", "DeviceHeaps", "HostRegistry"]

_ALIGN = 256
POISON = 0xDB


def _bytes(text: str) -> int:
    text = text.strip().upper()
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if text.endswith((suffix, suffix + "B", suffix + "IB")):
            return int(float(text.rstrip("IB").rstrip(suffix)) * scale)
    return int(text)


def device_sizes(count: int, default: int = 1 << 30) -> list[int]:
    """Each device's memory from ``SMARTARRAY_FAKE_GPU_MEMORY``.

    One size applies to every device; a comma-separated list gives device 0, 1, ... theirs,
    its last entry repeating for the devices after it (``64M,32M``).
    """
    value = _environment.text("SMARTARRAY_FAKE_GPU_MEMORY")
    if not value:
        return [default] * count
    try:
        sizes = [_bytes(part) for part in value.split(",")]
    except ValueError:
        raise ValueError(
            f"SMARTARRAY_FAKE_GPU_MEMORY={value!r}: expected a size (1G, 512M, 65536) or a "
            "comma-separated list of sizes, one per device"
        ) from None
    if any(size <= 0 for size in sizes):
        raise ValueError(f"SMARTARRAY_FAKE_GPU_MEMORY={value!r}: sizes must be positive")
    return [sizes[min(i, len(sizes) - 1)] for i in range(count)]


class DeviceHeap:
    """First-fit allocator over one mapping of ``size`` bytes: one device's memory."""

    def __init__(self, size: int = 1 << 30) -> None:
        self.size = size
        self._map = mmap.mmap(-1, self.size)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._starts: list[int] = []  # sorted starts of live allocations
        self._sizes: dict[int, int] = {}
        self.used = 0

    def alloc(self, nbytes: int) -> int:
        if nbytes == 0:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes")
        need = -(-nbytes // _ALIGN) * _ALIGN
        cursor = self.base
        for start in self._starts:
            if start - cursor >= need:
                break
            cursor = start + (-(-self._sizes[start] // _ALIGN) * _ALIGN)
        if cursor + need > self.base + self.size:
            raise CudaError(CUDA_ERROR_OUT_OF_MEMORY, f"fake device has no {nbytes} bytes free")
        bisect.insort(self._starts, cursor)
        self._sizes[cursor] = nbytes
        self.used += need
        return cursor

    def free(self, ptr: int) -> None:
        size = self._sizes.pop(ptr, None)
        if size is None:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuMemFree of {ptr:#x}: not an allocation")
        self._starts.remove(ptr)
        self.used -= -(-size // _ALIGN) * _ALIGN
        ctypes.memset(ptr, POISON, size)

    def find(self, ptr: int) -> tuple[int, int] | None:
        """``(start, size)`` of the live allocation holding ``ptr``."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        start = self._starts[i]
        size = self._sizes[start]
        return (start, size) if ptr < start + max(size, 1) else None

    def owns(self, ptr: int) -> bool:
        return self.base <= ptr < self.base + self.size

    def check(self, ptr: int, nbytes: int, what: str) -> None:
        """Raise unless ``[ptr, ptr + nbytes)`` lies in one live allocation."""
        found = self.find(ptr)
        if found is None or ptr + nbytes > found[0] + found[1]:
            state = "freed or never allocated" if self.owns(ptr) else "not device memory"
            raise CudaError(
                CUDA_ERROR_INVALID_VALUE, f"{what}: {nbytes} bytes at {ptr:#x} ({state})"
            )


class DeviceHeaps:
    """The memory of every fake device: one :class:`DeviceHeap` (one mapping) each.

    With unified addressing a pointer names its device: the lookups here find the heap that
    holds it, whichever device is current.
    """

    def __init__(self, sizes: list[int]) -> None:
        self.heaps = [DeviceHeap(size) for size in sizes]

    def __getitem__(self, device: int) -> DeviceHeap:
        return self.heaps[device]

    def device_of(self, ptr: int) -> int | None:
        """The device whose memory ``ptr`` lies in (freed or live), or ``None``."""
        for device, heap in enumerate(self.heaps):
            if heap.owns(ptr):
                return device
        return None

    def owns(self, ptr: int) -> bool:
        return self.device_of(ptr) is not None

    def find(self, ptr: int) -> tuple[int, int] | None:
        """``(start, size)`` of the live allocation holding ``ptr``, on any device."""
        device = self.device_of(ptr)
        return None if device is None else self.heaps[device].find(ptr)

    def check(self, ptr: int, nbytes: int, what: str) -> None:
        """Raise unless ``[ptr, ptr + nbytes)`` lies in one live allocation of one device."""
        device = self.device_of(ptr)
        (self.heaps[0] if device is None else self.heaps[device]).check(ptr, nbytes, what)

    def free(self, ptr: int) -> None:
        device = self.device_of(ptr)
        (self.heaps[0] if device is None else self.heaps[device]).free(ptr)


#: ``cuMemHostAlloc`` / ``cuMemHostRegister`` flags (both enums share these two values).
PORTABLE = 0x1
DEVICEMAP = 0x2
WRITECOMBINED = 0x4  # cuMemHostAlloc
IOMEMORY = 0x4  # cuMemHostRegister
READ_ONLY = 0x8  # cuMemHostRegister


class HostRange:
    """One page-locked host range: who page-locked it, and how."""

    __slots__ = ("allocated", "device", "flags", "keep", "size", "start")

    def __init__(
        self, start: int, size: int, allocated: bool, device: int, flags: int, keep: object
    ) -> None:
        self.start = start
        self.size = size
        self.allocated = allocated  # cuMemHostAlloc (True) or cuMemHostRegister (False)
        self.device = device  # the device of the context that page-locked it
        self.flags = flags
        self.keep = keep

    def covers(self, ptr: int, nbytes: int) -> bool:
        return self.start <= ptr and ptr + nbytes <= self.start + max(self.size, 1)

    def locked_for(self, device: int) -> bool:
        """Page-locked for ``device``'s context: the one that locked it, or all if PORTABLE."""
        return bool(self.flags & PORTABLE) or device == self.device

    def mapped_for(self, device: int) -> bool:
        """Whether kernels on ``device`` may touch it. Unified addressing maps every
        ``cuMemHostAlloc`` block into every device, whatever its flags; a registered range
        is mapped only with DEVICEMAP, into the registering context (every context if
        PORTABLE)."""
        if self.allocated:
            return True
        return bool(self.flags & DEVICEMAP) and self.locked_for(device)

    @property
    def read_only(self) -> bool:
        return not self.allocated and bool(self.flags & READ_ONLY)


class HostRegistry:
    """Page-locked host ranges: ``cuMemHostAlloc`` blocks and ``cuMemHostRegister`` ranges.

    As the driver API documents them: without ``PORTABLE`` a range is page-locked for the
    context that locked it only (other contexts copy it as pageable memory); a registered
    range is mapped for kernels only with ``DEVICEMAP``; ``READ_ONLY`` memory is read-only to
    the device; a range overlapping one already registered is refused.
    """

    def __init__(self) -> None:
        self._ranges: dict[int, HostRange] = {}  # start -> its range

    def allocate(self, nbytes: int, device: int = 0, flags: int = 0) -> int:
        if flags & ~(PORTABLE | DEVICEMAP | WRITECOMBINED):
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuMemHostAlloc flags {flags:#x}")
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        ptr = ctypes.addressof(buf)
        self._ranges[ptr] = HostRange(ptr, nbytes, True, device, flags, buf)
        return ptr

    def free(self, ptr: int) -> None:
        entry = self._ranges.get(ptr)
        if entry is None or not entry.allocated:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuMemFreeHost of {ptr:#x}")
        del self._ranges[ptr]

    def register(self, ptr: int, nbytes: int, device: int = 0, flags: int = 0) -> None:
        if flags & ~(PORTABLE | DEVICEMAP | READ_ONLY):
            # (IOMEMORY needs a third-party device's I/O space: never this fake's)
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuMemHostRegister flags {flags:#x}")
        end = ptr + nbytes
        for other in self._ranges.values():
            if other.start < end and ptr < other.start + max(other.size, 1):
                raise CudaError(
                    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                    f"cuMemHostRegister: [{ptr:#x}, {end:#x}) overlaps page-locked memory at "
                    f"{other.start:#x}",
                )
        self._ranges[ptr] = HostRange(ptr, nbytes, False, device, flags, None)

    def unregister(self, ptr: int) -> None:
        entry = self._ranges.get(ptr)
        if entry is None or entry.allocated:
            raise CudaError(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, f"{ptr:#x} is not registered")
        del self._ranges[ptr]

    def live(self, entry: HostRange) -> bool:
        """Whether ``entry`` is still page-locked (not unregistered or freed since)."""
        return self._ranges.get(entry.start) is entry

    def range_of(self, ptr: int) -> HostRange | None:
        """The page-locked range holding ``ptr``, whichever context locked it."""
        for entry in self._ranges.values():
            if entry.covers(ptr, 1):
                return entry
        return None

    def find(self, ptr: int) -> tuple[int, int] | None:
        entry = self.range_of(ptr)
        return None if entry is None else (entry.start, entry.size)

    def page_locked(self, ptr: int, nbytes: int, device: int) -> bool:
        """Whether ``[ptr, ptr + nbytes)`` is page-locked for ``device``'s context."""
        entry = self.range_of(ptr)
        return entry is not None and entry.covers(ptr, nbytes) and entry.locked_for(device)
