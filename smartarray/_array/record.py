"""The record view: one element of a structured SmartArray, as ``a[i]`` returns it.

It is a SmartArray subclass, so it builds on :mod:`smartarray.array`, which never imports it:
this module registers the class (:mod:`smartarray._engine.array_classes`) when imported, and
SmartArray's ``_as_record`` hook builds these views through that registration. The package
imports this module, so it is registered whenever a SmartArray can exist. It is the one module
of the array layer that imports the class at run time (to subclass it) and that the class
statement does not bind; it reads its base class's slots as the class's own code does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._engine.array_classes import register_record_view
from ..array import SmartArray
from .geometry import address

__all__ = ["_Record"]


class _Record(SmartArray):
    """One element of a structured SmartArray, as ``a[i]`` returns it.

    NumPy returns a record (``np.void``) that is a view of the array: assigning a field
    through it (``a[0]['x'] = 5``) writes the array. This 0-d SmartArray view does the same
    and records the write, so the device copy never keeps a stale value. Reading a field
    (by name or position) gives a NumPy scalar, as a record does (a copy of the current
    value; a subarray field gives a SmartArray view, a nested record another record view).
    ``a[i][()]`` gives a plain ``np.void`` copy.
    """

    __slots__ = ()

    @property
    def _names(self) -> tuple[str, ...]:
        """The record's field names (a record view's dtype is structured)."""
        names = self._dtype.names
        assert names is not None
        return names

    def _field(self, key: Any) -> str:
        names = self._names
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            try:
                return names[key]
            except IndexError:
                raise IndexError(
                    f"record field index {key} out of range for {len(names)} fields"
                ) from None
        return key

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple) and not key:
            with self._buf.lock:
                return self._host_ro().copy()[()]  # the plain record, a copy
        if not isinstance(key, (str, int, np.integer)):
            return SmartArray.__getitem__(self, key)
        name = self._field(key)
        with self._buf.lock:
            probe = self._probe()
            result = probe[name]
            offset = self._offset + address(result) - address(probe)
            field = SmartArray._view(self._buf, offset, result.shape, result.strides, result.dtype)
            if field.ndim:
                return field
            if field._dtype.names is not None:
                return _Record._view(self._buf, offset, (), (), field._dtype)
            return field._host_ro().copy()[()]

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, np.integer)):
            key = self._field(key)
        SmartArray.__setitem__(self, key, value)

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[Any]:
        for name in self._names:
            yield self[name]

    def __eq__(self, other: Any) -> Any:
        return self[()] == (other[()] if isinstance(other, SmartArray) else other)

    def __ne__(self, other: Any) -> Any:
        return self[()] != (other[()] if isinstance(other, SmartArray) else other)


register_record_view(_Record)
