"""SmartArray is one class statement: what users and maintainers rely on.

The class statement in ``smartarray/array.py`` binds functions of the concept modules
(``smartarray/_array/``: geometry, views, ndarray, ...); nothing rebuilds the class at import,
so the class that runs is the class the source, debuggers and type checkers show.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import re
import subprocess
import sys
import types
import weakref

import numpy as np
import pytest
from numba.cuda.args import ArgHint

import smartarray as sa
from smartarray._array.record import _Record
from smartarray._engine import array_classes as _array_classes
from smartarray._numba.kernels import ArrayArgument
from smartarray.array import SmartArray

ROOT = pathlib.Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.rst"


def test_the_mro_is_short_and_what_the_source_says() -> None:
    # numba's C dispatchers walk an argument type's MRO about nine times per njit call
    # (``PyType_IsSubtype``): each class between SmartArray and ``object`` costs every njit
    # call and launch a little (bench_overhead.py: twelve classes cost 1.14 x numba's floor for
    # a non-ndarray argument, four 1.08 x).
    assert SmartArray.__bases__ == (ArrayArgument,)
    assert SmartArray.__mro__ == (SmartArray, ArrayArgument, ArgHint, object)
    a = sa.SmartArray(np.arange(3.0))
    assert isinstance(a, ArgHint) and isinstance(a, ArrayArgument)  # what numba and hints test
    assert weakref.ref(a)() is a


def test_every_attribute_is_in_the_class_dictionary() -> None:
    # The first dictionary an attribute read searches: numba's dispatchers read ``_numba_type_``
    # on every call, and every method reached there skips the walk along the bases.
    inherited = set(dir(ArrayArgument))
    for name in dir(SmartArray):
        if name not in inherited or name in ArrayArgument.__dict__:
            assert name in SmartArray.__dict__, name


def test_super_reaches_smartarrays_methods_in_a_subclass() -> None:
    class Counted(SmartArray):
        __slots__ = ()

        def sum(self, *args: object, **kwargs: object) -> object:
            return super().sum(*args, **kwargs) + 100

        def __getitem__(self, key: object) -> object:
            return super().__getitem__(key)

    a = Counted(np.arange(4.0))
    assert a.sum() == 106.0
    assert isinstance(a[1:3], SmartArray) and a[1:3].tolist() == [1.0, 2.0]
    assert Counted.__mro__[1:] == SmartArray.__mro__


def test_monkeypatching_smartarray_reaches_every_array(monkeypatch: pytest.MonkeyPatch) -> None:
    a = sa.SmartArray(np.arange(4.0))
    monkeypatch.setattr(SmartArray, "sum", lambda self, *args, **kwargs: "patched")
    assert a.sum() == "patched"
    assert a[1:3].sum() == "patched"  # views too
    monkeypatch.undo()
    assert a.sum() == 6.0


def _functions(value: object) -> list[types.FunctionType]:
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset) if f is not None]
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    return [value] if isinstance(value, types.FunctionType) else []


def _public_names() -> list[str]:
    """SmartArray's public names: not private, or a protocol the API page lists."""
    listed = set(re.findall(r"__\w+__", API_PAGE.read_text(encoding="utf-8")))
    return sorted(
        name
        for name in SmartArray.__dict__
        if not name.startswith("_") or name in listed or name.startswith("__array")
    )


def test_every_public_name_is_documented() -> None:
    names = _public_names()
    assert {"shape", "get", "sum", "transpose", "copy", "__dlpack__", "__array__"} <= set(names)
    for name in names:
        value = inspect.getattr_static(SmartArray, name)
        doc = value.__doc__ if isinstance(value, property) else inspect.getdoc(value)
        assert doc and doc.strip(), f"SmartArray.{name} has no docstring"


def test_every_bound_function_keeps_its_attribute_name() -> None:
    # Tracebacks, pickles of bound methods and the API page name a method by ``__name__``.
    for name, value in SmartArray.__dict__.items():
        if name.startswith("_") and not name.startswith("__"):
            continue  # private helpers may keep their module's name (_probe is probe)
        for fn in _functions(value):
            if fn is not getattr(value, "fset", None):
                assert fn.__name__ == name, (name, fn.__name__)


def test_the_operators_are_numpys() -> None:
    a = sa.SmartArray(np.arange(1.0, 4.0))
    b = np.arange(1.0, 4.0)
    for op in ("__add__", "__rsub__", "__mul__", "__truediv__", "__pow__", "__lt__", "__eq__"):
        got = getattr(a, op)(2.0)
        assert np.array_equal(np.asarray(got), getattr(b, op)(2.0)), op
    assert np.array_equal(np.asarray(-a), -b) and np.array_equal(np.asarray(abs(-a)), b)
    c = sa.SmartArray(np.arange(3))
    c += 1
    assert c.tolist() == [1, 2, 3] and (c & 1).tolist() == [1, 0, 1]

    class Defers:
        __array_ufunc__ = None

        def __radd__(self, other: object) -> str:
            return "deferred"

    assert a + Defers() == "deferred"  # NumPy's opt-out, as NDArrayOperatorsMixin honours it


# -- the layers below the class statement construct through registered classes -------------


def test_the_layers_below_construct_through_the_registered_classes() -> None:
    # The interop layer (copies of device objects) and the array layer's helpers (NumPy and
    # njit results, unpickling, record views) make SmartArrays without importing the class.
    assert _array_classes.smartarray_class() is SmartArray
    assert _array_classes.record_view_class() is _Record
    a = sa.SmartArray(np.zeros(3, dtype=[("x", "f8"), ("y", "i4")]))
    assert type(a[1]) is _Record
    assert type(np.sin(sa.SmartArray(np.arange(3.0)))) is SmartArray
    assert type(sa.SmartArray(np.arange(3.0), where="gpu").copy()) is SmartArray


def test_no_registered_class_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_array_classes, "_SMARTARRAY", [])
    with pytest.raises(RuntimeError, match="no SmartArray class is registered: import smartarray"):
        _array_classes.smartarray_class()
    monkeypatch.setattr(_array_classes, "_RECORD_VIEW", [])
    with pytest.raises(RuntimeError, match="no record view class is registered"):
        _array_classes.record_view_class()


def test_importing_the_array_module_alone_gives_every_kind_of_array() -> None:
    # smartarray.array no longer imports what builds on it (the record view registers itself
    # when the package imports it): importing the module alone still gives all of it.
    code = (
        "import numpy as np\n"
        "from smartarray.array import SmartArray\n"
        "a = SmartArray(np.zeros(2, dtype=[('x', 'f8')]))\n"
        "a[0]['x'] = 5\n"
        "assert type(a[0]).__name__ == '_Record', type(a[0])\n"
        "assert a.host()['x'].tolist() == [5.0, 0.0]\n"
        "b = SmartArray(np.arange(3.0), where='gpu')\n"
        "assert type(b.copy()) is SmartArray and type(b + 1) is SmartArray\n"
        "assert SmartArray(b.gpu()).tolist() == [0.0, 1.0, 2.0]\n"
    )
    # (on the simulator: the question is what the import gives, not which target runs it; a
    # child of the fake-driver run would otherwise look for a real driver)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    env.pop("SMARTARRAY_FAKE_GPU", None)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=300, env=env)
