"""Kernels of the fake CUDA driver: numba-cuda's kernel, run by the simulator's interpreter.

``cuLaunchKernel`` names a kernel by its entry (mangled) name. The numba-cuda ``_Kernel`` with
that ``entry_name`` (found once among live objects, numba-cuda is not patched) gives the
Python function and the argument types; the launch's ``kernelParams`` are decoded by those
types' data models (an array is ``meminfo, parent, nitems, itemsize, data, shape..., strides...``),
each array becomes a NumPy array over the fake device memory, and the body runs block by block
on numba's CUDA simulator threads. An array that is not inside one live allocation, or a
misaligned one, fails the launch with ``CUDA_ERROR_ILLEGAL_ADDRESS`` /
``CUDA_ERROR_MISALIGNED_ADDRESS``; so does an out-of-bounds index in the body. An exception in
the body is reported for ``debug=True`` kernels only (through numba's own error globals), as
on a GPU; without ``debug`` the faulting thread just stops.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _blocks, _warp
from ._errors import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_MISALIGNED_ADDRESS,
    CudaError,
    InterpreterGap,
)

if TYPE_CHECKING:  # pragma: no cover
    from ._state import DriverState

__all__ = ["footprint", "prepare"]

_found: dict[str, object] = {}


def _kernel_object(name: str) -> Any:  # numba-cuda's compiled kernel
    """numba-cuda's ``_Kernel`` whose entry name is ``name``."""
    kernel = _found.get(name)
    if kernel is None:
        from numba.cuda.dispatcher import _Kernel

        for obj in gc.get_objects():
            # type(), not isinstance(): a dead weak proxy among the objects raises on isinstance.
            if issubclass(type(obj), _Kernel) and getattr(obj, "entry_name", None) == name:
                kernel = _found[name] = obj
                break
    if kernel is None:
        # A kernel of CUDA C/C++ or PTX code loaded beside numba's (NRT's memsys.cu, a linked
        # file's): a GPU runs it, the interpreter has no Python body for it.
        raise InterpreterGap(
            f"kernel {name} is not one numba-cuda compiled from Python: the fake driver's "
            "interpreter runs Python kernel bodies only"
        )
    return kernel


class _Params:
    """Reads ``kernelParams`` in order: each entry points to one parameter's bytes."""

    def __init__(self, params: int) -> None:
        self._array = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        self._next = 0

    def read(self, ctype: Any) -> Any:  # a ctypes simple type; its value
        ptr = self._array[self._next]
        self._next += 1
        return ctype.from_address(ptr).value


def _decode(ty: Any, params: _Params) -> object:  # ty: a numba type
    """One argument of numba type ``ty``, as plain values (an array as a tuple)."""
    from numba.core import types

    if isinstance(ty, types.Array):
        params.read(ctypes.c_void_p)  # meminfo
        params.read(ctypes.c_void_p)  # parent
        params.read(ctypes.c_int64)  # nitems
        itemsize = params.read(ctypes.c_int64)
        data = params.read(ctypes.c_uint64) or 0
        shape = tuple(params.read(ctypes.c_int64) for _ in range(ty.ndim))
        strides = tuple(params.read(ctypes.c_int64) for _ in range(ty.ndim))
        return ("array", ty, data, shape, strides, itemsize)
    if isinstance(ty, types.Boolean):
        return bool(params.read(ctypes.c_bool))
    if isinstance(ty, types.Integer):
        # (numba's stub of Integer lacks the attributes its instances have)
        sign = "" if ty.signed else "u"  # type: ignore[attr-defined]
        return params.read(getattr(ctypes, f"c_{sign}int{ty.bitwidth}"))  # type: ignore[attr-defined]
    if ty == types.float16:
        return np.uint16(params.read(ctypes.c_uint16)).view(np.float16)
    if ty == types.float32:
        return np.float32(params.read(ctypes.c_float))
    if ty == types.float64:
        return params.read(ctypes.c_double)
    if ty == types.complex64:
        return np.complex64(complex(params.read(ctypes.c_float), params.read(ctypes.c_float)))
    if ty == types.complex128:
        return complex(params.read(ctypes.c_double), params.read(ctypes.c_double))
    if isinstance(ty, types.CPointer):
        return _Pointer(params.read(ctypes.c_uint64), ty.dtype)
    if isinstance(ty, types.BaseTuple):
        return tuple(_decode(t, params) for t in ty)  # type: ignore[attr-defined]  # (iterable; not in the stub)
    if isinstance(ty, types.EnumMember):
        return ty.instance_class(_decode(ty.dtype, params))
    if isinstance(ty, (types.NPDatetime, types.NPTimedelta)):
        return np.int64(params.read(ctypes.c_int64)).view(
            ty.unit and f"{'M' if isinstance(ty, types.NPDatetime) else 'm'}8[{ty.unit}]"
        )
    if isinstance(ty, types.Record):
        return ("record", ty, params.read(ctypes.c_uint64), (), (), ty.size)
    raise CudaError(CUDA_ERROR_INVALID_VALUE, f"fake GPU cannot decode kernel argument type {ty}")


class _Pointer(int):
    """A ``CPointer`` kernel argument: its address, and the numba type it points to (what
    ``carray(ptr, shape)`` reads when it is given no dtype)."""

    dtype: Any

    def __new__(cls, address: int, dtype: Any) -> _Pointer:
        pointer = super().__new__(cls, address)
        pointer.dtype = dtype
        return pointer


def _materialise(
    driver: DriverState, kernel: str, argname: str, value: object, device: int
) -> object:
    """Turn decoded arrays into simulator arrays over device memory, checking the range."""
    if isinstance(value, tuple) and value and value[0] in ("array", "record"):
        kind, ty, data, shape, strides, itemsize = value
        from numba.np import numpy_support

        dtype = numpy_support.as_dtype(ty.dtype if kind == "array" else ty)
        # An array typed unaligned (a packed record's field) compiles to byte-wise
        # accesses: only an aligned type promises the hardware aligned loads.
        aligned = kind == "record" or getattr(ty, "aligned", True)
        arr = _device_view(
            driver, kernel, argname, device, data, shape, strides, itemsize, dtype, aligned
        )
        if kind == "record":
            return arr.reshape(())[()]
        return _within_kernel(arr)
    if isinstance(value, tuple):
        return tuple(_materialise(driver, kernel, argname, v, device) for v in value)
    return value


def _within_kernel(arr: np.ndarray) -> object:
    """``arr`` as the simulator's kernel bodies index arrays (an index out of range raises)."""
    from numba.cuda.simulator.cudadrv.devicearray import (
        FakeCUDAArray,
        FakeWithinKernelCUDAArray,
    )

    return FakeWithinKernelCUDAArray(FakeCUDAArray(arr))


def _device_view(
    driver: DriverState,
    kernel: str,
    argname: str,
    device: int,
    data: int,
    shape: tuple,
    strides: tuple,
    itemsize: int,
    dtype: np.dtype,
    aligned: bool = True,
) -> np.ndarray:
    """A NumPy array over ``data`` that a kernel on ``device`` may touch: checks the range
    (one live allocation, or mapped page-locked memory) and the alignment."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=False) if n)
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=False) if n) + itemsize
    if any(n == 0 for n in shape):
        return np.empty(shape, dtype=dtype)
    _check_range(driver, kernel, argname, data + lo, hi - lo, device)
    if aligned and data % max(1, min(dtype.alignment, 16)):
        raise CudaError(
            CUDA_ERROR_MISALIGNED_ADDRESS,
            f"kernel {kernel}: argument {argname!r} data pointer {data:#x} is misaligned",
        )
    buf = (ctypes.c_char * (hi - lo)).from_address(data + lo)
    arr = np.ndarray(shape, dtype=dtype, buffer=buf, offset=-lo, strides=strides)
    pinned = driver.host.range_of(data + lo)
    if pinned is not None and pinned.read_only:
        arr.flags.writeable = False  # registered READ_ONLY: a device write fails
    return arr


class _InKernelFault(RuntimeError):
    """A fault found while the body runs (a ``carray`` past its allocation): raised on a
    simulator thread, which re-creates an exception from its message alone, so the class
    carries the result code."""

    code = CUDA_ERROR_ILLEGAL_ADDRESS


class _InKernelMisaligned(_InKernelFault):
    code = CUDA_ERROR_MISALIGNED_ADDRESS


def _view_in_kernel(*args: Any) -> np.ndarray:
    """:func:`_device_view` called from a kernel body."""
    try:
        return _device_view(*args)
    except CudaError as exc:
        fault = _InKernelMisaligned if exc.code == CUDA_ERROR_MISALIGNED_ADDRESS else _InKernelFault
        raise fault(str(exc)) from exc


class _Launch:
    """What a kernel body's Python stand-ins need of the launch running it: the driver, the
    device and the kernel's name (for fault messages)."""

    def __init__(self, driver: DriverState, device: int, label: str) -> None:
        self.driver = driver
        self.device = device
        self.label = label

    def intrinsics(self) -> dict[int, Callable[..., object]]:
        """:func:`_python_intrinsics` of this launch (made once)."""
        table = self.__dict__.get("_intrinsics")
        if table is None:
            table = self._intrinsics = _python_intrinsics(self)
        return table

    def carray(self, ptr: int, shape: Any, dtype: Any = None, order: str = "C") -> object:
        """``numba.carray`` / ``farray`` in a kernel: an array over device memory at ``ptr``
        (checked as an argument is: inside one allocation the device may touch, aligned)."""
        from numba.core import types as numba_types
        from numba.np import numpy_support

        if dtype is None:
            dtype = getattr(ptr, "dtype", None)
            if dtype is None:
                raise TypeError("carray: explicit dtype required for a void* pointer")
        if isinstance(dtype, numba_types.Type):
            np_dtype = numpy_support.as_dtype(dtype)
        else:
            np_dtype = np.dtype(dtype)
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dims = tuple(int(n) for n in dims)
        if order == "F":
            dims = dims[::-1]
        strides: list[int] = []
        step = np_dtype.itemsize
        for n in reversed(dims):
            strides.insert(0, step)
            step *= n
        arr = _view_in_kernel(
            self.driver,
            self.label,
            f"{'f' if order == 'F' else 'c'}array({int(ptr):#x})",
            self.device,
            int(ptr),
            dims,
            tuple(strides),
            np_dtype.itemsize,
            np_dtype,
        )
        return _within_kernel(arr.T if order == "F" else arr)

    def captured(self, value: object) -> object:
        """A device array a kernel captured from its globals or closure, as the kernel sees
        it: an array over the device memory its ``__cuda_array_interface__`` names."""
        face = value.__cuda_array_interface__  # type: ignore[attr-defined]
        data = face["data"][0] or 0
        dtype = np.dtype(face["typestr"]) if not face.get("descr") else np.dtype(face["descr"])
        shape = tuple(face["shape"])
        strides = face.get("strides")
        if strides is None:
            strides, step = [], dtype.itemsize
            for n in reversed(shape):
                strides.insert(0, step)
                step *= n
        arr = _view_in_kernel(
            self.driver,
            self.label,
            "a captured device array",
            self.device,
            data,
            shape,
            tuple(strides),
            dtype.itemsize,
            dtype,
        )
        return _within_kernel(arr)


def _check_range(
    driver: DriverState, kernel: str, argname: str, start: int, nbytes: int, device: int
) -> None:
    """Raise unless a kernel on ``device`` may touch ``[start, start + nbytes)``: one live
    allocation of its own memory, or of a peer's whose access its context enabled."""
    found = driver.heaps.find(start)
    if found is not None and start + nbytes <= found[0] + found[1]:
        owner = driver.heaps.device_of(start)
        assert owner is not None  # a live allocation's device
        # Managed memory: every device's kernels may touch it (concurrent managed access).
        if driver.can_access(device, owner) or found[0] in driver.managed:
            return
        raise CudaError(
            CUDA_ERROR_ILLEGAL_ADDRESS,
            f"kernel {kernel} on device {device}: argument {argname!r} spans {nbytes} bytes at "
            f"{start:#x}, device {owner}'s memory, and peer access from device {device} to "
            f"device {owner} is not enabled (cuCtxEnablePeerAccess)",
        )
    pinned = driver.host.range_of(start)
    if pinned is not None and pinned.covers(start, nbytes):
        if pinned.mapped_for(device):  # page-locked host memory mapped for this device
            return
        raise CudaError(
            CUDA_ERROR_ILLEGAL_ADDRESS,
            f"kernel {kernel} on device {device}: argument {argname!r} spans {nbytes} bytes of "
            f"page-locked host memory at {start:#x} that is not mapped for device {device} "
            f"(registered by device {pinned.device}'s context "
            f"{'with' if pinned.flags & 2 else 'without'} DEVICEMAP, "
            f"{'' if pinned.flags & 1 else 'not '}PORTABLE)",
        )
    if found is not None:
        where = f"past the end of the {found[1]}-byte allocation at {found[0]:#x}"
    elif driver.heaps.owns(start):
        where = "freed device memory"
    else:
        where = "not device memory"
    raise CudaError(
        CUDA_ERROR_ILLEGAL_ADDRESS,
        f"kernel {kernel}: argument {argname!r} spans {nbytes} bytes at {start:#x} ({where})",
    )


def _in_python_function(fn: Callable[..., object], fake_module: object) -> Callable[..., object]:
    """``fn`` as a kernel body running in Python calls it: a copy of ``fn`` whose globals and
    closure cells hold Python equivalents of what only compiles.

    The simulator swaps ``numba.cuda`` in a kernel's module globals, in place. Here the copy
    has globals of its own, so nothing another host thread sees changes (a thread launching
    ``add_one`` from the same module while a kernel of that module runs here) and the swaps
    reach where the simulator's do not: ``numba.cuda`` in closure cells
    (``devicearray._assign_kernel``), device functions in closures (kernel factories such as
    ``cuda.reduce``'s) and in other modules' globals, CPU ``numba.jit`` functions that kernels
    may call (numba.cuda.random's), the intrinsics listed below, and device arrays the body
    captures (only those it names: a GPU kernel embeds the pointers of those alone).
    """
    globs = dict(fn.__globals__)
    named = _names(fn.__code__)
    for name, value in fn.__globals__.items():
        python = _in_python(value, fake_module, capture=name in named)
        if python is not value:
            globs[name] = python
    cells = fn.__closure__
    if cells:
        cells = tuple(_python_cell(c, fake_module) for c in cells)
    new = types.FunctionType(fn.__code__, globs, fn.__name__, fn.__defaults__, cells)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


def _names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions nested in it read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _python_cell(cell: types.CellType, fake_module: object) -> types.CellType:
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return cell
    python = _in_python(value, fake_module)
    return cell if python is value else types.CellType(python)


def _in_python(value: object, fake_module: object, capture: bool = True) -> object:
    """What a kernel body running in Python calls instead of ``value`` (``value`` itself if
    it runs in Python as it is); ``capture``: whether a device array becomes the array over
    device memory that the body reads."""
    from numba import cuda
    from numba.cuda.dispatcher import CUDADispatcher

    if value is cuda:
        return fake_module
    if isinstance(value, CUDADispatcher) or _is_cpu_dispatcher(value):
        # A CPU ``numba.jit`` function called from a kernel compiles for the device too
        # (numba.cuda.random's xoroshiro128p functions): in Python, its ``py_func`` runs.
        return _PythonDeviceFunction(value, fake_module)
    if isinstance(value, type):
        return value
    launch: _Launch = fake_module._fakegpu_launch  # type: ignore[attr-defined]
    if capture and _is_device_array(value):
        return launch.captured(value)
    return launch.intrinsics().get(id(value), value)


def _is_device_array(value: object) -> bool:
    """Whether ``value`` is a device array a kernel can capture: one exporting
    ``__cuda_array_interface__`` without work (numba-cuda's, or a wrapper of one). A
    SmartArray's export may move data: captured, its pointer is the one numba-cuda embedded
    when it compiled the kernel, which its own rules keep (not modelled here)."""
    module = type(value).__module__ or ""
    if module.startswith("smartarray"):
        return False
    try:
        return hasattr(value, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001 - a property that fails: not an array the body can read
        return False


def _is_cpu_dispatcher(value: object) -> bool:
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:  # numba-cuda without numba
        return False
    return isinstance(value, Dispatcher)


class _PythonDeviceFunction:
    """A device function (or a CPU ``numba.jit`` function) called from a kernel body that runs
    in Python: its Python body, made on first call with :func:`_in_python_function` (lazily,
    so that functions that name each other, or themselves, do not recurse here)."""

    def __init__(self, dispatcher: object, fake_module: object) -> None:
        self._dispatcher = dispatcher
        self._fake_module = fake_module
        self._fn: Callable[..., object] | None = None

    def __call__(self, *args: object) -> object:
        if self._fn is None:  # threads of a block may race here: both build the same copy
            py_func = self._dispatcher.py_func  # type: ignore[attr-defined]
            self._fn = _in_python_function(py_func, self._fake_module)
        return self._fn(*args)


def _python_intrinsics(launch: _Launch) -> dict[int, Callable[..., object]]:
    """Python equivalents of the numba intrinsics kernels call (by id): numba-cuda's own
    kernels' ``to_fixed_tuple``, and ``carray``/``farray`` over a pointer to device memory."""
    # (numba-cuda's module: numba.cuda redirects to it at run time, out of the checker's sight)
    from numba.cuda.np import numpy_support as cuda_support  # type: ignore[import-not-found]
    from numba.cuda.np.unsafe.ndarray import to_fixed_tuple  # type: ignore[import-not-found]

    def carray(ptr: int, shape: object, dtype: object = None) -> object:
        return launch.carray(ptr, shape, dtype)

    def farray(ptr: int, shape: object, dtype: object = None) -> object:
        return launch.carray(ptr, shape, dtype, order="F")

    table: dict[int, Callable[..., object]] = {
        id(to_fixed_tuple): lambda array, length: tuple(array[:length]),
        id(cuda_support.carray): carray,
        id(cuda_support.farray): farray,
    }
    try:  # numba's own carray/farray (numba.carray) compile for CUDA too
        import numba
    except ImportError:  # numba-cuda without numba
        return table
    for name, fn in (("carray", carray), ("farray", farray)):
        if hasattr(numba, name):
            table[id(getattr(numba, name))] = fn
    return table


def footprint(name: str, params: int) -> tuple[str, int]:
    """The Python ``__name__`` of kernel ``name`` and the bytes its array arguments span (what
    the clock's default rule moves through device memory)."""
    kernel = _kernel_object(name)
    reader = _Params(params)
    nbytes = 0
    for ty in kernel.argument_types:
        value = _decode(ty, reader)
        if isinstance(value, tuple) and value and value[0] == "array":
            _, _, _, shape, _, itemsize = value
            count = 1
            for n in shape:
                count *= n
            nbytes += count * itemsize
    return kernel.py_func.__name__, nbytes


def prepare(
    driver: DriverState, name: str, params: int, grid: tuple, block: tuple, smem: int, device: int
) -> Callable[[], None]:
    """Decode a launch now (CUDA copies ``kernelParams`` at launch); the returned call runs it
    on ``device`` (its arrays are checked then: peer access is a property of that moment)."""
    kernel = _kernel_object(name)
    reader = _Params(params)
    decoded = [_decode(ty, reader) for ty in kernel.argument_types]
    argnames = list(kernel.py_func.__code__.co_varnames[: kernel.py_func.__code__.co_argcount])
    argnames += [f"#{i}" for i in range(len(argnames), len(decoded))]

    def run() -> None:
        # Fault messages name the Python function first: the entry name is mangled.
        label = f"{kernel.py_func.__qualname__} ({name})"
        args = [
            _materialise(driver, label, a, v, device)
            for a, v in zip(argnames, decoded, strict=False)
        ]
        _execute(driver, kernel, name, args, grid, block, smem, device)

    return run


def _execute(
    driver: DriverState,
    kernel: Any,
    name: str,
    args: list,
    grid: tuple,
    block: tuple,
    smem: int,
    device: int,
) -> None:
    from numba.cuda.simulator import kernel as simkernel

    fake_module = simkernel.FakeCUDAModule(grid, block, smem)
    # What the simulator's module lacks and Python can do: time on the device is not modelled
    # (the queue's seeded order models asynchrony), so a sleep returns at once.
    # (an attribute the simulator's module lacks: the checker knows its class)
    fake_module.nanosleep = lambda ns: None  # type: ignore[attr-defined]
    # numba's scalar types (``cuda.float32`` as carray's dtype, or a cast) are Python values.
    from numba.core import types as numba_types

    for tname in dir(numba_types):
        ty = getattr(numba_types, tname)
        if isinstance(ty, (numba_types.Number, numba_types.Boolean)) and not hasattr(
            fake_module, tname
        ):
            setattr(fake_module, tname, ty)
    _warp.install(fake_module)
    label = f"{kernel.py_func.__qualname__} ({name})"
    fake_module._fakegpu_launch = _Launch(driver, device, label)  # type: ignore[attr-defined]
    # The driver's lock is held while a kernel runs, and the interpreter starts threads: a
    # garbage collection in one of them would run numba's finalizers (cuEventDestroy, ...),
    # which wait for that lock forever. No automatic collection while the body runs.
    collecting = gc.isenabled()
    gc.disable()
    try:
        fn = _in_python_function(kernel.py_func, fake_module)
        _run_blocks(driver, kernel, name, fn, fake_module, args, grid, block, device)
    except _InKernelFault as exc:
        raise CudaError(exc.code, str(exc)) from exc
    finally:
        if collecting:
            gc.enable()


def _run_blocks(
    driver: DriverState,
    kernel: Any,
    name: str,
    fn: Callable[..., object],
    fake_module: object,
    args: list,
    grid: tuple,
    block: tuple,
    device: int,
) -> None:
    from numba.cuda.simulator import kernel as simkernel

    with simkernel._push_kernel_context(fake_module):
        for grid_point in np.ndindex(*grid[::-1]):
            warps = _warp.Warps(block)
            try:
                _blocks.run_block(
                    warps.body(fn), block, grid_point[::-1], args, kernel.debug, warps
                )
            except _InKernelFault:
                raise  # (_execute turns it into its CUDA error)
            except _warp.WarpFault as exc:
                # Undefined in CUDA or a hang on a GPU: the launch fails, and stays failed.
                raise CudaError(
                    CUDA_ERROR_LAUNCH_FAILED, f"kernel {fn.__qualname__} ({name}): {exc}"
                ) from exc
            except IndexError as exc:
                raise CudaError(
                    CUDA_ERROR_ILLEGAL_ADDRESS,
                    f"kernel {fn.__qualname__} ({name}): out-of-bounds access: {exc}",
                ) from exc
            except Exception as exc:
                if isinstance(exc, ValueError) and "read-only" in str(exc):
                    raise CudaError(  # (the only read-only arrays here: READ_ONLY host memory)
                        CUDA_ERROR_ILLEGAL_ADDRESS,
                        f"kernel {fn.__qualname__} ({name}) wrote host memory registered "
                        f"READ_ONLY: {exc}",
                    ) from exc
                if _beyond_the_interpreter(exc):
                    # The fake driver's own limit, not the kernel's fault: never silent, and
                    # not sticky (a GPU would have run it).
                    raise InterpreterGap(
                        f"kernel {fn.__qualname__} ({name}) calls what the fake driver cannot "
                        f"run in Python: {exc}",
                    ) from exc
                if kernel.debug:
                    _report_exception(driver, kernel, name, exc, device)
                    return
                # Without debug a GPU does not check: the faulting thread stops, others run on.
                print(
                    f"fakegpu: kernel {name}: unchecked exception ignored: {exc!r}", file=sys.stderr
                )


def _beyond_the_interpreter(exc: Exception) -> bool:
    """Whether ``exc`` says the body called what the simulator's interpreter cannot run.

    An intrinsic with no Python body, a part of ``numba.cuda`` the simulator lacks
    (``activemask``), a device function the swaps above did not reach, numba's own errors.
    """
    text = str(exc)
    # numba's own errors raised while the body runs in Python: the simulator lacks what the
    # compiler did (a local array of a StructModel type cannot be a NumPy array).
    numba_error = any(
        c.__name__ == "NumbaError" and c.__module__.startswith("numba") for c in type(exc).__mro__
    )
    return (
        numba_error
        or (isinstance(exc, NotImplementedError) and "pure-python" in text)
        or (isinstance(exc, AttributeError) and "'FakeCUDAModule'" in text)
        or (isinstance(exc, ValueError) and "launch configuration was not specified" in text)
    )


def _report_exception(
    driver: DriverState, kernel: Any, name: str, exc: Exception, device: int
) -> None:
    """Write numba's ``__errcode__`` globals so numba-cuda raises the kernel's exception."""
    exceptions = getattr(kernel.call_helper, "exceptions", {})
    # Several raise sites may share a class (numba's own range() check raises ValueError too):
    # the site whose arguments are this exception's, else the first of its class.
    text = str(exc)
    same_class = [(c, rest) for c, (cls, *rest) in exceptions.items() if isinstance(exc, cls)]
    code = next(
        (c for c, rest in same_class if rest and rest[0] and all(str(a) in text for a in rest[0])),
        same_class[0][0] if same_class else None,
    )
    if code is None:
        raise CudaError(CUDA_ERROR_LAUNCH_FAILED, f"kernel {name} raised {exc!r}") from exc
    # The simulator's message starts "tid=[x, y, z] ctaid=[x, y, z]": numba-cuda reads both
    # back from the kernel's globals to name the faulting thread.
    found = re.match(r"tid=\[(\d+), (\d+), (\d+)\] ctaid=\[(\d+), (\d+), (\d+)\]", str(exc))
    ids = [int(v) for v in found.groups()] if found else [0] * 6
    values = {"errcode": code}
    values.update({f"tid{a}": v for a, v in zip("xyz", ids[:3], strict=False)})
    values.update({f"ctaid{a}": v for a, v in zip("xyz", ids[3:], strict=False)})
    # A library's globals are per context: the launching device's copy is the one read back.
    libs = [
        lib
        for (lib, gname, dev) in driver.globals
        if gname == f"{name}__errcode__" and dev == device
    ]
    for lib in libs:
        for key, value in values.items():
            address = driver.global_address(lib, f"{name}__{key}__", device)
            ctypes.c_int.from_address(address).value = value
