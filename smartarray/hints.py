"""Intent wrappers for kernel and njit arguments: :class:`In`, :class:`Out`, :class:`InOut`.

They tell smartarray (and Numba) what a kernel or ``njit`` function does with an argument:

- ``In(x)``: only reads ``x``. Its device (or host) copy is made current, but nothing is
  recorded as written afterwards; ``njit`` and ``cuda.jit`` see it as a read-only array, so a
  write fails at compile time (a lazily compiled kernel compiles a read-only version once).
- ``Out(x)``: overwrites *every element* of ``x``. Nothing is uploaded first; afterwards ``x``
  is marked written. A strided view (with gaps between its elements) falls back to ``InOut``:
  the gaps must stay current, so the view is synced first.
- ``InOut(x)``: reads and writes ``x``; the default for a bare SmartArray.

They also accept plain ndarrays and device arrays, with numba.cuda's meaning of ``cuda.In``,
``cuda.Out`` and ``cuda.InOut``.
"""

from __future__ import annotations

from typing import Any

from numba.cuda import args as _numba_args
from numba.cuda.typing.typeof import Purpose, typeof

from ._engine.buffer import IN, INOUT, OUT
from ._numba.kernels import ArrayArgument

__all__ = ["In", "InOut", "Out"]

# What a wrapped value's class is: an ArrayArgument (a SmartArray), an intent wrapper, or
# anything else. Cached per class: ``isinstance`` against numba's ArgHint hierarchy goes
# through ``ABCMeta.__instancecheck__`` (a few hundred nanoseconds), a dict look-up does not.
_OTHER, _SMART, _WRAPPER = 0, 1, 2
_KINDS: dict[type, int] = {}


def _kind(cls: type) -> int:
    kind = (
        _SMART
        if issubclass(cls, ArrayArgument)
        else _WRAPPER
        if issubclass(cls, _Intent)
        else _OTHER
    )
    _KINDS[cls] = kind
    return kind


class _Intent(_numba_args.ArgHint):
    intent: str  # each subclass's: IN, OUT or INOUT
    _numba_hint: type = _numba_args.InOut
    _njit_fast = None  # njit always goes through the hooks (see smartarray._numba.njit)
    #: Whether the wrapped value is a SmartArray (set once per wrapper: a launch reads it).
    _smart = False

    def __init__(self, value: Any) -> None:
        kind = _KINDS.get(type(value))
        if kind is None:
            kind = _kind(type(value))
        if kind == _WRAPPER:
            raise TypeError(
                f"{type(self).__name__}() takes an array, not another intent wrapper "
                f"({type(value).__name__})"
            )
        self.value = value
        self._smart = kind == _SMART

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        """Prepare the wrapped array for a kernel launch (numba-cuda's ArgHint protocol)."""
        if self._smart:
            return self.value._prepare_launch(retr, stream, self.intent)
        return self._numba_hint(self.value).to_device(retr, stream)

    @property
    def _numba_type_(self) -> Any:
        """The argument's Numba type (numba's dispatcher reads it twice per launch)."""
        if self._smart:
            # In: a readonly array type, so writes fail at compile time on both targets.
            # Cached in the array: a loop of launches makes a new wrapper each time.
            value = self.value
            return value._numba_in_type_ if self.intent == IN else value._numba_type_
        found = self.__dict__.get("_foreign_type")
        if found is None:
            found = self.__dict__["_foreign_type"] = typeof(self.value, Purpose.argument)
        return found

    def _njit_enter(self) -> Any:
        return self.value._njit_enter_as(self.intent)

    def _njit_exit(self) -> None:
        self.value._njit_exit_as(self.intent)

    def _njit_abort(self) -> None:
        self.value._njit_abort_as(self.intent)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class In(_Intent):
    """The kernel (or njit function) only reads the wrapped array.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> a = sa.SmartArray(np.arange(4.0))
    >>> sa.In(a)
    In(SmartArray([0., 1., 2., 3.], valid='host'))
    """

    intent = IN
    _numba_hint = _numba_args.In


class Out(_Intent):
    """The kernel (or njit function) overwrites every element of the wrapped array.

    Nothing is uploaded before the launch. A strided view falls back to :class:`InOut`.

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> out = sa.SmartArray(np.zeros(3))
    >>> sa.Out(out).intent
    'out'
    """

    intent = OUT
    _numba_hint = _numba_args.Out


class InOut(_Intent):
    """The kernel (or njit function) reads and writes the wrapped array (the default).

    Examples
    --------
    >>> import numpy as np, smartarray as sa
    >>> sa.InOut(sa.SmartArray(np.zeros(2))).intent
    'inout'
    """

    intent = INOUT
    _numba_hint = _numba_args.InOut
