"""DLPack export of the device copy to CUDA consumers (smartarray/_interop/dlpack.py).

A small consumer written here with ctypes (its own struct definitions, after ``dlpack.h``)
reads each capsule as a CUDA library would: device, shape, strides, dtype, data pointer, flags,
version; it marks the capsule consumed and calls the deleter when done. cuda.core's
``StridedMemoryView`` (what numba-cuda uses to take DLPack kernel arguments) is a second,
third-party consumer. The consumer reads and writes the bytes it was given through the driver
(a numba device array over the address: a device address is no host address on a GPU), or, on
the simulator, where a device address is host memory, directly. CuPy and PyTorch run in the
``gpu``-marked tests.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import weakref

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import memory
from smartarray._memory import streams as _streams
from smartarray.testing import strict
from tests._kernels import add_one

N = 6


def pointer(dev) -> int:
    """The device address of a device array (simulated device memory is host memory)."""
    if memory.SIMULATOR:
        return int(dev._ary.__array_interface__["data"][0])
    return int(dev.device_ctypes_pointer.value)


def moved() -> dict[str, int]:
    s = sa.stats()
    return {"h2d": s.h2d_bytes, "d2h": s.d2h_bytes, "d2d": s.d2d_bytes}


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()
    yield


# -- a consumer, with ctypes ------------------------------------------------------------------


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _Tensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _Versioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


def _capi(name, restype, argtypes):
    fn = ctypes.pythonapi[name]
    fn.restype, fn.argtypes = restype, argtypes
    return fn


_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, [ctypes.py_object, ctypes.c_char_p])
_get_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p])
_set_name = _capi("PyCapsule_SetName", ctypes.c_int, [ctypes.py_object, ctypes.c_char_p])
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# The capsule keeps the pointer to its name: names that live as long as the module.
_USED = {
    b"dltensor": ctypes.create_string_buffer(b"used_dltensor"),
    b"dltensor_versioned": ctypes.create_string_buffer(b"used_dltensor_versioned"),
}
_DTYPES = {(0, 8): "i1", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1", (2, 32): "f4", (2, 64): "f8"}
_DTYPES.update({(5, 128): "c16", (6, 8): "?"})


class Consumer:
    """Takes a capsule as a CUDA library does: reads the tensor, owns it until ``release``."""

    def __init__(self, capsule) -> None:
        if _is_valid(capsule, b"dltensor_versioned"):
            name, kind = b"dltensor_versioned", _Versioned
        else:
            assert _is_valid(capsule, b"dltensor"), f"not an unconsumed capsule: {capsule!r}"
            name, kind = b"dltensor", _Managed
        self.name = name.decode()
        self.address = _get_pointer(capsule, name)
        assert _set_name(capsule, _USED[name]) == 0  # consumed: the capsule must not delete
        managed = kind.from_address(self.address)
        self.versioned = kind is _Versioned
        self.version = (managed.major, managed.minor) if self.versioned else None
        self.flags = managed.flags if self.versioned else None
        t = managed.dl_tensor
        self.device = (t.device.device_type, t.device.device_id)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
        self.dtype = np.dtype(_DTYPES[(t.dtype.code, t.dtype.bits)])
        assert t.dtype.lanes == 1
        self.data = (t.data or 0) + t.byte_offset
        self.deleter = managed.deleter
        self.released = False

    def _extent(self) -> tuple[int, int, tuple[int, ...]]:
        """The bytes the tensor spans: the lowest element's byte offset from ``data`` (<= 0
        with negative strides), their count, and the element strides in bytes."""
        itemsize = self.dtype.itemsize
        if self.strides is None:
            strides = tuple(int(s) for s in np.empty(self.shape, np.uint8).strides)
        else:
            strides = self.strides
        byte_strides = tuple(s * itemsize for s in strides)
        if 0 in self.shape:
            return 0, 0, byte_strides
        low = sum(min(0, (n - 1) * s) for n, s in zip(self.shape, byte_strides, strict=True))
        high = (
            sum(max(0, (n - 1) * s) for n, s in zip(self.shape, byte_strides, strict=True))
            + itemsize
        )
        return low, high - low, byte_strides

    def _span(self, low: int, nbytes: int):
        """The spanned bytes as the consumer reaches them: on the simulator a NumPy view of
        them (device memory is host memory there); elsewhere a numba device array over the
        address, which the driver copies (the host cannot address GPU memory)."""
        desc = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "strides": None,
            "data": (self.data + low, False),
            "version": 3,
        }
        if memory.SIMULATOR:
            holder = type("H", (), {})()
            holder.__array_interface__ = desc
            return np.asarray(holder)
        return cuda.from_cuda_array_interface(desc, owner=None, sync=False)

    def _on_host(self) -> tuple[np.ndarray, object]:
        """The tensor's elements viewed over a host copy of the bytes it spans, with the span
        and that copy (to write the bytes back; None when it spans none), once the device work
        queued for the consumer (its upload, on a stream) has run."""
        cuda.synchronize()
        low, nbytes, byte_strides = self._extent()
        if nbytes == 0:
            return np.zeros(self.shape, self.dtype), None
        span = self._span(low, nbytes)
        raw = np.array(span) if memory.SIMULATOR else span.copy_to_host()
        elements = np.ndarray(self.shape, self.dtype, buffer=raw, offset=-low, strides=byte_strides)
        return elements, (span, raw)

    def values(self) -> np.ndarray:
        """A host copy of the elements the tensor describes."""
        return self._on_host()[0].copy()

    def write(self, values) -> None:
        """Write ``values`` (broadcast to the tensor's shape) into the device memory the tensor
        describes, as a consumer's kernel would, and wait until it is there."""
        elements, reached = self._on_host()
        elements[...] = values
        if reached is None:
            return
        span, raw = reached
        if memory.SIMULATOR:
            span[...] = raw
        else:
            span.copy_to_device(raw)
        cuda.synchronize()

    def release(self) -> None:
        assert not self.released
        self.released = True
        _DELETER(self.deleter)(self.address)


def export(a, **kwargs):
    kwargs.setdefault("dl_device", (2, 0))
    kwargs.setdefault("max_version", (1, 0))
    return a.__dlpack__(**kwargs)


# -- the capsule ------------------------------------------------------------------------------


def test_versioned_capsule_points_at_the_current_device_copy():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    cap = export(a, stream=1)
    assert moved() == {"h2d": 8 * N, "d2h": 0, "d2d": 0}  # made current on the device
    assert a.valid_at == ("gpu",)  # the consumer may write: recorded, as the CAI does
    t = Consumer(cap)
    assert t.name == "dltensor_versioned" and t.version[0] == 1 and t.flags == 0
    assert t.device == (2, 0) and t.shape == (N,) and t.dtype == np.float64
    assert t.strides in (None, (1,))
    assert t.data == pointer(a.get("gpu"))
    np.testing.assert_array_equal(t.values(), np.arange(N))
    t.write([100.0, 1, 2, 3, 4, 5])  # the consumer writes the device copy
    np.testing.assert_array_equal(a.host(), [100.0, 1, 2, 3, 4, 5])
    t.release()


def test_the_capsule_keeps_the_array_alive_and_releases_it_once():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    ref = weakref.ref(a)
    base = sys.getrefcount(a)
    cap = export(a)
    assert sys.getrefcount(a) == base + 1  # held by the capsule
    t = Consumer(cap)
    del a
    gc.collect()
    assert ref() is not None  # the consumer's tensor lives: so does the array
    t.release()
    gc.collect()
    assert ref() is None  # released by the deleter
    del cap  # a consumed capsule does not call the deleter again (that would crash)
    gc.collect()


def test_an_unconsumed_capsule_releases_the_array():
    for max_version in ((1, 0), None):
        a = sa.SmartArray(np.arange(N, dtype=np.float64))
        ref = weakref.ref(a)
        cap = export(a, max_version=max_version)
        del a
        gc.collect()
        assert ref() is not None
        del cap
        gc.collect()
        assert ref() is None


def test_a_capsule_freed_while_an_exception_unwinds_keeps_the_exception():
    # The capsule's destructor runs with the TypeError pending: it must neither lose it nor
    # raise another one (a deleter written as a Python callback would).
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    ref = weakref.ref(a)
    with pytest.raises(TypeError, match="unsupported operand"):
        export(a) + 1
    del a
    gc.collect()
    assert ref() is None


def test_legacy_capsule_of_a_strided_view():
    a = sa.SmartArray(np.arange(12, dtype=np.int32).reshape(3, 4))
    cap = export(a[:, 1], max_version=None, stream=None)
    t = Consumer(cap)
    assert t.name == "dltensor" and t.version is None and t.flags is None
    assert t.device == (2, 0) and t.shape == (3,) and t.strides == (4,)
    assert t.dtype == np.int32
    assert t.data == pointer(a.get("gpu")) + 4
    np.testing.assert_array_equal(t.values(), [1, 5, 9])
    t.release()
    assert moved() == {"h2d": 48, "d2h": 0, "d2d": 0}


def test_max_version_below_one_gets_the_legacy_form():
    a = sa.SmartArray(np.arange(N, dtype=np.int64))
    t = Consumer(export(a, max_version=(0, 8)))
    assert t.name == "dltensor"
    t.release()


def test_dtypes_and_a_2d_fortran_array():
    for dtype in (np.bool_, np.uint8, np.int8, np.float32, np.complex128):
        a = sa.SmartArray(np.arange(4).astype(dtype))
        t = Consumer(export(a))
        assert t.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(t.values(), np.arange(4).astype(dtype))
        t.release()
    r = sa.SmartArray(np.arange(6.0))
    t = Consumer(export(r[::-1]))  # DLPack takes negative strides (the CAI does not)
    assert t.strides == (-1,) and t.data == pointer(r.get("gpu")) + 40
    np.testing.assert_array_equal(t.values(), np.arange(6.0)[::-1])
    t.release()
    f = sa.SmartArray(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    t = Consumer(export(f))
    assert t.shape == (2, 3) and t.strides == (1, 2)
    np.testing.assert_array_equal(t.values(), np.arange(6.0).reshape(2, 3))
    t.release()


def test_cuda_core_reads_the_capsule():
    utils = pytest.importorskip("cuda.core.utils")
    a = sa.SmartArray(np.arange(12.0).reshape(3, 4))
    view = utils.StridedMemoryView.from_dlpack(a.cuda_view("in"), stream_ptr=-1)
    assert view.is_device_accessible and view.device_id == 0 and view.readonly
    assert view.shape == (3, 4) and view.dtype == np.float64
    assert view.ptr == pointer(a.get("gpu"))
    assert a.valid_at == ("host", "gpu")  # read-only: nothing recorded
    col = utils.StridedMemoryView.from_dlpack(a[:, 1].cuda_view(), stream_ptr=1)
    assert not col.readonly and col.shape == (3,) and col.ptr == pointer(a.get("gpu")) + 8
    assert a.valid_at == ("gpu",)


# -- what is recorded: CudaView, read-only ----------------------------------------------------


def test_cuda_view_speaks_dlpack_for_the_device_copy():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    v = a.cuda_view("in")
    assert v.__dlpack_device__() == (2, 0)
    assert a.__dlpack_device__() == (1, 0)  # the array itself: the host copy
    t = Consumer(v.__dlpack__(stream=1, max_version=(1, 0)))
    assert t.flags & 1 and t.device == (2, 0)  # DLPACK_FLAG_BITMASK_READ_ONLY
    assert a.valid_at == ("host", "gpu")
    t.release()
    with pytest.raises(BufferError, match="read-only"):
        v.__dlpack__(stream=1)  # the legacy form cannot say read-only
    with pytest.raises(BufferError, match="np.from_dlpack"):
        v.__dlpack__(dl_device=(1, 0), max_version=(1, 0))
    w = a.cuda_view()
    t = Consumer(w.__dlpack__(stream=1))
    assert t.name == "dltensor" and a.valid_at == ("gpu",)  # inout: a device write
    t.release()


def test_held_host_arrays_are_refreshed_when_the_write_is_recorded():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    held = a.get("host")
    add_one[1, 32](a)
    t = Consumer(export(a))
    np.testing.assert_array_equal(held, np.arange(N) + 1.0)
    t.release()


# -- copies -----------------------------------------------------------------------------------


def test_copy_true_is_a_fresh_device_copy_counted_d2d():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    add_one[1, 32](a)
    sa.reset_stats()
    t = Consumer(export(a, copy=True, stream=1))
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
    assert t.flags & 2  # DLPACK_FLAG_BITMASK_IS_COPIED
    assert t.data != pointer(a.get("gpu"))
    assert a.valid_at == ("gpu",)  # nothing recorded on a: the consumer has its own copy
    t.write(-1.0)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    t.release()


@cuda.jit
def add_hundred(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 100


@pytest.mark.seeds
@pytest.mark.gpu
def test_gpu_copy_true_is_not_reached_by_a_later_write_on_a_non_blocking_stream():
    """The fresh copy is made device to device on the legacy default stream, which may still
    hold it when the export returns; a kernel writing the source next on a non-blocking stream
    must be ordered after that copy (the source records it as well as the copy)."""
    from _kernels import non_blocking_stream

    with non_blocking_stream() as s:
        for trial in range(4):
            a = sa.SmartArray(np.zeros(N))
            add_one[1, 32](a)  # current on the device only
            t = Consumer(export(a, copy=True, stream=1))
            add_hundred[1, 32, s](a)
            np.testing.assert_array_equal(a.host(), np.full(N, 101.0), err_msg=str(trial))
            np.testing.assert_array_equal(t.values(), np.ones(N), err_msg=str(trial))
            t.release()


def test_copy_true_of_host_data_uploads_once():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    t = Consumer(export(a, copy=True))
    assert moved() == {"h2d": 8 * N, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("host",)  # a's own device copy was not needed
    np.testing.assert_array_equal(t.values(), np.arange(N))
    t.release()


def test_strides_that_need_a_copy():
    rec = np.zeros(4, dtype=[("x", "<f8"), ("y", "<i4")])
    rec["x"] = np.arange(4.0)
    a = sa.SmartArray(rec)
    x = a["x"]  # stride 12: not a multiple of 8
    with pytest.raises(BufferError, match="copy=False"):
        export(x, copy=False)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    t = Consumer(export(x))  # copy=None: a copy, flagged
    assert t.flags & 2 and t.strides in (None, (1,))
    np.testing.assert_array_equal(t.values(), np.arange(4.0))
    t.release()
    with pytest.raises(BufferError, match="dtype"):
        export(a)  # a record dtype: no copy helps


def test_bad_arguments_are_refused_before_anything_moves():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    cases = [
        (ValueError, "stream", {"stream": 0}),
        (ValueError, "stream", {"stream": -2}),
        (TypeError, "stream", {"stream": "s"}),
        (TypeError, "stream", {"stream": True}),
        (TypeError, "max_version", {"max_version": "1.0"}),
        (TypeError, "copy", {"copy": "yes"}),
        (BufferError, "device 0, not 3", {"dl_device": (2, 3)}),
        (BufferError, "not 7", {"dl_device": (7, 0)}),
        (ValueError, "dl_device", {"dl_device": "cuda"}),
        (ValueError, "dl_device", {"dl_device": (2, True)}),  # True is not device 1
        (ValueError, "dl_device", {"dl_device": (2, np.True_)}),
        (ValueError, "dl_device", {"dl_device": (True, 0)}),
        (ValueError, "dl_device", {"dl_device": (2, 0.5)}),
    ]
    for exc, match, kwargs in cases:
        with pytest.raises(exc, match=match):
            export(a, **kwargs)
    swapped = sa.SmartArray(np.arange(3, dtype=">f8"))
    with pytest.raises(BufferError, match="byte order"):
        export(swapped)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("host",) and swapped.valid_at == ("host",)


def test_the_transfer_guard_refuses_before_anything_is_recorded():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    with sa.transfer_guard("disallow", "h2d"), pytest.raises(sa.TransferGuardError):
        export(a)
    assert a.valid_at == ("host",) and moved()["h2d"] == 0
    # Nothing was exported: the device copy may still be evicted.
    assert [r.kept for r in sa.device_budget().resident if r.name == a.name] == [""]


# -- streams ----------------------------------------------------------------------------------


@pytest.mark.strict_mode
def test_pending_work_is_ordered_before_the_consumer_stream_without_a_host_wait(monkeypatch):
    from smartarray._engine.buffer import Buffer
    from smartarray._strict.scheduler import StrictEvent

    ordered, waited = [], []
    real_order = Buffer.order_before

    def spy(buf, c):
        if buf.work and not buf.works_on(c):  # work on other streams to order first
            ordered.append(([entry.stream for entry in buf.work.values()], c))
        real_order(buf, c)

    monkeypatch.setattr(Buffer, "order_before", spy)
    monkeypatch.setattr(_streams, "synchronize", lambda s: waited.append(s))
    monkeypatch.setattr(StrictEvent, "synchronize", lambda e: waited.append(e))
    with strict(seed=1):  # launches on their stream (the plain simulator's use 0)
        a = sa.SmartArray(np.arange(N, dtype=np.float64))
        producer = cuda.stream()
        add_one[1, 32, producer](a)
        pending = [entry.stream for entry in a._buf.work.values()]
        assert len(pending) == 1
        Consumer(export(a, stream=1)).release()
        assert len(ordered) == 1 and ordered[0][0] == pending  # an event: pending work first
        assert not waited  # the host did not wait
        ordered.clear()
        Consumer(export(a, stream=1)).release()
        assert not ordered  # the consumer's stream already holds the buffer's latest work
        Consumer(export(a, stream=-1)).release()
        assert not ordered and not waited  # -1: the consumer synchronizes itself


@pytest.mark.strict_mode
def test_strict_mode_consumer_stream_sees_the_data_only_after_the_event():
    with strict(seed=3) as state:
        a = sa.SmartArray(np.arange(N, dtype=np.float64))
        producer = cuda.stream()
        add_one[1, 32, producer](a)  # queued, not run
        consumer = cuda.stream()
        syncs = state.host_syncs
        t = Consumer(export(a, stream=consumer.handle))
        assert state.host_syncs == syncs  # no host wait
        assert state.pending() > 0  # the kernel has not run yet
        seen = []
        data = pointer(a._buf.device_bytes)
        consumer.add_callback(
            lambda *args: seen.append(
                np.ctypeslib.as_array((ctypes.c_double * N).from_address(data)).copy()
            )
        )
        consumer.synchronize()  # runs the consumer's stream and what it waits for only
        np.testing.assert_array_equal(seen[0], np.arange(N) + 1.0)
        t.release()
        np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)


@pytest.mark.strict_mode
def test_strict_mode_host_reads_wait_for_a_legacy_default_stream_consumer():
    with strict(seed=5, per_thread_default_stream=True) as state:  # no implicit order
        a = sa.SmartArray(np.arange(N, dtype=np.float64))
        t = Consumer(export(a, stream=1))  # the upload goes on the legacy default stream
        data = t.data
        cuda.legacy_default_stream().add_callback(  # the consumer writes on its stream
            lambda *args: ctypes.memmove(data, np.full(N, 7.0).ctypes.data, 8 * N)
        )
        assert state.pending() > 0
        np.testing.assert_array_equal(a.host(), np.full(N, 7.0))
        t.release()


@pytest.mark.strict_mode
def test_strict_mode_a_consumer_stream_handle_is_not_kept():
    """A stream handle may die with its owner (a CuPy or PyTorch stream): the array keeps no
    reference to it. Its own upload is ordered before later work with an event; the
    consumer's later work is the consumer's to synchronize, as with the CUDA Array Interface."""
    with strict(seed=5, per_thread_default_stream=True) as state:
        a = sa.SmartArray(np.arange(N, dtype=np.float64))
        consumer = cuda.stream()
        t = Consumer(export(a, stream=consumer.handle))  # the upload goes on the consumer's
        # Not the consumer's handle: the default stream, ordered after the upload.
        assert [entry.stream for entry in a._buf.work.values()] == [_streams.DEFAULT]
        data = t.data
        consumer.add_callback(lambda *args: ctypes.memmove(data, np.full(N, 7.0).ctypes.data, 48))
        np.testing.assert_array_equal(a.host(), np.arange(N))  # the upload, not the consumer's
        assert state.pending() > 0  # the consumer's work is its own to wait for
        consumer.synchronize()
        t.release()


def test_an_exported_device_copy_is_never_evicted():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    t = Consumer(export(a, stream=1))
    sa.set_device_budget(a.nbytes)
    try:
        b = sa.SmartArray(np.zeros(N))
        with pytest.raises(sa.DeviceMemoryError, match="DLPack"):
            b.get("gpu")  # would have to evict a, whose address the consumer holds
        assert pointer(a._buf.device_bytes) == t.data
    finally:
        sa.set_device_budget(None)
        t.release()


@pytest.mark.parametrize("how", ["dropped unconsumed", "consumer released"])
def test_an_export_keeps_the_copy_resident_only_while_it_is_alive(how):
    """A DLPack export (even a capsule dropped unconsumed) made the device copy unevictable
    for the array's life: two such arrays filled a budget of two."""
    from smartarray._engine import residency as _residency

    a, b = (sa.SmartArray(np.arange(N, dtype=np.float64) + k) for k in range(2))
    gc.collect()
    with _residency._lock:  # other tests' copies that may go: gone, so the budget is exact
        _residency._evict(1 << 62, None, "budget")
    kept = sum(r.nbytes for r in sa.device_budget().resident if r.kept)
    sa.set_device_budget(kept + 2 * a.nbytes)
    try:
        for x in (a, b):
            cap = export(x, stream=1)
            if how == "consumer released":
                t = Consumer(cap)
                kept = [r.kept for r in sa.device_budget().resident if r.name == x.name]
                assert kept == ["a DLPack export of it is alive"]  # the consumer holds it
                t.write(t.values() + 10)  # the consumer writes
                t.release()  # the DLManagedTensor's deleter: the consumer is done
            del cap
            gc.collect()
        mine = {r.name: r.kept for r in sa.device_budget().resident if r.name in (a.name, b.name)}
        assert mine == {a.name: "", b.name: ""}
        c = sa.SmartArray(np.zeros(N))
        c.get("gpu")  # room is made: a (least recently used) is downloaded and evicted
        assert a.name not in {r.name for r in sa.device_budget().resident}
        plus = 10.0 if how == "consumer released" else 0.0
        np.testing.assert_array_equal(np.asarray(a), np.arange(N) + plus)
        np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 1 + plus)
    finally:
        sa.set_device_budget(None)


def test_max_version_must_be_a_tuple_and_extended_precision_is_refused_before_moving():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    with pytest.raises(TypeError, match="max_version"):
        export(a, max_version=[1, 0])
    wide = sa.SmartArray(np.arange(3, dtype=np.longdouble))
    if wide.dtype.itemsize > 8:
        with pytest.raises(BufferError, match="extended precision"):
            export(wide)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("host",) and wide.valid_at == ("host",)


def test_a_zero_size_export_carries_no_host_address():
    t = Consumer(export(sa.SmartArray(np.zeros(0))))
    assert t.data == 0 and t.device == (2, 0)
    t.release()


# -- with a GPU: CuPy, PyTorch, numba ---------------------------------------------------------


@pytest.mark.gpu
def test_numba_kernel_takes_a_cuda_view_through_dlpack():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    add_one[1, 32](a.cuda_view())  # numba-cuda takes __dlpack__ objects (cuda.core)
    cuda.synchronize()
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)


@pytest.mark.gpu
def test_cupy_from_dlpack():
    cp = pytest.importorskip("cupy")
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    x = cp.from_dlpack(a.cuda_view())  # the device copy, ordered on CuPy's stream
    assert moved() == {"h2d": 8 * N, "d2h": 0, "d2d": 0}
    x += 1
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    s = cp.cuda.Stream(non_blocking=True)
    y = cp.from_dlpack(export(a, stream=s.ptr))  # a raw capsule, on another stream
    with s:
        y *= 2
    np.testing.assert_array_equal(a.host(), (np.arange(N) + 1.0) * 2)
    with pytest.raises(TypeError):
        cp.from_dlpack(a)  # __dlpack_device__ is the CPU: CuPy takes cuda_view() or the CAI
    sa.reset_stats()
    z = cp.from_dlpack(a.cuda_view().__dlpack__(stream=1, max_version=(1, 0), copy=True))
    assert moved()["d2d"] in (0, 8 * N) and moved()["h2d"] in (0, 8 * N)
    z[:] = 0
    np.testing.assert_array_equal(a.host(), (np.arange(N) + 1.0) * 2)
    v = cp.asarray(a)  # through the CUDA Array Interface
    np.testing.assert_array_equal(cp.asnumpy(v), (np.arange(N) + 1.0) * 2)
    b = sa.SmartArray(cp.arange(N, dtype=cp.float64))
    np.testing.assert_array_equal(b.host(), np.arange(N))


@pytest.mark.gpu
def test_pytorch_from_dlpack():
    torch = pytest.importorskip("torch")
    a = sa.SmartArray(np.arange(N, dtype=np.float32))
    t = torch.from_dlpack(a.cuda_view())
    assert t.device.type == "cuda"
    assert moved() == {"h2d": 4 * N, "d2h": 0, "d2d": 0}
    t += 1
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    h = torch.from_dlpack(a)  # a host consumer: the host copy
    assert h.device.type == "cpu"
    u = torch.as_tensor(a, device="cuda")  # through the CUDA Array Interface
    u += 1
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.host(), np.arange(N) + 2.0)


# -- a held host array while the device copy is exported -------------------------------------


def test_export_with_a_held_host_array_leaves_the_host_stale_until_the_consumer_wrote():
    """The export refreshed held host arrays before the consumer wrote and marked them
    current: the next host read returned the old values."""
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    h = a.host()  # held by the user
    t = Consumer(export(a, stream=1))
    t.write(t.values() + 1)  # the consumer writes on the device
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1.0)
    np.testing.assert_array_equal(h, np.arange(N) + 1.0)  # refreshed by that host access
    t.release()


def test_a_copied_export_of_device_data_under_a_budget_that_holds_only_it():
    """``copy=True`` pinned its own source through a get('gpu') hand-out, then could not make
    room for the copy (as ``a.copy()`` did): it copies on the host instead."""
    from smartarray._engine import residency as _residency

    gc.collect()
    with _residency._lock:  # other tests' copies that may go: gone, so the budget is exact
        _residency._evict(1 << 62, None, "budget")
    a = sa.SmartArray(np.zeros(N))
    add_one[1, 32](a)
    a.host()
    add_one[1, 32](a)  # current on the device only
    others = sum(r.nbytes for r in sa.device_budget().resident if r.kept and r.name != a.name)
    sa.set_device_budget(others + a.nbytes)  # room for one device copy
    try:
        cap = export(a, stream=1, copy=True)
        t = Consumer(cap)
        assert t.flags & 2  # DLPACK_FLAG_BITMASK_IS_COPIED
        np.testing.assert_array_equal(t.values(), np.full(N, 2.0))
        t.release()
    finally:
        sa.set_device_budget(None)
    np.testing.assert_array_equal(np.asarray(a), np.full(N, 2.0))
