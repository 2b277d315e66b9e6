"""The concept modules SmartArray is made of; its one class statement is :mod:`smartarray.array`.

Each module holds functions ``def name(self: SmartArray, ...)`` that the class body binds
(``transpose = _views.transpose``), as pydata/sparse's ``COO`` does:

- :mod:`.copies`: a view's side of its two copies (host views, recorded writes, validity, name);
- :mod:`.geometry`: the ndarray attributes (shape, dtype, strides, ...);
- :mod:`.views`: views and indexing;
- :mod:`.numpy_api`: NumPy's protocols (``__array__``, ufuncs, array functions);
- :mod:`.ndarray`: numpy.ndarray's methods and Python's operators;
- :mod:`.protocols`: Python's protocols (length, iteration, conversions, text, copying);
- :mod:`.exchange`: how outside code reads and writes a SmartArray (device copies, interop);
- :mod:`.results`: SmartArrays over ndarrays made elsewhere (NumPy, pickles, njit);
- :mod:`.arguments`: a SmartArray as a kernel or ``njit`` argument (its Numba type, launch
  preparation through the engine's buffer and launch object, the njit hooks).

- :mod:`.record`: the record view (``a[i]`` of a structured array), a SmartArray subclass that
  registers itself when the package imports it.

They import ``SmartArray`` for annotations only, but :mod:`.record`, which subclasses it.
Imports nothing itself; ``__all__`` lists the modules the rest of the package may import
(``tests/structure/test_layers.py``).
"""

__all__ = [
    "arguments",
    "copies",
    "exchange",
    "geometry",
    "ndarray",
    "numpy_api",
    "protocols",
    "record",
    "results",
    "views",
]
