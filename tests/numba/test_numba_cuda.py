"""SmartArrays as cuda.jit kernel arguments: exact bytes moved, views, streams, errors.

On a machine without a GPU these run on the CUDA simulator; the real-target typing is checked by
compiling to PTX in a child process (the simulator cannot compile), and GPU-only behaviour is in
tests marked ``gpu``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from tests._kernels import add_one, non_blocking_stream
from tests._targets import real_target_env

SIM = memory.SIMULATOR


@cuda.jit
def fill_with_index(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = i


@cuda.jit
def copy_into(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@cuda.jit
def add_one_2d(x):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        x[i, j] += 1


# A GPU reports a kernel's exception only for a kernel compiled with debug=True.
@cuda.jit(debug=True, opt=False)
def fail_if_negative(x):
    i = cuda.grid(1)
    if i < x.size and x[i] < 0:
        raise ValueError("negative element")


def launch(kernel, *args, n=64, stream=None):
    blocks = (n + 31) // 32
    if stream is None:
        kernel[blocks, 32](*args)
    else:
        kernel[blocks, 32, stream](*args)


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()


def moved() -> sa.TransferStats:
    return sa.stats()


def test_repeated_launches_upload_once_and_download_on_host_read():
    a = sa.SmartArray(np.arange(64.0))
    for _ in range(5):
        launch(add_one, a)
    s = moved()
    assert (s.h2d_count, s.h2d_bytes, s.d2h_count) == (1, 512, 0)
    np.testing.assert_array_equal(np.asarray(a), np.arange(64.0) + 5)
    s = moved()
    assert (s.d2h_count, s.d2h_bytes) == (1, 512)


def test_host_write_between_launches_uploads_only_the_written_bytes():
    a = sa.SmartArray(np.zeros(64, dtype=np.float32))
    launch(add_one, a)
    a[10:13] = 7.0  # 3 elements, no download needed: the write covers them
    before = moved()
    launch(add_one, a)
    s = moved() - before
    assert (s.h2d_count, s.h2d_bytes, s.d2h_count) == (1, 12, 0)
    expected = np.ones(64, dtype=np.float32) + 1
    expected[10:13] = 8.0
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_uninitialised_output_is_never_copied():
    out = sa.SmartArray(shape=64, dtype=np.int64)
    launch(fill_with_index, out)
    assert moved().h2d_count == 0
    np.testing.assert_array_equal(out[:], np.arange(64))
    assert moved().d2h_bytes == 64 * 8


@pytest.mark.parametrize("where", ["host", "gpu"])
def test_kernel_output_stays_on_device_for_the_next_kernel(where):
    src = sa.SmartArray(np.arange(64.0), where=where)
    dst = sa.SmartArray(shape=64)
    launch(copy_into, src, dst)
    launch(add_one, dst)
    s = moved()
    assert s.d2h_count == 0
    assert s.h2d_bytes == (512 if where == "host" else 512)  # construction upload for 'gpu'
    np.testing.assert_array_equal(np.asarray(dst), np.arange(64.0) + 1)


def test_view_argument_moves_and_marks_only_its_interval():
    a = sa.SmartArray(np.arange(100.0))
    view = a[20:40]
    launch(add_one, view)
    s = moved()
    assert (s.h2d_count, s.h2d_bytes) == (1, 160)
    assert a[:20].is_valid("host") and a[40:].is_valid("host")
    assert not a[20:40].is_valid("host")
    before = moved()
    assert a[5] == 5.0  # untouched by the kernel: no download
    assert (moved() - before).count == 0
    expected = np.arange(100.0)
    expected[20:40] += 1
    np.testing.assert_array_equal(np.asarray(a), expected)
    assert (moved() - before).d2h_bytes == 160


def test_strided_and_2d_views_as_kernel_arguments():
    a = sa.SmartArray(np.zeros((8, 8)))
    add_one_2d[(1, 1), (8, 8)](a[::2, 1:])
    add_one_2d[(1, 1), (8, 8)](a.T[1:3])
    expected = np.zeros((8, 8))
    expected[::2, 1:] += 1
    expected.T[1:3] += 1
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_In_records_no_device_change_and_Out_uploads_nothing():
    src = sa.SmartArray(np.arange(64.0))
    dst = sa.SmartArray(np.full(64, -1.0))
    launch(copy_into, sa.In(src), sa.Out(dst))
    s = moved()
    assert (s.h2d_count, s.h2d_bytes) == (1, 512)  # src only: dst is overwritten
    assert src.is_valid("host") and src.is_valid("gpu")
    assert not dst.is_valid("host")
    np.testing.assert_array_equal(np.asarray(dst), np.arange(64.0))


def test_Out_of_a_strided_view_falls_back_to_InOut():
    a = sa.SmartArray(np.arange(16.0))
    launch(fill_with_index, sa.Out(a[::2]), n=8)
    # The gaps between the elements must reach the device unchanged: the bounding interval
    # (15 elements) is uploaded first.
    assert moved().h2d_bytes == 15 * 8
    expected = np.arange(16.0)
    expected[::2] = np.arange(8)
    np.testing.assert_array_equal(np.asarray(a), expected)


def test_hints_accept_plain_ndarrays_and_device_arrays_with_numbas_meaning():
    host = np.arange(32.0)
    dev = sa.device_array(32)
    launch(copy_into, sa.In(host), sa.Out(dev), n=32)
    np.testing.assert_array_equal(dev.copy_to_host(), host)
    inout = np.zeros(32)
    launch(add_one, sa.InOut(inout), n=32)
    np.testing.assert_array_equal(inout, np.ones(32))


def test_eager_refresh_of_a_held_host_array_after_a_launch():
    a = sa.SmartArray(np.zeros(64))
    held = a.host()
    launch(add_one, a)
    before = moved()
    np.testing.assert_array_equal(held, np.ones(64))  # already current: no call needed
    assert (moved() - before).count == 0
    assert moved().d2h_bytes == 512


REC = np.dtype([("x", np.float64), ("y", np.float64)])


@cuda.jit
def add_one_to_x(r):
    i = cuda.grid(1)
    if i < r.size:
        r[i].x += 1


@pytest.mark.parametrize(
    "derive, expected",
    [
        (lambda a: a.host()[2:5], np.ones(3)),
        (lambda a: np.asarray(a).reshape(2, 4), np.ones((2, 4))),
        (lambda a: a.host().reshape(2, 4).T, np.ones((4, 2))),
        (lambda a: np.asarray(a)[::3], np.ones(3)),
        (lambda a: a.host().view(np.int64)[:1].view(np.float64), np.ones(1)),
    ],
    ids=["slice", "reshape of asarray", "transpose", "strided", "view of view"],
)
def test_views_derived_from_a_held_host_array_are_refreshed(derive, expected):
    a = sa.SmartArray(np.zeros(8))
    held = derive(a)  # the array it was derived from is gone at once
    launch(add_one, a, n=8)
    np.testing.assert_array_equal(held, expected)


def test_a_field_of_a_record_export_is_refreshed():
    a = sa.SmartArray(np.zeros(4, REC))
    x = a.host()["x"]
    y = np.asarray(a)["y"]
    launch(add_one_to_x, a, n=4)
    np.testing.assert_array_equal(x, np.ones(4))
    np.testing.assert_array_equal(y, np.zeros(4))


def test_the_array_an_adopted_slice_came_from_is_refreshed():
    x = np.zeros(10)
    b = sa.SmartArray(x[2:6], copy=False)  # the slice object itself is gone at once
    launch(add_one, b, n=4)
    np.testing.assert_array_equal(x, [0, 0, 1, 1, 1, 1, 0, 0, 0, 0])


def test_read_only_export_cannot_be_made_writable():
    a = sa.SmartArray(np.zeros(4))
    v = np.asarray(a)
    with pytest.raises(ValueError, match="WRITEABLE"):
        v.flags.writeable = True
    with pytest.raises(ValueError, match="WRITEABLE"):
        v[1:].flags.writeable = True
    base = np.asarray(v.base)
    assert not base.flags.writeable
    with pytest.raises(ValueError):
        base[0] = 9
    a.gpu()
    launch(add_one, a, n=4)  # nothing was written behind its back
    np.testing.assert_array_equal(v, np.ones(4))


def test_writable_export_stays_a_plain_ndarray():
    a = sa.SmartArray(np.arange(6.0).reshape(2, 3))
    h = a.host()
    assert type(h) is np.ndarray and h.flags.writeable and h.flags.c_contiguous
    h[0, 0] = 5.0
    a.host_changed()
    assert a[0, 0] == 5.0
    assert np.shares_memory(h, a.host())


def test_no_download_without_held_host_arrays():
    a = sa.SmartArray(np.zeros(64))
    view = a.host()
    del view
    launch(add_one, a)
    assert moved().d2h_count == 0


def test_launch_on_a_stream_and_read_back():
    s = sa.stream()
    a = sa.SmartArray(np.zeros(64))
    launch(add_one, a, stream=s)
    launch(add_one, a, stream=s)
    np.testing.assert_array_equal(np.asarray(a), np.full(64, 2.0))
    assert moved().h2d_count == 1 and moved().d2h_count == 1


def test_argument_protocol_records_the_launch_stream():
    # What the real dispatcher does (the simulator always passes stream 0): to_device(retr,
    # stream) before the launch, then the retr callbacks right after it.
    s = sa.stream()
    a = sa.SmartArray(np.zeros(8))
    retr: list = []
    arg = a.to_device(retr, s)
    assert arg is not None and moved().h2d_bytes == 64
    for callback in retr:
        callback()
    assert [entry.stream for entry in a._buf.work.values()] == [s]  # its work, on s
    assert not a.is_valid("host")  # the kernel may have written: the host copy is stale


def test_failed_launch_leaves_validity_as_it_was():
    # A kernel that only reads (In) changes no validity when it fails.
    a = sa.SmartArray(np.array([1.0, -1.0, 2.0]))
    with pytest.raises(ValueError, match="negative"):
        launch(fail_if_negative, sa.In(a), n=3)
    assert a.valid_at == ("host", "gpu")
    np.testing.assert_array_equal(np.asarray(a), [1.0, -1.0, 2.0])


def test_failed_launch_of_a_writing_kernel_records_the_device_write():
    # A kernel that may write (InOut) and fails may have written before failing: the host
    # copy is no longer claimed current (it was before the fix), the values stay right.
    a = sa.SmartArray(np.array([1.0, -1.0, 2.0]))
    with pytest.raises(ValueError, match="negative"):
        launch(fail_if_negative, a, n=3)
    assert a.valid_at == ("gpu",)
    np.testing.assert_array_equal(np.asarray(a), [1.0, -1.0, 2.0])


def test_launches_from_several_threads_on_separate_arrays():
    # The simulator runs one kernel at a time (it refuses concurrent launches), so launches are
    # serialised there; on a GPU they run concurrently.
    launch_lock = threading.Lock() if SIM else None
    arrays = [sa.SmartArray(np.zeros(64)) for _ in range(4)]
    errors: list[BaseException] = []

    def work(arr: sa.SmartArray) -> None:
        try:
            for _ in range(3):
                if launch_lock:
                    with launch_lock:
                        launch(add_one, arr)
                else:
                    launch(add_one, arr)
                arr[0] = arr[0] + 10  # host read and write between launches
        except BaseException as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(arr,)) for arr in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for arr in arrays:
        expected = np.full(64, 3.0)
        expected[0] = 33.0
        np.testing.assert_array_equal(np.asarray(arr), expected)


def test_numba_type_matches_device_arrays():
    for host in (np.zeros(8), np.zeros((4, 4), order="F"), np.zeros((4, 4))[:, ::2]):
        a = sa.SmartArray(host, copy=False)
        dev_type = sa.to_device(np.ascontiguousarray(host) if host.flags.forc else host.copy())
        ty = a._numba_type_
        assert (ty.dtype, ty.ndim) == (dev_type._numba_type_.dtype, dev_type._numba_type_.ndim)
    assert sa.SmartArray(np.zeros((4, 4)))._numba_type_.layout == "C"
    assert sa.SmartArray(np.zeros((4, 4), order="F"))._numba_type_.layout == "F"
    assert sa.SmartArray(np.zeros((4, 4)))[:, ::2]._numba_type_.layout == "A"
    a = sa.SmartArray(np.zeros(4))
    assert a._numba_type_ is a._numba_type_  # cached per instance


def test_unsupported_dtype_is_a_clear_type_error_before_anything_runs():
    a = sa.SmartArray(np.zeros(4, dtype=np.longdouble))
    with pytest.raises(TypeError, match="dtype"):
        launch(add_one, a, n=4)
    assert moved().count == 0


# --- real-target typing without a GPU -------------------------------------------------------

PTX_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda, types
    from numba.cuda.target import CUDATypingContext
    from smartarray._numba.njit import smartarray_type

    def kernel(x, y):
        i = cuda.grid(1)
        if i < y.size:
            part = x[1:]            # slicing a SmartArray gives a plain array
            y[i] = part.size

    compiled = 0
    for dtype in ("f4", "f8", "i4", "c16"):
        for ndim in (1, 2):
            for layout in "CFA":
                t = smartarray_type(np.dtype(dtype), ndim, layout)
                out = smartarray_type(np.dtype("f8"), 1, "C")
                src = kernel if ndim == 1 else (lambda x, y: None)
                cuda.compile_ptx(src, (t, out), cc=(8, 0))
                compiled += 1

    # Slices inside a kernel type as plain arrays.
    def probe(x):
        s = x[1:]
    cres = cuda.compile_ptx(probe, (smartarray_type(np.dtype("f8"), 1, "C"),), cc=(8, 0))

    ctx = CUDATypingContext()
    sa_t = smartarray_type(np.dtype("f8"), 1, "C")
    plain = types.Array(types.float64, 1, "C")
    to_plain = ctx.can_convert(sa_t, plain) is not None
    both_ways = to_plain and ctx.can_convert(plain, sa_t) is not None
    print("compiled", compiled, "convertible", both_ways)
    """
)


def test_kernels_taking_smartarrays_compile_to_ptx_for_a_real_gpu():
    # The real target: neither the simulator nor strict mode (which selects the simulator).
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-c", PTX_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "compiled 24 convertible True" in out.stdout


def _run_real_target(script: str) -> str:
    """Run ``script`` with the real numba.cuda (no simulator, no GPU needed); return stdout."""
    env = real_target_env()
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


PACKED_FIELD_PTX_SCRIPT = textwrap.dedent(
    """
    import re
    import numpy as np
    from numba import cuda
    import smartarray as sa

    def kernel(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = x[i] * 2.0

    packed = np.zeros(4, np.dtype([("n", "i1"), ("x", "f8")]))
    for name, arg in (("field", sa.SmartArray(packed)["x"]), ("plain", sa.SmartArray(np.zeros(4)))):
        ptx, _ = cuda.compile_ptx(kernel, (arg._numba_type_,), cc=(8, 0))
        # 8-byte loads and stores of x (kernel parameters are read with ld.param).
        wide = re.findall(r"\\b(?:ld|st)(?:\\.(?!param)\\w+)*\\.(?:f64|b64|u64)\\b", ptx)
        print(name, len(wide))
    """
)


def test_field_view_of_packed_records_compiles_without_misaligned_8_byte_accesses():
    # 'x' sits at offset 1 with stride 9: an ld.f64 there faults on a GPU ("misaligned
    # address"). Typed unaligned, the elements are loaded and stored byte-wise.
    out = _run_real_target(PACKED_FIELD_PTX_SCRIPT)
    assert "field 0" in out, out
    assert "plain 0" not in out, out  # the check would see 8-byte accesses


def test_kernel_on_a_field_view_of_packed_records_moves_and_writes_only_that_field():
    records = np.zeros(8, np.dtype([("n", "i1"), ("x", "f8")]))
    records["n"] = np.arange(8)
    a = sa.SmartArray(records)
    add_one[1, 8](a["x"])
    np.testing.assert_array_equal(np.asarray(a["x"]), np.ones(8))
    np.testing.assert_array_equal(np.asarray(a["n"]), np.arange(8))


DEVICE_FUNCTION_CAST_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    from numba import cuda, types
    import numba.cuda.dispatcher as dispatcher
    from smartarray._numba.njit import smartarray_type

    class _Device:  # eager device functions ask the current device for its compute capability
        compute_capability = (8, 0)

    dispatcher.get_current_device = lambda: _Device()
    smart = smartarray_type(np.dtype("f8"), 1, "C")
    plain = types.float64[::1]
    for caller, callee in ((plain, smart), (smart, plain)):
        @cuda.jit(types.void(callee), device=True)
        def dev(x):
            x[0] = 1.0

        def kernel(a):
            dev(a)

        ptx, _ = cuda.compile_ptx(kernel, (caller,), cc=(8, 0))
        print("compiled", caller, "->", callee)
    """
)


def test_plain_array_passed_to_a_device_function_compiled_for_smartarrays():
    # The plain-to-SmartArray cast reached numba-cuda's array_to_array, whose assertion fails.
    out = _run_real_target(DEVICE_FUNCTION_CAST_SCRIPT)
    assert out.count("compiled") == 2, out


# --- real GPU only ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_kernel_compiles_once_for_smartarrays_next_to_device_arrays():
    # numba-cuda's dispatcher wants an exact type match while it can compile: SmartArrays get
    # one version of their own, In(SmartArray) a read-only one; each compiled once
    # (tests/numba/test_dispatch.py shows the same without a GPU).
    @cuda.jit
    def inc(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    inc[1, 32](sa.to_device(np.zeros(32)))
    inc[1, 32](sa.to_device(np.zeros(32)))
    assert len(inc.overloads) == 1
    a = sa.SmartArray(np.zeros(32))
    inc[1, 32](a)
    inc[1, 32](sa.SmartArray(np.zeros(32)))
    inc[1, 32](a[:16])
    inc[1, 32](sa.Out(a))
    assert len(inc.overloads) == 2
    np.testing.assert_array_equal(np.asarray(a), np.r_[np.full(16, 3.0), np.full(16, 2.0)])


#: Arrays big enough that a GPU is still busy when the host goes on; on the fake driver, whose
#: kernels run in Python, the queue's seeded order makes any size asynchronous.
BIG, MID = (1 << 20, 1 << 18) if _fakegpu.current() is None else (1 << 10, 1 << 10)


@pytest.mark.gpu
def test_gpu_host_read_waits_for_the_launch_stream_only():
    s = sa.stream()
    a = sa.SmartArray(np.zeros(BIG, dtype=np.float32), pinned=True)
    add_one[BIG // 256, 256, s](a)
    np.testing.assert_array_equal(np.asarray(a)[:4], 1.0)


@pytest.mark.gpu
def test_gpu_eager_refresh_is_ordered_after_a_kernel_on_a_stream():
    s = sa.stream()
    a = sa.SmartArray(np.zeros(MID, dtype=np.float32))
    held = a.host()
    for _ in range(3):
        add_one[MID // 256, 256, s](a)
        # No synchronize here: the refresh was queued after the kernel and waited for.
        assert held[-1] == held[0]
    np.testing.assert_array_equal(held[:8], 3.0)


@pytest.mark.gpu
def test_gpu_launches_on_two_streams_are_ordered_on_one_array():
    s1, s2 = sa.stream(), sa.stream()
    a = sa.SmartArray(np.zeros(MID, dtype=np.float32))
    for i in range(6):
        add_one[MID // 256, 256, s1 if i % 2 else s2](a)
    np.testing.assert_array_equal(np.asarray(a)[::4096], 6.0)


@pytest.mark.seeds
@pytest.mark.gpu
def test_gpu_default_stream_work_is_ordered_before_a_launch_on_a_non_blocking_stream():
    # A non-blocking stream (what CuPy and PyTorch may hand over) does not wait for the legacy
    # default stream: smartarray orders the default stream's kernel before it with an event.
    with non_blocking_stream() as s:
        for _ in range(8):  # the fake driver's seeded order picks another order each time
            a = sa.SmartArray(np.zeros(MID))
            fill_with_index[a.size // 256, 256](a)  # on the default stream
            add_one[a.size // 256, 256, s](a)
            np.testing.assert_array_equal(np.asarray(a), np.arange(a.size) + 1.0)


@pytest.mark.gpu
def test_gpu_host_write_waits_for_an_upload_on_a_non_blocking_launch_stream():
    # The upload from page-locked memory runs when the stream gets to it: a host write waits
    # for the launch's stream, which a wait for the default stream does not cover here.
    with non_blocking_stream() as s:
        for _ in range(8):  # the fake driver's seeded order picks another order each time
            a = sa.SmartArray(np.arange(float(MID)), pinned=True)
            out = sa.SmartArray(np.zeros(MID))
            copy_into[MID // 256, 256, s](sa.In(a), out)
            a[:] = -1.0  # the kernel's input must not change
            np.testing.assert_array_equal(np.asarray(out), np.arange(float(MID)))


@pytest.mark.gpu
def test_gpu_pinned_smartarray_uses_page_locked_host_memory():
    from numba.cuda.cudadrv import driver

    a = sa.SmartArray(np.arange(1024.0), pinned=True)
    base = a._buf.host_bytes
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, driver.PinnedMemory | driver.MappedMemory) or hasattr(base, "handle")
    add_one[4, 256](a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(1024.0) + 1)


@pytest.mark.gpu
def test_gpu_mapped_array_copies_are_host_side_and_not_counted():
    # Mapped memory is host memory: these copies move nothing between host and device (the
    # test counted them as 128 bytes each way before; numba's own methods raised there).
    m = sa.mapped_array(16)
    sa.reset_stats()
    m.copy_to_device(np.arange(16.0))
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(16.0))
    assert sa.stats().count == 0


@pytest.mark.gpu
def test_gpu_kernel_on_views_of_a_mapped_array():
    m = sa.mapped_array(16)
    m[:] = 0.0
    add_one[1, 16](m[4:])
    add_one_2d[(1, 1), (4, 4)](m.reshape(4, 4)[:2])
    cuda.synchronize()
    np.testing.assert_array_equal(m, [1.0] * 4 + [2.0] * 4 + [1.0] * 8)
