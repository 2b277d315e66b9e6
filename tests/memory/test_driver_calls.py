"""The hot paths' driver calls made through cuda-bindings directly: they do what numba-cuda's
wrapped calls do, and a call the driver refuses raises numba-cuda's ``CudaAPIError``.

On the fake driver only: a refusal is provoked with a stream handle nobody made, which a GPU
need not refuse safely.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import cuda

from smartarray import _fakegpu

pytestmark = pytest.mark.skipif(
    _fakegpu.current() is None, reason="runs on the fake CUDA driver (SMARTARRAY_FAKE_GPU=1)"
)

NOBODYS_STREAM = 0x7FFF0001  # a handle the driver never handed out


def test_context_of_thread_is_the_current_context_or_zero():
    from smartarray._memory import driver_calls

    context = cuda.current_context()
    assert driver_calls.context_of_thread() == int(context.handle)
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(driver_calls.context_of_thread()))
    thread.start()
    thread.join()
    assert seen == [0]  # a new thread has no current context


@pytest.mark.parametrize("stream", [0, "stream"])
def test_copies_move_the_bytes_on_either_kind_of_stream(stream):
    from numba.cuda.cudadrv import driver

    from smartarray._memory import driver_calls

    s = cuda.stream() if stream == "stream" else None
    handle = int(s.handle) if s is not None else 0
    host = np.arange(16, dtype=np.uint8)
    dev = cuda.device_array(16, np.uint8)
    driver_calls.memcpy_htod(driver.device_pointer(dev), host.ctypes.data, 16, handle)
    back = np.zeros(16, np.uint8)
    driver_calls.memcpy_dtoh(back.ctypes.data, driver.device_pointer(dev), 16, handle)
    if s is not None:
        s.synchronize()
    np.testing.assert_array_equal(back, host)


def test_a_refused_call_raises_numba_cudas_error_naming_it():
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.driver import CudaAPIError

    from smartarray._memory import driver_calls

    host = np.zeros(8, np.uint8)
    dev = cuda.device_array(8, np.uint8)
    with pytest.raises(CudaAPIError, match="cuMemcpyHtoDAsync"):
        driver_calls.memcpy_htod(driver.device_pointer(dev), host.ctypes.data, 8, NOBODYS_STREAM)
    with pytest.raises(CudaAPIError, match="cuMemcpyDtoHAsync"):
        driver_calls.memcpy_dtoh(host.ctypes.data, driver.device_pointer(dev), 8, NOBODYS_STREAM)
    with pytest.raises(CudaAPIError, match="cuEventRecord"):
        driver_calls.event_record(cuda.event(timing=False), NOBODYS_STREAM)


def test_an_event_recorded_through_the_binding_waits_for_the_work_before_it():
    from smartarray._memory import streams

    s = cuda.stream()
    host = cuda.pinned_array(1 << 12, np.uint8)
    host[:] = 7
    dev = cuda.device_array(1 << 12, np.uint8)
    dev.copy_to_device(host, stream=s)
    event = cuda.event(timing=False)
    streams.record(event, s)
    assert not event.query()  # (the fake driver runs queued work at a wait: the copy waits)
    event.synchronize()
    assert event.query()
    np.testing.assert_array_equal(dev.copy_to_host(), host)
