"""A fake CUDA driver: numba-cuda's real target, without a GPU (``SMARTARRAY_FAKE_GPU=1``).

A test double shipped for users, like strict mode. :func:`enable` builds (once, cached) and
loads a small C library under the soname ``libcuda.so.1``; cuda-bindings, cuda.core and
numba-cuda then load it instead of NVIDIA's driver and run their own, unmodified code over
it. Every driver entry point is implemented in Python (:mod:`.driver`): device memory is a
separate host mapping, queued work runs in a seeded adversarial order when the host waits for
it (:mod:`._queue`), and kernels run their Python body with numba's simulator thread
interpreter over the fake device memory (:mod:`._kernels`).

It must be enabled before ``numba.cuda`` is first imported; it is never loaded unless asked.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import weakref

from .._platform import environment as _environment

__all__ = ["current", "enable"]

_DRIVER = None
_RESOLVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64)
_keep: list[object] = []


def enable() -> object:
    """Load the fake driver for this process; returns its :class:`~.driver.FakeDriver`.

    Raises
    ------
    RuntimeError
        When ``numba.cuda`` or cuda-bindings' driver was already imported (too late to choose
        the driver), or the simulator is selected (``NUMBA_ENABLE_CUDASIM=1``).
    """
    global _DRIVER
    if _DRIVER is not None:
        return _DRIVER
    if _environment.flag("SMARTARRAY_STRICT"):
        raise RuntimeError(
            "SMARTARRAY_FAKE_GPU and SMARTARRAY_STRICT exclude each other: strict mode runs on "
            "the CUDA simulator, the fake driver under numba-cuda's real target; set one"
        )
    if _environment.text("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError(
            "SMARTARRAY_FAKE_GPU runs numba-cuda's real target; unset NUMBA_ENABLE_CUDASIM "
            "(and SMARTARRAY_STRICT, which uses the simulator)"
        )
    if "numba.cuda.cudadrv.driver" in sys.modules or _driver_already_loaded():
        raise RuntimeError(
            "SMARTARRAY_FAKE_GPU must be set before numba.cuda is imported: set it in the "
            "environment and import smartarray first, or run the program as `python -m "
            "smartarray run SCRIPT`; an installed smartarray's start-up hook does it for any "
            "program (docs/testing.rst, 'The fake CUDA driver in any program')"
        )
    from . import _build
    from .driver import FakeDriver

    lib = _build.load()
    fake = FakeDriver()
    resolver = _RESOLVER(fake.resolve)
    _keep.extend((lib, resolver))
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(resolver))  # never freed, like the driver
    lib.fakecuda_set_resolver(resolver)
    # After Python's exit handlers, every entry answers CUDA_ERROR_DEINITIALIZED from C:
    # cuda.core releases contexts in C++ destructors once the interpreter is gone.
    atexit.register(_shutdown, lib)
    # numba-cuda's CUDA-Python binding path chooses the driver through cuda-bindings.
    os.environ.setdefault("NUMBA_CUDA_USE_NVIDIA_BINDING", "1")
    _DRIVER = fake
    return fake


def _shutdown(lib: ctypes.CDLL) -> None:
    """Close the fake driver at exit, after the finalizers that still call it.

    numba-cuda frees memory and unloads modules from ``weakref.finalize`` callbacks, which
    run at exit from an exit handler of the weakref module's own; when that one was registered
    before this (pytest, say, made a finalizer first), it would run after the driver closed
    and each unload would fail (``CUDA_ERROR_DEINITIALIZED`` tracebacks at exit). A GPU's
    driver stays up until the process ends: those finalizers run now, while it answers.
    """
    # A finalizer's error must not keep the driver open.
    with contextlib.suppress(Exception):
        weakref.finalize._exitfunc()  # type: ignore[attr-defined]  # (CPython's own hook)
    lib.fakecuda_shutdown()


def _driver_already_loaded() -> bool:
    """Whether the simulator was chosen or a ``libcuda.so.1`` is loaded already."""
    numba_config = sys.modules.get("numba.core.config")
    if getattr(numba_config, "ENABLE_CUDASIM", False):
        return True  # numba.cuda chose the simulator at import
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def current() -> object | None:
    """The loaded :class:`~.driver.FakeDriver`, or ``None`` when the fake driver is off."""
    return _DRIVER
