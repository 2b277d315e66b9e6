"""Driver entries for memory: allocation, page-locking, pointer attributes, copies, memset.

CUDA's rules for what is synchronous (the "API synchronization behavior" page), each taken
as far as it lets work stay queued: a copy that is not ``Async`` runs on the legacy default
stream; to host memory, or from page-locked host memory, it returns once done; from *pageable*
host memory it synchronises the legacy stream, reads the source at the call (a staging copy)
and returns with the transfer still queued; device to device, and ``cuMemsetD8`` of device
memory, it returns at once with the work queued. An ``Async`` copy from *pageable* host memory
reads the source at the call and one to pageable host memory returns once done; an ``Async``
copy from or to *page-locked* memory touches the host bytes only when it runs.

Page-locking is a context's: memory registered or allocated without ``PORTABLE`` is pageable
to other devices' contexts (their copies stage it), and kernel-accessible only where mapped.
Frees wait for the freeing context's device, not the others.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from ._errors import CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_INVALID_VALUE, CudaError
from ._memory import DEVICEMAP
from ._queue import Op, Stream
from ._state import DriverState

__all__ = ["MemoryEntries"]

_CU_MEMORYTYPE_HOST, _CU_MEMORYTYPE_DEVICE = 1, 2
_CU_MEM_ATTACH_GLOBAL, _CU_MEM_ATTACH_HOST = 1, 2


def _put(ptr: int, ctype: type, value: object) -> None:
    if not ptr:
        raise CudaError(CUDA_ERROR_INVALID_VALUE, "a NULL output pointer")
    ctypes.cast(ptr, ctypes.POINTER(ctype))[0] = value


class MemoryEntries(DriverState):
    """Mixin of :class:`~smartarray._fakegpu.driver.FakeDriver`."""

    # allocation -----------------------------------------------------------------------------
    def cuMemAlloc(self, p: int, nbytes: int) -> None:
        device = self._current_device()
        _put(p, ctypes.c_uint64, self.heaps[device].alloc(nbytes))
        if self.clock is not None:
            self.clock.allocated(nbytes, device)

    def cuMemFree(self, ptr: int) -> None:
        # A free waits for the freeing context's device (what drivers do; the API documents
        # no wait): other devices' queued work, even work using this memory, stays queued.
        self._wait_for_freeing_device()
        found = self.heaps.find(ptr)
        self.heaps.free(ptr)
        self.managed.pop(ptr, None)
        if self.clock is not None and found is not None:
            self.clock.freed(found[1])

    def cuMemAllocManaged(self, p: int, nbytes: int, flags: int) -> None:
        """Managed memory: the current device's memory, which the host may also touch (the
        fake's device memory is a host mapping) and every device's kernels may access (the
        devices report concurrent managed access). ``flags``: exactly one of
        ``CU_MEM_ATTACH_GLOBAL`` (1) and ``CU_MEM_ATTACH_HOST`` (2), else invalid."""
        if flags not in (_CU_MEM_ATTACH_GLOBAL, _CU_MEM_ATTACH_HOST):
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"cuMemAllocManaged flags {flags:#x}")
        device = self._current_device()
        ptr = self.heaps[device].alloc(nbytes)
        self.managed[ptr] = flags
        _put(p, ctypes.c_uint64, ptr)
        if self.clock is not None:
            self.clock.allocated(nbytes, device)

    def _wait_for_freeing_device(self) -> None:
        device = self._current_device()
        self._run(lambda: self.queue.synchronize_device(device))

    def cuMemAllocAsync(self, p: int, nbytes: int, stream: int | None) -> None:
        device = self.queue.stream(stream).device  # the stream's device, as CUDA allocates
        _put(p, ctypes.c_uint64, self.heaps[device].alloc(nbytes))

    def cuMemFreeAsync(self, ptr: int, stream: int | None) -> None:
        self.heaps.check(ptr, 0, "cuMemFreeAsync")
        self.queue.enqueue(self.queue.stream(stream), lambda: self.heaps.free(ptr), "free")

    # stream-ordered allocation (cuda.core's DeviceMemoryResource) --------------------------
    def cuDeviceGetDefaultMemPool(self, p: int, dev: int) -> None:
        _put(p, ctypes.c_void_p, self.mempools[self._device(dev)])

    cuDeviceGetMemPool = cuDeviceGetDefaultMemPool

    def _pool(self, pool: int | None) -> int:
        """The device of memory pool ``pool``."""
        for device, handle in self.mempools.items():
            if pool == handle:
                return device
        raise CudaError(CUDA_ERROR_INVALID_VALUE, f"memory pool {pool}")

    def cuMemPoolGetAttribute(self, pool: int | None, attr: int, value: int) -> None:
        device = self._pool(pool)
        # 1-3 are int flags (reuse policies, on); the rest are 64-bit byte counts.
        if attr <= 3:
            _put(value, ctypes.c_int, 1)
        else:
            _put(value, ctypes.c_uint64, self.heaps[device].used if attr >= 5 else 0)

    def cuMemPoolSetAttribute(self, pool: int | None, attr: int, value: int) -> None:
        self._pool(pool)

    def cuMemPoolTrimTo(self, pool: int | None, keep: int) -> None:
        self._pool(pool)

    def cuMemAllocFromPoolAsync(
        self, p: int, nbytes: int, pool: int | None, stream: int | None
    ) -> None:
        device = self._pool(pool)
        self.queue.stream(stream)
        _put(p, ctypes.c_uint64, self.heaps[device].alloc(nbytes))

    def cuMemGetInfo(self, free: int, total: int) -> None:
        heap = self.heaps[self._current_device()]
        _put(free, ctypes.c_size_t, heap.size - heap.used)
        _put(total, ctypes.c_size_t, heap.size)

    def cuMemGetAddressRange(self, pbase: int, psize: int, ptr: int) -> None:
        found = self.heaps.find(ptr)
        if found is None:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} is not device memory")
        if pbase:
            _put(pbase, ctypes.c_uint64, found[0])
        if psize:
            _put(psize, ctypes.c_size_t, found[1])

    def cuMemHostAlloc(self, p: int, nbytes: int, flags: int) -> None:
        device = self._current_device()
        _put(p, ctypes.c_void_p, self.host.allocate(nbytes, device, flags))
        if self.clock is not None:
            self.clock.page_locked(nbytes, device)

    def cuMemAllocHost(self, p: int, nbytes: int) -> None:
        self.cuMemHostAlloc(p, nbytes, 0)

    def cuMemFreeHost(self, ptr: int) -> None:
        self._wait_for_freeing_device()
        found = self.host.find(ptr)
        self.host.free(ptr)
        if self.clock is not None and found is not None:
            self.clock.unlocked(found[1])

    def cuMemHostRegister(self, ptr: int, nbytes: int, flags: int) -> None:
        if not ptr or not nbytes:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, "cuMemHostRegister of nothing")
        device = self._current_device()
        self.host.register(ptr, nbytes, device, flags)
        if self.clock is not None:
            self.clock.page_locked(nbytes, device)

    def cuMemHostUnregister(self, ptr: int) -> None:
        self._wait_for_freeing_device()
        found = self.host.find(ptr)
        self.host.unregister(ptr)
        if self.clock is not None and found is not None:
            self.clock.unlocked(found[1])

    def cuMemHostGetDevicePointer(self, p: int, ptr: int, flags: int) -> None:
        # Unified addressing: a mapped page-locked host range has the same address on the
        # device. The driver refuses memory locked without DEVICEMAP, and memory mapped for
        # another context only.
        entry = self.host.range_of(ptr)
        if entry is None or not entry.flags & DEVICEMAP:
            raise CudaError(
                CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} is not mapped page-locked host memory"
            )
        if not entry.mapped_for(self._current_device()):
            raise CudaError(
                CUDA_ERROR_INVALID_VALUE,
                f"{ptr:#x} was mapped for device {entry.device}'s context only (not PORTABLE)",
            )
        _put(p, ctypes.c_uint64, ptr)

    # pointer attributes ---------------------------------------------------------------------
    def _attribute(self, attribute: int, ptr: int) -> tuple[type, object]:
        dev = self.heaps.find(ptr)
        host = None if dev else self.host.find(ptr)
        found = dev or host
        if found is None:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"{ptr:#x} is not known to the driver")
        start, size = found
        # Device memory is its device's (context's); page-locked host memory the context's
        # that locked it.
        if dev:
            ordinal = self.heaps.device_of(ptr) or 0  # (dev: device_of knows it)
        else:
            ordinal = self.host.range_of(ptr).device  # type: ignore[union-attr]  # (host: found)
        ctx = self.contexts[ordinal]
        managed = bool(dev) and start in self.managed
        table = {
            1: (ctypes.c_void_p, ctx),  # CONTEXT
            2: (ctypes.c_uint, _CU_MEMORYTYPE_DEVICE if dev else _CU_MEMORYTYPE_HOST),
            3: (ctypes.c_uint64, ptr),  # DEVICE_POINTER
            4: (ctypes.c_void_p, ptr if not dev or managed else None),  # HOST_POINTER
            6: (ctypes.c_uint, 0),  # SYNC_MEMOPS
            7: (ctypes.c_ulonglong, start),  # BUFFER_ID
            8: (ctypes.c_int, int(managed)),  # IS_MANAGED
            9: (ctypes.c_int, ordinal),  # DEVICE_ORDINAL
            11: (ctypes.c_uint64, start),  # RANGE_START_ADDR
            12: (ctypes.c_size_t, size),  # RANGE_SIZE
            13: (ctypes.c_int, 1),  # MAPPED
            16: (ctypes.c_int, 0),  # IS_LEGACY_CUDA_IPC_CAPABLE
            17: (ctypes.c_void_p, None),  # MEMPOOL_HANDLE
        }
        if attribute not in table:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"pointer attribute {attribute}")
        return table[attribute]

    def cuPointerGetAttribute(self, data: int, attribute: int, ptr: int) -> None:
        ctype, value = self._attribute(attribute, ptr)
        _put(data, ctype, value)

    def cuPointerGetAttributes(self, n: int, attributes: int, data: int, ptr: int) -> None:
        attrs = ctypes.cast(attributes, ctypes.POINTER(ctypes.c_int))
        outs = ctypes.cast(data, ctypes.POINTER(ctypes.c_void_p))
        known = self.heaps.find(ptr) or self.host.find(ptr)
        for i in range(n):
            if known is None:  # CUDA: an unknown pointer reads as zeros, not an error
                if attrs[i] == 2:
                    _put(outs[i], ctypes.c_uint, 0)
                continue
            ctype, value = self._attribute(attrs[i], ptr)
            _put(outs[i], ctype, value)

    # copies ---------------------------------------------------------------------------------
    def _copy(
        self,
        dst: int,
        src: int,
        n: int,
        stream: Stream,
        label: str,
        wait: bool,
        keep: object = None,
        after: Sequence[Op] = (),
    ) -> None:
        """Queue a copy of ``n`` bytes; device ranges are checked now and again when it runs.

        Device memory of any device may be either end (unified addressing): a copy between
        two devices' memory is allowed with or without peer access, and counted.
        """
        for ptr, what in ((dst, "destination"), (src, "source")):
            if self.heaps.owns(ptr):
                self.heaps.check(ptr, n, f"{label} {what}")

        # Page-locked host ends the DMA reads or writes when it runs: unpinned before then
        # (cuMemHostUnregister, cuMemFreeHost), the copy is undefined on a GPU; here it faults.
        pins = [r for r in (self.host.range_of(dst), self.host.range_of(src)) if r is not None]

        def run() -> None:
            for ptr, what in ((dst, "destination"), (src, "source")):
                if self.heaps.owns(ptr):
                    self.heaps.check(ptr, n, f"{label} {what} (when it ran)")
            for pin in pins:
                if not self.host.live(pin):
                    raise CudaError(
                        CUDA_ERROR_ILLEGAL_ADDRESS,
                        f"{label}: the page-locked host memory at {pin.start:#x} was "
                        "unregistered or freed before the copy ran",
                    )
            ctypes.memmove(dst, src, n)
            del keep_alive[:]

        keep_alive = [keep]  # a staging buffer lives until the copy ran
        self.count_copy(dst, src, n)
        op = self.queue.enqueue(stream, run, label, after=after)
        if self.clock is not None:
            ends = [self.heaps.device_of(src), self.heaps.device_of(dst)]
            pageable = any(
                device is None and not self.host.page_locked(ptr, n, stream.device)
                for device, ptr in zip(ends, (src, dst), strict=True)
            )
            self.clock.copy(op, n, ends[0], ends[1], pageable and any(e is not None for e in ends))
        if wait:
            self._run(lambda: self.queue.run_until([op]))

    @staticmethod
    def _staged(src: int, n: int) -> tuple[int, object]:
        buf = ctypes.create_string_buffer(ctypes.string_at(src, n), max(n, 1))
        return ctypes.addressof(buf), buf

    def cuMemcpyHtoD(self, dst: int, src: int, n: int) -> None:
        legacy = self.queue.stream(0)
        if self.host.page_locked(src, n, self._current_device()):
            self._copy(dst, src, n, legacy, "HtoD", wait=True)  # synchronous from pinned memory
            return
        # Pageable: the legacy stream is synchronised, the source staged, and the call returns
        # with the DMA to the device still queued there.
        self._run(lambda: self.queue.synchronize(legacy))
        src, keep = self._staged(src, n)
        self._copy(dst, src, n, legacy, "HtoD", wait=False, keep=keep)

    def cuMemcpyDtoH(self, dst: int, src: int, n: int) -> None:
        self._copy(dst, src, n, self.queue.stream(0), "DtoH", wait=True)

    def cuMemcpyDtoD(self, dst: int, src: int, n: int) -> None:
        # No host-side synchronisation: the copy may still be queued on the legacy stream.
        self._copy(dst, src, n, self.queue.stream(0), "DtoD", wait=False)

    def cuMemcpy(self, dst: int, src: int, n: int) -> None:
        # Unified addressing: the rules of the copy's direction, read from the pointers.
        if self.heaps.owns(dst) and self.heaps.owns(src):
            self.cuMemcpyDtoD(dst, src, n)
        elif self.heaps.owns(dst):
            self.cuMemcpyHtoD(dst, src, n)
        else:
            self._copy(dst, src, n, self.queue.stream(0), "copy", wait=True)

    def cuMemcpyHtoDAsync(self, dst: int, src: int, n: int, stream: int | None) -> None:
        s = self.queue.stream(stream)
        keep = None
        if not self.host.page_locked(src, n, s.device):
            src, keep = self._staged(src, n)  # pageable: the bytes are taken now
        self._copy(dst, src, n, s, "HtoDAsync", wait=False, keep=keep)

    def cuMemcpyDtoHAsync(self, dst: int, src: int, n: int, stream: int | None) -> None:
        s = self.queue.stream(stream)
        pageable = not self.host.page_locked(dst, n, s.device)
        self._copy(dst, src, n, s, "DtoHAsync", wait=pageable)

    def cuMemcpyDtoDAsync(self, dst: int, src: int, n: int, stream: int | None) -> None:
        self._copy(dst, src, n, self.queue.stream(stream), "DtoDAsync", wait=False)

    def cuMemcpyAsync(self, dst: int, src: int, n: int, stream: int | None) -> None:
        s = self.queue.stream(stream)
        keep = None
        if not self.heaps.owns(src) and not self.host.page_locked(src, n, s.device):
            src, keep = self._staged(src, n)
        wait = not self.heaps.owns(dst) and not self.host.page_locked(dst, n, s.device)
        self._copy(dst, src, n, s, "copyAsync", wait=wait, keep=keep)

    def _memset(self, dst: int, value: int, n: int, stream: Stream, wait: bool) -> None:
        self.heaps.check(dst, n, "cuMemsetD8")

        def run() -> None:
            self.heaps.check(dst, n, "cuMemsetD8 (when it ran)")
            ctypes.memset(dst, value, n)

        op = self.queue.enqueue(stream, run, "memset")
        if self.clock is not None:
            self.clock.memset(op, n, self.heaps.device_of(dst) or 0)
        if wait:
            self._run(lambda: self.queue.run_until([op]))

    def cuMemsetD8(self, dst: int, value: int, n: int) -> None:
        # Device memory: asynchronous with respect to the host (only a memset of page-locked
        # host memory is synchronous, and the fake's memset targets device memory only).
        self._memset(dst, value, n, self.queue.stream(0), wait=False)

    def cuMemsetD8Async(self, dst: int, value: int, n: int, stream: int | None) -> None:
        self._memset(dst, value, n, self.queue.stream(stream), wait=False)
