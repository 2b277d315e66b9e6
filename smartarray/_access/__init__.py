"""Which array parameters a function may write: a sound analysis of Numba's IR.

:func:`analyse` reads the untyped Numba IR of a Python function (``numba.core.compiler.
run_frontend``: the same on the CUDA simulator and on a GPU, no compilation, no GPU) and says,
per parameter, whether the function may write the memory of the array passed there.

The analysis is *sound*: whatever it cannot prove read-only counts as written. It is flow
insensitive (the IR is not in SSA form: every definition of a name counts wherever the name is
used, and the statements are iterated to a fixpoint), so conditional writes and loops are
covered without path reasoning.

What it tracks, per variable: the parameters whose memory the variable may reference, each with
a *level*: how many dimensions indexing removed since the parameter (``x`` is level 0, ``x[i]``
level 1, ``x[i, j]`` level 2, ``x[1:]`` level 0, ``x[None]`` level -1; a tuple ``(x, y)`` is one
level *below* its items, so ``(x, y)[0]`` is ``x`` again). A value at a level at least the
array's number of dimensions is an element: a copy, which the function may change freely
(``acc = x[i]; acc += 1`` does not write a 1-d ``x``). Anything whose rank is unknown
(``x.reshape(...)``, an index the analysis cannot classify) gets level :data:`NEG`: it may be
the array itself.

Writes (events) at level ``k`` on parameter ``p`` write ``p``'s array when ``k < ndim``:

- ``v[...] = ...``, ``v.attr = ...``, ``del v[...]`` on an alias: always (a record element
  ``x[i]`` is a reference into the array, so no level is trusted there);
- ``v += ...`` (in place): at ``v``'s level;
- a call: ``cuda.atomic.*`` writes its first argument; device functions and njit functions
  are analysed in turn (a recursion guard counts a function that calls itself as writing);
  known read-only functions (``math``, ``cuda`` intrinsics, a whitelist of NumPy functions and
  array methods) write nothing; any other call receiving an alias writes it;
- an alias stored into something (``lst[0] = x``), returned or yielded escapes: written at its
  level (storing an element copies it).

The result is a threshold per parameter: the least level of any write. A parameter whose
array has ``1 <= ndim <= threshold`` elements and no record fields is read only; a parameter
with no write at all is read only whatever is passed.

Layout (one concept per module): :mod:`.results` (the report types), :mod:`.known` (what is
known about callees without reading them), :mod:`.values` (aliases with levels, index kinds),
:mod:`.transfer` (the per-statement rules), :mod:`.deps` (the bindings an analysis resolved,
to redo it when one is rebound), :mod:`.driver` (IR, fixpoints, callees, cache).
"""

from __future__ import annotations

from .deps import Deps
from .driver import analyse, analysis
from .results import NEG, Access, ParamAccess, Write
from .results import NEVER as NEVER  # not in __all__ (as before): read by jit.py and tests

__all__ = ["NEG", "Access", "Deps", "ParamAccess", "Write", "analyse", "analysis"]
