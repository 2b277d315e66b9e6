"""The ``cuda.jit`` target: kernel-argument typing and numba-cuda's ArgHint protocol.

numba-cuda prepares every kernel argument that is an ``ArgHint`` by calling its
``to_device(retr, stream)``: the object returns what the kernel receives and appends zero-argument
callbacks to ``retr``, which the dispatcher runs right after the launch (the simulator: after
every block finished). SmartArray and the intent wrappers of :mod:`smartarray.hints` are
``ArgHint`` subclasses; a SmartArray is an :class:`ArrayArgument`, the protocol the intent
wrappers talk to, and SmartArray's direct base class (``smartarray/array.py`` is one class
statement: each class between an argument's type and ``object`` costs every njit call and
launch a little).

The simulator swaps ``numba.cuda.args`` for a module of its own, so ``ArgHint`` is imported here,
after numba.cuda chose its target (any import of smartarray imports numba.cuda first).

Typing: the dispatcher reads ``_numba_type_`` directly (a Python ``typeof`` lookup costs about
13 us a call); a SmartArray caches its :class:`~smartarray._numba.njit.SmartArrayType`, which
converts to and from the plain array type in the CUDA typing context. While a kernel can still
compile, numba-cuda's C dispatcher requires an exact type match (``exact_match_required`` in its
``_dispatcher.cpp``), so a lazily compiled kernel compiles one version for SmartArrays next to
the one for device arrays, and one for ``In(SmartArray)`` (read-only); each once. Eager
signatures serve SmartArrays without compiling (conversions apply once compiling is disabled).
Typing SmartArrays as plain arrays during a launch only would need a Python property for
``_numba_type_``, which numba's C code reads twice per argument on every call: about 0.15 to
0.3 us more per ``njit`` call, for a compile paid once. ``tests/numba/test_dispatch.py`` runs
the real dispatcher and shows which version each kind of argument uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.core import types
from numba.cuda.args import ArgHint as _ArgHint
from numba.cuda.args import In as _NumbaIn
from numba.np import numpy_support

__all__ = ["ArrayArgument", "element_type", "kernel_argument"]


def element_type(dtype: np.dtype) -> types.Type:
    """The Numba type of one element, or a ``TypeError`` naming the dtype."""
    try:
        return numpy_support.from_dtype(dtype)
    except Exception as exc:  # noqa: BLE001 - numba's errors for a dtype vary
        raise TypeError(f"Numba cannot compile for elements of dtype {dtype}: {exc}") from None


class ArrayArgument(_ArgHint):
    """An array the glue can hand to a kernel or an ``njit`` function with an intent.

    The protocol the intent wrappers (:mod:`smartarray.hints`) and the njit unbox hooks
    (:mod:`smartarray._numba.njit`) talk to, so that the glue never imports the array layer.
    ``intent`` is one of ``smartarray._engine.buffer``'s ``IN``, ``OUT``, ``INOUT``. Subclasses
    implement numba-cuda's ``to_device(retr, stream=0)`` and ``_numba_type_``.
    """

    __slots__ = ()

    def _prepare_launch(self, retr: list[Any], stream: Any, intent: str) -> Any:
        """Make the device copy current for a launch; append the post-launch record to ``retr``."""
        raise NotImplementedError

    def _numba_type(self, readonly: bool) -> Any:
        """The Numba type of this array (``readonly``: for an ``In`` argument)."""
        raise NotImplementedError

    def _njit_enter_as(self, intent: str) -> Any:
        """The current host ndarray an njit function receives."""
        raise NotImplementedError

    def _njit_exit_as(self, intent: str) -> None:
        """Record what the njit call wrote."""
        raise NotImplementedError

    def _njit_abort_as(self, intent: str) -> None:
        """Record what a failed njit call may have written."""
        raise NotImplementedError


def kernel_argument(devary: Any) -> Any:
    """What the dispatcher expects from ``ArgHint.to_device`` for the device array ``devary``.

    Since numba-cuda 0.25 the dispatcher reads ``.ptr`` and ``._layout.strides_in_bytes`` from
    it, so it is whatever numba's own ``In(devary).to_device`` returns (on a GPU the device
    array's cached ``_strided_memory_view_shim``, on the simulator the array itself): the same
    object launch after launch, so a view computes it once. ``In`` copies nothing for device
    memory and ignores the stream; the keep-alive callback it appends is not needed (the
    launch holds the view, which holds ``devary``, until its callback ran).
    """
    return _NumbaIn(devary).to_device([], 0)
