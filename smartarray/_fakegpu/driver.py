"""The semantics of the fake CUDA driver: one Python function per driver entry point.

The C shim (``fake_cuda.c``) answers ``cuGetProcAddress`` with ctypes callbacks made here from
the prototypes cuda-bindings declares (:mod:`._signatures`). Each entry takes the raw C
arguments (pointers as integers), raises :class:`CudaError` to fail, and returns nothing on
success. An unexpected Python error is logged and becomes ``CUDA_ERROR_UNKNOWN``. A kernel
fault is sticky, as on a GPU: every later call returns it.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._platform import environment as _environment
from . import _clock
from ._copies import MemoryEntries
from ._errors import (
    CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_INITIALIZED,
    CUDA_ERROR_NOT_READY,
    CUDA_ERROR_UNKNOWN,
    CUDA_SUCCESS,
    CudaError,
    InterpreterGap,
)
from ._launch import ExecutionEntries
from ._memory import DeviceHeaps, HostRegistry, device_sizes
from ._peer import PeerEntries, allowed_pairs
from ._queue import Queue
from ._signatures import prototype

#: How long the first cuInit takes (outside the driver's lock), as a GPU's does.
CU_INIT_SECONDS = 0.02

__all__ = ["FakeDriver"]

DRIVER_VERSION = 13000
_PER_THREAD_DEFAULT_STREAM = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
_ATTRIBUTES = {  # CUdevice_attribute values of an H100-like device (others read 0)
    1: 1024,
    2: 1024,
    3: 1024,
    4: 64,
    5: 2147483647,
    6: 65535,
    7: 65535,
    8: 49152,
    9: 65536,
    10: 32,
    11: 2147483647,
    12: 65536,
    13: 1755000,
    14: 512,
    15: 1,
    16: 132,
    17: 0,
    18: 0,
    19: 1,
    20: 0,
    30: 512,
    31: 1,
    33: 0,
    34: 0,
    35: 0,
    36: 2619000,
    37: 5120,
    38: 52428800,
    39: 2048,
    40: 2,
    41: 1,
    50: 0,
    75: 9,
    76: 0,
    78: 1,
    79: 1,
    80: 1,
    81: 233472,
    82: 65536,
    83: 1,
    84: 1,
    85: 0,
    86: 1,
    87: 64,
    88: 1,
    89: 1,
    90: 0,
    91: 1,
    95: 1,
    96: 1,
    97: 232448,
    98: 1,
    99: 1,
    100: 1,
    101: 1,
    102: 1,
    106: 32,
    115: 1,
    116: 1,
}
# Queries that still answer after a kernel fault (every other call returns the fault).
_UNAFFECTED_BY_FAULTS = frozenset(
    "cuGetErrorName cuGetErrorString cuCtxGetCurrent cuCtxSetCurrent cuCtxPushCurrent "
    "cuCtxPopCurrent cuCtxGetDevice cuDriverGetVersion cuDeviceGet cuDeviceGetCount "
    "cuDeviceGetAttribute cuDeviceGetName".split()
)


def _put(ptr: int, ctype: type, value: object) -> None:
    if not ptr:
        raise CudaError(CUDA_ERROR_INVALID_VALUE, "a NULL output pointer")
    ctypes.cast(ptr, ctypes.POINTER(ctype))[0] = value


def _cstr(ptr: int) -> str:
    return ctypes.string_at(ptr).decode()


def _device_count() -> int:
    value = _environment.text("SMARTARRAY_FAKE_GPU_DEVICES", "1")
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(
            f"SMARTARRAY_FAKE_GPU_DEVICES={value!r}: expected a number of devices, 1 or more"
        )
    return count


class FakeDriver(MemoryEntries, ExecutionEntries, PeerEntries):
    """State of the fake driver: devices, contexts, memory, streams, modules.

    Each device has a primary context, memory (``heaps[device]``), a memory pool and a legacy
    default stream of its own; streams and events belong to the device current when they were
    made. ``peer_allowed`` holds the directed device pairs that may access each other's memory,
    ``peer_enabled`` those enabled (:mod:`._peer`). ``run_kernels`` (default ``True``): set to
    ``False``, launched kernels are decoded, queued and timed but their bodies do not run (for
    measuring host time: ``benchmarks/bench_overhead.py``).
    """

    def __init__(self) -> None:
        self.device_count = _device_count()
        self._handle_ids = itertools.count(0x10000, 0x10)
        self.heaps = DeviceHeaps(device_sizes(self.device_count))
        self.host = HostRegistry()
        self.queue = Queue(lambda: next(self._handle_ids), self._queue_device)
        self.clock = self.queue.clock = _clock.from_environment()  # None: no modelled time
        self.initialized = False
        self.contexts = {d: next(self._handle_ids) for d in range(self.device_count)}
        self._ctx_device = {c: d for d, c in self.contexts.items()}
        self.mempools = {d: next(self._handle_ids) for d in range(self.device_count)}
        self.peer_allowed = allowed_pairs(self.device_count)
        self.peer_enabled: set[tuple[int, int]] = set()
        self.peer_copies: Counter[tuple[int, int]] = Counter()  # (from, to) device: copies
        self.peer_bytes: Counter[tuple[int, int]] = Counter()  # (from, to) device: bytes
        self._current = threading.local()
        self.libraries: dict[int, bytes] = {}
        self.kernels: dict[int, str] = {}  # CUkernel / CUfunction handle -> entry name
        self._kernel_attributes: dict[int, dict[int, int]] = {}  # kernel -> its cubin's
        self.globals: dict[tuple[int, str, int], int] = {}  # (library, name, device)
        self.managed: dict[int, int] = {}  # managed allocation's start -> its attach flags
        self.sticky: CudaError | None = None
        # Whether launched kernels' bodies run. Off, a launch is checked, queued, ordered and
        # timed as ever but leaves device memory as it was: benchmarks of smartarray's host
        # time turn it off, because a GPU runs kernels off the host, while the interpreter
        # runs them on the host's own core inside its waits and leaves its caches cold for
        # the next call (a host time that moved by 20% from run to run with them).
        self.run_kernels = True
        self.calls: Counter[str] = Counter()  # how often each entry point was called
        # Thread CPU time spent in the entry points (benchmarks subtract it: a GPU driver's
        # calls cost less than this stand-in's Python callbacks).
        self.thread_time_ns = 0
        self._log = _environment.flag("SMARTARRAY_FAKE_GPU_LOG")
        self._callbacks: dict[str, Any] = {}  # ctypes callbacks, by entry name
        self._strings: dict[int, ctypes.Array] = {}
        self.lock = threading.RLock()

    # plumbing ---------------------------------------------------------------------------------
    def resolve(self, name: bytes, flags: int = 0) -> int:
        """Address of the callback for entry ``name``, or 0 when the fake does not provide it.

        ``flags``: cuGetProcAddress's. With ``CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM``
        the entry is its per-thread default stream variant (a driver's ``_ptds``/``_ptsz``):
        stream handle 0 there names the calling thread's per-thread default stream, not the
        legacy one (``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1``).
        """
        text = name.decode()
        impl = getattr(self, text, None) if text.startswith("cu") else None
        proto = prototype(text) if impl is not None else None
        if impl is None or proto is None:
            if self._log:
                print(f"fakegpu: absent {text}", file=sys.stderr)
            return 0
        per_thread = bool(flags & _PER_THREAD_DEFAULT_STREAM)
        slot = f"{text}_ptds" if per_thread else text
        if slot not in self._callbacks:
            callback = proto(self._wrap(text, impl, per_thread))
            # The bindings keep the address for the life of the process, past interpreter
            # teardown: the callback must never be freed.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(callback))
            self._callbacks[slot] = callback
        return ctypes.cast(self._callbacks[slot], ctypes.c_void_p).value or 0

    def _wrap(
        self, name: str, impl: Callable[..., None], per_thread: bool = False
    ) -> Callable[..., int]:
        queue = self.queue

        def entry(*args: object) -> int:
            if name == "cuInit" and not self.initialized:
                # A GPU's cuInit takes a while (tens of milliseconds to seconds): other
                # threads' driver calls run meanwhile, and fail until it returned.
                time.sleep(CU_INIT_SECONDS)
            start = time.thread_time_ns()
            try:
                if per_thread:
                    with queue.per_thread_default_stream():
                        return run(*args)
                return run(*args)
            finally:
                self.thread_time_ns += time.thread_time_ns() - start

        def run(*args: object) -> int:
            with self.lock:
                self.calls[name] += 1
                if name != "cuInit" and not self.initialized and name != "cuDriverGetVersion":
                    return CUDA_ERROR_NOT_INITIALIZED
                if self.sticky is not None and name not in _UNAFFECTED_BY_FAULTS:
                    return self.sticky.code
                if self.clock is not None:
                    self.clock.call(name)  # the host pays the call's API cost
                try:
                    impl(*args)
                except CudaError as exc:
                    if self._log or exc.code != CUDA_ERROR_NOT_READY:
                        print(f"fakegpu: {name}: error {exc.code}: {exc}", file=sys.stderr)
                    return exc.code
                except BaseException:  # noqa: BLE001 - nothing may raise into the C caller
                    print(f"fakegpu: {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
                    return CUDA_ERROR_UNKNOWN
                return CUDA_SUCCESS

        return entry

    def clear_fault(self) -> CudaError | None:
        """Forget a sticky kernel fault and drop the queued work; returns the fault.

        On a GPU the process must start afresh; a test session calls this between tests so
        that one test's fault does not fail every later one.
        """
        fault, self.sticky = self.sticky, None
        if fault is not None:
            for op in list(self.queue.ops):
                op.done = True
            self.queue.ops.clear()
        return fault

    def _run(self, fn: Callable[[], None]) -> None:
        """Run queued work; a fault in a kernel or copy becomes sticky, as on a GPU (an
        interpreter gap fails this call only: the fake driver's limit, not a fault)."""
        try:
            fn()
        except InterpreterGap:
            raise
        except CudaError as exc:
            self.sticky = exc
            raise

    def _device(self, dev: int) -> int:
        if not 0 <= dev < self.device_count:
            raise CudaError(CUDA_ERROR_INVALID_DEVICE, f"device {dev}")
        return dev

    def _context(self) -> int:
        ctx = getattr(self._current, "ctx", 0)
        if not ctx:
            raise CudaError(CUDA_ERROR_INVALID_CONTEXT, "no current context")
        return ctx

    def _current_device(self) -> int:
        """The device of the calling thread's current context."""
        return self._ctx_device[self._context()]

    def _queue_device(self) -> int:
        """The device whose default stream (handle 0, ``CU_STREAM_LEGACY``,
        ``CU_STREAM_PER_THREAD``) a call names: the current context's. A GPU refuses such a
        call with ``CUDA_ERROR_INVALID_CONTEXT`` in a thread with no current context (a new
        thread, or after ``with cuda.gpus[n]:`` popped the only one); so does the fake."""
        return self._current_device()

    # initialisation, devices, contexts -------------------------------------------------------
    def cuInit(self, flags: int) -> None:
        self.initialized = True

    def cuDriverGetVersion(self, p: int) -> None:
        _put(p, ctypes.c_int, DRIVER_VERSION)

    def cuDeviceGetCount(self, p: int) -> None:
        _put(p, ctypes.c_int, self.device_count)

    def cuDeviceGet(self, p: int, ordinal: int) -> None:
        _put(p, ctypes.c_int, self._device(ordinal))

    def cuDeviceGetAttribute(self, p: int, attrib: int, dev: int) -> None:
        self._device(dev)
        _put(p, ctypes.c_int, _ATTRIBUTES.get(attrib, 0))

    def cuDeviceGetName(self, name: int, length: int, dev: int) -> None:
        text = f"smartarray fake GPU {self._device(dev)} (cc 9.0)".encode()[: length - 1]
        ctypes.memmove(name, text + b"\0", len(text) + 1)

    def cuDeviceGetUuid(self, p: int, dev: int) -> None:
        ctypes.memmove(p, bytes([0xFA, 0x4E, self._device(dev)] + [0] * 13), 16)

    cuDeviceGetUuid_v2 = cuDeviceGetUuid

    def cuDeviceTotalMem(self, p: int, dev: int) -> None:
        _put(p, ctypes.c_size_t, self.heaps[self._device(dev)].size)

    def cuDeviceGetPCIBusId(self, p: int, length: int, dev: int) -> None:
        text = f"0000:{self._device(dev) + 1:02x}:00.0".encode()[: length - 1]
        ctypes.memmove(p, text + b"\0", len(text) + 1)

    def cuDevicePrimaryCtxRetain(self, p: int, dev: int) -> None:
        _put(p, ctypes.c_void_p, self.contexts[self._device(dev)])

    def cuDevicePrimaryCtxRelease(self, dev: int) -> None:
        self._device(dev)

    def cuDevicePrimaryCtxReset(self, dev: int) -> None:
        self._device(dev)
        self.queue.synchronize_all()

    def cuDevicePrimaryCtxGetState(self, dev: int, flags: int, active: int) -> None:
        self._device(dev)
        _put(flags, ctypes.c_uint, 0)
        _put(active, ctypes.c_int, 1)

    def cuCtxGetCurrent(self, p: int) -> None:
        _put(p, ctypes.c_void_p, getattr(self._current, "ctx", 0) or None)

    def cuCtxSetCurrent(self, ctx: int | None) -> None:
        if ctx and ctx not in self.contexts.values():
            raise CudaError(CUDA_ERROR_INVALID_CONTEXT, f"context {ctx:#x}")
        self._current.ctx = ctx or 0

    def cuCtxPushCurrent(self, ctx: int | None) -> None:
        stack = self._current.__dict__.setdefault("stack", [])
        stack.append(getattr(self._current, "ctx", 0))
        self.cuCtxSetCurrent(ctx)

    def cuCtxPopCurrent(self, p: int) -> None:
        if p:
            _put(p, ctypes.c_void_p, getattr(self._current, "ctx", 0) or None)
        stack = self._current.__dict__.setdefault("stack", [])
        self._current.ctx = stack.pop() if stack else 0

    def cuCtxGetDevice(self, p: int) -> None:
        _put(p, ctypes.c_int, self._current_device())

    def cuCtxGetId(self, ctx: int | None, p: int) -> None:
        _put(p, ctypes.c_ulonglong, ctx or self._context())

    def cuCtxSynchronize(self) -> None:
        device = self._current_device()
        self._run(lambda: self.queue.synchronize_device(device))

    def cuCtxGetStreamPriorityRange(self, least: int, greatest: int) -> None:
        if least:
            _put(least, ctypes.c_int, 0)
        if greatest:
            _put(greatest, ctypes.c_int, -5)

    def cuCtxGetLimit(self, p: int, limit: int) -> None:
        _put(p, ctypes.c_size_t, 1024)

    def cuCtxSetLimit(self, limit: int, value: int) -> None:
        pass

    def cuGetErrorName(self, code: int, p: int) -> None:
        # The enumerator's name, as a driver answers (cuda-bindings knows every one).
        try:
            from cuda.bindings import driver as bindings

            name = bindings.CUresult(code).name
        except (ImportError, ValueError):
            raise CudaError(CUDA_ERROR_INVALID_VALUE, f"no CUresult {code}") from None
        self._string_out(p, name)

    def cuGetErrorString(self, code: int, p: int) -> None:
        self._string_out(p, f"fake CUDA driver error {code}")

    def _string_out(self, p: int, text: str) -> None:
        buf = self._strings.setdefault(hash(text), ctypes.create_string_buffer(text.encode()))
        _put(p, ctypes.c_void_p, ctypes.addressof(buf))

    def cuProfilerStart(self) -> None:
        pass

    def cuProfilerStop(self) -> None:
        pass
