"""The low-level primitives: reference signatures, behaviour, exact transfer counts, errors."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import memory
from smartarray._memory import pinning as _pinning
from tests._kernels import add_one
from tests._targets import real_target_env


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()
    yield


def delta(before: sa.TransferStats) -> sa.TransferStats:
    return sa.stats() - before


# --- signatures, exactly as on the reference pages ------------------------------------------

P = inspect.Parameter
REFERENCE_SIGNATURES = {
    "to_device": "(obj, stream=0, copy=True, to=None)",
    "device_array": "(shape, dtype=<class 'numpy.float64'>, strides=None, order='C', stream=0)",
    "device_array_like": "(ary, stream=0)",
    "pinned_array": "(shape, dtype=<class 'numpy.float64'>, strides=None, order='C')",
    "mapped_array": (
        "(shape, dtype=<class 'numpy.float64'>, strides=None, order='C', stream=0, "
        "portable=False, wc=False)"
    ),
    "pinned": "(*arrays)",
    "mapped": "(*arrays, stream=0)",
    "register": "(*arrays)",
    "deregister": "(*arrays)",
    "stream": "()",
}


@pytest.mark.parametrize("name", sorted(REFERENCE_SIGNATURES))
def test_reference_signature(name):
    fn = getattr(sa, name)
    sig = inspect.signature(fn)
    plain = sig.replace(
        parameters=[p.replace(annotation=P.empty) for p in sig.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    assert str(plain) == REFERENCE_SIGNATURES[name]
    assert "Examples" in fn.__doc__


# --- to_device --------------------------------------------------------------------------------

DTYPES = [np.float64, np.float32, np.int8, np.int64, np.complex128, np.bool_, np.float16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2), (), (0,), (0, 3)])
def test_to_device_round_trip_counts_bytes(dtype, shape):
    host = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    before = sa.stats()
    d = sa.to_device(host)
    assert d.shape == host.shape and d.dtype == host.dtype
    back = d.copy_to_host()
    np.testing.assert_array_equal(back, host)
    moved = delta(before)
    expected_count = 1 if host.nbytes else 0
    assert (moved.h2d_count, moved.h2d_bytes) == (expected_count, host.nbytes)
    assert (moved.d2h_count, moved.d2h_bytes) == (expected_count, host.nbytes)
    assert moved.d2d_count == 0


def test_to_device_fortran_order_keeps_layout():
    host = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    d = sa.to_device(host)
    assert d.is_f_contiguous() and not d.is_c_contiguous()
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_to_device_accepts_array_likes():
    d = sa.to_device([[1, 2], [3, 4]])
    np.testing.assert_array_equal(d.copy_to_host(), [[1, 2], [3, 4]])


def test_to_device_structured_scalar_gives_record():
    dt = np.dtype([("x", np.float64), ("n", np.int32)])
    rec = np.array([(1.5, 7)], dtype=dt)[0]
    before = sa.stats()
    d = sa.to_device(rec)
    back = d.copy_to_host()
    assert back["x"] == 1.5 and back["n"] == 7
    moved = delta(before)
    assert moved.h2d_bytes == dt.itemsize and moved.d2h_bytes == dt.itemsize


def test_record_copy_to_device_and_into_existing_host():
    dt = np.dtype([("x", np.float64), ("n", np.int32)])
    d = sa.to_device(np.zeros(1, dtype=dt)[0])
    d.copy_to_device(np.array([(2.5, 3)], dtype=dt)[0])
    out = np.zeros((), dtype=dt)
    d.copy_to_host(out)
    assert out["x"] == 2.5 and out["n"] == 3


def test_to_device_copy_false_allocates_without_copying():
    host = np.arange(6.0)
    before = sa.stats()
    d = sa.to_device(host, copy=False)
    assert d.shape == host.shape and d.dtype == host.dtype
    assert delta(before).count == 0


def test_to_device_record_copy_false_allocates_without_copying():
    rec = np.array([(1.5, 7)], dtype=[("x", np.float64), ("n", np.int32)])[0]
    before = sa.stats()
    d = sa.to_device(rec, copy=False)
    assert d.dtype == rec.dtype and delta(before).count == 0


REAL_RECORD_SCRIPT = textwrap.dedent(
    """
    import contextlib, ctypes
    import numpy as np
    from numba.cuda.cudadrv import devices, driver
    import smartarray as sa

    uploads = []

    class Context:  # no driver here: allocations at a made-up address, uploads recorded
        def memalloc(self, size):
            return driver.MemoryPointer(None, ctypes.c_void_p(0x7F0000000000), size)

    devices.get_context = lambda devnum=None: Context()
    devices._runtime.ensure_context = contextlib.nullcontext
    driver.host_to_device = lambda *args, **kws: uploads.append(args[-1])
    rec = np.zeros((), dtype=[("x", np.float64), ("n", np.int32)])[()]
    d = sa.to_device(rec, copy=False)
    print(type(d).__name__, "uploads", uploads, "counted", sa.stats().count)
    """
)


def test_to_device_record_copy_false_uploads_nothing_on_the_real_target():
    # It uploaded a zero record there, without counting it: now it only allocates.
    out = _run_real_target(REAL_RECORD_SCRIPT)
    assert "DeviceRecord uploads [] counted 0" in out, out


def test_to_device_to_existing_returns_it_and_copies():
    target = sa.device_array(5, dtype=np.int32)
    before = sa.stats()
    result = sa.to_device(np.arange(5, dtype=np.int32), to=target)
    assert result is target
    np.testing.assert_array_equal(target.copy_to_host(), np.arange(5))
    assert delta(before).h2d_bytes == 20


def test_to_device_to_existing_from_device_is_device_to_device():
    src = sa.to_device(np.arange(4.0))
    dst = sa.device_array(4)
    before = sa.stats()
    assert sa.to_device(src, to=dst) is dst
    moved = delta(before)
    assert (moved.d2d_count, moved.d2d_bytes, moved.h2d_count) == (1, 32, 0)
    np.testing.assert_array_equal(dst.copy_to_host(), np.arange(4.0))


def test_to_device_of_device_array_returns_it():
    d = sa.to_device(np.arange(3))
    assert sa.to_device(d) is d


def test_to_device_on_stream():
    s = sa.stream()
    host = np.arange(8.0)
    d = sa.to_device(host, stream=s)
    out = d.copy_to_host(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, host)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"obj": np.array([object(), 1], dtype=object)}, TypeError, "object dtype"),
        ({"obj": [[1, 2], [3]]}, (TypeError, ValueError), "obj"),
        ({"obj": np.array(["a", "b"])}, TypeError, "string"),
        ({"obj": np.arange(10.0)[::2]}, ValueError, "contiguous"),
        ({"obj": np.arange(3.0), "stream": "fast"}, TypeError, "stream"),
        ({"obj": np.arange(3.0), "stream": 3}, ValueError, "stream"),
        ({"obj": np.arange(3.0), "to": np.zeros(3)}, TypeError, "to must be a device array"),
    ],
)
def test_to_device_bad_input(kwargs, error, words):
    before = sa.stats()
    with pytest.raises(error, match=words):
        sa.to_device(**kwargs)
    assert delta(before).count == 0


@pytest.mark.parametrize(
    ("host", "words"),
    [(np.arange(4, dtype=np.int32), "shape"), (np.arange(5, dtype=np.int64), "dtype")],
)
def test_to_device_mismatched_to_is_value_error_and_changes_nothing(host, words):
    target = sa.to_device(np.full(5, 9, dtype=np.int32))
    before = sa.stats()
    with pytest.raises(ValueError, match=words):
        sa.to_device(host, to=target)
    assert delta(before).count == 0
    np.testing.assert_array_equal(target.copy_to_host(), np.full(5, 9))


# --- device_array, device_array_like ---------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
def test_device_array_order_and_default_dtype(order):
    d = sa.device_array((3, 4), order=order)
    assert d.dtype == np.float64 and d.shape == (3, 4)
    assert d.is_c_contiguous() == (order == "C")
    assert d.is_f_contiguous() == (order == "F")


def test_device_array_int_shape_and_zero_size():
    assert sa.device_array(5, dtype=np.int16).shape == (5,)
    assert sa.device_array((0, 4)).size == 0
    assert sa.device_array(()).shape == ()


def test_device_array_with_strides():
    d = sa.device_array((2, 3), dtype=np.float32, strides=(4, 8))
    assert d.strides == (4, 8)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        ((-1,), {}, ValueError, "negative"),
        (((2, -3),), {}, ValueError, "negative"),
        ((2.5,), {}, TypeError, "shape"),
        (("ten",), {}, TypeError, "shape"),
        ((True,), {}, TypeError, "shape"),
        ((3,), {"order": "K"}, ValueError, "order"),
        ((3,), {"dtype": object}, TypeError, "objects"),
        ((3,), {"dtype": "not-a-dtype"}, TypeError, "dtype"),
        ((3,), {"strides": (8, 8)}, ValueError, "strides"),
        ((3,), {"strides": "x"}, TypeError, "strides"),
        ((3,), {"stream": object()}, TypeError, "stream"),
    ],
)
def test_device_array_bad_input(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        sa.device_array(*args, **kwargs)


@pytest.mark.parametrize("source", ["host", "device"])
def test_device_array_like(source):
    host = np.asfortranarray(np.zeros((3, 5), dtype=np.int32))
    like = host if source == "host" else sa.to_device(host)
    before = sa.stats()
    d = sa.device_array_like(like)
    assert (d.shape, d.dtype, d.is_f_contiguous()) == ((3, 5), np.int32, True)
    assert delta(before).count == 0


def test_device_array_like_bad_input():
    with pytest.raises(TypeError, match="ary must be"):
        sa.device_array_like([1, 2, 3])
    with pytest.raises(TypeError, match="objects"):
        sa.device_array_like(np.array([None]))


# --- device-object methods of the reference pages -------------------------------------------


def test_copy_to_device_host_to_device_and_device_to_device():
    d = sa.device_array(6, dtype=np.int64)
    before = sa.stats()
    d.copy_to_device(np.arange(6))
    other = sa.device_array(6, dtype=np.int64)
    other.copy_to_device(d)
    moved = delta(before)
    assert (moved.h2d_count, moved.h2d_bytes, moved.d2d_count, moved.d2d_bytes) == (1, 48, 1, 48)
    np.testing.assert_array_equal(other.copy_to_host(), np.arange(6))


def test_copy_to_device_mismatch_changes_nothing():
    d = sa.to_device(np.arange(4.0))
    before = sa.stats()
    with pytest.raises(ValueError, match="shape"):
        d.copy_to_device(np.zeros(5))
    assert delta(before).count == 0
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(4.0))


@pytest.mark.parametrize("use_stream", [False, True])
def test_copy_to_host_with_and_without_ary(use_stream):
    s = sa.stream() if use_stream else 0
    d = sa.to_device(np.arange(10.0))
    fresh = d.copy_to_host(stream=s)
    into = np.zeros(10)
    returned = d.copy_to_host(into, stream=s)
    if use_stream:
        s.synchronize()
    assert returned is into
    np.testing.assert_array_equal(fresh, np.arange(10.0))
    np.testing.assert_array_equal(into, np.arange(10.0))


def test_copy_to_host_rejects_non_array():
    d = sa.to_device(np.arange(3.0))
    with pytest.raises(TypeError, match="ary must be"):
        d.copy_to_host([0, 0, 0])


def test_ravel_and_reshape_with_order():
    host = np.arange(12.0).reshape(3, 4)
    d = sa.to_device(host)
    np.testing.assert_array_equal(d.ravel().copy_to_host(), host.ravel())
    r = d.reshape(4, 3)
    np.testing.assert_array_equal(r.copy_to_host(), host.reshape(4, 3))
    f = sa.to_device(np.asfortranarray(host)).reshape(2, 6, order="F")
    assert f.shape == (2, 6) and f.is_f_contiguous()
    np.testing.assert_array_equal(
        f.copy_to_host(), np.asfortranarray(host).reshape(2, 6, order="F")
    )


def test_split_counts_and_values():
    d = sa.to_device(np.arange(10, dtype=np.int32))
    parts = d.split(4)
    assert [p.shape for p in parts] == [(4,), (4,), (2,)]
    before = sa.stats()
    values = [p.copy_to_host() for p in parts]
    np.testing.assert_array_equal(np.concatenate(values), np.arange(10))
    assert delta(before).d2h_bytes == 40


def test_views_stay_counted():
    d = sa.to_device(np.arange(8.0))
    before = sa.stats()
    d[2:6].copy_to_host()
    assert delta(before).d2h_bytes == 32


def test_element_read_is_a_counted_transfer():
    d = sa.to_device(np.arange(5, dtype=np.int16))
    before = sa.stats()
    assert d[3] == 3
    assert (delta(before).d2h_count, delta(before).d2h_bytes) == (1, 2)


def test_np_asarray_of_device_array_copies_not_aliases():
    d = sa.to_device(np.arange(4.0))
    before = sa.stats()
    host = np.asarray(d)
    host[0] = 99.0
    assert d.copy_to_host()[0] == 0.0
    assert delta(before).d2h_count == 2


@pytest.mark.parametrize(
    "make", [sa.to_device, lambda x: sa.device_array_like(x)], ids=["to_device", "device_array"]
)
def test_np_array_copy_false_of_a_device_array_is_refused_before_anything_moves(make):
    """NumPy 2: copy=False never copies; device memory needs a copy to become an ndarray
    (numba-cuda's device arrays raise ValueError too)."""
    d = make(np.arange(4.0))
    before = sa.stats()
    with pytest.raises(ValueError, match="copy=False"):
        np.array(d, copy=False)
    assert delta(before).d2h_count == 0
    np.testing.assert_array_equal(np.array(d, copy=None).shape, (4,))  # a copy is fine


# --- pinned, mapped ----------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
def test_pinned_array(order):
    a = sa.pinned_array((3, 2), dtype=np.int32, order=order)
    assert isinstance(a, np.ndarray) and a.shape == (3, 2) and a.dtype == np.int32
    assert a.flags.f_contiguous == (order == "F") or a.shape[1] == 1
    a[...] = 4
    assert sa.to_device(a).copy_to_host().sum() == 24
    assert sa.pinned_array(4).dtype == np.float64


def test_pinned_array_bad_input():
    with pytest.raises(ValueError, match="negative"):
        sa.pinned_array(-2)
    with pytest.raises(ValueError, match="order"):
        sa.pinned_array(2, order="A")


@pytest.mark.parametrize("flags", [{}, {"portable": True}, {"wc": True}])
def test_mapped_array_is_host_ndarray_kernels_take(flags):
    m = sa.mapped_array(8, dtype=np.float32, **flags)
    assert isinstance(m, np.ndarray)
    m[:] = np.arange(8)
    before = sa.stats()
    add_one[1, 8](m)
    cuda.synchronize()
    np.testing.assert_array_equal(m, np.arange(8) + 1)
    assert delta(before).count == 0  # zero-copy: nothing crossed


def test_mapped_array_device_methods():
    m = sa.mapped_array(6, dtype=np.int64)
    m.copy_to_device(np.arange(6))
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(6))
    assert [p.shape for p in m.split(4)] == [(4,), (2,)]
    assert m.is_c_contiguous()


def test_mapped_array_copies_are_host_side_and_not_transfers():
    # Mapped memory is host memory: copying in and out of it moves nothing between host and
    # device (like a kernel's zero-copy access), so nothing is counted.
    m = sa.mapped_array(6, dtype=np.int64)
    before = sa.stats()
    m.copy_to_device(np.arange(6))
    back = m.copy_to_host()
    part = np.zeros(3, dtype=np.int64)
    m[::2].copy_to_host(part, stream=sa.stream())
    assert delta(before).count == 0
    assert type(back) is np.ndarray and not np.may_share_memory(back, m)
    np.testing.assert_array_equal(back, np.arange(6))
    np.testing.assert_array_equal(part, [0, 2, 4])
    assert m.alloc_size == 48 and m.reshape(1, 6).squeeze().shape == (6,)
    with pytest.raises(ValueError, match="shape"):
        m.copy_to_device(np.arange(5))
    np.testing.assert_array_equal(m, np.arange(6))  # refused before anything moved


def test_mapped_array_filled_from_a_device_array_counts_the_download():
    m = sa.mapped_array(4)
    d = sa.to_device(np.arange(4.0))
    with sa.trace() as t:
        m.copy_to_device(d)
    assert [(e.direction, e.nbytes) for e in t.events] == [("d2h", 32)]
    np.testing.assert_array_equal(m, np.arange(4.0))


def test_mapped_array_bind_shares_the_memory():
    m = sa.mapped_array(4)
    s = sa.stream()
    bound = m.bind(s)
    bound[:] = 5.0
    assert bound.stream is s
    np.testing.assert_array_equal(m, 5.0)


def _run_real_target(script: str) -> str:
    """Run ``script`` with the real numba.cuda (no simulator, no GPU needed); return stdout."""
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# numba.cuda.mapped_array builds its MappedNDArray like this (memhostalloc needs a driver: a
# MemoryPointer at a made-up device address stands in for the mapping).
REAL_MAPPED_PRELUDE = """
import ctypes
import numpy as np
import numba.cuda
from numba.cuda.args import InOut
from numba.cuda.cudadrv import driver
from numba.cuda.cudadrv.devicearray import MappedNDArray
import smartarray as sa
from smartarray import memory

BASE = 0x7F0000000000
host = np.zeros(12, dtype=np.int64)
m = np.ndarray.view(host, type=MappedNDArray)
m.device_setup(driver.MemoryPointer(None, ctypes.c_void_p(BASE), host.nbytes))
m = memory._adopt(m)
"""

REAL_MAPPED_COPY_SCRIPT = REAL_MAPPED_PRELUDE + textwrap.dedent(
    """
    waits = []
    numba.cuda.synchronize = lambda: waits.append("device")  # no driver: record the waits

    class Stream:
        def synchronize(self):
            waits.append("stream")

    m.copy_to_device(np.arange(12))
    back = m.copy_to_host()
    part = np.zeros(4, dtype=np.int64)
    m[::3].copy_to_host(part, stream=Stream())
    print("values", back.tolist() == list(range(12)), part.tolist())
    print("waits", waits, "transfers", sa.stats().count)
    print("surface", m.alloc_size, m.is_c_contiguous(), m.reshape(1, 12).squeeze().shape)
    """
)


def test_mapped_array_copies_work_on_the_real_target():
    # numba's MappedNDArray is built without DeviceNDArrayBase.__init__: its own copy methods
    # read alloc_size and fail on a GPU. The host-side copies wait for the device first.
    out = _run_real_target(REAL_MAPPED_COPY_SCRIPT)
    assert "values True [0, 3, 6, 9]" in out, out
    assert "waits ['device', 'device', 'stream'] transfers 0" in out, out
    assert "surface 96 True (12,)" in out, out


REAL_MAPPED_VIEW_SCRIPT = REAL_MAPPED_PRELUDE + textwrap.dedent(
    """
    def expected(v):
        return BASE + v.__array_interface__["data"][0] - host.__array_interface__["data"][0]

    views = {
        "root": m, "slice": m[2:], "step": m[1::3], "reversed": m[::-1],
        "twice": m[::-1][2::-2], "row": m.reshape(3, 4)[1], "T": m.reshape(3, 4).T,
        "empty": m[5:5], "bind": m[4:].bind(0),
    }
    for name, v in views.items():
        arg = InOut(v).to_device([], 0)  # what numba-cuda's dispatcher reads for a launch
        ok = (
            arg.ptr == expected(v)
            and v.__cuda_array_interface__["data"][0] == expected(v)
            and tuple(arg._layout.strides_in_bytes) == v.strides
        )
        print(name, "ok" if ok else f"wrong {arg.ptr} != {expected(v)}")
    for name, v in (("ufunc", m + 1), ("copy", m[2:].copy())):
        try:
            InOut(v).to_device([], 0)
            print(name, "accepted")
        except ValueError as exc:
            print(name, "refused" if "mapped memory" in str(exc) else exc)
    """
)


def test_views_of_mapped_arrays_reach_kernels_with_their_device_pointer():
    # Views NumPy makes of a mapped array had no gpu_data, so the launch passed NULL.
    lines = _run_real_target(REAL_MAPPED_VIEW_SCRIPT).split("\n")
    names = ["root", "slice", "step", "reversed", "twice", "row", "T", "empty", "bind"]
    assert [f"{n} ok" for n in names] + ["ufunc refused", "copy refused"] == lines[:-1]


def test_pinned_context_manager():
    a, b = np.arange(4.0), np.arange(3.0)
    with sa.pinned(a, b):
        assert memory.is_registered(a) and memory.is_registered(b)
        np.testing.assert_array_equal(sa.to_device(a).copy_to_host(), a)
    assert not memory.is_registered(a) and not memory.is_registered(b)


def test_pinned_keeps_earlier_registration():
    a = np.arange(4.0)
    sa.register(a)
    with sa.pinned(a):
        pass
    assert memory.is_registered(a)
    sa.deregister(a)


@pytest.mark.parametrize("count", [1, 2])
def test_mapped_kernel_writes_land_in_host_arrays(count):
    arrays = [np.zeros(5, dtype=np.float64) for _ in range(count)]
    before = sa.stats()
    with sa.mapped(*arrays) as devs:
        devs = [devs] if count == 1 else devs
        assert len(devs) == count
        for dev in devs:
            add_one[1, 8](dev)
        cuda.synchronize()
    for ary in arrays:
        np.testing.assert_array_equal(ary, np.ones(5))
    assert delta(before).count == 0


def test_mapped_and_pinned_reject_non_arrays():
    with pytest.raises(TypeError, match=r"arrays\[0\]"), sa.mapped([1, 2, 3]):
        pass
    with pytest.raises(TypeError, match=r"arrays\[1\]"), sa.pinned(np.zeros(2), "x"):
        pass


# --- register / deregister ---------------------------------------------------------------------


def test_register_deregister_and_context_manager():
    a, b = np.arange(10), np.arange(10)
    sa.register(a)
    assert memory.is_registered(a)
    sa.deregister(a)
    assert not memory.is_registered(a)
    with sa.register(a, b) as arrays:
        assert arrays == (a, b)
        assert memory.is_registered(a) and memory.is_registered(b)
    assert not memory.is_registered(a) and not memory.is_registered(b)


def test_register_twice_is_a_no_op_and_one_deregister_releases():
    a = np.zeros(16)
    sa.register(a)
    sa.register(a)
    sa.deregister(a)
    assert not memory.is_registered(a)


def test_context_manager_leaves_earlier_registration_alone():
    a, b = np.zeros(8), np.zeros(8)
    sa.register(a)
    with sa.register(a, b):
        pass
    assert memory.is_registered(a) and not memory.is_registered(b)
    sa.deregister(a)


def test_deregister_unregistered_raises_and_changes_nothing():
    a, b = np.zeros(4), np.zeros(4)
    sa.register(a)
    with pytest.raises(sa.RegistrationError, match="not registered"):
        sa.deregister(a, b)
    assert memory.is_registered(a)  # all or nothing
    sa.deregister(a)
    with pytest.raises(ValueError):  # RegistrationError is a ValueError
        sa.deregister(a)


def test_register_overlapping_view_is_refused():
    base = np.zeros(100)
    sa.register(base[:60])
    try:
        with pytest.raises(sa.RegistrationError, match="overlaps"):
            sa.register(base[40:])
        assert not memory.is_registered(base[40:])
    finally:
        sa.deregister(base[:60])


def _gpu_like_pinning(monkeypatch):
    """Page-locking that fails as a GPU does for memory already page-locked (here: any)."""
    calls = []

    def pin(ary, extent, mapped=False):
        calls.append(extent)
        raise RuntimeError("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")

    monkeypatch.setattr(_pinning, "_pin", pin)  # the page-lock registry's
    return calls


def test_memory_allocated_page_locked_is_not_page_locked_again(monkeypatch):
    pinned = sa.pinned_array(16)
    mapped = sa.mapped_array(16)
    smart = sa.SmartArray(np.arange(16.0), pinned=True)
    calls = _gpu_like_pinning(monkeypatch)
    arrays = [pinned, pinned[2:9], mapped, mapped[::2], smart.host()]
    for ary in arrays:
        with sa.register(ary):
            assert memory.is_registered(ary)
        sa.register(ary)
        sa.deregister(ary)  # a no-op: it stays page-locked until it is freed
        with sa.pinned(ary):
            pass
        assert memory.is_registered(ary)
    assert calls == []
    with pytest.raises(RuntimeError, match="ALREADY_REGISTERED"):  # the stand-in does fail
        sa.register(np.zeros(4))


def test_freed_page_locked_allocation_is_forgotten():
    import gc

    a = sa.pinned_array(1024)
    extent = memory._byte_extent(a)
    with memory._registry._lock:
        assert memory._registry._page_locked_at_allocation(extent)
    del a
    gc.collect()
    with memory._registry._lock:
        assert not memory._registry._page_locked_at_allocation(extent)


def test_unpinning_waits_for_the_device_first(monkeypatch):
    # An asynchronous copy from the memory may still be queued: unpinning under it is undefined.
    events = []
    synchronize = cuda.synchronize  # still waits: strict mode runs queued work there
    monkeypatch.setattr(cuda, "synchronize", lambda: (events.append("wait"), synchronize()))
    unpin = _pinning._unpin  # the page-lock registry's
    monkeypatch.setattr(_pinning, "_unpin", lambda pin: (events.append("unpin"), unpin(pin)))
    a, b = np.zeros(8), np.zeros(8)
    sa.register(a, b)
    sa.deregister(a, b)
    assert events == ["wait", "unpin", "unpin"]
    events.clear()
    with sa.pinned(a):
        d = sa.to_device(a, stream=sa.stream())
    assert events == ["wait", "unpin"]
    events.clear()
    sa.register(a)
    with sa.pinned(a):  # registered before: nothing is unpinned, no wait
        pass
    assert events == []
    sa.deregister(a)
    assert d.shape == (8,)


REAL_ALREADY_LOCKED_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import numba.cuda
    from numba.cuda.cudadrv.driver import CudaAPIError, binding
    import smartarray as sa
    from smartarray import memory

    class Context:  # the driver's answer for memory page-locked elsewhere (no driver here)
        code = binding.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED

        def mempin(self, owner, pointer, size, mapped=False):
            raise CudaAPIError(self.code, "cuMemHostRegister")

    numba.cuda.current_context = lambda: Context()
    numba.cuda.synchronize = lambda: None
    a = np.zeros(64)
    with sa.pinned(a):
        pass
    sa.register(a)
    print("registered", memory.is_registered(a))
    sa.deregister(a)  # registered in name only: nothing is unpinned
    Context.code = binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    try:
        sa.register(a)
    except CudaAPIError:
        print("other errors raise")
    print("registered", memory.is_registered(a))
    """
)


def test_memory_page_locked_elsewhere_is_not_an_error_on_the_real_target():
    out = _run_real_target(REAL_ALREADY_LOCKED_SCRIPT)
    assert out.split("\n")[:-1] == ["registered True", "other errors raise", "registered False"]


def test_mapped_block_waits_for_the_device_before_unmapping(monkeypatch):
    events = []
    synchronize = cuda.synchronize  # still waits: strict mode runs queued work there
    monkeypatch.setattr(cuda, "synchronize", lambda: (events.append("wait"), synchronize()))
    a = np.zeros(4)
    with sa.mapped(a) as d_a:
        add_one[1, 4](d_a)
        events.append("launched")
    assert events == ["launched", "wait"]
    with pytest.raises(KeyError), sa.mapped(a):
        raise KeyError("in the block")
    assert events == ["launched", "wait", "wait"]
    np.testing.assert_array_equal(a, np.ones(4))


REAL_MAPPED_BLOCK_SCRIPT = textwrap.dedent(
    """
    import contextlib
    import numpy as np
    import numba.cuda
    import smartarray as sa

    events = []

    @contextlib.contextmanager
    def mapped(*arrays, stream=0):  # numba's: maps on entry, unmaps on exit (no driver here)
        yield arrays[0] if len(arrays) == 1 else list(arrays)
        events.append("unmap")

    numba.cuda.mapped = mapped
    numba.cuda.synchronize = lambda: events.append("wait")
    with sa.mapped(np.zeros(4), np.zeros(2)) as devs:
        events.append(len(devs))
    print(events)
    """
)


def test_mapped_block_waits_before_numba_unmaps_on_the_real_target():
    assert _run_real_target(REAL_MAPPED_BLOCK_SCRIPT).strip() == "[2, 'wait', 'unmap']"


REAL_PAGE_LOCKED_ALLOCATIONS_SCRIPT = textwrap.dedent(
    """
    import contextlib, gc
    import numpy as np
    import numba.cuda
    import numba.cuda.api as api
    from numba.cuda.cudadrv import devices
    import smartarray as sa
    from smartarray import memory

    pins = []

    class Context:  # no driver here: host allocations are bytearrays, page-locking is recorded
        def memhostalloc(self, size, mapped=False, portable=False, wc=False):
            return bytearray(size)

        def mempin(self, owner, pointer, size, mapped=False):
            pins.append(size)
            return object()

    devices._runtime.ensure_context = contextlib.nullcontext
    numba.cuda.current_context = api.current_context = lambda: Context()
    numba.cuda.synchronize = lambda: None
    p = sa.pinned_array(16)
    m = sa.mapped_array(16)
    wc = sa.mapped_array(16, wc=True)
    smart = sa.SmartArray(np.zeros(16), pinned=True)
    for a in (p, p[3:], m, wc[::2], smart.host()):
        with sa.pinned(a):
            pass
        sa.register(a)
        sa.deregister(a)
    print("pinned again", pins)
    sa.register(np.zeros(3))
    print("pinned", pins)
    extent = memory._byte_extent(p)
    del p
    gc.collect()
    with memory._registry._lock:
        print("forgotten", not memory._registry._page_locked_at_allocation(extent))
    """
)


def test_page_locked_allocations_are_not_pinned_again_on_the_real_target():
    out = _run_real_target(REAL_PAGE_LOCKED_ALLOCATIONS_SCRIPT)
    assert out.split("\n")[:-1] == ["pinned again []", "pinned [24]", "forgotten True"], out


def test_register_rejects_non_arrays():
    with pytest.raises(TypeError, match=r"arrays\[0\] must be numpy.ndarray"):
        sa.register([1, 2])


# --- stream --------------------------------------------------------------------------------------


def test_stream_synchronize_and_auto_synchronize():
    s = sa.stream()
    with s.auto_synchronize():
        d = sa.to_device(np.arange(3.0), stream=s)
        out = d.copy_to_host(stream=s)
    np.testing.assert_array_equal(out, np.arange(3.0))
    s.synchronize()


# --- byte-range copies used by SmartArray --------------------------------------------------------


def test_copy_range_moves_and_counts_exactly_the_range():
    host = np.arange(16, dtype=np.uint8)
    dev = sa.device_array(16, dtype=np.uint8)
    dev.copy_to_device(np.zeros(16, dtype=np.uint8))
    before = sa.stats()
    with sa.trace() as t:
        memory.copy_range("h2d", host, dev, 4, 10, reason="test")
    assert [(e.direction, e.nbytes, e.reason) for e in t.events] == [("h2d", 6, "test")]
    assert delta(before).h2d_bytes == 6
    expected = np.zeros(16, dtype=np.uint8)
    expected[4:10] = host[4:10]
    np.testing.assert_array_equal(dev.copy_to_host(), expected)
    back = np.zeros(16, dtype=np.uint8)
    memory.copy_range("d2h", back, dev, 5, 7)
    np.testing.assert_array_equal(back[5:7], [5, 6])
    assert back[:5].sum() == 0 and back[7:].sum() == 0


def test_copy_range_empty_and_bad_direction():
    host = np.zeros(4, dtype=np.uint8)
    dev = sa.device_array(4, dtype=np.uint8)
    before = sa.stats()
    memory.copy_range("h2d", host, dev, 2, 2)
    assert delta(before).count == 0
    with pytest.raises(ValueError, match="direction"):
        memory.copy_range("sideways", host, dev, 0, 1)


MISFITS = {
    "host too short": (lambda: np.zeros(4, np.uint8), lambda: sa.device_array(16, np.uint8)),
    "device too short": (lambda: np.zeros(16, np.uint8), lambda: sa.device_array(4, np.uint8)),
    "host strided": (lambda: np.zeros(32, np.uint8)[::2], lambda: sa.device_array(16, np.uint8)),
    "host not bytes": (lambda: np.zeros(16, np.int32), lambda: sa.device_array(16, np.uint8)),
    "host 2-D": (lambda: np.zeros((4, 4), np.uint8), lambda: sa.device_array(16, np.uint8)),
    "device not bytes": (
        lambda: np.zeros(16, np.uint8),
        lambda: sa.device_array(16, np.float32),
    ),
}


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("misfit", sorted(MISFITS))
def test_copy_range_refuses_buffers_that_do_not_hold_the_range(misfit, direction):
    make_host, make_device = MISFITS[misfit]
    host, dev = make_host(), make_device()
    dev.copy_to_device(np.full(dev.shape, 7, dev.dtype))
    host_before = host.copy()
    before = sa.stats()
    with pytest.raises(ValueError, match="host_bytes|device_bytes"):
        memory.copy_range(direction, host, dev, 0, 16)
    assert delta(before).count == 0  # refused before anything moved
    np.testing.assert_array_equal(host, host_before)
    assert (dev.copy_to_host() == 7).all()


def test_copy_range_refuses_to_download_into_a_read_only_host_buffer():
    host, dev = np.zeros(8, np.uint8), sa.device_array(8, np.uint8)
    host.flags.writeable = False
    before = sa.stats()
    with pytest.raises(ValueError, match="host_bytes must be writable"):
        memory.copy_range("d2h", host, dev, 0, 8)
    assert delta(before).count == 0
    memory.copy_range("h2d", host, dev, 0, 8)  # (an upload only reads it)


def test_copy_range_refuses_a_negative_start():
    host, dev = np.zeros(8, np.uint8), sa.device_array(8, np.uint8)
    with pytest.raises(ValueError, match="start"):
        memory.copy_range("h2d", host, dev, -2, 4)


# --- real GPU only -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_pinned_array_is_page_locked():
    from numba.cuda.cudadrv import driver

    a = sa.pinned_array(1024)
    assert isinstance(a.base, driver.PinnedMemory) or hasattr(a.base, "handle")


@pytest.mark.gpu
def test_gpu_register_page_locks_memory():
    a = np.zeros(1 << 16)
    sa.register(a)
    try:
        entry = memory._registry._pins[memory._byte_extent(a)]
        assert entry is not None and entry.size >= a.nbytes
    finally:
        sa.deregister(a)


@pytest.mark.gpu
def test_gpu_register_of_memory_allocated_page_locked_does_not_fail():
    a = sa.pinned_array(1 << 12)
    m = sa.mapped_array(1 << 12)
    smart = sa.SmartArray(np.zeros(1 << 12), pinned=True)
    with sa.pinned(a, m, smart.host()):
        pass
    sa.register(a[8:])
    sa.deregister(a[8:])
    np.testing.assert_array_equal(sa.to_device(a, stream=sa.stream()).shape, a.shape)


@pytest.mark.gpu
def test_gpu_stream_copies_are_asynchronous_and_ordered():
    n = 1 << 24
    host = sa.pinned_array(n, dtype=np.float32)
    host[:] = 1.0
    s = sa.stream()
    d = sa.to_device(host, stream=s)
    out = sa.pinned_array(n, dtype=np.float32)
    d.copy_to_host(out, stream=s)
    s.synchronize()
    assert out[-1] == 1.0


# --- device_view ---------------------------------------------------------------------------------


def test_device_view_aliases_device_bytes():
    dev = memory.device_array(32, np.uint8)
    view = memory.device_view(dev, 8, (3,), (8,), np.float64)
    assert view.shape == (3,) and view.dtype == np.float64
    host = np.arange(32, dtype=np.uint8)
    memory.copy_range("h2d", host, dev, 0, 32)
    np.testing.assert_array_equal(view.copy_to_host(), host[8:32].view(np.float64))


def test_device_view_rejects_negative_strides_and_overflow():
    dev = memory.device_array(32, np.uint8)
    with pytest.raises(ValueError, match="negative"):
        memory.device_view(dev, 24, (3,), (-8,), np.float64)
    with pytest.raises(ValueError, match="does not fit"):
        memory.device_view(dev, 16, (3,), (8,), np.float64)


def test_deregister_inside_register_block_is_allowed():
    a = np.zeros(8)
    with sa.register(a):
        sa.deregister(a)
    assert not memory.is_registered(a)


def test_to_device_into_existing_is_traced_as_to_device():
    target = sa.device_array(4)
    with sa.trace() as t:
        sa.to_device(np.arange(4.0), to=target)
    assert [(e.direction, e.nbytes, e.reason) for e in t.events] == [("h2d", 32, "to_device")]


def test_element_write_counts_the_value_as_numba_uploads_it():
    d = sa.to_device(np.zeros(10, dtype=np.int32))
    before = sa.stats()
    d[2:8] = 7  # a Python int goes up as one int64, then a kernel broadcasts it
    d[0] = np.int32(1)
    moved = sa.stats() - before
    assert (moved.h2d_count, moved.h2d_bytes) == (2, 8 + 4)
    np.testing.assert_array_equal(d.copy_to_host(), [1, 0, 7, 7, 7, 7, 7, 7, 0, 0])
