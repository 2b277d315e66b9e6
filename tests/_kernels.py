"""Kernels that many test modules launch, defined once (import them: ``from _kernels import
add_one``). A kernel a module needs with its own options (``debug=True``, a launch shape) stays
in that module."""

from __future__ import annotations

from numba import cuda


@cuda.jit
def add_one(x):  # pragma: no cover - runs as a kernel
    """Add 1 to every element of the 1-d ``x`` (one thread per element)."""
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1
