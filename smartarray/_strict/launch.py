"""Kernel launches of strict mode: queued on their stream, with a GPU's crash checks.

As numba-cuda's real dispatcher does, a launch prepares its arguments with the launch's stream,
queues the kernel and runs the ``retr`` callbacks at once, before the kernel body has run. A
kernel compiled with ``debug=True`` makes the host wait and raises the kernel's exception; any
other kernel's exception is lost, as on a GPU. Before queueing, every array argument must point
into a live device allocation (or mapped host memory), aligned for its element type.
"""

from __future__ import annotations

import dis
import inspect
import os
import types
from typing import Any

import numpy as np

# (the simulator swaps its args module in at run time: numba's stub of the package lacks it)
from numba.cuda.simulator import args as _args  # type: ignore[attr-defined]
from numba.cuda.simulator import kernel as _kernel
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray
from numba.cuda.simulator.kernelapi import FakeCUDAModule, swapped_cuda_module

from . import state as _state
from .devmem import byte_extent, pointer
from .scheduler import StrictModeError, core_stream

__all__ = ["StrictLaunch", "StrictModeError", "kernel_getitem"]

try:
    from numba.cuda.errors import normalize_kernel_dimensions
except ImportError:  # pragma: no cover - older numba-cuda
    from numba.cuda.simulator.kernel import normalize_kernel_dimensions


def _param_names(fn: Any, n: int) -> list[str]:
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"argument {i}" for i in range(n)]


def check_argument(kernel_name: str, arg_name: str, devary: Any, aligned: bool = True) -> None:
    """A GPU crashes on a misaligned pointer or one outside every live allocation.

    ``aligned`` is what the argument's Numba type promises: a kernel compiled for an unaligned
    array type loads its elements byte by byte, so any address is fine for it.
    """
    ary = devary._ary
    if ary.size == 0:
        return  # numba passes NULL for an empty array, which a kernel never dereferences
    ptr = pointer(ary)
    align = ary.dtype.alignment
    where = f"kernel {kernel_name!r}, argument {arg_name!r} ({ary.dtype}{list(ary.shape)})"
    if devary.__dict__.get("_strict_null"):
        raise StrictModeError(
            f"{where}: NULL device pointer: a view of a mapped array has no device pointer in "
            "numba-cuda (only the array mapped_array returned has one)"
        )
    wrong = devary.__dict__.get("_strict_wrong_address")
    if wrong is not None:
        raise StrictModeError(
            f"{where}: device pointer {wrong:#x} is not the address {ptr:#x} of the array's "
            "first element (a GPU reads and writes the wrong bytes)"
        )
    if aligned and ptr % align:
        raise StrictModeError(
            f"{where}: device pointer {ptr:#x} is not aligned to {align} bytes, as "
            f"{ary.dtype} elements need (a GPU reports a misaligned address)"
        )
    lo, hi = byte_extent(ary)
    if _state.current().device_ranges.find(lo, hi) is None:
        raise StrictModeError(
            f"{where}: bytes [{lo:#x}, {hi:#x}) are not inside a live device allocation or "
            "mapped host memory (a GPU reports an illegal address)"
        )


def _user_raised(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the kernel's own code (not by an illegal access)."""
    if isinstance(exc, IndexError):
        return False  # out of bounds: an illegal address on a GPU, never a Python exception
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    code = last.tb_frame.f_code
    filename = os.path.normcase(os.path.abspath(code.co_filename))
    if filename.startswith(_LIBRARY_DIRS):
        return False
    # Only a raise statement is a kernel's exception on a GPU; a Python error elsewhere (a
    # TypeError, a NameError) would be a compile error or undefined behaviour there.
    lasti = last.tb_lasti
    return 0 <= lasti < len(code.co_code) and code.co_code[lasti] == _RAISE


def _library_dirs() -> tuple[str, ...]:
    import threading

    import numba
    import numba.cuda

    dirs = [
        os.path.dirname(m.__file__ or "")
        for m in (np, numba, numba.cuda, threading)
        if getattr(m, "__file__", None)
    ]
    return tuple(os.path.normcase(os.path.abspath(d)) + os.sep for d in dirs)


_LIBRARY_DIRS = _library_dirs()
_RAISE = dis.opmap["RAISE_VARARGS"]


class StrictLaunch:
    """``kernel[griddim, blockdim, stream, sharedmem]``: a configured launch (numba-cuda's
    ``_LaunchConfiguration``)."""

    def __init__(self, kernel: Any, griddim: Any, blockdim: Any, stream: Any, sharedmem: Any):
        self.dispatcher = kernel
        self.griddim = griddim
        self.blockdim = blockdim
        # As numba-cuda's _LaunchConfiguration: the launch stream as a new, non-owning
        # cuda.core-like Stream per configuration (``sync()``, no ``synchronize()``); every
        # argument's ``to_device`` receives it, and it does not keep the user's stream alive.
        self.stream = core_stream(_state.current().scheduler, stream)
        self.sharedmem = sharedmem

    def __call__(self, *args: Any) -> None:
        launch(self.dispatcher, args, self.griddim, self.blockdim, self.stream, self.sharedmem)


def kernel_getitem(self: Any, configuration: Any) -> StrictLaunch:
    """``FakeCUDAKernel.__getitem__`` that keeps the launch's stream (the simulator drops it)."""
    if not isinstance(configuration, tuple) or not 2 <= len(configuration) <= 4:
        raise ValueError("must specify at least the griddim and blockdim")
    griddim, blockdim = normalize_kernel_dimensions(*configuration[:2])
    stream = configuration[2] if len(configuration) > 2 else 0
    sharedmem = configuration[3] if len(configuration) > 3 else 0
    return StrictLaunch(self, griddim, blockdim, stream, sharedmem)


def kernel_forall(
    self: Any, ntasks: int, tpb: int = 0, stream: Any = 0, sharedmem: int = 0
) -> StrictLaunch:
    if ntasks < 0:
        raise ValueError(f"Can't create ForAll with negative task count: {ntasks}")
    return kernel_getitem(self, (ntasks, 1, stream, sharedmem))


def _numba_hint(hint: Any, retr: list[Any], stream: Any) -> Any:
    """numba's own ``In`` / ``Out`` / ``InOut`` as numba-cuda 0.30's ``args`` runs them.

    The copy in goes on the launch's cuda.core Stream (``cuMemcpyHtoDAsync``, even for the
    default stream: from page-locked memory the DMA reads the host bytes when it runs); the
    copy back of ``Out`` / ``InOut`` is synchronous on handle 0 (``cuMemcpyDtoH`` and a
    default-stream sync), asynchronous on another stream. (The simulator's versions copy
    back on the launch's stream object.) Other hints run as they are.
    """
    cls = type(hint)
    if cls not in (_args.In, _args.Out, _args.InOut):
        return hint.to_device(retr, stream)
    from .devmem import auto_device

    devary, converted = auto_device(hint.value, copy=cls is not _args.Out, stream=stream)
    if cls is _args.In:
        retr.append(lambda: devary)  # keeps the device array alive until the launch ran
    elif converted:
        value = hint.value
        if getattr(stream, "handle", 0):
            retr.append(lambda: devary.copy_to_host(value, stream=stream))
        else:

            def copy_back() -> None:
                devary.stream = 0  # (its own stream is the launch's: that would be async)
                devary.copy_to_host(value, stream=0)

            retr.append(copy_back)
    return devary


#: A GPU's launch limits (compute capability 9.0; the same since 2.0 but for the grid).
_MAX_THREADS_PER_BLOCK = 1024
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)


def _check_configuration(name: str, griddim: Any, blockdim: Any) -> None:
    """Refuse what a GPU's ``cuLaunchKernel`` refuses (CUDA_ERROR_INVALID_VALUE): the
    simulator runs any block size."""
    threads = int(np.prod(blockdim))
    over = [
        f"{what} {dims} exceeds {limit} in dimension {axis}"
        for what, dims, limits in (("block", blockdim, _MAX_BLOCK), ("grid", griddim, _MAX_GRID))
        for axis, (n, limit) in enumerate(zip(dims, limits, strict=True))
        if n > limit
    ]
    if threads > _MAX_THREADS_PER_BLOCK:
        over.insert(0, f"block {blockdim} has {threads} threads (at most 1024)")
    if over:
        raise StrictModeError(
            f"kernel {name!r} cannot be launched: {'; '.join(over)}; a GPU refuses the launch "
            "with CUDA_ERROR_INVALID_VALUE (the arguments were prepared, the kernel never runs)"
        )


def launch(kernel: Any, args: tuple, griddim: Any, blockdim: Any, stream: Any, shmem: Any) -> None:
    st = _state.current()
    sch = st.scheduler
    fn = kernel.fn
    name = getattr(fn, "__name__", "kernel")
    names = _param_names(fn, len(args))
    retr: list[Any] = []
    prepared = []
    for arg in args:
        if isinstance(arg, np.ndarray) and arg.ndim > 0:
            ret = _numba_hint(_args.InOut(arg), retr, stream)
        elif isinstance(arg, _args.ArgHint):
            ret = _numba_hint(arg, retr, stream)
        elif isinstance(arg, np.void):
            ret = FakeCUDAArray(arg)  # a record passed by value
            prepared.append((None, ret))
            continue
        else:
            ret = arg
        prepared.append((ret, ret))
    _check_configuration(name, griddim, blockdim)  # as cuLaunchKernel, once prepared
    for arg, arg_name, (checked, _) in zip(args, names, prepared, strict=True):
        if isinstance(checked, FakeCUDAArray):
            typ = getattr(arg, "_numba_type_", None)
            check_argument(name, arg_name, checked, getattr(typ, "aligned", True))
    fake_args = [
        FakeWithinKernelCUDAArray(ret) if isinstance(ret, FakeCUDAArray) else ret
        for _, ret in prepared
    ]
    debug = bool(kernel._debug)
    # The body runs later, when the host waits: freeze the kernel's globals now, as a GPU
    # compiles them in as constants (and a doctest clears its globals when it ends).
    frozen = types.FunctionType(
        fn.__code__, dict(fn.__globals__), fn.__name__, fn.__defaults__, fn.__closure__
    )
    frozen.__kwdefaults__ = fn.__kwdefaults__
    fn = frozen

    def body() -> None:
        module = FakeCUDAModule(griddim, blockdim, shmem)
        try:
            with _kernel._push_kernel_context(module), swapped_cuda_module(fn, module):
                for grid_point in np.ndindex(*griddim):
                    bm = _kernel.BlockManager(fn, griddim, blockdim, debug)
                    bm.run(grid_point, *fake_args)
        except Exception as exc:
            if debug:
                raise
            if _user_raised(exc):
                return  # a GPU reports a kernel's exception only with debug=True
            raise StrictModeError(
                f"kernel {name!r} crashed while it ran: {type(exc).__name__}: {exc} "
                "(on a GPU: an illegal memory access or a compile error)"
            ) from exc

    op = sch.enqueue(stream, body, f"kernel {name}")
    st.launches += 1
    if debug:
        # numba-cuda reads the kernel's error flag with a synchronous copy.
        sch.count_host_sync()
        sch.run_until([op])
    for wb in retr:
        wb()
