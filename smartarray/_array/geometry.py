"""SmartArray's geometry: the ndarray attributes (shape, dtype, strides, ...) and the probe.

Functions the :class:`~smartarray.array.SmartArray` class statement binds (``shape =
property(_geometry.shape)``). A SmartArray is a view (offset, shape, strides, dtype) of its
base buffer; these read that geometry and never touch data. The probe (an array of this
geometry over one element) lets NumPy's own indexing find a view's geometry (see
:mod:`smartarray._array.views`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "T",
    "address",
    "check_device_geometry",
    "contiguous_strides",
    "covers",
    "dtype",
    "flags",
    "from_probe",
    "itemsize",
    "nbytes",
    "ndim",
    "probe",
    "shape",
    "size",
    "strides",
]


def address(ary: np.ndarray) -> int:
    """The address of ``ary``'s first element."""
    return ary.__array_interface__["data"][0]


def contiguous_strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    """The strides of a new contiguous array (``order`` 'F' or else C order)."""
    strides = [0] * len(shape)
    step = itemsize
    dims = range(len(shape)) if order == "F" else reversed(range(len(shape)))
    for i in dims:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def probe(self: SmartArray) -> np.ndarray:
    """An array with this geometry over one element: indexing it never reads memory."""
    return as_strided(np.zeros(1, self._dtype), self._shape, self._strides)


def from_probe(self: SmartArray, probe: np.ndarray, result: np.ndarray) -> SmartArray:
    """The view of ``self`` that ``result`` (NumPy's view of ``probe``) is of the probe."""
    offset = self._offset + address(result) - address(probe)
    return self._view(self._buf, offset, result.shape, result.strides, result.dtype)


def check_device_geometry(self: SmartArray) -> None:
    """Refuse a device view that numba cannot take (negative strides), moving nothing."""
    if any(s < 0 for s in self._strides):
        raise ValueError(
            f"device views take no negative strides, got {self._strides!r}; "
            "make a contiguous copy first (e.g. SmartArray(a))"
        )


def covers(self: SmartArray) -> bool:
    """Whether the elements tile the byte interval (a write needs no sync first)."""
    return self._hi - self._lo == math.prod(self._shape) * self._dtype.itemsize


# -- attributes (properties of SmartArray) ---------------------------------------------------


def shape(self: SmartArray) -> tuple[int, ...]:
    """tuple of int: the array's dimensions."""
    return self._shape


def dtype(self: SmartArray) -> np.dtype:
    """numpy.dtype: the element type."""
    return self._dtype


def ndim(self: SmartArray) -> int:
    """int: the number of dimensions."""
    return len(self._shape)


def size(self: SmartArray) -> int:
    """int: the number of elements."""
    return math.prod(self._shape)


def strides(self: SmartArray) -> tuple[int, ...]:
    """tuple of int: bytes to step in each dimension."""
    return self._strides


def itemsize(self: SmartArray) -> int:
    """int: bytes per element."""
    return self._dtype.itemsize


def nbytes(self: SmartArray) -> int:
    """int: bytes taken by the elements."""
    return math.prod(self._shape) * self._dtype.itemsize


def flags(self: SmartArray) -> Any:
    """Layout flags of the host view (``c_contiguous``, ``f_contiguous``, ...)."""
    return probe(self).flags


def T(self: SmartArray) -> SmartArray:  # noqa: N802 - numpy's name
    """The transposed view."""
    return self.transpose()
