"""Interoperability: the CUDA Array Interface, DLPack, foreign device arrays, streams.

Each direction with numba's own consumers and producers (device arrays, kernels taking what
``as_cuda_array`` returns), NumPy's ``from_dlpack``, and a stand-in that speaks the CUDA Array
Interface as CuPy's ndarray does; the bytes each path moves are checked (device to device is
``d2d``, never ``d2h`` + ``h2d``). CuPy and PyTorch run in the ``gpu``-marked tests.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from smartarray import memory
from tests._kernels import add_one, non_blocking_stream

N = 6


@cuda.jit
def copy_into(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


def launch(kernel, *args):
    kernel[1, 32](*args)


def pointer(dev) -> int:
    """The device address of a device array (simulated device memory is host memory)."""
    if memory.SIMULATOR:
        return int(dev._ary.__array_interface__["data"][0])
    return int(dev.device_ctypes_pointer.value)


class CupyLike:
    """Speaks the CUDA Array Interface as CuPy's ndarray does (version 3, ``descr``, ``stream``).

    Its memory is numba device memory it owns; ``owned()`` reads it back (a counted d2h).
    """

    def __init__(self, host: np.ndarray, readonly: bool = False) -> None:
        self._mem = cuda.to_device(host)  # numba's own, uncounted
        self._host = np.array(host)
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self) -> dict:
        dt = self._host.dtype
        return {
            "shape": self._host.shape,
            "typestr": dt.str,
            "descr": [("", dt.str)],
            "strides": None,
            "data": (pointer(self._mem), self.readonly),
            "version": 3,
            "stream": None,
        }

    def values(self) -> np.ndarray:
        return self._mem.copy_to_host()


def moved() -> dict[str, int]:
    s = sa.stats()
    return {"h2d": s.h2d_bytes, "d2h": s.d2h_bytes, "d2d": s.d2d_bytes}


@pytest.fixture(autouse=True)
def _fresh_stats():
    sa.reset_stats()
    yield


# -- export: the CUDA Array Interface ------------------------------------------------------


def test_interface_makes_device_current_and_records_a_write():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    desc = a.__cuda_array_interface__
    assert moved() == {"h2d": 8 * N, "d2h": 0, "d2d": 0}
    assert desc["version"] == 3 and desc["shape"] == (N,) and desc["typestr"] == "<f8"
    assert desc["strides"] is None
    # The upload may still be in flight on a GPU (from pageable memory the copy returns once
    # staged): the consumer orders after the legacy default stream. The simulator waits here.
    assert desc["stream"] == (None if memory.SIMULATOR else 1)
    assert desc["data"] == (pointer(a.get("gpu")), False)
    assert a.valid_at == ("gpu",)  # the consumer may write: conservative
    sa.reset_stats()
    again = a.__cuda_array_interface__  # already current: nothing moves
    # (get('gpu') above waited for the upload: no stream to order after any more)
    assert {**again, "stream": None} == {**desc, "stream": None}
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}


def test_kernel_writing_through_as_cuda_array_is_seen_on_the_host():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    d = sa.as_cuda_array(a)
    launch(add_one, d)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    assert moved() == {"h2d": 8 * N, "d2h": 8 * N, "d2d": 0}


def test_interface_of_a_strided_view_describes_its_strides():
    a = sa.SmartArray(np.arange(12, dtype=np.int32).reshape(3, 4))
    col = a[:, 1]
    desc = col.__cuda_array_interface__
    assert desc["shape"] == (3,) and desc["strides"] == (16,)
    assert desc["data"][0] == pointer(a.get("gpu")) + 4
    view = sa.as_cuda_array(col)
    launch(add_one, view)
    np.testing.assert_array_equal(a.host()[:, 1], [2, 6, 10])
    np.testing.assert_array_equal(a.host()[:, 0], [0, 4, 8])


def test_read_only_view_records_nothing():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    v = a.cuda_view(intent="in")
    assert v.__cuda_array_interface__["data"][1] is True
    assert a.valid_at == ("host", "gpu")
    out = sa.SmartArray(np.zeros(N))
    launch(copy_into, sa.as_cuda_array(v), out)
    np.testing.assert_array_equal(out.host(), np.arange(N))
    assert a.valid_at == ("host", "gpu")  # the host copy was not made stale
    sa.reset_stats()
    a.host()
    assert moved()["d2h"] == 0


def test_inout_view_records_the_write_on_exit_for_held_host_arrays():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    held = a.get("host")  # a host array the user keeps
    with a.cuda_view() as v:
        launch(add_one, sa.as_cuda_array(v))
    np.testing.assert_array_equal(held, np.arange(N) + 1.0)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)


def test_inout_view_records_the_write_even_when_the_consumer_fails():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    held = a.get("host")
    with pytest.raises(RuntimeError, match="consumer"), a.cuda_view() as v:
        launch(add_one, sa.as_cuda_array(v))
        raise RuntimeError("consumer failed after writing")
    np.testing.assert_array_equal(held, np.arange(N) + 1.0)


def test_cuda_view_refuses_an_unknown_intent_moving_nothing():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    with pytest.raises(ValueError, match="intent"):
        a.cuda_view(intent="sideways")
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("host",)


def test_negative_strides_are_refused_before_anything_moves():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    with pytest.raises(ValueError, match="negative strides"):
        _ = a[::-1].__cuda_array_interface__
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}


# -- primitives -------------------------------------------------------------------------------


def test_is_cuda_array_moves_nothing():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    assert sa.is_cuda_array(a)
    assert a.valid_at == ("host",) and moved()["h2d"] == 0
    assert sa.is_cuda_array(sa.to_device(np.arange(3)))
    assert sa.is_cuda_array(cuda.to_device(np.arange(3)))
    assert sa.is_cuda_array(CupyLike(np.arange(3)))
    assert not sa.is_cuda_array(np.arange(3))
    assert not sa.is_cuda_array([1, 2])


def test_as_cuda_array_views_foreign_memory_and_counts_its_copies():
    stand = CupyLike(np.arange(N, dtype=np.float32))
    d = sa.as_cuda_array(stand)
    assert pointer(d) == stand.__cuda_array_interface__["data"][0]
    launch(add_one, d)  # writes the stand-in's memory: a view, no copy
    np.testing.assert_array_equal(stand.values(), np.arange(N) + 1.0)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(N) + 1.0)
    assert moved()["d2h"] == 4 * N  # the view's copies are counted


def test_as_cuda_array_keeps_its_owner_alive():
    stand = CupyLike(np.arange(N, dtype=np.float64))
    ref = weakref.ref(stand)
    d = sa.as_cuda_array(stand)
    del stand
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(N))


def test_as_cuda_array_refuses_what_has_no_interface():
    with pytest.raises(TypeError, match="cuda array interface"):
        sa.as_cuda_array(np.arange(3))


# -- import: device objects -------------------------------------------------------------------


def test_from_a_numba_device_array_copies_device_to_device():
    d = cuda.to_device(np.arange(N, dtype=np.float64))
    for where in ("host", "gpu"):
        sa.reset_stats()
        a = sa.SmartArray(d, where=where)
        assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
        assert a.valid_at == ("gpu",)
        launch(add_one, a)
        np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
        np.testing.assert_array_equal(d.copy_to_host(), np.arange(N))  # a copy


def test_from_a_counted_device_array_and_a_2d_fortran_one():
    d = sa.to_device(np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    sa.reset_stats()
    a = sa.SmartArray(d)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 96}
    assert a.flags.f_contiguous
    np.testing.assert_array_equal(a.host(), np.arange(12.0).reshape(3, 4))


def test_from_the_cupy_like_stand_in_copies_device_to_device():
    stand = CupyLike(np.arange(N, dtype=np.int64))
    a = sa.SmartArray(stand, name="imported")
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
    assert a.name == "imported" and a.valid_at == ("gpu",)
    launch(add_one, a)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1)
    np.testing.assert_array_equal(stand.values(), np.arange(N))


def test_copy_false_adopts_the_foreign_memory_and_keeps_its_owner_alive():
    stand = CupyLike(np.arange(N, dtype=np.float64))
    ref = weakref.ref(stand)
    a = sa.SmartArray(stand, copy=False)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("gpu",)
    launch(add_one, a)
    np.testing.assert_array_equal(stand.values(), np.arange(N) + 1.0)  # the same memory
    del stand
    gc.collect()
    assert ref() is not None  # held by the SmartArray
    a[0] = 100.0
    launch(add_one, a)
    np.testing.assert_array_equal(a.host(), [101.0, 3, 4, 5, 6, 7])
    np.testing.assert_array_equal(ref().values(), [101.0, 3, 4, 5, 6, 7])


def test_copy_false_adopts_a_numba_device_array():
    d = cuda.to_device(np.zeros(N))
    a = sa.SmartArray(d, copy=False)
    a[:] = 5.0
    launch(add_one, a)
    np.testing.assert_array_equal(d.copy_to_host(), np.full(N, 6.0))


def test_bad_device_input_is_refused_before_anything_moves():
    stand = CupyLike(np.arange(N, dtype=np.float64), readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        sa.SmartArray(stand, copy=False)
    with pytest.raises(TypeError, match="dtype"):
        sa.SmartArray(stand, dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        sa.SmartArray(stand, shape=(N + 1,))
    strided = cuda.to_device(np.arange(12.0).reshape(3, 4))[:, 1]
    with pytest.raises(ValueError, match="contiguous"):
        sa.SmartArray(strided)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    a = sa.SmartArray(stand)  # a read-only source is fine to copy
    np.testing.assert_array_equal(a.host(), np.arange(N))


def test_transfer_guard_sees_the_device_copy():
    d = cuda.to_device(np.arange(N, dtype=np.float64))
    with (
        sa.transfer_guard("disallow_explicit", "d2d"),
        pytest.raises(sa.TransferGuardError, match="d2d"),
    ):
        sa.SmartArray(d)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}


def test_copy_of_device_data_copies_device_to_device():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    launch(add_one, a)
    sa.reset_stats()
    b = a.copy()
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
    launch(add_one, b)
    np.testing.assert_array_equal(b.host(), np.arange(N) + 2.0)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_copy_module_of_device_data_copies_device_to_device(how):
    import copy

    a = sa.SmartArray(np.asfortranarray(np.arange(12.0).reshape(3, 4)), where="gpu")
    launch(add_one, a.reshape(-1, order="F"))
    sa.reset_stats()
    b = getattr(copy, how)(a)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 96}
    assert b.valid_at == ("gpu",) and b._buf is not a._buf
    assert b.flags.f_contiguous  # the layout is kept, as ndarray.__copy__ keeps it
    launch(add_one, b.reshape(-1, order="F"))
    np.testing.assert_array_equal(b.host(), np.arange(12.0).reshape(3, 4) + 2.0)
    np.testing.assert_array_equal(a.host(), np.arange(12.0).reshape(3, 4) + 1.0)


def test_copy_module_of_host_data_moves_nothing():
    import copy

    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    for b in (copy.copy(a), copy.deepcopy(a)):
        assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
        b[0] = -1
        assert a.host()[0] == 0


def test_from_a_read_only_cuda_view_copies_device_to_device():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    v = a.cuda_view("in")
    sa.reset_stats()
    b = sa.SmartArray(v)
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
    assert a.valid_at == ("host", "gpu")
    np.testing.assert_array_equal(b.host(), np.arange(N))


def test_copy_of_host_data_moves_nothing():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    b = a.copy()
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    b[0] = -1
    assert a.host()[0] == 0


# -- DLPack -----------------------------------------------------------------------------------


def test_numpy_from_dlpack_gets_the_host_copy_current_and_records_a_host_write():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    launch(add_one, a)
    sa.reset_stats()
    h = np.from_dlpack(a)
    assert moved() == {"h2d": 0, "d2h": 8 * N, "d2d": 0}
    np.testing.assert_array_equal(h, np.arange(N) + 1.0)
    assert a.valid_at == ("host",)  # the consumer may write
    h[0] = 50.0  # NumPy writes through the shared memory
    launch(add_one, a)
    assert a.host()[0] == 51.0


def test_dlpack_copy_is_a_snapshot():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    h = np.from_dlpack(a, copy=True)
    assert a.valid_at == ("host", "gpu")
    h[0] = 50.0
    assert a.host()[0] == 0.0


def test_dlpack_device_and_cuda_requests():
    # A CUDA request is served since the device export landed (tests/interop/test_dlpack.py); this
    # test asserted the BufferError that stood for it. What stays: the device is the CPU, and
    # bad requests move nothing.
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    assert a.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match="not 7"):
        a.__dlpack__(dl_device=(7, 0))
    with pytest.raises(ValueError, match="dl_device"):
        a.__dlpack__(dl_device="cuda")
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}
    assert a.valid_at == ("host",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"copy": "yes"},
        {"copy": "no"},
        {"dl_device": (1, 7)},
        {"dl_device": (1, 7), "copy": True},
        {"max_version": "1.0"},
        {"max_version": (1, 0), "copy": "true"},
    ],
)
def test_a_bad_host_export_request_fails_as_numpy_fails_and_moves_nothing(kwargs):
    # The host export is NumPy's ndarray.__dlpack__ of the host copy: the same errors, raised
    # before anything moves (copy='yes' was taken for a snapshot, (1, 7) for CPU 0).
    with pytest.raises(Exception) as numpy_error:
        np.arange(N, dtype=np.float64).__dlpack__(**kwargs)
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    d = a.gpu()
    a.gpu_changed()
    with pytest.raises(type(numpy_error.value)) as error:
        a.__dlpack__(**kwargs)
    assert str(error.value) == str(numpy_error.value)
    assert moved()["d2h"] == 0
    assert a.valid_at == ("gpu",)
    del d


def test_from_an_object_that_speaks_dlpack_only():
    class DLPackOnly:
        def __init__(self, ary):
            self._ary = ary

        def __dlpack__(self, **kwargs):
            return self._ary.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (1, 0)

    a = sa.SmartArray(DLPackOnly(np.arange(4.0)))
    np.testing.assert_array_equal(a.host(), np.arange(4.0))

    class CudaDLPack(DLPackOnly):
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        sa.SmartArray(CudaDLPack(np.arange(4.0)))


def test_dlpack_round_trip_through_another_smartarray():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    b = sa.SmartArray(np.from_dlpack(a), copy=False)  # shares a's host memory
    b[0] = 9.0
    assert a.host()[0] == 9.0


# -- streams ----------------------------------------------------------------------------------


class ForeignStream:
    """A stand-in for CuPy's / PyTorch's streams: ``synchronize()``, ``__cuda_stream__``."""

    def __init__(self, handle: int) -> None:
        self.handle_value = handle

    def synchronize(self) -> None:
        pass

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle_value)


def test_foreign_streams_become_numba_external_streams(monkeypatch):
    made = []

    def external_stream(ptr):
        made.append(ptr)
        return ("external", ptr)

    from smartarray._platform import cuda_simulator as _simulator

    monkeypatch.setattr(_simulator, "SIMULATOR", False)  # the real target's conversion
    monkeypatch.setattr(memory.cuda, "external_stream", external_stream, raising=False)
    assert memory._check_stream(ForeignStream(0x1234)) == ("external", 0x1234)

    class TorchLike:
        cuda_stream = 0x99

        def synchronize(self):
            pass

    assert memory._check_stream(TorchLike()) == ("external", 0x99)
    assert made == [0x1234, 0x99]


def test_foreign_stream_is_accepted_by_copies():
    a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
    out = a.copy_to_host(stream=ForeignStream(7))
    np.testing.assert_array_equal(out, np.arange(N))


# -- with a GPU: CuPy and PyTorch -------------------------------------------------------------


@pytest.mark.seeds
@pytest.mark.gpu
def test_gpu_interface_stream_after_a_launch_on_a_stream_orders_the_consumer_after_it():
    """After a launch on a (non-blocking) stream of the user's, the interface names the legacy
    default stream (1), made to wait for the launch's event on the device: the user's stream
    may be destroyed before the consumer runs, and a consumer ordered after stream 1 sees the
    kernel's writes (a non-blocking stream is not ordered before the legacy stream by CUDA)."""
    with non_blocking_stream() as s:
        for trial in range(8):  # the fake driver's seeded order picks another order each time
            a = sa.SmartArray(np.zeros(N))
            a.gpu()
            for _ in range(3):
                add_one[1, 32, s](a)
            iface = a.__cuda_array_interface__  # no host wait
            assert iface["stream"] == 1
            d = cuda.from_cuda_array_interface(iface, owner=a, sync=False)
            np.testing.assert_array_equal(d.copy_to_host(), np.full(N, 3.0), err_msg=str(trial))


@pytest.mark.gpu
def test_gpu_interface_after_a_dlpack_consumer_names_its_stream():
    """A DLPack consumer works on the legacy default stream from its export on: a later
    interface names that stream (never destroyed), so its consumer orders after the first."""
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    a.gpu()
    capsule = a.__dlpack__(stream=1, dl_device=(2, 0))  # kDLCUDA, device 0
    assert a.__cuda_array_interface__["stream"] == 1
    del capsule


@pytest.mark.gpu
def test_numba_as_cuda_array_consumes_a_smartarray():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    d = cuda.as_cuda_array(a)
    add_one[1, 32](d)
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)


@pytest.mark.gpu
def test_cupy_both_ways():
    cp = pytest.importorskip("cupy")
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    x = cp.asarray(a)  # shares the device copy
    x += 1
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    sa.reset_stats()
    b = sa.SmartArray(cp.arange(N, dtype=cp.float64))
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 8 * N}
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        c = sa.SmartArray(cp.ones(N), copy=False)
    np.testing.assert_array_equal(c.copy_to_host(stream=cuda.external_stream(s.ptr)), np.ones(N))
    if hasattr(s, "__cuda_stream__"):
        np.testing.assert_array_equal(c.copy_to_host(stream=s), np.ones(N))
    np.testing.assert_array_equal(b.host(), np.arange(N))


@pytest.mark.gpu
def test_pytorch_both_ways():
    torch = pytest.importorskip("torch")
    a = sa.SmartArray(np.arange(N, dtype=np.float32))
    t = torch.as_tensor(a, device="cuda")
    t += 1
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.host(), np.arange(N) + 1.0)
    sa.reset_stats()
    b = sa.SmartArray(torch.arange(N, dtype=torch.float32, device="cuda"))
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 4 * N}
    np.testing.assert_array_equal(b.host(), np.arange(N))
    h = torch.from_dlpack(a)  # a host consumer
    assert h.device.type == "cpu"


@pytest.mark.strict_mode
def test_copy_of_device_data_waits_for_pending_work_on_another_stream():
    from smartarray.testing import strict

    # Per-thread default stream: nothing orders the copy (on the default stream) after the
    # kernel on ``s`` but an event.
    with strict(seed=2, per_thread_default_stream=True):
        a = sa.SmartArray(np.arange(N, dtype=np.float64), where="gpu")
        s = cuda.stream()
        add_one[1, 32, s](a)  # queued on s
        b = a.copy()  # device to device
        np.testing.assert_array_equal(b.host(), np.arange(N) + 1.0)


# -- numba-cuda's own In / Out / InOut around a SmartArray -----------------------------------


@pytest.mark.parametrize("hint", ["In", "Out", "InOut"])
def test_numba_cudas_own_hints_take_the_device_copy_not_the_host_one(hint):
    """numba-cuda 0.30's ``In``/``Out``/``InOut`` hand a non-ndarray to
    ``devicearray._to_strided_memory_view``, which tries ``__dlpack__`` first: SmartArray's
    host DLPack export gave the kernel the host pointer (an illegal address on a GPU). Run
    numba-cuda's real hint code (no simulator); cuda.core's ``StridedMemoryView`` is replaced by
    a stand-in (its device path needs a driver), which says which protocol was used."""
    import subprocess
    import sys

    from _targets import real_target_env

    code = (
        "import numpy as np\n"
        "from numba.cuda import args\n"
        "from numba.cuda.cudadrv import devicearray\n"
        "import smartarray as sa\n"
        "from smartarray._platform import cuda_simulator as _simulator\n"
        "assert not _simulator.SIMULATOR\n"
        "used = []\n"
        "class StandIn:\n"
        "    @classmethod\n"
        "    def from_dlpack(cls, obj, stream_ptr=None):\n"
        "        used.append('dlpack')\n"
        "        return 'host view'\n"
        "    @classmethod\n"
        "    def from_cuda_array_interface(cls, obj, stream_ptr=None):\n"
        "        used.append('cuda_array_interface')\n"
        "        return 'device view'\n"
        "devicearray.StridedMemoryView = StandIn\n"
        "desc = {'shape': (4,), 'typestr': '<f8', 'data': (4096, False), 'version': 3,\n"
        "        'strides': None, 'stream': None}\n"
        "sa.SmartArray.__cuda_array_interface__ = property(lambda self: desc)  # needs a GPU\n"
        "a = sa.SmartArray(np.arange(4.0))\n"
        f"out = args.{hint}(a).to_device([], 0)\n"
        "assert used == ['cuda_array_interface'], used\n"
        "assert out == 'device view', out\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=real_target_env(), timeout=300)


@pytest.mark.gpu
@pytest.mark.parametrize("hint", ["In", "InOut", "Out"])
def test_numba_cudas_own_hints_run_a_kernel_on_the_device_copy(hint):
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    h = a.host()  # held: shows the kernel's writes once the kernel is done
    dst = sa.SmartArray(np.zeros(N))
    if hint == "Out":
        copy_into[1, 32](sa.In(a), cuda.Out(dst))
        cuda.synchronize()
        np.testing.assert_array_equal(np.asarray(dst), np.arange(N, dtype=np.float64))
        return
    wrap = getattr(cuda, hint)
    copy_into[1, 32](wrap(a), dst)  # the kernel reads the device copy (not the host pointer)
    cuda.synchronize()
    np.testing.assert_array_equal(np.asarray(dst), np.arange(N, dtype=np.float64))
    if hint == "InOut":
        add_one[1, 32](cuda.InOut(a))
        cuda.synchronize()
        # numba's InOut takes the interface (an export: no callback tells smartarray when the
        # kernel is done), so the held array is refreshed at the array's next host access.
        np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1.0)
        np.testing.assert_array_equal(h, np.arange(N) + 1.0)


# -- exports while a host array is held ------------------------------------------------------


def _consumer_adds_one(a):
    """A CUDA consumer of the array's interface writing on the device (as CuPy would)."""
    add_one[1, 32](sa.as_cuda_array(a))  # a view of the exported memory (no copy)
    cuda.synchronize()  # the consumer's work is done before the host reads


@pytest.mark.parametrize("how", ["interface", "cuda_view"])
def test_export_with_a_held_host_array_leaves_the_host_stale_until_the_consumer_wrote(how):
    """Exporting the device copy refreshed held host arrays at export time, before the
    consumer wrote, and marked them current: the next host read returned old values."""
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    h = a.host()  # held by the user
    exported = a if how == "interface" else a.cuda_view()
    _consumer_adds_one(exported)
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1.0)  # the consumer's write
    np.testing.assert_array_equal(h, np.arange(N) + 1.0)  # refreshed by that host access
    assert a.valid_at == ("host", "gpu")


def test_with_cuda_view_refreshes_held_host_arrays_at_exit():
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    h = a.host()
    with a.cuda_view() as v:
        _consumer_adds_one(v)
    np.testing.assert_array_equal(h, np.arange(N) + 1.0)  # no host access needed
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1.0)


# -- np.from_dlpack: a host consumer writes without telling ----------------------------------


@pytest.mark.parametrize("view", [False, True])
def test_writes_through_np_from_dlpack_after_a_kernel_are_not_lost(view):
    """DLPack has no way to say "I wrote": the host write was recorded only at export, so a
    write through ``h`` after a kernel (which refreshed ``h``) was lost by the next launch."""
    a = sa.SmartArray(np.zeros(N))
    h = np.from_dlpack(a[1:] if view else a)
    launch(add_one, a)
    np.testing.assert_array_equal(h, np.ones(N - 1 if view else N))  # refreshed
    h[0] = 100.0  # the consumer writes, and tells nobody
    launch(add_one, a)
    expected = np.full(N, 2.0)
    expected[1 if view else 0] = 101.0
    np.testing.assert_array_equal(np.asarray(a), expected)
    np.testing.assert_array_equal(h, expected[1:] if view else expected)
    del h
    gc.collect()
    launch(add_one, a)  # uploads what the host holds, once
    sa.reset_stats()
    launch(add_one, a)  # the export is gone: nothing moves any more
    assert moved() == {"h2d": 0, "d2h": 0, "d2d": 0}


# -- a.copy() under a budget, and of data partly current on the host --------------------------


def _copy_by(how, a):
    import copy

    return a.copy() if how == "method" else getattr(copy, how)(a)


@pytest.mark.parametrize("how", ["method", "copy", "deepcopy"])
def test_copy_of_device_only_data_under_a_budget_that_holds_only_it(how):
    """The copy pinned its own source (through a get('gpu') hand-out) and then could not
    make room for its device copy: DeviceMemoryError blaming a get('gpu') never made."""
    from smartarray._engine import residency as _residency

    gc.collect()
    with _residency._lock:  # other tests' copies that may go: gone, so the budget is exact
        _residency._evict(1 << 62, None, "budget")
    a = sa.SmartArray(np.zeros(N), name="source")
    launch(add_one, a)
    a.host()  # current on both copies ...
    launch(add_one, a)  # ... then on the device only again
    assert a.valid_at == ("gpu",)
    others = sum(r.nbytes for r in sa.device_budget().resident if r.kept and r.name != a.name)
    sa.set_device_budget(others + a.nbytes)  # room for one device copy
    try:
        b = _copy_by(how, a)
        np.testing.assert_array_equal(np.asarray(b), np.full(N, 2.0))
        np.testing.assert_array_equal(np.asarray(a), np.full(N, 2.0))
        b[0] = -1.0
        assert a[0] == 2.0
    finally:
        sa.set_device_budget(None)


@pytest.mark.parametrize("how", ["method", "copy", "deepcopy"])
def test_copy_of_data_mostly_current_on_the_host_moves_only_the_device_only_bytes(how):
    """The copy went device to device (all bytes) and the next host read downloaded all of
    them: each byte should come from where it is current."""
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    launch(add_one, a)
    a.host()  # current on both copies
    launch(add_one, a[1:3])  # two elements current on the device only
    sa.reset_stats()
    b = _copy_by(how, a)
    expected = np.arange(N, dtype=np.float64) + 1
    expected[1:3] += 1
    np.testing.assert_array_equal(np.asarray(b), expected)
    assert moved() == {"h2d": 0, "d2h": 16, "d2d": 0}


@pytest.mark.gpu
def test_cupy_writes_after_an_export_with_a_held_host_array():
    """An export while a host array is held, on hardware: the export leaves held host arrays
    stale until the consumer wrote; the ``with`` form refreshes them at exit, after a
    non-blocking consumer stream."""
    cp = pytest.importorskip("cupy")
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    h = a.host()
    x = cp.asarray(a)  # through __cuda_array_interface__
    x += 1
    cp.cuda.Device().synchronize()  # the consumer's work is done before the host reads
    np.testing.assert_array_equal(np.asarray(a), np.arange(N) + 1.0)
    np.testing.assert_array_equal(h, np.arange(N) + 1.0)
    s = cp.cuda.Stream(non_blocking=True)
    with a.cuda_view() as v, s:
        y = cp.asarray(v)
        y *= 2  # queued on a non-blocking stream, not waited for here
    np.testing.assert_array_equal(h, (np.arange(N) + 1.0) * 2)  # refreshed after it
    cap = a.__dlpack__(dl_device=(2, 0), stream=s.ptr, max_version=(1, 0))
    z = cp.from_dlpack(cap)
    with s:
        z += 1
    s.synchronize()
    np.testing.assert_array_equal(np.asarray(a), (np.arange(N) + 1.0) * 2 + 1)
    np.testing.assert_array_equal(h, (np.arange(N) + 1.0) * 2 + 1)


@cuda.jit
def add_hundred(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 100


@pytest.mark.seeds
@pytest.mark.gpu
def test_gpu_a_write_on_a_non_blocking_stream_does_not_reach_a_device_copy_made_before():
    """``a.copy()`` of data current on the device only copies device to device on the legacy
    default stream, and CUDA may return with the copy still queued there; a kernel writing
    ``a`` next on a non-blocking stream is not ordered after it by CUDA, so the copy must be
    recorded on ``a`` too. (On the fake driver the kernel runs first when nothing orders it.)"""
    with non_blocking_stream() as s:
        for trial in range(4):
            a = sa.SmartArray(np.zeros(N))
            launch(add_one, a)  # current on the device only
            b = a.copy()
            add_hundred[1, 32, s](a)
            np.testing.assert_array_equal(a.host(), np.full(N, 101.0), err_msg=str(trial))
            np.testing.assert_array_equal(b.host(), np.ones(N), err_msg=str(trial))
