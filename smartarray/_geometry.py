"""SmartArray's geometry: the ndarray attributes (shape, dtype, strides, ...) and the probe.

:class:`GeometryMethods` is a mixin :class:`~smartarray.array.SmartArray` inherits. A SmartArray
is a view (offset, shape, strides, dtype) of its base buffer; these read that geometry and never
touch data. The probe (an array of this geometry over one element) lets NumPy's own indexing
find a view's geometry (see :mod:`smartarray._views`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._arguments import address

if TYPE_CHECKING:  # pragma: no cover
    from .array import SmartArray

__all__ = ["GeometryMethods"]


class GeometryMethods:
    """The geometry of a SmartArray view: ndarray attributes and the probe."""

    __slots__ = ()

    def _probe(self) -> np.ndarray:
        """An array with this geometry over one element: indexing it never reads memory."""
        return as_strided(np.zeros(1, self._dtype), self._shape, self._strides)

    def _from_probe(self, probe: np.ndarray, result: np.ndarray) -> SmartArray:
        offset = self._offset + address(result) - address(probe)
        return self._view(self._buf, offset, result.shape, result.strides, result.dtype)

    def _covers(self) -> bool:
        """Whether the elements tile the byte interval (a write needs no sync first)."""
        return self._hi - self._lo == self.size * self._dtype.itemsize

    # -- attributes ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """tuple of int: the array's dimensions."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the element type."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """int: the number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """int: the number of elements."""
        return math.prod(self._shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """tuple of int: bytes to step in each dimension."""
        return self._strides

    @property
    def itemsize(self) -> int:
        """int: bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """int: bytes taken by the elements."""
        return self.size * self._dtype.itemsize

    @property
    def flags(self) -> Any:
        """Layout flags of the host view (``c_contiguous``, ``f_contiguous``, ...)."""
        return self._probe().flags

    @property
    def T(self) -> SmartArray:  # noqa: N802 - numpy's name
        """The transposed view."""
        return self.transpose()
