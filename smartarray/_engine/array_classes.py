"""The array layer's classes, registered for the code below it that makes SmartArrays.

The interop layer (a device object copied into a new array: ``a.copy()``, a DLPack copy) and
the array layer's own helpers (NumPy and njit results, unpickling, record views) construct
SmartArrays, but the class statement sits above them and binds their functions: importing it
from there would close an import circle. So :mod:`smartarray.array` registers ``SmartArray``
right after its class statement and :mod:`smartarray._array.record` its record view when imported
(the package imports both), and the code below reads the classes here: a list item, as
cheap as a module global (the njit result adapter reads it on every returned view).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray

__all__ = [
    "SMARTARRAY",
    "record_view_class",
    "register",
    "register_record_view",
    "smartarray_class",
]

# One slot each, filled once at import (see the module's text).
_SMARTARRAY: list[type[SmartArray]] = []
_RECORD_VIEW: list[type[SmartArray]] = []

#: The SmartArray class's slot itself, for the array layer's host fast paths, which make a
#: new array per NumPy result and run only on an existing SmartArray (so after the
#: registration): ``SMARTARRAY[0]`` is an item read, a call of :func:`smartarray_class` costs
#: a tenth of NumPy's whole ufunc on a few elements.
SMARTARRAY = _SMARTARRAY


def register(cls: type[SmartArray]) -> None:
    """Make ``cls`` the class :func:`smartarray_class` returns (``smartarray.array`` calls it)."""
    _SMARTARRAY[:] = [cls]


def register_record_view(cls: type[SmartArray]) -> None:
    """Make ``cls`` the record view class (``smartarray._array.record`` calls it when imported)."""
    _RECORD_VIEW[:] = [cls]


def smartarray_class() -> type[SmartArray]:
    """The SmartArray class.

    Raises
    ------
    RuntimeError
        ``smartarray.array`` was never imported (``import smartarray`` imports it).
    """
    if not _SMARTARRAY:
        raise RuntimeError(
            "no SmartArray class is registered: import smartarray (smartarray.array registers "
            "it) before making SmartArrays"
        )
    return _SMARTARRAY[0]


def record_view_class() -> type[SmartArray]:
    """The class of a structured array's record view (``a[i]``).

    Raises
    ------
    RuntimeError
        ``smartarray._array.record`` was never imported (``import smartarray`` imports it).
    """
    if not _RECORD_VIEW:
        raise RuntimeError(
            "no record view class is registered: import smartarray (it imports "
            "smartarray._array.record, which registers it) before indexing structured "
            "SmartArrays"
        )
    return _RECORD_VIEW[0]
