"""The Numba type of SmartArray arguments, and the ``njit`` target's unboxing and post-call hook.

Both Numba dispatchers (``njit``'s and numba-cuda's) type an argument that is not an ndarray
from its ``_numba_type_`` attribute, read directly by their C code. A SmartArray therefore has
one type for both targets, :class:`SmartArrayType`: a ``types.Array`` subclass with the array
data model (registered for the CPU and the CUDA targets), so inside compiled code it *is* an
array. Views taken inside compiled code and arrays computed from it keep the type
(``copy``, ``__array_ufunc__``, ``_allocate``, ``__allocate__`` for ``parallel=True``), so that
what an ``njit`` function returns can be given back as SmartArrays (see "Results" below); on
the CUDA target the type lowers exactly as an array.

The two targets differ in conversions (:meth:`SmartArrayType.can_convert_to`):

- CUDA: a SmartArrayType converts to and from the plain array type, so a kernel compiled
  eagerly for device arrays runs for SmartArrays of the same dtype, rank and layout (a lazily
  compiled one compiles a SmartArray version once: numba-cuda's dispatcher wants an exact
  match while it can compile); kernel arguments are prepared through the ArgHint protocol
  whatever the compiled type (see :mod:`smartarray._numba.kernels`).
- CPU: no conversion to plain arrays, so ``njit`` compiles a SmartArray version whose unboxing
  asks the object for its current host ndarray and hands that to Numba's own array unboxer.

Unboxing (:func:`_unbox_smartarray`):

- fast path: ``obj._njit_fast`` is the cached host ndarray while the array's bytes are current
  on the host and nowhere else. A host write changes nothing in that state, so the call needs
  no Python hook at all: one attribute read, as for any non-ndarray argument. The reference
  that read returns is released by the cleanup, after the call: a call still running (with
  ``nogil=True``, while another thread disarms the fast path) shows in the ndarray's
  reference count, which the engine reads to wait for it before copying its bytes;
- slow path: ``obj._njit_enter()`` makes the host copy current and returns the ndarray; the
  ``NativeValue`` cleanup calls ``obj._njit_exit()`` after the call, which records the write;
- a plain ndarray reaching a SmartArray version (numba reuses compiled versions through safe
  conversions) is unboxed as it is.

Results (:func:`_box_smartarray`): numba's own array boxer builds an ndarray for the returned
native array, then the array layer's adapter (:func:`set_result_adapter`) maps it: the
argument's host ndarray itself back to the SmartArray argument, a view of it (numba keeps that
ndarray as the view's ``parent``, reachable as ``ndarray.base.parent``) to a SmartArray view of
the same base buffer, a new array to a SmartArray adopting it. Only functions returning a
SmartArrayType value run this; arguments keep their unboxing cost.

Traps handled (numba 0.68): the cleanup also runs when a later argument failed to unbox, with
an exception pending: the exception is set aside around the hook, and ``obj._njit_abort()`` runs
instead of ``_njit_exit()`` (for ``Out`` the enter hook skipped the download: recording a host
write would declare stale host bytes current and lose the device's); errors raised in a cleanup
would be swallowed: they are reported with ``PyErr_WriteUnraisable``;
``pyapi.string_from_constant_string`` crashes on numba 0.68: only constant-name calls
(``call_method``, ``GetAttrString``) are used.
"""

from __future__ import annotations

from typing import Any, Literal

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.extending import (
    NativeValue,
    box,
    lower_cast,
    models,
    overload_classmethod,
    register_model,
    unbox,
)

# (numba.cuda is numba-cuda's package at run time; the checker reads numba's own stub of it)
from numba.cuda.extending import register_model as register_cuda_model  # type: ignore[attr-defined]
from numba.np.arrayobj import intrin_alloc

from .kernels import element_type

__all__ = ["Layout", "SmartArrayType", "set_result_adapter", "smartarray_type"]

#: A Numba array type's layout (numba's set; a SmartArray's is "C", "F" or "A").
Layout = Literal["C", "F", "CS", "FS", "A"]


def _is_cuda_context(typingctx: Any) -> bool:
    return type(typingctx).__module__.startswith("numba.cuda")


class SmartArrayType(types.Array):
    """The Numba type of a SmartArray argument (``njit`` and ``cuda.jit``).

    The array data model and typing of ``types.Array``. Views taken inside compiled code
    (``copy``) and arrays computed from it (``__array_ufunc__``) keep this type, so that what
    an ``njit`` function returns is boxed by :func:`_box_smartarray`; on the CUDA target it
    lowers exactly as an array. ``aligned=False`` types a view whose elements are not all at
    multiples of their dtype's alignment (a field of packed records): compiled code then loads
    and stores them byte-wise, as Numba does for an unaligned ndarray (on a GPU a misaligned
    ``ld.f64`` faults).
    """

    def __init__(
        self,
        dtype: types.Type,
        ndim: int,
        layout: Layout,
        readonly: bool = False,
        aligned: bool = True,
    ) -> None:
        kind = "readonly SmartArray" if readonly else "SmartArray"
        if not aligned or (isinstance(dtype, types.Record) and not dtype.aligned):
            kind = "unaligned " + kind
        name = f"{kind}({dtype}, {ndim}d, {layout})"
        super().__init__(dtype, ndim, layout, readonly=readonly, name=name, aligned=aligned)

    def can_convert_to(self, typingctx: Any, other: types.Type) -> Any:
        # On the CPU, converting to a plain array type would let the dispatcher call a version
        # compiled for ndarrays and unbox this object as an ndarray (a TypeError): refused, so
        # njit compiles a SmartArray version. An eager ``njit("f8(f8[::1])")`` signature then
        # fails with numba's "No matching definition for argument type(s) SmartArray(...)".
        if isinstance(other, SmartArrayType) or _is_cuda_context(typingctx):
            return super().can_convert_to(typingctx, other)
        return None

    # (numba's stub overloads copy() by dtype, each returning a types.Array: this one keeps the
    # subtype for every dtype, which no overload of the stub says)
    def copy(  # type: ignore[override]
        self,
        dtype: types.Type | None = None,
        ndim: int | None = None,
        layout: Layout | None = None,
        readonly: bool | None = None,
    ) -> SmartArrayType:
        # numba derives the type of every view (slice, transpose, reshape, ...) through copy():
        # keeping the subtype lets the box hook map a returned view back to its argument.
        return SmartArrayType(
            self.dtype if dtype is None else dtype,
            self.ndim if ndim is None else ndim,
            self.layout if layout is None else layout,
            (not self.mutable) if readonly is None else readonly,
            aligned=self.aligned,  # a view of an unaligned array is unaligned too
        )

    def __array_ufunc__(self, ufunc: Any, method: str, *args: Any, **kwargs: Any) -> type:
        # numba's ufunc typing calls this on the first array operand that has it and builds the
        # result type from the class returned: new arrays computed from SmartArrays are
        # SmartArrayType, boxed as SmartArrays (allocation: _allocate below).
        return SmartArrayType

    def __allocate__(
        self,
        typingctx: Any,
        typemap: Any,
        calltypes: Any,
        lhs: Any,
        size_var: Any,
        dtype: Any,
        scope: Any,
        loc: Any,
        lhs_typ: Any,
        size_typ: Any,
        out: list[Any],
    ) -> list[Any]:
        # parallel=True allocates the result of an array expression with np.empty in IR
        # (numba.parfors.ir_utils.mk_alloc), whose compiled implementation returns a plain
        # array: allocate a plain array, then assign it to ``lhs`` (a no-op cast, below).
        from numba.core import ir
        from numba.core.ir_utils import mk_unique_var
        from numba.parfors.ir_utils import mk_alloc

        plain = lhs_typ.plain()
        if isinstance(size_typ, types.BaseTuple):
            # mk_alloc types a variable size as one intp: hand it the dimensions one by one.
            dims = []
            for i in range(len(size_typ)):
                dim = ir.Var(scope, mk_unique_var("$smartarray_dim"), loc)
                if typemap:
                    typemap[dim.name] = types.intp
                out.append(ir.Assign(ir.Expr.static_getitem(size_var, i, None, loc), dim, loc))
                dims.append(dim)
            size_var = tuple(dims)
        tmp = ir.Var(scope, mk_unique_var("$smartarray_alloc"), loc)
        if typemap:
            typemap[tmp.name] = plain
        out.extend(mk_alloc(typingctx, typemap, calltypes, tmp, size_var, dtype, scope, loc, plain))
        out.append(ir.Assign(tmp, lhs, loc))
        return out

    def plain(self) -> types.Array:
        """The plain array type with the same dtype, rank, layout, mutability and alignment."""
        return types.Array(
            self.dtype, self.ndim, self.layout, readonly=not self.mutable, aligned=self.aligned
        )


register_model(SmartArrayType)(models.ArrayModel)
register_cuda_model(SmartArrayType)(models.ArrayModel)


@lower_cast(SmartArrayType, types.Array)
@lower_cast(types.Array, SmartArrayType)
def _cast_to_array(context: Any, builder: Any, fromty: Any, toty: Any, val: Any) -> Any:
    # The same data model both ways: nothing to convert. Typing already refused what is unsafe
    # (read-only to mutable, unaligned to aligned, another dtype or rank). Without the
    # plain-to-SmartArray direction, a plain array passed where a device function or njit
    # function was compiled for a SmartArray reached Numba's ``array_to_array``, whose
    # assertion fails for two types of the same layout and mutability. numba-cuda's target
    # installs implementations from numba.core's registry made outside Numba, so this one
    # registration serves both targets.
    return val


_types: dict[tuple[Any, ...], SmartArrayType] = {}


def smartarray_type(
    dtype: Any, ndim: int, layout: Layout, readonly: bool = False, aligned: bool = True
) -> SmartArrayType:
    """The (cached) :class:`SmartArrayType` for these properties."""
    key = (dtype, ndim, layout, readonly, aligned)
    typ = _types.get(key)
    if typ is None:
        typ = _types[key] = SmartArrayType(element_type(dtype), ndim, layout, readonly, aligned)
    return typ


def _attribute_name(c: Any, name: str) -> Any:
    """An interned ``str`` for ``name``, made on the first call and kept in a module global.

    ``pyapi.object_getattr_string`` makes a new string object on every call (then hashes and
    frees it), and a new string misses CPython's type attribute cache (keyed by the string
    object), so every call also searches the class dictionaries along the MRO. The interned
    string is found in that cache. It is made at run time, not embedded as a pointer, so the
    code works from numba's on-disk cache too. NULL (with ``MemoryError`` set) if interning
    failed.
    """
    builder, pyapi = c.builder, c.pyapi
    module = builder.module
    symbol = f"_smartarray_attr_{name}"
    try:
        slot = module.get_global(symbol)
    except KeyError:
        slot = ir.GlobalVariable(module, pyapi.pyobj, symbol)
        slot.linkage = "internal"
        slot.initializer = ir.Constant(pyapi.pyobj, None)
    with builder.if_then(cgutils.is_null(builder, builder.load(slot)), likely=False):
        intern = pyapi._get_function(
            ir.FunctionType(pyapi.pyobj, [pyapi.cstring]), name="PyUnicode_InternFromString"
        )
        # A new reference, kept for the life of the process (one per compiled module).
        builder.store(builder.call(intern, [c.context.insert_const_string(module, name)]), slot)
    return builder.load(slot)


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

    fast_ptr = cgutils.alloca_once_value(builder, cgutils.get_null_value(pyapi.pyobj))
    # The fast path's ndarray, whose reference is kept until the cleanup: while it is held,
    # the engine sees a host writer in flight (smartarray._engine.device_work.writing).
    held_ptr = cgutils.alloca_once_value(builder, cgutils.get_null_value(pyapi.pyobj))
    name = _attribute_name(c, "_njit_fast")
    with builder.if_then(cgutils.is_not_null(builder, name), likely=True):
        builder.store(pyapi.object_getattr(obj, name), fast_ptr)
    fast = builder.load(fast_ptr)
    with builder.if_else(cgutils.is_not_null(builder, fast), likely=True) as (smart, ndarray):
        with smart:
            is_fast = builder.icmp_unsigned("!=", fast, pyapi.borrow_none())
            with builder.if_else(is_fast, likely=True) as (coherent, hooked):
                with coherent:
                    unbox_ndarray(fast)
                    builder.store(fast, held_ptr)  # released by the cleanup, after the call
                with hooked:
                    host = pyapi.call_method(obj, "_njit_enter")
                    with builder.if_then(cgutils.is_not_null(builder, host), likely=True):
                        builder.store(cgutils.true_bit, hooked_ptr)
                        unbox_ndarray(host)
                        pyapi.decref(host)
                    pyapi.decref(fast)  # (None)
        with ndarray:
            # No such attribute: an ndarray reaching a SmartArray version (numba's unboxer
            # raises its TypeError for anything else).
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
        held = builder.load(held_ptr)
        with builder.if_then(cgutils.is_not_null(builder, held), likely=True):
            pyapi.decref(held)  # the fast-path call is over: no host writer in flight
        with builder.if_then(builder.load(hooked_ptr), likely=False):
            # A Python error pending here means the call did not complete normally: a later
            # argument failed to unbox (the function never ran). ``_njit_abort`` records
            # only what may have been written over current bytes; ``_njit_exit`` records the
            # write of a call that returned (or raised a nopython exception, which numba
            # sets only after the cleanups: the writes before the raise are recorded).
            pending = cgutils.is_not_null(builder, pyapi.err_occurred())
            with pyapi.err_push(), builder.if_else(pending, likely=False) as (aborted, returned):
                with aborted:
                    call_hook("_njit_abort")
                with returned:
                    call_hook("_njit_exit")

    return NativeValue(builder.load(value_ptr), is_error=builder.load(error_ptr), cleanup=cleanup)


@overload_classmethod(SmartArrayType, "_allocate", target="CPU")
def _ol_smartarray_allocate(cls: Any, allocsize: Any, align: Any) -> Any:
    # numba allocates the result of an array expression through ``type(result)._allocate``;
    # it is registered for ``types.Array`` only, so the subtype delegates to the same intrinsic.
    def impl(cls: Any, allocsize: Any, align: Any) -> Any:
        return intrin_alloc(allocsize, align)  # type: ignore[call-arg]  # an @intrinsic: numba passes the typing context

    return impl


def _no_adapter(ary: Any) -> Any:
    return ary


# The array layer's function turning a boxed ndarray back into a SmartArray (see
# set_result_adapter); a plain function here, so the glue never imports the array layer.
_adapter: list[Any] = [_no_adapter]


def set_result_adapter(fn: Any) -> None:
    """Install ``fn(ndarray) -> object``: what an njit function returning a SmartArrayType gives.

    ``fn`` receives the ndarray numba's own array boxer built for the returned native array
    (the argument's host ndarray itself, or a new ndarray whose ``.base`` is numba's MemInfo,
    whose ``.parent`` is the argument's host ndarray for a view of it).
    """
    _adapter[0] = fn


def _adapt_result(ary: Any) -> Any:
    """Called from compiled code for every returned SmartArrayType value."""
    return _adapter[0](ary)


@box(SmartArrayType)
def _box_smartarray(typ: SmartArrayType, val: Any, c: Any) -> Any:
    pyapi = c.pyapi
    ary = c.box(typ.plain(), val)  # numba's array boxer (consumes the native reference)
    result_ptr = cgutils.alloca_once_value(c.builder, ary)
    with c.builder.if_then(cgutils.is_not_null(c.builder, ary), likely=True):
        # An environment constant (no unpickling per call; works with cache=True).
        fn = c.env_manager.read_const(c.env_manager.add_const(_adapt_result))
        result = pyapi.call_function_objargs(fn, [ary])
        pyapi.decref(ary)
        c.builder.store(result, result_ptr)
    return c.builder.load(result_ptr)
