"""SmartArray's mixins, merged into one class at run time: :func:`flatten`.

SmartArray is written as a class inheriting its mixins (``GeometryMethods``, ``ViewMethods``,
``NumPyMethods``, ...), one concept per module, and that is what readers and type tools see.
At run time, :func:`flatten` rebuilds it with every mixin's attributes in its own dictionary
and only the bases Numba and the glue test for: ``SmartArray -> ArrayArgument -> ArgHint ->
object`` instead of twelve classes.

Why: numba's C dispatchers (``_typeof.cpp``: ``typeof_typecode``, ``compute_fingerprint``)
test an argument that is not an ndarray against nine C types (``PyArray_Check``,
``PyFloat_Check``, numba's device array, ...) on every call before reading its
``_numba_type_``; each test is a ``PyType_IsSubtype`` walk along the argument type's
``__mro__``. With the twelve-class MRO a no-op ``njit`` call with one SmartArray took 1.14 x
numba's floor for a non-ndarray argument (``benchmarks/bench_overhead.py``, median of five
runs: 554 ns against 490 ns); with these four classes, 1.06 to 1.08 x over three such runs
(527 ns against 488 ns). Every attribute is also in the first dictionary searched, which the
dispatchers' ``_numba_type_`` read needs (made with a new name string, it misses CPython's
type attribute cache).

What the mixins must do for the merge to mean what the class statement says:

- declare ``__slots__ = ()`` (the instance layout is the decorated class's own);
- use no zero-argument ``super()`` and no ``__class__`` (that cell would name the class as
  written, not the one built here);
- not be tested with ``isinstance``: at run time a SmartArray is not an instance of its
  mixins. Test ``ArrayArgument`` (what the glue calls a SmartArray) instead.

Likewise, patching a mixin's method after import (a test's ``monkeypatch``) does not reach
SmartArray, which holds its own reference: patch ``SmartArray``.

``tests/test_mixins.py`` checks that every attribute resolves to the same object as on the
class as written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["flatten"]

T = TypeVar("T", bound=type)

# Entries every class statement makes for itself: the decorated class's own are kept.
_CLASS_ENTRIES = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__slots__",
        "__annotations__",
        "__dict__",
        "__weakref__",
        "__firstlineno__",
        "__static_attributes__",
    }
)


def flatten(keep: type) -> Callable[[T], T]:
    """Rebuild the decorated class with ``keep`` as its only base and its mixins merged in.

    Every class of the decorated class's MRO before ``keep``'s own MRO (its mixins) gives its
    attributes to the new class's dictionary, in reverse MRO order, so that each name resolves
    to what the class as written resolved it to. The new class keeps the written class's name,
    module, docstring and ``__slots__``; the written class stays reachable as ``_written``.

    Parameters
    ----------
    keep : type
        The base the class keeps at run time; its MRO must end the written class's MRO.

    Raises
    ------
    TypeError
        ``keep`` is not where the written MRO ends, or a mixin does not declare
        ``__slots__ = ()``.
    """

    def rebuild(cls: T) -> T:
        mro, tail = cls.__mro__, keep.__mro__
        if mro[len(mro) - len(tail) :] != tail:
            raise TypeError(f"{cls.__name__}'s MRO does not end with {keep.__name__}'s")
        namespace: dict[str, object] = {}
        for mixin in reversed(mro[1 : len(mro) - len(tail)]):  # earlier in the MRO wins
            if mixin.__dict__.get("__slots__") != ():
                raise TypeError(f"mixin {mixin.__name__} must declare __slots__ = ()")
            namespace.update(
                (name, value)
                for name, value in mixin.__dict__.items()
                if name not in _CLASS_ENTRIES
            )
        slots = cls.__dict__.get("__slots__", ())
        namespace.update(
            (name, value)
            for name, value in cls.__dict__.items()
            if name not in slots and name not in ("__dict__", "__weakref__")
        )  # the written class's slot descriptors are not the new class's
        namespace["_written"] = cls
        return type(cls)(cls.__name__, (keep,), namespace)  # type: ignore[return-value]

    return rebuild
