"""Argument checks of the memory primitives, shared with the array layer.

Every public function of :mod:`smartarray.memory` (and SmartArray's constructor and copy
methods) checks its arguments here before it allocates or copies anything, so bad input gets a
``ValueError`` or ``TypeError`` naming the argument, and nothing moves. The copy checks follow
numba-cuda's own (``cudadrv/devicearray.py``), in its order and with its messages, so code that
matches them keeps working. Nothing here allocates, copies or reads device memory.
"""

from __future__ import annotations

import operator
from typing import Any, Literal

import numpy as np

from ..errors import _DtypeMismatchError

_ORDERS = ("C", "F")
_INTP_MAX = int(np.iinfo(np.intp).max)


def _check_shape(shape: Any, name: str = "shape", itemsize: int = 1) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, checked with exact (Python int) arithmetic.

    As NumPy, the product of the nonzero dimensions times ``itemsize`` must fit in ``np.intp``
    (an int64 product would wrap around silently).
    """
    if isinstance(shape, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}")
    try:
        dims: tuple[int, ...] = (operator.index(shape),)
    except TypeError:
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
        if any(isinstance(d, (bool, np.bool_)) for d in shape):
            raise TypeError(f"{name} must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{name} must not have negative dimensions, got {shape!r}")
    nbytes = itemsize
    for d in dims:
        nbytes *= d or 1
    if nbytes > _INTP_MAX:
        raise ValueError(
            f"{name} {shape!r} is too big: {nbytes} bytes exceed the largest addressable size "
            f"({_INTP_MAX} bytes)"
        )
    return dims


def check_byte_budget(nbytes: Any, name: str = "nbytes") -> int | None:
    """A budget in bytes: a non-negative int (anything ``operator.index`` takes but a bool),
    or None (no budget); TypeError or ValueError naming ``name`` otherwise."""
    if nbytes is None:
        return None
    if isinstance(nbytes, bool):
        raise TypeError(f"{name} must be an int (bytes) or None, got a bool")
    try:
        value = operator.index(nbytes)
    except TypeError:
        raise TypeError(
            f"{name} must be an int (bytes) or None, got {type(nbytes).__name__}"
        ) from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (bytes) or None, got {value}")
    return value


def _check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be a NumPy dtype or something np.dtype() accepts: {exc}"
        ) from None
    if dt.hasobject:
        raise TypeError(
            f"{name} {dt} holds Python objects, which device memory cannot hold; "
            "use a numeric, boolean or structured dtype"
        )
    return dt


def _check_array_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """:func:`_check_dtype`, and no strings: the dtypes a SmartArray holds."""
    dt = _check_dtype(dtype, name)
    if dt.kind in "US":
        raise TypeError(f"{name} {dt} is a string dtype; SmartArray holds numbers and records")
    return dt


def _check_order(order: Any) -> Literal["C", "F"]:
    if order not in _ORDERS:
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    return order


def _check_strides(strides: Any, ndim: int) -> tuple[int, ...] | None:
    if strides is None:
        return None
    try:
        result = tuple(operator.index(s) for s in strides)
    except TypeError:
        raise TypeError(f"strides must be None or a tuple of ints, got {strides!r}") from None
    if len(result) != ndim:
        raise ValueError(f"strides must have one entry per dimension ({ndim}), got {strides!r}")
    return result


def _check_layout(
    shape: Any, dtype: Any, strides: Any, order: Any
) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...] | None, Literal["C", "F"]]:
    """Check the arguments numpy.empty-like allocators share; return them normalised."""
    dims = _check_shape(shape)
    dt = _check_dtype(dtype)
    _check_shape(dims, itemsize=dt.itemsize)
    return dims, dt, _check_strides(strides, len(dims)), _check_order(order)


def _check_stream(stream: Any) -> Any:
    """Accept 0 (the default stream) or a stream object, as numba.cuda does.

    A stream object has ``synchronize()`` (numba's, the simulator's) or names its CUstream
    through ``__cuda_stream__()`` (the CUDA stream protocol: cuda.core's ``Stream``, which
    numba-cuda's dispatcher hands ``ArgHint.to_device`` during every launch, CuPy's, ...).
    """
    if stream.__class__ in _TAKEN_AS_THEY_ARE:  # (the common case: one look-up)
        return stream
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        if stream != 0:
            raise ValueError(
                f"stream must be 0 (the default stream) or a stream object, got {stream!r}"
            )
        return 0
    if callable(getattr(stream, "synchronize", None)) or callable(
        getattr(stream, "__cuda_stream__", None)
    ):
        return _foreign_stream(stream)
    raise TypeError(
        "stream must be 0 (the default stream) or a stream from smartarray.stream() "
        f"or numba.cuda.stream(), got {type(stream).__name__}"
    )


def _foreign_stream(stream: Any) -> Any:
    """CuPy's and PyTorch's streams as numba's ``external_stream`` (numba's copies need one).

    numba's own streams and cuda.core's (what numba-cuda's launches hand argument hints) are
    taken as they are: numba-cuda's copies accept both. Any other stream that names its
    CUstream through ``__cuda_stream__()`` (the CUDA stream protocol) or PyTorch's
    ``cuda_stream`` is wrapped, whatever other attributes it has (numba-cuda refuses it as it
    is). The simulator has no external streams: there it is taken as it is.
    """
    from .._platform.cuda_simulator import SIMULATOR

    if SIMULATOR or isinstance(stream, _streams_numba_takes()):
        _TAKEN_AS_THEY_ARE.add(stream.__class__)
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    handle = protocol()[1] if callable(protocol) else getattr(stream, "cuda_stream", None)
    if handle is None:
        return stream
    handle = int(getattr(handle, "value", handle) or 0)  # 0: the legacy default stream
    if handle == 0:
        return 0
    from numba import cuda

    return cuda.external_stream(handle)


_STREAM_TYPES: list[tuple[type, ...]] = []
#: Stream classes whose objects :func:`_check_stream` returns as they are (numba-cuda's and
#: cuda.core's; on the simulator every stream class): a fact of the process, learned once each.
_TAKEN_AS_THEY_ARE: set[type] = set()


def _streams_numba_takes() -> tuple[type, ...]:
    """numba-cuda's ``Stream`` and cuda.core's (numba-cuda's copies accept both as they are)."""
    if not _STREAM_TYPES:
        from numba.cuda.cudadrv import driver  # the simulator's has no Stream

        types: tuple[type, ...] = tuple(filter(None, [getattr(driver, "Stream", None)]))
        try:
            from cuda.core import Stream as CoreStream
        except ImportError:  # pragma: no cover - cuda.core comes with numba-cuda
            pass
        else:
            types += (CoreStream,)
        _STREAM_TYPES.append(types)
    return _STREAM_TYPES[0]


def _check_host_array(ary: Any, name: str) -> np.ndarray:
    if not isinstance(ary, np.ndarray):
        raise TypeError(f"{name} must be numpy.ndarray, got {type(ary).__name__}")
    return ary


def _host_array_from(obj: Any, gather: bool = False) -> np.ndarray | np.void:
    """Turn ``obj`` into something numba can upload, with errors that name ``obj``.

    ``gather=True``: a strided ``obj`` is accepted (the caller gathers it, as numba does).
    """
    if isinstance(obj, np.void):
        _check_dtype(obj.dtype, "obj.dtype")
        return obj
    try:
        ary = np.asarray(obj)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"obj cannot be turned into an array: {exc}") from None
    if ary.dtype.hasobject:
        raise TypeError(
            "obj has object dtype (ragged or Python objects), which device memory cannot "
            "hold; pass a numeric, boolean or structured array"
        )
    if ary.dtype.kind in "US":
        raise TypeError(f"obj has string dtype {ary.dtype}; device arrays hold numbers and records")
    if not gather and not _is_contiguous(ary):
        raise ValueError(
            "obj must be C- or F-contiguous to be copied in one transfer; "
            "pass np.ascontiguousarray(obj)"
        )
    return ary


def _is_contiguous(ary: np.ndarray) -> bool:
    # Broadcast (stride 0) and length-1 dimensions do not break contiguity for numba.
    if ary.size == 0:
        return True
    core = ary[tuple(0 if s == 0 else slice(None) for s in ary.strides)] if ary.ndim else ary
    return bool(core.flags.c_contiguous or core.flags.f_contiguous)


def is_device_array(obj: Any) -> bool:
    """Whether ``obj`` is a numba device array (``__cuda_ndarray__``; a mapped ndarray is not)."""
    return bool(getattr(obj, "__cuda_ndarray__", False)) and not isinstance(obj, np.ndarray)


# numba-cuda's own messages (cudadrv/devicearray.py), so code that matches them keeps working.
_NONCONTIGUOUS = (
    "Array contains non-contiguous buffer and cannot be transferred as a single memory region. "
    "Please ensure contiguous buffer with numpy .ascontiguousarray()"
)


def _core_probe(ary: Any) -> np.ndarray:
    """numba's ``array_core(ary)`` geometry (broadcast dimensions dropped), reading no memory."""
    kept = [(d, s) for d, s in zip(ary.shape, ary.strides, strict=True) if s != 0]
    return np.lib.stride_tricks.as_strided(
        np.zeros(1, np.dtype((np.void, max(ary.dtype.itemsize, 1)))),
        tuple(d for d, _ in kept),
        tuple(s for _, s in kept),
    )


def _squeezed(ary: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    kept = [(d, s) for d, s in zip(ary.shape, ary.strides, strict=True) if d != 1]
    return tuple(d for d, _ in kept), tuple(s for _, s in kept)


def _copy_source(dst: Any, src: Any, name: str) -> Any:
    """What ``dst.copy_to_device(src)`` copies, checked as numba-cuda checks it; None: nothing.

    numba-cuda's ``DeviceNDArrayBase.copy_to_device``, in its order and with its messages:
    an empty source copies nothing; the destination's core (broadcast dimensions dropped)
    must be contiguous; a device source's too, while a host source's core is gathered into a
    contiguous host copy in the destination's order (no transfer); then the cores' dtype
    (``TypeError``, also a ``ValueError``), shape and strides (``ValueError``), ignoring
    length-1 dimensions. A structured scalar into a device record is numba's record copy.
    """
    device_source = is_device_array(src)
    if not device_source:
        src = _host_array_from(src, gather=True)
    if isinstance(src, np.void) or not hasattr(dst, "strides"):
        _check_same_layout(dst, src, name)
        return src
    if src.size == 0:
        return None
    dst_core = _core_probe(dst)
    if not (dst_core.flags.c_contiguous or dst_core.flags.f_contiguous):
        raise ValueError(_NONCONTIGUOUS)
    if device_source:
        src_core = _core_probe(src)
        if not (src_core.flags.c_contiguous or src_core.flags.f_contiguous):
            raise ValueError(_NONCONTIGUOUS)
    else:
        core = src[tuple(0 if st == 0 else slice(None) for st in src.strides)]
        src = src_core = np.array(
            core, order="C" if dst_core.flags.c_contiguous else "F", copy=None
        )
    if np.dtype(src.dtype) != np.dtype(dst.dtype):
        raise _DtypeMismatchError(f"incompatible dtype: {dst.dtype} vs. {src.dtype}")
    _check_geometry(dst_core, src_core)
    return src


def check_compatibility(first: Any, second: Any) -> None:
    """numba-cuda's ``check_array_compatibility``: dtype, shape, strides, with its messages.

    Length-1 dimensions are ignored; strides only matter for a non-empty array.
    """
    if np.dtype(first.dtype) != np.dtype(second.dtype):
        raise _DtypeMismatchError(f"incompatible dtype: {first.dtype} vs. {second.dtype}")
    _check_geometry(first, second)


def _check_geometry(first: Any, second: Any) -> None:
    (shape1, strides1), (shape2, strides2) = _squeezed(first), _squeezed(second)
    if shape1 != shape2:
        raise ValueError(f"incompatible shape: {first.shape} vs. {second.shape}")
    size = int(np.prod(first.shape, dtype=np.int64))
    if size and strides1 != strides2:
        raise ValueError(f"incompatible strides: {first.strides} vs. {second.strides}")


def _check_same_layout(dst: Any, src: Any, name: str) -> None:
    if np.dtype(src.dtype) != np.dtype(dst.dtype):
        raise ValueError(f"{name} has dtype {src.dtype}, the destination has dtype {dst.dtype}")
    if tuple(s for s in src.shape if s != 1) != tuple(s for s in dst.shape if s != 1):
        raise ValueError(
            f"{name} has shape {tuple(src.shape)}, the destination has shape {tuple(dst.shape)}"
        )


def _byte_extent(ary: np.ndarray) -> tuple[int, int]:
    low, high = np.lib.array_utils.byte_bounds(ary)  # (numpy >= 2.0; the floor is 2.1)
    return int(low), int(high)
