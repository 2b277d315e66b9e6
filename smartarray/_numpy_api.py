"""NumPy's protocols for SmartArray: ``__array__``, ufuncs, array functions, ndarray methods.

:class:`NumPyMethods` is a mixin :class:`~smartarray.array.SmartArray` inherits. Every NumPy
call runs on the current host data: the arrays involved are locked together (in a fixed order),
their host copies made current (:meth:`~smartarray._engine.Buffer.acquire`: only stale bytes
move), NumPy runs, and what it wrote is recorded on the host (the device copy goes stale).
A NumPy call that raises keeps what it wrote before failing: that is recorded too, over the
bytes that were current (see :func:`_failed_host_write`). Methods NumPy arrays have and
SmartArray does not fail with a hint (:func:`add_unsupported_hints`).

Every method is written out (not generated) so readers and type tools see it; each delegates
to :func:`_read` (a method that only reads) or :func:`_write` (one that writes in place).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index
from numpy.lib.mixins import NDArrayOperatorsMixin

from ._engine import HOST, IN, INOUT
from ._numba_cuda import ArrayArgument  # a SmartArray: not an instance of its mixins (_mixins)

if TYPE_CHECKING:  # pragma: no cover
    from .array import SmartArray

__all__ = ["NumPyMethods", "add_unsupported_hints", "arrays_in", "locked"]


def _smart() -> type[SmartArray]:
    """The SmartArray class (the array layer's module imports this one to build it)."""
    from .array import SmartArray

    return SmartArray


class NumPyMethods(NDArrayOperatorsMixin):
    """NumPy's protocols and ``numpy.ndarray``'s methods, on the current host data.

    Operators (``+``, ``<``, ...) come from NumPy's ``NDArrayOperatorsMixin`` through
    ``__array_ufunc__``.
    """

    __slots__ = ()

    def resize(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: a SmartArray's buffer cannot grow in place."""
        raise TypeError(
            "SmartArray.resize is not supported (views share the buffer); "
            "use SmartArray(np.resize(a, new_shape)) for a resized copy"
        )

    def setflags(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: SmartArray has no settable flags."""
        raise TypeError(
            "SmartArray.setflags is not supported; use np.asarray(a) for a read-only view or "
            "a.host() for a writable one"
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The current host data as a read-only view, tracked so it stays current.

        A writable view would let an untracked write go silently stale (the device copy
        would never learn of it), so the view is read-only: writing raises NumPy's
        read-only error. It is refreshed eagerly when the device copy is marked changed.
        ``copy=True`` (or a different ``dtype``) returns a plain writable copy instead.
        """
        with self._buf.lock:
            if copy or (dtype is not None and np.dtype(dtype) != self._dtype):
                return np.array(self._host_ro("__array__"), dtype=dtype, copy=True)
            self._buf.acquire(HOST, self._lo, self._hi, IN, "__array__")
            return self._export(readonly=True)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        outs = kwargs.get("out", ())
        if not isinstance(outs, tuple):
            outs = (outs,)
        targets = [o for o in outs if isinstance(o, ArrayArgument)]
        if method == "at" and isinstance(inputs[0], ArrayArgument):
            targets.append(inputs[0])
        if method == "__call__" and ufunc.signature is None:
            _check_broadcast(inputs, outs, kwargs.get("where", True))  # before anything moves
        arrays = [x for x in (*inputs, *outs) if isinstance(x, ArrayArgument)]
        with locked(arrays):
            hosts: list[np.ndarray] = []
            ins = []
            for i, x in enumerate(inputs):
                if isinstance(x, ArrayArgument):
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
                    if isinstance(o, ArrayArgument):
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
                    return outs[0] if isinstance(outs[0], ArrayArgument) else result
                return tuple(
                    o if isinstance(o, ArrayArgument) else r
                    for o, r in zip(outs, result, strict=True)
                )
            return _smart()._wrap(result, tuple(hosts))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        first = args[0] if args else None
        if isinstance(first, ArrayArgument):
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
        arrays: list[SmartArray] = []
        _collect(args, arrays)
        _collect(kwargs, arrays)
        mutated = first if func in _MUTATING and isinstance(first, ArrayArgument) else None
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
            return _smart()._wrap(result, tuple(hosts))

    # -- ndarray methods that read (on the current host data) -------------------------------

    def all(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.all``, on the current host data."""
        return _read(self, "all", args, kwargs)

    def any(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.any``, on the current host data."""
        return _read(self, "any", args, kwargs)

    def argmax(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.argmax``, on the current host data."""
        return _read(self, "argmax", args, kwargs)

    def argmin(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.argmin``, on the current host data."""
        return _read(self, "argmin", args, kwargs)

    def argpartition(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.argpartition``, on the current host data."""
        return _read(self, "argpartition", args, kwargs)

    def argsort(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.argsort``, on the current host data."""
        return _read(self, "argsort", args, kwargs)

    def astype(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.astype``, on the current host data."""
        return _read(self, "astype", args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.choose``, on the current host data."""
        return _read(self, "choose", args, kwargs)

    def clip(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.clip``, on the current host data."""
        return _read(self, "clip", args, kwargs)

    def compress(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.compress``, on the current host data."""
        return _read(self, "compress", args, kwargs)

    def conj(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.conj``, on the current host data."""
        return _read(self, "conj", args, kwargs)

    def conjugate(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.conjugate``, on the current host data."""
        return _read(self, "conjugate", args, kwargs)

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.copy``, on the current host data."""
        return _read(self, "copy", args, kwargs)

    def cumprod(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.cumprod``, on the current host data."""
        return _read(self, "cumprod", args, kwargs)

    def cumsum(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.cumsum``, on the current host data."""
        return _read(self, "cumsum", args, kwargs)

    def diagonal(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.diagonal``, on the current host data."""
        return _read(self, "diagonal", args, kwargs)

    def dot(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.dot``, on the current host data."""
        return _read(self, "dot", args, kwargs)

    def dump(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.dump``, on the current host data."""
        return _read(self, "dump", args, kwargs)

    def dumps(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.dumps``, on the current host data."""
        return _read(self, "dumps", args, kwargs)

    def item(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.item``, on the current host data."""
        return _read(self, "item", args, kwargs)

    def max(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.max``, on the current host data."""
        return _read(self, "max", args, kwargs)

    def mean(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.mean``, on the current host data."""
        return _read(self, "mean", args, kwargs)

    def min(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.min``, on the current host data."""
        return _read(self, "min", args, kwargs)

    def nonzero(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.nonzero``, on the current host data."""
        return _read(self, "nonzero", args, kwargs)

    def prod(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.prod``, on the current host data."""
        return _read(self, "prod", args, kwargs)

    def ptp(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.ptp``, on the current host data."""
        return _read(self, "ptp", args, kwargs)

    def repeat(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.repeat``, on the current host data."""
        return _read(self, "repeat", args, kwargs)

    def round(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.round``, on the current host data."""
        return _read(self, "round", args, kwargs)

    def searchsorted(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.searchsorted``, on the current host data."""
        return _read(self, "searchsorted", args, kwargs)

    def std(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.std``, on the current host data."""
        return _read(self, "std", args, kwargs)

    def sum(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.sum``, on the current host data."""
        return _read(self, "sum", args, kwargs)

    def take(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.take``, on the current host data."""
        return _read(self, "take", args, kwargs)

    def tobytes(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.tobytes``, on the current host data."""
        return _read(self, "tobytes", args, kwargs)

    def tofile(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.tofile``, on the current host data."""
        return _read(self, "tofile", args, kwargs)

    def tolist(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.tolist``, on the current host data."""
        return _read(self, "tolist", args, kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.trace``, on the current host data."""
        return _read(self, "trace", args, kwargs)

    def var(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.var``, on the current host data."""
        return _read(self, "var", args, kwargs)

    # -- ndarray methods that write in place (on the host copy) ----------------------------

    def fill(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.fill``, in place on the host copy.

        The device copy goes stale over this array\'s bytes.
        """
        return _write(self, "fill", False, args, kwargs)

    def sort(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.sort``, in place on the host copy.

        The device copy goes stale over this array\'s bytes.
        """
        return _write(self, "sort", True, args, kwargs)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.put``, in place on the host copy.

        The device copy goes stale over this array\'s bytes.
        """
        return _write(self, "put", True, args, kwargs)

    def partition(self, *args: Any, **kwargs: Any) -> Any:
        """As ``numpy.ndarray.partition``, in place on the host copy.

        The device copy goes stale over this array\'s bytes.
        """
        return _write(self, "partition", True, args, kwargs)

    def byteswap(self, inplace: bool = False) -> Any:
        """As ``numpy.ndarray.byteswap``; ``inplace=True`` marks the host copy changed."""
        with locked([self]):
            if inplace:
                host = self._host_rw(full=True)
                host.byteswap(inplace=True)
                self._changed(HOST, self._lo, self._hi)
                return self
            return _smart()(self._host_ro().byteswap())


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
    if isinstance(obj, ArrayArgument):
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
    if isinstance(obj, ArrayArgument):
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
    if isinstance(x, (ArrayArgument, np.ndarray, np.generic)):
        return tuple(x.shape)
    if isinstance(x, (bool, int, float, complex)):
        return ()
    return None


def _check_broadcast(inputs: tuple[Any, ...], outs: tuple[Any, ...], where: Any) -> None:
    """NumPy's broadcasting checks of an elementwise call, on shapes alone (nothing moves).

    The inputs (and ``where``) broadcast together, and into each output's shape unchanged.
    """
    shapes = [_shape_of(x) for x in (*inputs, where)]
    if any(shape is None for shape in shapes):
        return
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


def _check_sort_args(self: SmartArray, name: str, args: Any, kwargs: Any) -> None:
    """Validate ``sort`` / ``partition`` arguments on a tiny stand-in (nothing moves)."""
    if arrays_in(args, kwargs):
        return  # SmartArray arguments: NumPy judges them after conversion
    tiny = np.zeros(tuple(min(d, 1) for d in self._shape), self._dtype)
    if name == "sort":
        tiny.sort(*args, **kwargs)  # axis, kind and order, checked by NumPy itself
        return
    rest = dict(kwargs)
    kth = args[0] if args else rest.pop("kth", None)
    axis = args[1] if len(args) > 1 else rest.pop("axis", -1)
    tiny.partition(0, axis, *args[2:], **rest)  # axis, kind and order
    if axis is not None:
        n = self._shape[normalize_axis_index(axis, self.ndim)]
        ks = np.asarray(kth)
        if ks.dtype.kind in "iu" and ks.size and (ks.min() < -n or ks.max() >= n):
            raise ValueError(f"kth(={kth!r}) out of bounds ({n})")


def _read(self: SmartArray, name: str, args: Any, kwargs: Any) -> Any:
    """Call ``numpy.ndarray.<name>`` on the current host data (and of SmartArray arguments)."""
    with locked(arrays_in(self, args, kwargs)):
        hosts: list[np.ndarray] = []
        host = _convert(self, hosts, None)
        result = getattr(host, name)(*_convert(args, hosts, None), **_convert(kwargs, hosts, None))
        return _smart()._wrap(result, tuple(hosts))


def _write(self: SmartArray, name: str, reads: bool, args: Any, kwargs: Any) -> Any:
    """Call ``numpy.ndarray.<name>`` in place on the host copy and record the write.

    ``reads``: whether the method reads the old values (synced in full first) or only writes.
    """
    if name in ("sort", "partition"):
        _check_sort_args(self, name, args, kwargs)
    with locked(arrays_in(self, args, kwargs)):
        hosts: list[np.ndarray] = []
        args = _convert(args, hosts, None)
        kwargs = _convert(kwargs, hosts, None)
        host = self._host_rw(full=reads)
        try:
            result = getattr(host, name)(*args, **kwargs)
        except BaseException:
            _failed_host_write([self])  # e.g. put: index 0 written, then index 99 fails
            raise
        self._changed(HOST, self._lo, self._hi)
        return result


def _not_supported(name: str) -> property:
    def fail(self: SmartArray) -> Any:
        raise AttributeError(
            f"SmartArray has no attribute {name!r}; use a.host().{name} on the host copy "
            "(then a.host_changed() if it writes)"
        )

    return property(fail)


def add_unsupported_hints(cls: type) -> None:
    """Make every public ``numpy.ndarray`` attribute ``cls`` lacks fail with a hint.

    Properties rather than a ``__getattr__`` hook: a class with ``__getattr__`` makes every
    attribute read slower, and Numba's dispatchers read two attributes per call
    (``_numba_type_``, ``_njit_fast``). The list depends on the NumPy version, so it is made
    at import.
    """
    for name in dir(np.ndarray):
        if not name.startswith("_") and not hasattr(cls, name):
            setattr(cls, name, _not_supported(name))
