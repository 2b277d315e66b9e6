"""NumPy's protocols for SmartArray: ``__array__``, ``__array_ufunc__``, ``__array_function__``.

Functions the :class:`~smartarray.array.SmartArray` class statement binds under the same names,
and what they share with :mod:`smartarray._array.ndarray` (ndarray's methods). Every NumPy call runs
on the current host data: the arrays involved are locked together (in a fixed order), their
host copies made current (:meth:`~smartarray._engine.buffer.Buffer.acquire`: only stale bytes move),
NumPy runs, and what it wrote is recorded on the host (the device copy goes stale). A NumPy
call that raises keeps what it wrote before failing: that is recorded too, over the bytes that
were current (see :func:`_failed_host_write`).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np

from .._engine.buffer import HOST, IN, INOUT
from .results import fresh as _fresh  # (no hook: a call less per result)

if TYPE_CHECKING:  # pragma: no cover
    from ..array import SmartArray
    from ..array import SmartArray as _SmartArray
else:
    # What ``isinstance`` tests at run time: SmartArray's base class, whose only instances are
    # SmartArrays (this module is bound into the class statement, so cannot import the class).
    from .._numba.kernels import ArrayArgument as _SmartArray

__all__ = [
    "INT_KEYS",
    "NUMBERS",
    "__array__",
    "__array_function__",
    "__array_ufunc__",
    "arrays_in",
    "locked",
]

# Keys and values the host fast paths take without converting anything first: Python's and
# NumPy's integers (keys) and numbers (values). Anything else (a SmartArray, a sequence) goes
# the slow way, which locks every array it reads.
INT_KEYS = frozenset({int, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16})
NUMBERS = frozenset(
    {int, float, complex, bool, np.float64, np.float32, np.float16, np.complex128, np.complex64}
    | INT_KEYS
    | {np.uint8, np.bool_}
)

_NDARRAY = np.ndarray  # (a global read: the unary fast path's class test without np's attribute)

#: NumPy's own elementwise ufuncs (no core dimensions): on a SmartArray's numbers each gives
#: numbers of the operand's shape, which the unary fast path adopts with no check of the
#: result's dtype or the ufunc's signature (two attribute reads cost more than this lookup).
_ELEMENTWISE = frozenset(
    u for u in vars(np).values() if isinstance(u, np.ufunc) and u.signature is None
)


def __array__(self: SmartArray, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """The current host data as a read-only view, tracked so it stays current.

    A writable view would let an untracked write go silently stale (the device copy
    would never learn of it), so the view is read-only: writing raises NumPy's
    read-only error. It is refreshed eagerly when the device copy is marked changed.
    ``copy=True`` (or a different ``dtype``) returns a plain writable copy instead.
    """
    buf = self._buf
    with buf.lock:
        if copy or (dtype is not None and np.dtype(dtype) != self._dtype):
            return np.array(self._host_ro("__array__"), dtype=dtype, copy=True)
        if self._host_at != buf.host_stamp:  # (not current on the host: its fast path closed)
            buf.acquire(HOST, self._lo, self._hi, IN, "__array__")
        return self._export(readonly=True)


def __array_ufunc__(
    self: SmartArray, ufunc: Any, method: str, first: Any, /, *rest: Any, **kwargs: Any
) -> Any:
    """NumPy's ufuncs (and the operators) on the current host data of every SmartArray operand.

    The outputs that are SmartArrays are written on the host copy and recorded (their device
    copies go stale); a new result is a new SmartArray. NumPy passes the inputs positionally
    (``first``, then ``rest``: NumPy's ``*inputs``, every ufunc has one at least): a unary
    ufunc's call then builds no tuple of them, and its fast path tests no length.
    """
    if first is self and not rest and method == "__call__" and not kwargs:
        # A unary ufunc (np.sin(a)): the fast path below without its loops.
        stamp, host = self._host_at, self._host_nd
        if host is None:
            host = self._readable()  # (a new result's, made on its first read)
        if host is not None and stamp == self._buf.host_stamp:
            result = ufunc(host)
            if stamp == self._buf.host_stamp:
                if result.__class__ is _NDARRAY and (
                    ufunc in _ELEMENTWISE  # (NumPy's own: one set lookup for the two below)
                    or (
                        ufunc.signature is None  # (a gufunc's core dims reshape it)
                        and not result.dtype.hasobject  # (np.frompyfunc's: no SmartArray)
                    )
                ):
                    return _fresh(result, self._shape)  # (elementwise: its shape)
                return self._wrap(result)  # (two outputs: np.modf, np.frexp; the rest)
    inputs = (first, *rest)
    if method == "__call__" and not kwargs:
        # The host fast path: every SmartArray operand current on the host (its stamp), no
        # output given (nothing written): NumPy's loop on the read-only host data, its result
        # adopted. The stamps are read again after the call (a device write began meanwhile:
        # the slow way, under the locks).
        ins = []
        for x in inputs:
            if isinstance(x, _SmartArray):
                host = x._host_nd  # (made on a new result's first read: _readable)
                if host is None and (host := x._readable()) is None:
                    break
                if x._host_at != x._buf.host_stamp:
                    break
                x = host
            ins.append(x)
        else:
            result = ufunc(*ins)
            for x in inputs:
                if isinstance(x, _SmartArray) and x._host_at != x._buf.host_stamp:
                    break
            else:
                if result.__class__ is np.ndarray and result.dtype.kind in "biufc":
                    return self._adopt(result)  # a fresh array of numbers (no out= given)
                return self._wrap(result)
    outs = kwargs.get("out", ())
    if not isinstance(outs, tuple):
        outs = (outs,)
    targets = [o for o in outs if isinstance(o, _SmartArray)]
    if method == "at" and isinstance(inputs[0], _SmartArray):
        targets.append(inputs[0])
    if method == "__call__" and ufunc.signature is None:
        _check_broadcast(inputs, outs, kwargs.get("where", True))  # before anything moves
    arrays = [x for x in (*inputs, *outs) if isinstance(x, _SmartArray)]
    with locked(arrays):
        hosts: list[np.ndarray] = []
        ins = []
        for i, x in enumerate(inputs):
            if isinstance(x, _SmartArray):
                if method == "at" and i == 0:
                    x = x._host_rw(full=True)
                else:
                    x = x._host_ro()
                hosts.append(x)
            ins.append(x)
        if outs:
            new_outs = []
            # With where=, unselected elements keep their old values: they must be current.
            partial = kwargs.get("where", True) is not True
            for o in outs:
                if isinstance(o, _SmartArray):
                    o = o._host_rw(full=partial)
                    hosts.append(o)
                new_outs.append(o)
            kwargs["out"] = tuple(new_outs)
        try:
            result = getattr(ufunc, method)(*ins, **kwargs)
        except BaseException:
            # NumPy keeps what it wrote before failing (a floating-point error under
            # errstate='raise', a bad index of ufunc.at): record it.
            _failed_host_write(targets)
            raise
        for t in targets:
            t._changed(HOST, t._lo, t._hi)
        if method == "at":
            return None
        if outs:
            if len(outs) == 1:
                return outs[0] if isinstance(outs[0], _SmartArray) else result
            return tuple(
                o if isinstance(o, _SmartArray) else r for o, r in zip(outs, result, strict=True)
            )
        return self._wrap(result, tuple(hosts))


def __array_function__(self: SmartArray, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """NumPy's functions (``np.sum(a)``, ``np.copyto(a, b)``, ...) on the current host data.

    A function that writes into its first argument (``np.copyto``, ``np.put``, ...) writes the
    host copy and records it; a new result is a new SmartArray. Shape functions
    (``np.reshape``, ``np.transpose``, ...) give views, as the methods do.
    """
    first = args[0] if args else None
    if isinstance(first, _SmartArray):
        if func is np.reshape:
            return _call_reshape(*args, **kwargs)
        if func is np.transpose:
            return first.transpose(*(a for a in args[1:2] + tuple(kwargs.values())))
        if func is np.ravel:
            return first.ravel(*args[1:], **kwargs)
        if func is np.shape:
            return first.shape
        if func is np.ndim:
            return first.ndim
        if func is np.size and len(args) == 1 and not kwargs:
            return first.size
        if func is np.squeeze:
            return first.squeeze(*args[1:], **kwargs)
        if len(args) == 1 and not kwargs:
            # The host fast path (``np.sum(a)``): a read of one array current on the host.
            stamp, host = first._host_at, first._host_nd
            if host is None:
                host = first._readable()  # (a new result's, made on its first read)
            if host is not None and stamp == first._buf.host_stamp:
                result = func(host)
                if stamp == first._buf.host_stamp:
                    return self._wrap(result, (host,))
    arrays: list[SmartArray] = []
    _collect(args, arrays)
    _collect(kwargs, arrays)
    mutated = first if func in _MUTATING and isinstance(first, _SmartArray) else None
    full = True  # whether the old values of ``mutated`` are read (or kept): sync them
    if mutated is not None and func is np.copyto:
        src = args[1] if len(args) > 1 else kwargs.get("src")
        _check_broadcast((src,), (mutated,), True)  # before anything moves
        where = args[3] if len(args) > 3 else kwargs.get("where", True)
        # No mask: every element is overwritten, so nothing needs downloading first
        # (_host_rw still syncs the gaps of a strided destination).
        full = not (isinstance(where, (bool, np.bool_)) and where)
    with locked(arrays):
        hosts: list[np.ndarray] = []
        new_args = _convert(args, hosts, mutated, full)
        new_kwargs = _convert(kwargs, hosts, mutated, full)
        try:
            result = func(*new_args, **new_kwargs)
        except BaseException:
            if mutated is not None:
                _failed_host_write([mutated])
            raise
        if mutated is not None:
            mutated._changed(HOST, mutated._lo, mutated._hi)
            return result
        return self._wrap(result, tuple(hosts))


# NumPy functions that write into their first argument.
_MUTATING = {np.copyto, np.put, np.place, np.putmask, np.fill_diagonal, np.put_along_axis}


def _failed_host_write(targets: list[SmartArray]) -> None:
    """Record what a NumPy call that raised may have written into writable host views.

    NumPy keeps a partial write (``a.put([0, 99], v)`` writes index 0, then fails). Where the
    host bytes were current when the view was handed out, they are recorded as written
    (conservative: the device copy becomes stale there); bytes that were stale (a pure
    overwrite skips the download) keep the device's value.
    """
    for t in targets:
        t._buf.abort(HOST, t._lo, t._hi, INOUT)


def _call_reshape(a: SmartArray, *args: Any, **kwargs: Any) -> SmartArray:
    shape = kwargs.pop("shape", kwargs.pop("newshape", None))
    if args:
        shape, args = args[0], args[1:]
    order = args[0] if args else kwargs.pop("order", "C")
    return a.reshape(shape, order=order)


def _collect(obj: Any, found: list[SmartArray]) -> None:
    if isinstance(obj, _SmartArray):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect(x, found)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect(x, found)


def _convert(
    obj: Any, hosts: list[np.ndarray], mutated: SmartArray | None, full: bool = True
) -> Any:
    if isinstance(obj, _SmartArray):
        view = obj._host_rw(full=full) if obj is mutated else obj._host_ro()
        hosts.append(view)
        return view
    if isinstance(obj, tuple):
        return tuple(_convert(x, hosts, mutated, full) for x in obj)
    if isinstance(obj, list):
        return [_convert(x, hosts, mutated, full) for x in obj]
    if isinstance(obj, dict):
        return {k: _convert(v, hosts, mutated, full) for k, v in obj.items()}
    return obj


def _shape_of(x: Any) -> tuple[int, ...] | None:
    """The shape of an operand known without reading it, or None (NumPy will judge)."""
    if isinstance(x, (_SmartArray, np.ndarray, np.generic)):
        return tuple(x.shape)
    if isinstance(x, (bool, int, float, complex)):
        return ()
    return None


def _check_broadcast(inputs: tuple[Any, ...], outs: tuple[Any, ...], where: Any) -> None:
    """NumPy's broadcasting checks of an elementwise call, on shapes alone (nothing moves).

    The inputs (and ``where``) broadcast together, and into each output's shape unchanged.
    """
    shapes = [shape for x in (*inputs, where) if (shape := _shape_of(x)) is not None]
    if len(shapes) < len(inputs) + 1:
        return  # an operand whose shape only NumPy knows
    try:
        full = np.broadcast_shapes(*shapes)
    except ValueError:
        text = " ".join(str(shape) for shape in shapes)
        raise ValueError(f"operands could not be broadcast together with shapes {text}") from None
    for out in outs:
        shape = None if out is None else _shape_of(out)
        if shape is None:
            continue
        try:
            fits = np.broadcast_shapes(full, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"non-broadcastable output operand with shape {shape} doesn't match the "
                f"broadcast shape {full}"
            )


def arrays_in(*objs: Any) -> list[SmartArray]:
    """The SmartArrays in ``objs`` (and in their lists, tuples and dicts), to lock together."""
    found: list[SmartArray] = []
    _collect(objs, found)
    return found


class locked:  # noqa: N801 - used like a function
    """Hold the locks of several arrays' buffers, taken in a fixed order (no deadlock)."""

    def __init__(self, arrays: list[SmartArray]) -> None:
        bufs = {id(a._buf): a._buf for a in arrays}
        self._locks = [bufs[k].lock for k in sorted(bufs)]
        self._stack = ExitStack()

    def __enter__(self) -> None:
        for lock in self._locks:
            self._stack.enter_context(lock)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
