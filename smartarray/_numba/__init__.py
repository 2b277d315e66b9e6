"""Numba's side of a SmartArray: its type on both targets, and counting numba.cuda's copies.

- :mod:`.kernels`: the ``cuda.jit`` target: kernel-argument typing and numba-cuda's ``ArgHint``
  protocol (``ArrayArgument``, SmartArray's base class);
- :mod:`.njit`: the Numba type of a SmartArray argument, the ``njit`` target's unboxing and
  post-call hook;
- :mod:`.copy_counting`: opt-in counting of every copy numba.cuda makes
  (:func:`smartarray.count_all_transfers`).

No module here may have ``numba.cuda`` in its dotted name: numba-cuda's import redirector
takes every such name for one of numba.cuda's own. Imports nothing itself; ``__all__`` lists
the modules the rest of the package may import (``tests/structure/test_layers.py``).
"""

__all__ = ["copy_counting", "kernels", "njit"]
