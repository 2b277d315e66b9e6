"""Review of several GPUs (issue 29): defects found, each shown on the fake driver.

Each test runs a child process on the fake CUDA driver with two devices (see
``tests/engine/test_devices.py``): the driver runs queued work only when the host waits for it, so a
copy or launch that is not ordered after the work it reads sees the bytes from before.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.test_devices import _run

# Outcomes depend on the fake driver's adversarial order: CI runs them over several seeds.
pytestmark = pytest.mark.seeds


def test_a_fast_path_launch_on_another_device_keeps_the_first_devices_work_ordered() -> None:
    # Two disjoint views, each written on its own device; the second round takes the launch
    # fast path (current on its device only, latest work on "the default stream"). The
    # default stream of device 1 is not device 0's: the host read must still wait for the
    # kernel queued on device 0.
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))
lo, hi = a[:32], a[32:]
with cuda.gpus[0]:
    add_one[1, 32](lo)
with cuda.gpus[1]:
    add_one[1, 32](hi)
with cuda.gpus[0]:
    add_one[1, 32](lo)
with cuda.gpus[1]:
    add_one[1, 32](hi)
    values = a.get("host").tolist()
print(json.dumps({"values": values}))
"""
    )
    assert out["values"] == [2.0] * 64


#: cuda-bindings 13.2.0 to 13.4.1 answer ``cuPointerGetAttribute(DEVICE_ORDINAL, p)`` with
#: ``(CUDA_SUCCESS, 0)`` whatever the driver wrote (``_HelperCUpointer_attribute.pyObj`` reads
#: a field the driver never wrote; NVIDIA/cuda-python#2928): seen on an H100 machine with
#: 13.3.1. This stands in for that binding in the child.
ORDINAL_READS_ZERO = """
from cuda.bindings import driver as _drv
_faithful = _drv.cuPointerGetAttribute
def _reads_zero(attribute, pointer):
    err, value = _faithful(attribute, pointer)
    if attribute == _drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        return err, 0
    return err, value
_drv.cuPointerGetAttribute = _reads_zero
"""


@pytest.mark.parametrize("binding", ["faithful", "DEVICE_ORDINAL reads 0"])
def test_adopting_another_devices_memory_keeps_it_that_devices_copy(binding: str) -> None:
    out = _run(
        (ORDINAL_READS_ZERO if binding != "faithful" else "")
        + """
with cuda.gpus[1]:
    d = cuda.to_device(np.arange(16.0))
with cuda.gpus[0]:
    a = sa.SmartArray(d, copy=False)
    adopted = a.valid_at
    error = None
    try:
        add_one[1, 16](a)
        values = a.get("host").tolist()
    except Exception as exc:
        error, values = repr(exc)[:300], None
print(json.dumps({"adopted": adopted, "error": error, "values": values}))
""",
        peer="0",
    )
    assert out["error"] is None
    assert out["adopted"] == ["gpu:1"]  # (device 0 current: device 1's copy is named)
    assert out["values"] == (np.arange(16.0) + 1).tolist()


def test_a_cuda_view_records_the_consumers_write_on_its_own_device() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(16))
with cuda.gpus[0]:
    add_one[1, 16](a)  # device 0's copy: 1.0
with cuda.gpus[1]:
    view = a.cuda_view()  # device 1's copy made current and shared
    add_one[1, 16](cuda.as_cuda_array(view))  # the consumer writes there: 2.0
with view:  # its exit records the consumer's write again (device 0 is current)
    pass
print(json.dumps({"values": a.get("host").tolist(), "valid": a.valid_at}))
"""
    )
    assert out["values"] == [2.0] * 16
    assert "gpu" not in out["valid"]  # device 0's copy is stale


def test_a_host_read_from_another_device_waits_for_a_dlpack_consumers_default_stream() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(16))
with cuda.gpus[1]:
    view = a.cuda_view()
    capsule = view.__dlpack__(stream=1)  # the consumer works on the legacy default stream
    add_one[1, 16](cuda.as_cuda_array(view))  # its work there
print(json.dumps({"values": a.get("host").tolist()}))  # device 0 current
"""
    )
    assert out["values"] == [1.0] * 16


def test_a_copy_between_peer_devices_enables_peer_access() -> None:
    # CUDA's programming guide ("Peer-to-Peer Memory Copy"): with peer access enabled a copy
    # between the two devices "no longer needs to be staged through the host". The fake
    # driver counts any copy between two devices' memory as a peer copy, staged or not.
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)
with sa.trace() as t, cuda.gpus[1]:
    add_one[1, 64](a)
print(json.dumps({"moved": moved(t), "enabled": sorted(fake.peer_enabled),
                  "values": a.get("host").tolist()}))
"""
    )
    assert out["moved"] == [["d2d", "gpu:0", "gpu:1", 0, 512]]
    assert [1, 0] in out["enabled"]  # device 1 (the copy's target) reads device 0's memory
    assert out["values"] == [2.0] * 64


def test_a_copy_to_device_that_fails_halfway_leaves_the_other_devices_copy_the_current_one():
    out = _run(
        """
from smartarray import memory

@cuda.jit
def touch(x):
    pass

a = sa.SmartArray(np.zeros(16))
with cuda.gpus[0]:
    add_one[1, 16](a)  # 1.0, current on device 0 only
with cuda.gpus[1]:
    touch[1, 1](sa.In(a))  # read there: current on both devices, stale on the host
    src = cuda.to_device(np.full(16, 7.0))
real = memory.device_view

class Halfway:  # numba's copy into device 0's copy, failing after half of it
    def __init__(self, dev):
        self.dev = dev

    def copy_to_device(self, source, stream=0):
        self.dev[:8].copy_to_device(source[:8], stream=stream)
        cuda.synchronize()
        raise RuntimeError("injected: the copy failed halfway")

before = a.valid_at
memory.device_view = lambda *args, **kw: Halfway(real(*args, **kw))
try:
    a.copy_to_device(src)  # device 0 current
    error = None
except Exception as exc:
    error = type(exc).__name__
finally:
    memory.device_view = real
print(json.dumps({"before": before, "error": error, "after": a.valid_at,
                  "values": a.get("host").tolist()}))
"""
    )
    assert out["before"] == ["gpu", "gpu:1"]
    assert out["error"] == "TransferError"
    assert out["after"] == ["gpu:1"]  # device 0's copy may hold part of the new values
    assert out["values"] == [1.0] * 16


def test_a_cuda_view_names_the_device_of_the_copy_it_shares() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(16))
with cuda.gpus[1]:
    view = a.cuda_view()
shared = ordinal(cuda.as_cuda_array(view))
print(json.dumps({"shared": shared, "dlpack": list(view.__dlpack_device__())}))
"""
    )
    assert out["shared"] == 1
    assert out["dlpack"] == [2, 1]  # (kDLCUDA, device 1), whichever device is current


def test_a_write_marked_on_a_device_is_read_from_another_device_after_it_ran() -> None:
    # get, write, mark_changed: on one device the download follows the user's kernel on the
    # default stream (the control, b); with two it must too, whichever device is current.
    out = _run(
        """
a = sa.SmartArray(np.zeros(16))
d = a.gpu(device=1)  # device 0 current
with cuda.gpus[1]:
    add_one[1, 16](d)  # the user's write, on device 1's default stream
a.mark_changed("gpu:1")
b = sa.SmartArray(np.zeros(16))
add_one[1, 16](b.gpu())
b.mark_changed("gpu")
print(json.dumps({"values": a.get("host").tolist(), "control": b.get("host").tolist()}))
"""
    )
    assert out["control"] == [1.0] * 16
    assert out["values"] == [1.0] * 16


@pytest.mark.parametrize("code, stays_peer", [(704, True), (711, False)])
def test_a_peer_access_refused_sends_later_copies_through_the_host(
    code: int, stays_peer: bool
) -> None:
    """``cuCtxEnablePeerAccess`` refused with CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (704:
    what was wanted) keeps the pair peer to peer; any other refusal (711, too many peers)
    makes later copies of the pair go through the host, and no refusal is lost silently as a
    bug would be (every error was swallowed)."""
    out = _run(
        f"""
from numba.cuda.cudadrv import driver as _driver
from smartarray._memory import devices as _devices
def _refuse(self, peer_context, flags=0):
    raise _driver.CudaAPIError({code}, "refused")
_driver.Context.enable_peer_access = _refuse
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)
with sa.trace() as first, cuda.gpus[1]:
    add_one[1, 64](a)
with cuda.gpus[0]:
    add_one[1, 64](a)
with sa.trace() as second, cuda.gpus[1]:
    add_one[1, 64](a)
print(json.dumps({{"first": moved(first), "second": moved(second),
                  "peer": _devices.peer(0, 1), "values": np.asarray(a).tolist()}}))
"""
    )
    assert out["values"] == [4.0] * 64
    assert out["first"] == [["d2d", "gpu:0", "gpu:1", 0, 512]]  # (the driver stages it)
    assert out["peer"] is stays_peer
    if stays_peer:
        assert out["second"] == [["d2d", "gpu:0", "gpu:1", 0, 512]]
    else:
        assert out["second"] == [["d2h", "gpu:0", "host", 0, 512], ["h2d", "host", "gpu:1", 0, 512]]
