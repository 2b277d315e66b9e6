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
``cuda.Out`` and ``cuda.InOut``. smartarray moves a plain ndarray itself, on the launch's
stream and counted in :func:`smartarray.stats`: numba-cuda 0.30 hands it to NumPy's
``__dlpack__`` with the stream, which NumPy refuses for any stream but the default one
(NVIDIA/cuda-python#473). ``In`` uploads it (from a staged copy when its memory may be
page-locked: the DMA would read the host bytes only when it runs); ``Out`` allocates without
uploading; ``Out`` and ``InOut`` download it after the launch on the same stream and wait for
that stream before the launch returns, as numba's ``InOut`` does.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
from numba.cuda import args as _numba_args
from numba.cuda.typing.typeof import Purpose, typeof

from . import memory
from ._array import arguments as _arguments
from ._engine import residency as _residency
from ._engine.buffer import IN, INOUT, OUT
from ._memory import streams as _streams
from ._numba.kernels import ArrayArgument, kernel_argument
from ._platform import sessions as _sessions

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
    #: Whether a wrapped SmartArray is typed as the bare array is (not read only): the
    #: inferred ``In`` of smartarray/jit.py, whose analysis proved the parameter unwritten.
    _typed_as_bare = False

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
        if kind == _SMART:
            # A loop of launches makes a wrapper per launch, and numba's dispatcher reads its
            # ``_numba_type_`` twice: the array's cached type is stored in the instance (over
            # this class's cached property), so the reads make no Python call. (Binding the
            # array's preparation too, with functools.partial, measured slower than the
            # to_device call it saves.) In: a readonly array type, so writes fail at compile
            # time on both targets.
            self._smart = True
            self._numba_type_ = (
                _arguments.numba_in_type(value)
                if self.intent == IN and not self._typed_as_bare
                else value._numba_type_
            )

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        """Prepare the wrapped array for a kernel launch (numba-cuda's ArgHint protocol)."""
        if self._smart:
            return _arguments.to_device(self.value, retr, stream, self.intent)
        value = self.value
        if isinstance(value, np.ndarray):
            return _host_array_argument(value, self.intent, retr, stream)
        return self._numba_hint(value).to_device(retr, stream)

    @functools.cached_property
    def _numba_type_(self) -> Any:
        """A wrapped foreign value's Numba type, found on first use and kept (a wrapped
        SmartArray's is stored by the constructor)."""
        return typeof(self.value, Purpose.argument)

    def _njit_enter(self) -> Any:
        return _arguments.njit_enter_as(self.value, self.intent)

    def _njit_exit(self) -> None:
        _arguments.njit_exit_as(self.value, self.intent)

    def _njit_abort(self) -> None:
        _arguments.njit_abort_as(self.value, self.intent)

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


def maybe_page_locked(a: np.ndarray) -> bool:
    """Whether ``a``'s memory may be page-locked (pinned, mapped or registered).

    An asynchronous upload from page-locked memory reads the host bytes when it runs, so a
    host write right after the launch would reach the kernel. Memory NumPy does not own (a
    CUDA host allocation, a foreign buffer) may be page-locked.
    """
    strict = _sessions.current()
    if strict is not None:
        return bool(strict.is_page_locked(a))
    owner = a
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    if not isinstance(owner, np.ndarray):
        return True
    return memory.is_registered(a) or memory.is_registered(owner)


def _host_array_argument(value: np.ndarray, intent: str, retr: list[Any], stream: Any) -> Any:
    """A plain ndarray in an intent wrapper, moved by smartarray on the launch's ``stream``
    (see the module's text); returns what the kernel receives."""
    order: Literal["C", "F"] = "F" if value.flags.f_contiguous else "C"
    # A strided array is gathered into a C-ordered copy and scattered back after.
    strided = not (value.flags.c_contiguous or value.flags.f_contiguous)
    if intent == OUT:
        dev = memory.device_array(value.shape, value.dtype, order=order, stream=stream)
    else:
        source = value
        if strided or (intent == IN and maybe_page_locked(value)):
            source = np.array(value, order=order)  # pageable: taken at the call
        dev = memory.to_device(source, stream=stream)
    if intent == IN:
        # Nothing waits for the kernel: its free must not overtake it (see keep_until_ran).
        retr.append(lambda: _residency.keep_until_ran(dev, stream))
    else:

        def download() -> None:
            if not strided:
                dev.copy_to_host(value, stream=stream)
                _streams.synchronize(stream)
            else:
                gathered = dev.copy_to_host(stream=stream)
                _streams.synchronize(stream)
                value[...] = gathered

        retr.append(download)
    return kernel_argument(dev)
