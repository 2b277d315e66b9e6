"""SmartArray at run time: one class with its mixins merged in (``smartarray._mixins``)."""

from __future__ import annotations

import functools
import inspect
import types
import weakref

import numpy as np
import pytest
from numba.cuda.args import ArgHint

import smartarray as sa
from smartarray._mixins import flatten
from smartarray._numba_cuda import ArrayArgument
from smartarray.array import SmartArray


def test_runtime_mro_is_short() -> None:
    # numba's C dispatchers walk an argument type's MRO about nine times per njit call
    # (``PyType_IsSubtype``): twelve classes cost an njit call with one SmartArray about 1.14 x
    # numba's floor for a non-ndarray argument, four about 1.08 x (bench_overhead.py).
    assert SmartArray.__mro__ == (SmartArray, ArrayArgument, ArgHint, object)
    a = sa.SmartArray(np.arange(3.0))
    assert isinstance(a, ArgHint) and isinstance(a, ArrayArgument)  # what numba and hints test
    assert weakref.ref(a)() is a


def test_every_attribute_resolves_as_written() -> None:
    written = SmartArray._written
    assert written.__mro__[1:] != SmartArray.__mro__[1:]  # the mixins are its bases
    for name in dir(written):
        want = inspect.getattr_static(written, name)
        got = inspect.getattr_static(SmartArray, name)
        if name in written.__slots__:  # the new class's own slot, same name
            assert isinstance(got, types.MemberDescriptorType), name
            assert got.__objclass__ is SmartArray, name
        elif name not in ("__dict__", "__weakref__"):  # the instance layout's descriptors
            assert got is want, name


def _functions(value: object) -> list[types.FunctionType]:
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, functools.cached_property):
        return [value.func]
    return [value] if isinstance(value, types.FunctionType) else []


def test_no_method_names_the_written_class() -> None:
    # A zero-argument super() or __class__ in a mixin would name the class as written.
    for name, value in vars(SmartArray).items():
        for fn in _functions(value):
            assert "__class__" not in fn.__code__.co_freevars, name


def test_flatten_refuses_a_mixin_with_slots_or_a_foreign_base() -> None:
    class Base:
        __slots__ = ()

    class Mixin:
        __slots__ = ("x",)

    class Written(Mixin, Base):
        __slots__ = ()

    with pytest.raises(TypeError, match=r"Mixin must declare __slots__ = \(\)"):
        flatten(keep=Base)(Written)
    with pytest.raises(TypeError, match="does not end with"):
        flatten(keep=ArgHint)(Written)


def test_flatten_keeps_what_the_mixins_define() -> None:
    class Base:
        def where(self) -> str:
            return "base"

    class Left:
        __slots__ = ()

        def where(self) -> str:
            return "left"

        def left(self) -> str:
            return "left"

    class Right:
        __slots__ = ()

        def where(self) -> str:
            return "right"

        def right(self) -> str:
            return "right"

    @flatten(keep=Base)
    class Both(Left, Right, Base):
        """Both."""

        __slots__ = ("value",)

    both = Both()
    both.value = 1
    assert Both.__mro__ == (Both, Base, object)
    assert (both.where(), both.left(), both.right(), both.value) == ("left", "left", "right", 1)
    assert Both.__doc__ == "Both." and Both.__qualname__.endswith("Both")
