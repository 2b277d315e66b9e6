"""The Numba type of SmartArray arguments, and the ``njit`` target's unboxing and post-call hook.

Both Numba dispatchers (``njit``'s and numba-cuda's) type an argument that is not an ndarray
from its ``_numba_type_`` attribute, read directly by their C code. A SmartArray therefore has
one type for both targets, :class:`SmartArrayType`: a ``types.Array`` subclass with the array
data model (registered for the CPU and the CUDA targets), so inside compiled code it *is* an
array and everything derived from it (slices, views) is a plain array.

The two targets differ in conversions (:meth:`SmartArrayType.can_convert_to`):

- CUDA: a SmartArrayType converts to and from the plain array type, so a kernel compiled for
  device arrays runs for SmartArrays of the same dtype, rank and layout without compiling
  again (and the other way round); kernel arguments are prepared through the ArgHint protocol
  whatever the compiled type (see :mod:`smartarray._numba_cuda`).
- CPU: no conversion to plain arrays, so ``njit`` compiles a SmartArray version whose unboxing
  asks the object for its current host ndarray and hands that to Numba's own array unboxer.

Unboxing (:func:`_unbox_smartarray`):

- fast path: ``obj._njit_fast`` is the cached host ndarray while the array's bytes are current
  on the host and nowhere else. A host write changes nothing in that state, so the call needs
  no Python hook at all: one attribute read, as for any non-ndarray argument;
- slow path: ``obj._njit_enter()`` makes the host copy current and returns the ndarray; the
  ``NativeValue`` cleanup calls ``obj._njit_exit()`` after the call, which records the write;
- a plain ndarray reaching a SmartArray version (numba reuses compiled versions through safe
  conversions) is unboxed as it is.

Traps handled (numba 0.68): the cleanup also runs when a later argument failed to unbox, with
an exception pending: the exception is set aside around the hook, and ``obj._njit_abort()`` runs
instead of ``_njit_exit()`` (for ``Out`` the enter hook skipped the download: recording a host
write would declare stale host bytes current and lose the device's); errors raised in a cleanup
would be swallowed: they are reported with ``PyErr_WriteUnraisable``;
``pyapi.string_from_constant_string`` crashes on numba 0.68: only constant-name calls
(``call_method``, ``GetAttrString``) are used.
"""

from __future__ import annotations

from typing import Any

from numba.core import cgutils, types
from numba.core.extending import NativeValue, lower_cast, models, register_model, unbox
from numba.cuda.extending import register_model as register_cuda_model

from ._numba_cuda import element_type

__all__ = ["SmartArrayType", "smartarray_type"]


def _is_cuda_context(typingctx: Any) -> bool:
    return type(typingctx).__module__.startswith("numba.cuda")


class SmartArrayType(types.Array):
    """The Numba type of a SmartArray argument (``njit`` and ``cuda.jit``).

    The array data model and typing of ``types.Array``; views taken inside compiled code
    (``copy``) are plain arrays.
    """

    def __init__(self, dtype: types.Type, ndim: int, layout: str, readonly: bool = False) -> None:
        kind = "readonly SmartArray" if readonly else "SmartArray"
        name = f"{kind}({dtype}, {ndim}d, {layout})"
        super().__init__(dtype, ndim, layout, readonly=readonly, name=name)

    def can_convert_to(self, typingctx: Any, other: types.Type) -> Any:
        # On the CPU, converting to a plain array type would let the dispatcher call a version
        # compiled for ndarrays and unbox this object as an ndarray (a TypeError): refused, so
        # njit compiles a SmartArray version. An eager ``njit("f8(f8[::1])")`` signature then
        # fails with numba's "No matching definition for argument type(s) SmartArray(...)".
        if isinstance(other, SmartArrayType) or _is_cuda_context(typingctx):
            return super().can_convert_to(typingctx, other)
        return None

    def plain(self) -> types.Array:
        """The plain array type with the same dtype, rank, layout and mutability."""
        return types.Array(self.dtype, self.ndim, self.layout, readonly=not self.mutable)


register_model(SmartArrayType)(models.ArrayModel)
register_cuda_model(SmartArrayType)(models.ArrayModel)


@lower_cast(SmartArrayType, types.Array)
def _cast_to_array(context: Any, builder: Any, fromty: Any, toty: Any, val: Any) -> Any:
    return val  # the same data model: nothing to convert


_types: dict[tuple[Any, ...], SmartArrayType] = {}


def smartarray_type(dtype: Any, ndim: int, layout: str, readonly: bool = False) -> SmartArrayType:
    """The (cached) :class:`SmartArrayType` for these properties."""
    key = (dtype, ndim, layout, readonly)
    typ = _types.get(key)
    if typ is None:
        typ = _types[key] = SmartArrayType(element_type(dtype), ndim, layout, readonly)
    return typ


@unbox(SmartArrayType)
def _unbox_smartarray(typ: SmartArrayType, obj: Any, c: Any) -> NativeValue:
    builder, pyapi = c.builder, c.pyapi
    plain = typ.plain()
    null = cgutils.get_null_value(c.context.get_value_type(typ))
    value_ptr = cgutils.alloca_once_value(builder, null)
    error_ptr = cgutils.alloca_once_value(builder, cgutils.true_bit)
    hooked_ptr = cgutils.alloca_once_value(builder, cgutils.false_bit)

    def unbox_ndarray(ary: Any) -> None:
        native = c.unbox(plain, ary)  # the native array's meminfo keeps its own reference
        builder.store(native.value, value_ptr)
        builder.store(native.is_error, error_ptr)

    fast = pyapi.object_getattr_string(obj, "_njit_fast")
    with builder.if_else(cgutils.is_not_null(builder, fast), likely=True) as (smart, ndarray):
        with smart:
            is_fast = builder.icmp_unsigned("!=", fast, pyapi.borrow_none())
            with builder.if_else(is_fast, likely=True) as (coherent, hooked):
                with coherent:
                    unbox_ndarray(fast)
                with hooked:
                    host = pyapi.call_method(obj, "_njit_enter")
                    with builder.if_then(cgutils.is_not_null(builder, host), likely=True):
                        builder.store(cgutils.true_bit, hooked_ptr)
                        unbox_ndarray(host)
                        pyapi.decref(host)
            pyapi.decref(fast)
        with ndarray:
            # No such attribute: an ndarray reaching a SmartArray version.
            pyapi.err_clear()
            unbox_ndarray(obj)

    def call_hook(name: str) -> None:
        done = pyapi.call_method(obj, name)
        with builder.if_else(cgutils.is_null(builder, done), likely=False) as (failed, ok):
            with failed:
                pyapi.err_write_unraisable(obj)
            with ok:
                pyapi.decref(done)

    def cleanup() -> None:
        with builder.if_then(builder.load(hooked_ptr), likely=False):
            # A Python error pending here means the call did not complete normally: a later
            # argument failed to unbox (the function never ran). ``_njit_abort`` records
            # only what may have been written over current bytes; ``_njit_exit`` records the
            # write of a call that returned (or raised a nopython exception, which numba
            # sets only after the cleanups: the writes before the raise are recorded).
            pending = cgutils.is_not_null(builder, pyapi.err_occurred())
            with pyapi.err_push():
                with builder.if_else(pending, likely=False) as (aborted, returned):
                    with aborted:
                        call_hook("_njit_abort")
                    with returned:
                        call_hook("_njit_exit")

    return NativeValue(builder.load(value_ptr), is_error=builder.load(error_ptr), cleanup=cleanup)
