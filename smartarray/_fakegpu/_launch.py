"""Driver entries for streams, events, code (libraries, modules, kernels) and kernel launch."""

from __future__ import annotations

import ctypes
import sys
from types import FrameType

from . import _cubin, _kernels
from ._errors import (
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY,
    CudaError,
)
from ._queue import Op
from ._state import DriverState

__all__ = ["ExecutionEntries"]


def _put(ptr: int, ctype: type, value: object) -> None:
    if not ptr:
        raise CudaError(CUDA_ERROR_INVALID_VALUE, "a NULL output pointer")
    ctypes.cast(ptr, ctypes.POINTER(ctype))[0] = value


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


def _skipped() -> None:
    """A kernel whose body is not run (``run_kernels`` off)."""


# A compute capability 9.0 device's launch limits (block and grid dimensions).
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)
_FUNC_ATTRIBUTES = {0: 1024, 1: 0, 2: 0, 3: 0, 4: 32, 5: 90, 6: 90, 7: 1, 8: 49152}
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_STREAM_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


class ExecutionEntries(DriverState):
    """Mixin of :class:`~smartarray._fakegpu.driver.FakeDriver`."""

    # streams --------------------------------------------------------------------------------
    def cuStreamCreate(self, p: int, flags: int) -> None:
        self._context()  # the stream is the current context's (Queue.create_stream)
        _put(p, ctypes.c_void_p, self.queue.create_stream(flags).handle)

    def cuStreamCreateWithPriority(self, p: int, flags: int, priority: int) -> None:
        self.cuStreamCreate(p, flags)

    def cuStreamDestroy(self, stream: int | None) -> None:
        self.queue.destroy_stream(stream or 0)

    def cuStreamSynchronize(self, stream: int | None) -> None:
        s = self.queue.stream(stream)
        self._run(lambda: self.queue.synchronize(s))

    def _poll(self, op: Op | None) -> None:
        """A query of pending work: "not ready" once, then the work runs (a GPU gets there).

        Answering "not ready" forever would hang a host that polls; answering "ready" at once
        would hide a missing wait. With the clock, "not ready" also until the host's modelled
        time reached the work's modelled end: a query is no wait (each query's API cost moves
        the host on, so a polling host gets there too).
        """
        if op is None or op.done:
            return
        clock = self.clock
        if not op.polled or (clock is not None and op.end > clock.host):
            op.polled = True
            raise CudaError(CUDA_ERROR_NOT_READY, "work queued")
        self._run(lambda: self.queue.run_until([op]))

    def cuStreamQuery(self, stream: int | None) -> None:
        self._poll(self.queue.stream(stream).last)

    def cuStreamWaitEvent(self, stream: int | None, event: int | None, flags: int) -> None:
        s, e = self.queue.stream(stream), self.queue.event(event or 0)
        self.queue.enqueue(s, lambda: None, "wait_event", after=[e.op] if e.op else [])

    def cuStreamIsCapturing(self, stream: int | None, p: int) -> None:
        self.queue.stream(stream)
        _put(p, ctypes.c_int, 0)  # CU_STREAM_CAPTURE_STATUS_NONE: graphs are not modelled

    def cuStreamGetFlags(self, stream: int | None, p: int) -> None:
        _put(p, ctypes.c_uint, self.queue.stream(stream).flags)

    def cuStreamGetPriority(self, stream: int | None, p: int) -> None:
        self.queue.stream(stream)
        _put(p, ctypes.c_int, 0)

    def cuStreamGetCtx(self, stream: int | None, p: int) -> None:
        _put(p, ctypes.c_void_p, self.contexts[self.queue.stream(stream).device])

    def cuStreamGetId(self, stream: int | None, p: int) -> None:
        _put(p, ctypes.c_ulonglong, self.queue.stream(stream).handle)

    def cuStreamGetDevice(self, stream: int | None, p: int) -> None:
        _put(p, ctypes.c_int, self.queue.stream(stream).device)

    def cuLaunchHostFunc(self, stream: int | None, fn: int, data: int | None) -> None:
        call = _HOST_FN(fn)
        self.queue.enqueue(self.queue.stream(stream), lambda: call(data), "host_fn")

    def cuStreamAddCallback(
        self, stream: int | None, fn: int, data: int | None, flags: int
    ) -> None:
        call = _STREAM_CALLBACK(fn)
        handle = stream or 0
        self.queue.enqueue(self.queue.stream(stream), lambda: call(handle, 0, data), "callback")

    # events ---------------------------------------------------------------------------------
    def cuEventCreate(self, p: int, flags: int) -> None:
        self._context()
        _put(p, ctypes.c_void_p, self.queue.create_event(flags).handle)

    def cuEventDestroy(self, event: int | None) -> None:
        self.queue.event(event or 0)
        del self.queue.events[event or 0]

    def cuEventRecord(self, event: int | None, stream: int | None) -> None:
        e, s = self.queue.event(event or 0), self.queue.stream(stream)
        if e.device != s.device:
            # CUDA: "hEvent and hStream must be from the same context otherwise
            # CUDA_ERROR_INVALID_HANDLE is returned". Waiting on it from any device is legal.
            raise CudaError(
                CUDA_ERROR_INVALID_HANDLE,
                f"event of device {e.device} recorded on a stream of device {s.device}",
            )
        e.op = self.queue.enqueue(s, lambda: None, "record")

    def cuEventRecordWithFlags(self, event: int | None, stream: int | None, flags: int) -> None:
        self.cuEventRecord(event, stream)

    def cuEventSynchronize(self, event: int | None) -> None:
        e = self.queue.event(event or 0)
        self._run(lambda: self.queue.run_until([e.op]))

    def cuEventQuery(self, event: int | None) -> None:
        self._poll(self.queue.event(event or 0).op)

    def cuEventElapsedTime(self, p: int, start: int | None, end: int | None) -> None:
        if self.queue.event(start or 0).device != self.queue.event(end or 0).device:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "events of two devices")
        for h in (start, end):
            e = self.queue.event(h or 0)
            if e.op is None or not e.op.done:
                raise CudaError(CUDA_ERROR_NOT_READY, "event not completed")
        first, last = self.queue.event(start or 0).op, self.queue.event(end or 0).op
        elapsed = 0.0
        if self.clock is not None and first is not None and last is not None:
            elapsed = self.clock.elapsed_ms(first, last)
        _put(p, ctypes.c_float, elapsed)

    # code: libraries, modules, kernels -------------------------------------------------------
    def _load(self, p: int, image: int) -> None:
        if not image:
            raise CudaError(CUDA_ERROR_INVALID_VALUE, "no image")
        handle = next(self._handle_ids)
        # A cubin is kept: kernel-property queries read it (_cubin). Other images (PTX) are
        # not: their kernels answer the device's defaults.
        size = _cubin.elf_size(ctypes.string_at(image, 64))
        self.libraries[handle] = ctypes.string_at(image, size) if size else b""
        _put(p, ctypes.c_void_p, handle)

    def cuLibraryLoadData(self, p: int, code: int, *options: object) -> None:
        self._load(p, code)

    def cuModuleLoadData(self, p: int, image: int) -> None:
        self._load(p, image)

    def cuModuleLoadDataEx(self, p: int, image: int, *options: object) -> None:
        self._load(p, image)

    def cuLibraryUnload(self, lib: int | None) -> None:
        if self.libraries.pop(lib or 0, None) is None:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "library")

    cuModuleUnload = cuLibraryUnload

    def cuLibraryGetModule(self, p: int, lib: int | None) -> None:
        _put(p, ctypes.c_void_p, lib)

    def _get_kernel(self, p: int, lib: int | None, name: int) -> None:
        if (lib or 0) not in self.libraries:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "library")
        handle = next(self._handle_ids)
        self.kernels[handle] = ctypes.string_at(name).decode()
        self._kernel_attributes[handle] = _cubin.function_attributes(
            self.libraries[lib or 0], self.kernels[handle]
        )
        _put(p, ctypes.c_void_p, handle)

    def cuLibraryGetKernel(self, p: int, lib: int | None, name: int) -> None:
        self._get_kernel(p, lib, name)

    def cuModuleGetFunction(self, p: int, mod: int | None, name: int) -> None:
        self._get_kernel(p, mod, name)

    def cuKernelGetFunction(self, p: int, kernel: int | None) -> None:
        self._kernel_name(kernel)
        _put(p, ctypes.c_void_p, kernel)

    def _kernel_name(self, handle: int | None) -> str:
        name = self.kernels.get(handle or 0)
        if name is None:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "kernel")
        return name

    def cuKernelGetName(self, p: int, kernel: int | None) -> None:
        self._string_out(p, self._kernel_name(kernel))

    cuFuncGetName = cuKernelGetName

    def _global(self, dptr: int, nbytes: int, lib: int | None, name: int) -> None:
        text = ctypes.string_at(name).decode()
        if (lib or 0) not in self.libraries:
            raise CudaError(CUDA_ERROR_INVALID_HANDLE, "library")
        if text.endswith("__"):  # numba's exception globals (4-byte flags)
            initial: bytes | None = bytes(4)
        else:  # a global the cubin defines (NRT's memsys_size, say), with its initial bytes
            initial = _cubin.global_symbol(self.libraries[lib or 0], text)
        if initial is None:
            raise CudaError(CUDA_ERROR_NOT_FOUND, f"global {text}")
        if dptr:
            address = self.global_address(lib or 0, text, self._current_device(), initial)
            _put(dptr, ctypes.c_uint64, address)
        if nbytes:
            _put(nbytes, ctypes.c_size_t, len(initial))

    def global_address(self, lib: int, name: str, device: int, initial: bytes = bytes(4)) -> int:
        """Device address of a module's global ``name`` in ``device``'s context (``initial``
        its bytes when first asked): a library loaded in several contexts has a copy in
        each."""
        key = (lib, name, device)
        if key not in self.globals:
            self.globals[key] = self.heaps[device].alloc(len(initial))
            ctypes.memmove(self.globals[key], initial, len(initial))
        return self.globals[key]

    def cuLibraryGetGlobal(self, dptr: int, nbytes: int, lib: int | None, name: int) -> None:
        self._global(dptr, nbytes, lib, name)

    def cuModuleGetGlobal(self, dptr: int, nbytes: int, mod: int | None, name: int) -> None:
        self._global(dptr, nbytes, mod, name)

    def _function_attribute(self, attrib: int, func: int | None) -> int:
        """A kernel's attribute: what its cubin records, else an sm_90 device's default."""
        self._kernel_name(func)
        found = self._kernel_attributes.get(func or 0, {})
        if attrib == _MAX_DYNAMIC_SHARED and _cubin.SHARED_SIZE_BYTES in found:
            # The default opt-in limit: 48 KiB of static and dynamic shared memory together.
            return max(0, _FUNC_ATTRIBUTES[attrib] - found[_cubin.SHARED_SIZE_BYTES])
        return found.get(attrib, _FUNC_ATTRIBUTES.get(attrib, 0))

    def cuFuncGetAttribute(self, p: int, attrib: int, func: int | None) -> None:
        _put(p, ctypes.c_int, self._function_attribute(attrib, func))

    def cuKernelGetAttribute(self, p: int, attrib: int, kernel: int | None, dev: int) -> None:
        self.cuFuncGetAttribute(p, attrib, kernel)

    def cuFuncSetAttribute(self, func: int | None, attrib: int, value: int) -> None:
        self._kernel_name(func)

    def cuKernelSetAttribute(self, attrib: int, value: int, kernel: int | None, dev: int) -> None:
        self._kernel_name(kernel)

    def cuFuncSetCacheConfig(self, func: int | None, config: int) -> None:
        self._kernel_name(func)

    def cuKernelSetCacheConfig(self, kernel: int | None, config: int, dev: int) -> None:
        self._kernel_name(kernel)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(
        self, p: int, f: int | None, block: int, smem: int
    ) -> None:
        self._kernel_name(f)
        _put(p, ctypes.c_int, max(1, min(32, 2048 // max(block, 1))))

    def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        self, p: int, f: int | None, block: int, smem: int, flags: int
    ) -> None:
        self.cuOccupancyMaxActiveBlocksPerMultiprocessor(p, f, block, smem)

    def cuOccupancyMaxPotentialBlockSize(
        self, grid: int, block: int, f: int | None, cb: int | None, smem: int, limit: int
    ) -> None:
        self._kernel_name(f)
        size = min(1024, limit) if limit else 1024
        _put(grid, ctypes.c_int, 132 * (2048 // size))
        _put(block, ctypes.c_int, size)

    # launch ---------------------------------------------------------------------------------
    def _launch(
        self, f: int | None, grid: tuple, block: tuple, smem: int, stream: int | None, params: int
    ) -> None:
        name = self._kernel_name(f)
        s = self.queue.stream(stream)
        device = self._current_device()
        if s.device != device:
            # CUDA's programming guide (multi-device system, "Stream and Event Behavior"): a
            # kernel launch fails if issued to a stream not associated with the current
            # device; the runtime answers it as an invalid resource handle. Copies may.
            raise CudaError(
                CUDA_ERROR_INVALID_HANDLE,
                f"launch of {name} on a stream of device {s.device} while device {device} is "
                "current",
            )
        if (
            0 in grid
            or 0 in block
            or block[0] * block[1] * block[2] > 1024
            or any(n > limit for n, limit in zip(block, _MAX_BLOCK, strict=True))
            or any(n > limit for n, limit in zip(grid, _MAX_GRID, strict=True))
        ):
            raise CudaError(
                CUDA_ERROR_INVALID_VALUE, f"launch of {name} with grid {grid} block {block}"
            )
        most = self._function_attribute(0, f)  # CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        if block[0] * block[1] * block[2] > most:
            # A block larger than the kernel's launch bounds (.maxntid) does not launch.
            raise CudaError(
                CUDA_ERROR_INVALID_VALUE,
                f"launch of {name} with block {block}: more than the {most} threads per block "
                "its launch bounds allow",
            )
        run = _kernels.prepare(self, name, params, grid, block, smem, device)
        # Who launched: the Python frames above this callback (tests check that numba-cuda's
        # own _Kernel.launch called cuda.core's compiled launch, which called the driver).
        frame: FrameType | None = sys._getframe(1)
        self.launch_stack = []
        while frame is not None:
            self.launch_stack.append((frame.f_code.co_filename, frame.f_code.co_name))
            frame = frame.f_back
        if not self.run_kernels:
            run = _skipped  # (decoded all the same: a bad argument still fails the launch)
        op = self.queue.enqueue(s, run, f"kernel {name}")
        if self.clock is not None:
            py_name, nbytes = _kernels.footprint(name, params)
            self.clock.kernel(op, py_name, nbytes, device)

    def cuLaunchKernel(
        self,
        f: int | None,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        smem: int,
        stream: int | None,
        params: int,
        extra: int | None,
    ) -> None:
        self._launch(f, (gx, gy, gz), (bx, by, bz), smem, stream, params)

    def cuLaunchKernelEx(self, config: int, f: int | None, params: int, extra: int | None) -> None:
        c = _LaunchConfig.from_address(config)
        self._launch(f, tuple(c.grid), tuple(c.block), c.sharedMemBytes, c.hStream, params)
