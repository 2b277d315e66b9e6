"""Kernels and helpers that many test modules use, defined once (import them: ``from _kernels
import add_one``). A kernel a module needs with its own options (``debug=True``, a launch
shape) stays in that module."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from numba import cuda


@cuda.jit
def add_one(x):  # pragma: no cover - runs as a kernel
    """Add 1 to every element of the 1-d ``x`` (one thread per element)."""
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


@contextlib.contextmanager
def non_blocking_stream() -> Iterator[Any]:
    """A numba stream over a new non-blocking CUstream (what CuPy and PyTorch may hand over:
    not ordered after the legacy default stream), destroyed after the block (real target)."""
    from cuda.bindings import driver as drv

    cuda.current_context()  # the primary context, current in this thread
    err, handle = drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
    assert err == drv.CUresult.CUDA_SUCCESS
    try:
        yield cuda.external_stream(int(handle))
    finally:
        cuda.synchronize()
        drv.cuStreamDestroy(handle)
