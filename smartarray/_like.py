"""New SmartArrays shaped like an existing array: :func:`empty_like` and :func:`zeros_like`.

As ``numpy.empty_like`` / ``numpy.zeros_like`` and numba's ``device_array_like``: the new array
takes the prototype's shape, dtype and memory order (C or Fortran), never its data, so making
one moves nothing. The prototype may be a SmartArray, an ndarray, or device memory (numba's
device arrays, CuPy, PyTorch, anything with ``shape``, ``dtype`` and ``strides``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .array import SmartArray

__all__ = ["empty_like", "zeros_like"]

_ORDERS = ("C", "F", "A", "K")


def _is_f_only(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    """Whether ``shape``/``strides`` lay elements out in Fortran order and not in C order."""
    if strides is None or len(shape) < 2 or any(n == 0 for n in shape):
        return False
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    if len(dims) < 2:
        return False  # one non-trivial axis: both orders at once, C by NumPy's convention
    step = itemsize
    for n, s in dims:
        if s != step:
            return False
        step *= n
    return True


def _geometry(
    prototype: Any, dtype: Any, order: Any, shape: Any
) -> tuple[Any, Any, Literal["C", "F", "A", "K"]]:
    """The shape, dtype and order ('C' or 'F') of a new array like ``prototype``."""
    if order not in _ORDERS:
        raise ValueError(f"order must be 'C', 'F', 'A' or 'K', got {order!r}")
    try:
        proto_shape = tuple(int(n) for n in prototype.shape)
        proto_dtype = np.dtype(prototype.dtype)
    except (AttributeError, TypeError) as exc:
        raise TypeError(
            "prototype must be an array with shape and dtype (a SmartArray, an ndarray or "
            f"device memory), got {type(prototype).__name__}"
        ) from exc
    if order in ("A", "K"):
        strides = getattr(prototype, "strides", None)
        f_only = strides is not None and _is_f_only(
            proto_shape, tuple(strides), proto_dtype.itemsize
        )
        order = "F" if f_only else "C"
    new_shape = proto_shape if shape is None else shape
    return new_shape, proto_dtype if dtype is None else dtype, order


def empty_like(
    prototype: Any,
    dtype: Any = None,
    order: str = "K",
    shape: Any = None,
    *,
    pinned: bool = False,
    name: str | None = None,
) -> SmartArray:
    """A new uninitialised SmartArray with the shape, dtype and order of ``prototype``.

    Nothing is allocated or moved until the array is first used, and its garbage is never
    copied: the first kernel to write it needs no upload (pass it as ``Out``).

    Parameters
    ----------
    prototype : SmartArray, ndarray or device array
        Gives the shape, dtype and memory order; its data is not read.
    dtype : dtype, optional
        Overrides the prototype's dtype.
    order : {'K', 'A', 'C', 'F'}, optional
        ``'K'`` and ``'A'`` (default ``'K'``) keep Fortran order when the prototype is
        Fortran-contiguous (and not C-contiguous), otherwise C order.
    shape : int or tuple of int, optional
        Overrides the prototype's shape.
    pinned : bool, optional
        Keep the host copy in page-locked memory.
    name : str, optional
        The array's name in transfer events, summaries and warnings.

    Returns
    -------
    SmartArray

    Raises
    ------
    TypeError
        ``prototype`` has no ``shape`` and ``dtype``; an object or string dtype.
    ValueError
        An unknown ``order``; a bad ``shape``.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> out = sa.empty_like(np.zeros((3, 2), np.float32, order="F"))
    >>> out.shape, out.dtype, out.flags.f_contiguous
    ((3, 2), dtype('float32'), True)
    """
    new_shape, new_dtype, new_order = _geometry(prototype, dtype, order, shape)
    return SmartArray(shape=new_shape, dtype=new_dtype, order=new_order, pinned=pinned, name=name)


def zeros_like(
    prototype: Any,
    dtype: Any = None,
    order: str = "K",
    shape: Any = None,
    *,
    pinned: bool = False,
    name: str | None = None,
) -> SmartArray:
    """A new SmartArray of zeros with the shape, dtype and order of ``prototype``.

    The zeros are written on the host, so a kernel reading them uploads them once; for an
    output a kernel overwrites in full, :func:`empty_like` (passed as ``Out``) moves nothing.

    Parameters
    ----------
    prototype, dtype, order, shape, pinned, name
        As :func:`empty_like`.

    Returns
    -------
    SmartArray

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> sa.zeros_like(np.arange(3))
    SmartArray([0, 0, 0], valid='host')
    """
    out = empty_like(prototype, dtype, order, shape, pinned=pinned, name=name)
    out[...] = 0
    return out
