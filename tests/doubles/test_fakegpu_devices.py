"""Several devices on the fake CUDA driver, with peer access.

``SMARTARRAY_FAKE_GPU_DEVICES=N`` gives N devices, each with a context, memory, streams and
legacy default stream of its own; ``SMARTARRAY_FAKE_GPU_PEER`` says which devices may access
each other's memory. Each test runs a child on the fake driver (the settings are read when it
loads) through :func:`tests.doubles.test_fakegpu.run_fake`.
"""

from __future__ import annotations

import itertools
import os

import pytest

from tests.doubles.test_fakegpu import run_fake

ADD_ONE = """
from cuda.bindings import driver as drv
from smartarray import _fakegpu
from numba.cuda.cudadrv.driver import CudaAPIError
import warnings
warnings.simplefilter("ignore")  # numba's low-occupancy warning

@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0

@cuda.jit
def add_from(dst, src):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] += src[i]

def code(call):
    try:
        result = call()
    except CudaAPIError as exc:
        return int(exc.code)
    if isinstance(result, tuple):
        result = result[0]
    return int(result)

def ptr(d):
    return int(d.device_ctypes_pointer.value)

def ordinal(d):
    # The fake driver's own record: cuda-bindings 13.2.0 to 13.4.1 read DEVICE_ORDINAL as 0
    # (NVIDIA/cuda-python#2928), whatever the driver answered.
    return _fakegpu.current().heaps.device_of(ptr(d))

def context_of(d):
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT
    return int(drv.cuPointerGetAttribute(attr, ptr(d))[1])
"""


def _devices(n: int, **extra: str) -> dict[str, str]:
    return {"SMARTARRAY_FAKE_GPU_DEVICES": str(n), **extra}


# 1. several devices under numba-cuda's real target --------------------------------------------


@pytest.mark.parametrize("count", [2, 4])
def test_numba_cuda_runs_on_every_device_and_its_memory_is_that_devices(count: int) -> None:
    out = run_fake(
        ADD_ONE
        + """
report = {"gpus": [g.id for g in cuda.gpus], "devices": []}
for dev in range(len(cuda.gpus)):
    with cuda.gpus[dev]:
        d = cuda.to_device(np.arange(4.0) * (dev + 1))
        e = cuda.device_array(4)
        e.copy_to_device(d)
        add_one[1, 4](e)
        ctx = cuda.current_context()
        report["devices"].append({
            "current": cuda.get_current_device().id,
            "context_device": ctx.device.id,
            "values": e.copy_to_host().tolist(),
            "ordinals": [ordinal(d), ordinal(e)],
            "pointer_context_is_current": context_of(d) == int(ctx.handle),
            "stream_device": int(drv.cuStreamGetDevice(cuda.stream().handle)[1]),
            "total": int(ctx.get_memory_info()[1]),
            "device_total": int(drv.cuDeviceTotalMem(dev)[1]),
            "range": [ptr(d), ptr(d) + 32],
        })
selected = cuda.select_device(len(cuda.gpus) - 1).id
print(json.dumps({**report, "selected": selected, "now": cuda.get_current_device().id}))
""",
        env=_devices(count, SMARTARRAY_FAKE_GPU_MEMORY="64M,32M"),
    )
    assert out["gpus"] == list(range(count))
    for dev, seen in enumerate(out["devices"]):
        assert seen["current"] == seen["context_device"] == dev
        assert seen["values"] == [(i * (dev + 1)) + 1.0 for i in range(4)]
        assert seen["ordinals"] == [dev, dev]
        assert seen["pointer_context_is_current"]
        assert seen["stream_device"] == dev
        # A list gives each device its size; the last one repeats for the devices after it.
        assert seen["total"] == seen["device_total"] == (64 << 20 if dev == 0 else 32 << 20)
    ranges = sorted(tuple(s["range"]) for s in out["devices"])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    assert out["selected"] == out["now"] == count - 1


def test_each_device_has_its_own_memory() -> None:
    """Filling device 1 leaves device 0's memory free: one heap each, of the configured size."""
    out = run_fake(
        ADD_ONE
        + """
big = 24 << 20  # of 32 MiB each: two would not fit in one shared heap
with cuda.gpus[0]:
    a = cuda.device_array(big // 8)
    free0 = int(cuda.current_context().get_memory_info()[0])
with cuda.gpus[1]:
    b = cuda.device_array(big // 8)
    free1 = int(cuda.current_context().get_memory_info()[0])
    try:
        cuda.device_array(big // 8)
        third = 0
    except CudaAPIError as exc:
        third = int(exc.code)
print(json.dumps({"free": [free0, free1], "third": third,
                  "ordinals": [ordinal(a), ordinal(b)]}))
""",
        env=_devices(2, SMARTARRAY_FAKE_GPU_MEMORY="32M"),
    )
    assert out["free"] == [8 << 20, 8 << 20]
    assert out["third"] == 2  # CUDA_ERROR_OUT_OF_MEMORY on device 1 only
    assert out["ordinals"] == [0, 1]


# 2. peer access ---------------------------------------------------------------------------------

PEER_ENTRIES = (
    ADD_ONE
    + """
with cuda.gpus[0]:
    ctx0 = cuda.current_context()
with cuda.gpus[1]:
    ctx1 = cuda.current_context()
can = [[int(drv.cuDeviceCanAccessPeer(a, b)[1]) for b in range(2)] for a in range(2)]
with cuda.gpus[0]:
    numba_can = ctx0.can_access_peer(1)
    enable = [code(lambda: drv.cuCtxEnablePeerAccess(ctx1.handle, 0)) for _ in range(2)]
    self_enable = code(lambda: drv.cuCtxEnablePeerAccess(ctx0.handle, 0))
    flags = code(lambda: drv.cuCtxEnablePeerAccess(ctx1.handle, 1))
    disable = [code(lambda: drv.cuCtxDisablePeerAccess(ctx1.handle)) for _ in range(2)]
p2p = int(drv.cuDeviceGetP2PAttribute(
    drv.CUdevice_P2PAttribute.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1)[1])
print(json.dumps({"can": can, "numba_can": numba_can, "enable": enable, "self": self_enable,
                  "flags": flags, "disable": disable, "p2p": p2p}))
"""
)


@pytest.mark.parametrize("peer", [None, "1", "0", "0:1"])
def test_peer_access_is_answered_and_enabled_as_configured(peer: str | None) -> None:
    env = _devices(2) if peer is None else _devices(2, SMARTARRAY_FAKE_GPU_PEER=peer)
    out = run_fake(PEER_ENTRIES, env=env)
    allowed = {None: {(0, 1), (1, 0)}, "1": {(0, 1), (1, 0)}, "0": set(), "0:1": {(0, 1)}}[peer]
    assert out["can"] == [[int((a, b) in allowed) for b in range(2)] for a in range(2)]
    assert out["numba_can"] == ((0, 1) in allowed)
    assert out["p2p"] == int((0, 1) in allowed)
    assert out["self"] == 201  # CUDA_ERROR_INVALID_CONTEXT: the current context itself
    assert out["flags"] == 1  # CUDA_ERROR_INVALID_VALUE: flags must be 0
    if (0, 1) in allowed:
        assert out["enable"] == [0, 704]  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        assert out["disable"] == [0, 705]  # CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    else:
        assert out["enable"] == [217, 217]  # CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
        assert out["disable"] == [705, 705]


def test_a_bad_peer_setting_is_refused_naming_the_variable() -> None:
    out = run_fake("print('{}')", env=_devices(2, SMARTARRAY_FAKE_GPU_PEER="yes"), check=False)
    assert out["_returncode"] != 0
    assert "SMARTARRAY_FAKE_GPU_PEER" in out["_stderr"] and "'yes'" in out["_stderr"]


COPIES = (
    ADD_ONE
    + """
fake = _fakegpu.current()
with cuda.gpus[0]:
    ctx0 = cuda.current_context()
    d0 = cuda.to_device(np.zeros(8))
    s0 = cuda.stream()
with cuda.gpus[1]:
    ctx1 = cuda.current_context()
    d1 = cuda.to_device(np.arange(8.0))
before = sum(fake.peer_copies.values())
results = {}
with cuda.gpus[0]:
    drv.cuMemcpyPeer(ptr(d0), ctx0.handle, ptr(d1), ctx1.handle, 32)  # the first half
    results["peer"] = d0.copy_to_host().tolist()
    drv.cuMemcpyPeerAsync(ptr(d0) + 32, ctx0.handle, ptr(d1) + 32, ctx1.handle, 32, s0.handle)
    s0.synchronize()
    results["peer_async"] = d0.copy_to_host().tolist()
    d0.copy_to_device(np.zeros(8))
    drv.cuMemcpyDtoD(ptr(d0), ptr(d1), 64)  # unified addressing: any two devices
    results["dtod"] = d0.copy_to_host().tolist()
    d0.copy_to_device(np.zeros(8))
    d0.copy_to_device(d1, stream=s0)  # numba-cuda's own device-to-device copy (DtoDAsync)
    s0.synchronize()
    results["numba"] = d0.copy_to_host().tolist()
    wrong = code(lambda: drv.cuMemcpyPeer(ptr(d0), ctx1.handle, ptr(d1), ctx1.handle, 8))
results["wrong_context"] = wrong
results["copies"] = {f"{a}->{b}": n for (a, b), n in fake.peer_copies.items()}
results["bytes"] = {f"{a}->{b}": n for (a, b), n in fake.peer_bytes.items()}
results["calls"] = [fake.calls["cuMemcpyPeer"], fake.calls["cuMemcpyPeerAsync"]]
results["before"] = before
print(json.dumps(results))
"""
)


@pytest.mark.seeds
@pytest.mark.parametrize("peer", ["1", "0"])
def test_copies_between_devices_are_allowed_with_or_without_peer_access(peer: str) -> None:
    out = run_fake(COPIES, env=_devices(2, SMARTARRAY_FAKE_GPU_PEER=peer))
    assert out["peer"] == [0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]
    assert out["peer_async"] == [float(i) for i in range(8)]
    assert out["dtod"] == out["numba"] == [float(i) for i in range(8)]
    assert out["wrong_context"] == 1  # CUDA_ERROR_INVALID_VALUE: d0 is not ctx1's memory
    assert out["before"] == 0
    assert out["copies"] == {"1->0": 4}  # each copy from device 1 to device 0, counted
    assert out["bytes"] == {"1->0": 32 + 32 + 64 + 64}
    assert out["calls"] == [2, 1]  # the refused one is a call too


@pytest.mark.seeds
def test_a_kernel_reads_another_devices_memory_only_with_peer_access() -> None:
    out = run_fake(
        ADD_ONE
        + """
with cuda.gpus[1]:
    ctx1 = cuda.current_context()
    src = cuda.to_device(np.arange(8.0))
    # The upload may still be queued on device 1's legacy stream (a pageable cuMemcpyHtoD
    # returns once the bytes are staged): nothing orders device 0's kernel after it.
    cuda.synchronize()
with cuda.gpus[0]:
    dst = cuda.to_device(np.ones(8))
    drv.cuCtxEnablePeerAccess(ctx1.handle, 0)
    add_from[1, 8](dst, src)
    allowed = dst.copy_to_host().tolist()
    drv.cuCtxDisablePeerAccess(ctx1.handle)
    add_from[1, 8](dst, src)
    fault = code(cuda.synchronize)
print(json.dumps({"allowed": allowed, "fault": fault}))
""",
        env=_devices(2),
    )
    assert out["allowed"] == [1.0 + i for i in range(8)]
    assert out["fault"] == 700  # CUDA_ERROR_ILLEGAL_ADDRESS, as an out-of-bounds access
    assert "kernel add_from" in out["_stderr"] and "'src'" in out["_stderr"]
    assert "peer access from device 0 to device 1 is not enabled" in out["_stderr"]


def test_peer_access_is_one_way() -> None:
    """Device 0 enabling access to device 1 lets device 1's kernels read nothing of device 0."""
    out = run_fake(
        ADD_ONE
        + """
with cuda.gpus[1]:
    ctx1 = cuda.current_context()
with cuda.gpus[0]:
    drv.cuCtxEnablePeerAccess(ctx1.handle, 0)
    src = cuda.to_device(np.arange(8.0))
with cuda.gpus[1]:
    dst = cuda.to_device(np.ones(8))
    add_from[1, 8](dst, src)
    fault = code(cuda.synchronize)
print(json.dumps({"fault": fault}))
""",
        env=_devices(2),
    )
    assert out["fault"] == 700
    assert "peer access from device 1 to device 0 is not enabled" in out["_stderr"]


# 3. streams and events across devices -----------------------------------------------------------

CROSS_DEVICE_EVENT = (
    ADD_ONE
    + """
with cuda.gpus[1]:
    ctx1 = cuda.current_context()
    s1 = cuda.stream()
    src = cuda.to_device(np.zeros(64), stream=s1)
    for _ in range(3):
        add_one[1, 64, s1](src)            # queued on device 1, run only when waited for
    done = cuda.event()
    done.record(s1)
with cuda.gpus[0]:
    ctx0 = cuda.current_context()
    s0 = cuda.stream()
    dst = cuda.device_array(64, stream=s0)
    done.wait(s0)                          # cuStreamWaitEvent across contexts: legal
    drv.cuMemcpyPeerAsync(ptr(dst), ctx0.handle, ptr(src), ctx1.handle, 512, s0.handle)
    add_one[1, 64, s0](dst)
    s0.synchronize()
    values = dst.copy_to_host(stream=s0).tolist()
ran = _fakegpu.current().queue.ran
print(json.dumps({"values": values, "ran": ran}))
"""
)


@pytest.mark.parametrize("seed", range(4))
def test_an_event_of_device_1_orders_a_device_0_stream(seed: int) -> None:
    out = run_fake(CROSS_DEVICE_EVENT, seed=seed, env=_devices(2))
    assert out["values"] == [4.0] * 64
    ran = out["ran"]
    kernels = [i for i, label in enumerate(ran) if label.startswith("kernel")]
    assert len(kernels) == 4 and ran.index("record") < ran.index("wait_event")
    assert kernels[2] < ran.index("record")  # device 1's kernels ran before the copy


def test_a_launch_on_another_devices_stream_is_refused() -> None:
    """What CUDA documents: a kernel launch fails if issued to a stream not associated with the
    current device, a copy on such a stream succeeds (programming guide, multi-device system,
    "Stream and Event Behavior"); ``cuEventRecord``: "hEvent and hStream must be from the same
    context otherwise CUDA_ERROR_INVALID_HANDLE is returned"; ``cuStreamWaitEvent``: "hEvent
    may be from a different context or device than hStream"."""
    out = run_fake(
        ADD_ONE
        + """
with cuda.gpus[1]:
    s1 = cuda.stream()
    e1 = cuda.event()
with cuda.gpus[0]:
    d0 = cuda.to_device(np.zeros(4))
    cuda.synchronize()  # (the upload may still be queued; device 1's stream is not after it)
    e0 = cuda.event()
    try:
        add_one[1, 4, s1](d0)
        launch = ""
    except Exception as exc:  # cuda.core's launch raises its own CUDAError
        launch = str(exc)
    record = code(lambda: drv.cuEventRecord(e0.handle, s1.handle))
    wait = code(lambda: drv.cuStreamWaitEvent(s1.handle, e0.handle, 0))
    d0.copy_to_device(np.ones(4), stream=s1)  # a copy on device 1's stream: allowed
    s1.synchronize()
    add_one[1, 4](d0)                          # not sticky: device 0 works on
    values = d0.copy_to_host().tolist()
print(json.dumps({"launch": launch, "record": record, "wait": wait, "values": values}))
""",
        env=_devices(2),
    )
    assert "CUDA_ERROR_INVALID_HANDLE" in out["launch"]
    assert out["record"] == 400
    assert out["wait"] == 0
    assert out["values"] == [2.0] * 4
    assert "stream of device 1" in out["_stderr"] and "device 0 is current" in out["_stderr"]


# the queue with several devices, in this process (pure Python: no driver is loaded) -----------


def _queue(seed: int, current: list[int]):
    from smartarray._fakegpu import _queue

    session_seed = os.environ.get("SMARTARRAY_FAKE_GPU_SEED")  # (a seeded CI run's)
    os.environ["SMARTARRAY_FAKE_GPU_SEED"] = str(seed)
    try:
        ids = itertools.count(0x100, 0x10)
        return _queue.Queue(lambda: next(ids), lambda: current[0])
    finally:
        if session_seed is None:
            del os.environ["SMARTARRAY_FAKE_GPU_SEED"]
        else:
            os.environ["SMARTARRAY_FAKE_GPU_SEED"] = session_seed


def test_each_device_has_its_own_legacy_default_stream() -> None:
    """Device 1's legacy stream neither waits for device 0's blocking streams nor they for it."""
    current = [0]
    q = _queue(0, current)
    blocking0 = q.create_stream(0)
    ran: list[str] = []
    q.enqueue(blocking0, lambda: ran.append("device 0 side"), "side")
    current[0] = 1
    legacy1 = q.stream(0)
    assert legacy1.device == 1 and legacy1 is not q.legacy_of(0)
    q.enqueue(legacy1, lambda: ran.append("device 1 legacy"), "legacy1")
    q.synchronize(legacy1)
    assert ran == ["device 1 legacy"]
    q.synchronize_device(1)
    assert ran == ["device 1 legacy"]  # device 0's work is not device 1's
    q.synchronize_device(0)
    assert ran == ["device 1 legacy", "device 0 side"]


def test_cross_device_event_waits_keep_order_in_every_seeded_order() -> None:
    orders = set()
    for seed in range(12):
        current = [1]
        q = _queue(seed, current)
        s1 = q.create_stream(1)
        for i in range(3):
            q.enqueue(s1, lambda: None, f"d1_{i}")
        e = q.create_event(0)
        e.op = q.enqueue(s1, lambda: None, "record")
        current[0] = 0
        s0 = q.create_stream(1)
        q.enqueue(s0, lambda: None, "d0_before")
        q.enqueue(s0, lambda: None, "wait", after=[e.op])
        q.enqueue(s0, lambda: None, "d0_after")
        q.synchronize_device(0)  # device 0's work needs device 1's up to the record
        ran = q.ran
        assert ran.index("d0_after") > ran.index("record") > ran.index("d1_2")
        orders.add(tuple(ran))
    assert len(orders) > 1


# smartarray on several devices (what tests/engine/test_devices.py builds on) ---------------------

SMARTARRAY_ON = (
    ADD_ONE
    + """
result = {}
with cuda.gpus[1]:
    a = sa.SmartArray(np.zeros(8))
    add_one[1, 8](a)
    add_one[1, 8](a)
    result["values"] = np.asarray(a).tolist()
    result["ordinal"] = ordinal(a.gpu())
if MIXED:
    with cuda.gpus[0]:
        add_one[1, 8](a)
        result["mixed"] = np.asarray(a).tolist()
print(json.dumps(result))
"""
)


@pytest.mark.seeds
def test_a_smartarray_used_on_device_1_lives_there() -> None:
    out = run_fake("MIXED = False\n" + SMARTARRAY_ON, env=_devices(2))
    assert out["values"] == [2.0] * 8
    assert out["ordinal"] == 1


@pytest.mark.seeds
def test_a_smartarray_launched_on_device_1_then_device_0() -> None:
    out = run_fake("MIXED = True\n" + SMARTARRAY_ON, env=_devices(2))
    assert out["mixed"] == [3.0] * 8


# page-locked memory with several devices ------------------------------------------------------


@pytest.mark.seeds
def test_deregistering_waits_for_a_copy_queued_on_another_device() -> None:
    """``sa.deregister`` on device 0 of memory that device 1's stream still copies from: the
    driver's wait at ``cuMemHostUnregister`` covers device 0 only, so smartarray must wait for
    every device first (the copy faults on the fake driver when its memory was unpinned)."""
    out = run_fake(
        ADD_ONE
        + """
h = np.arange(4.0)
with cuda.gpus[1]:
    sa.register(h)  # page-locked by device 1's context
    s1 = cuda.stream()
    d = cuda.to_device(h, stream=s1)  # asynchronous: the DMA reads h when it runs
with cuda.gpus[0]:
    sa.deregister(h)
    with cuda.gpus[1]:
        try:
            values = d.copy_to_host().tolist()
        except CudaAPIError as exc:
            values = int(exc.code)
print(json.dumps({"values": values}))
""",
        env=_devices(2),
    )
    assert out["values"] == [0.0, 1.0, 2.0, 3.0]


def test_registered_memory_is_page_locked_for_every_device() -> None:
    """With several devices ``sa.register`` page-locks portably: without
    ``CU_MEMHOSTREGISTER_PORTABLE`` another device's context treats the memory as pageable."""
    out = run_fake(
        ADD_ONE
        + """
h = np.arange(4.0)
with cuda.gpus[0]:
    sa.register(h)
fake = _fakegpu.current()
locked = [fake.host.page_locked(h.ctypes.data, h.nbytes, dev) for dev in range(2)]
with cuda.gpus[1]:
    s1 = cuda.stream()
    d = cuda.to_device(h, stream=s1)
    s1.synchronize()
    values = d.copy_to_host().tolist()
with cuda.gpus[0]:
    sa.deregister(h)
print(json.dumps({"locked": locked, "values": values}))
""",
        env=_devices(2),
    )
    assert out["locked"] == [True, True]
    assert out["values"] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("peer", "pairs"),
    [
        ("1", [[0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1]]),
        ("0", []),
        ("1:0,2:1", [[0, 1], [1, 2]]),
    ],
)
def test_peer_pairs_says_which_devices_copy_peer_to_peer(peer: str, pairs: list) -> None:
    """The public question (``A:B``: device A can access B's memory, so B -> A copies peer to
    peer: the pair is (source B, target A))."""
    out = run_fake(
        "print(json.dumps({'all': sa.peer_pairs(), 'some': sa.peer_pairs([2, 1])}))",
        env=_devices(3, SMARTARRAY_FAKE_GPU_PEER=peer),
    )
    assert out["all"] == pairs
    assert out["some"] == [p for p in pairs if 0 not in p]
