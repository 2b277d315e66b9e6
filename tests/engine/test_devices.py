"""One SmartArray over several GPUs: a copy per device, current where it is used.

Each test runs a child process on the fake CUDA driver with ``SMARTARRAY_FAKE_GPU_DEVICES``
devices (numba-cuda's real target; the driver reads its settings when it loads), through
:func:`tests.doubles.test_fakegpu.run_fake`. The child prints a JSON report; the assertions
are here.
Peer access comes from ``SMARTARRAY_FAKE_GPU_PEER`` (``1``: every pair, ``0``: none).
The section on one device checks what a one-device process accepts and refuses, in-process.
The driver runs queued work only when the host waits for it, so a copy or launch that is not
ordered after the work it reads sees the bytes from before: the last section shows that order
kept across devices, on adopted memory, through hand-outs and when peer access is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import smartarray as sa
from tests.doubles.test_fakegpu import run_fake

PRELUDE = """
import warnings
from smartarray import _fakegpu
warnings.simplefilter("ignore")  # numba's low-occupancy warning
fake = _fakegpu.current()

@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0

def ordinal(d):
    # The fake driver's own record: cuda-bindings 13.2.0 to 13.4.1 read DEVICE_ORDINAL as 0.
    return fake.heaps.device_of(int(d.device_ctypes_pointer.value))

def moved(trace):
    return sorted(
        (e.direction, e.source, e.target, e.start, e.stop) for e in trace.events
    )

def peer():
    return {f"{a}->{b}": n for (a, b), n in fake.peer_copies.items()}
"""


def _run(code: str, devices: int = 2, peer: str = "1") -> dict:
    env = {"SMARTARRAY_FAKE_GPU_DEVICES": str(devices), "SMARTARRAY_FAKE_GPU_PEER": peer}
    return run_fake(PRELUDE + code, env=env)


# -- a kernel on each device reads current data ----------------------------------------------


@pytest.mark.seeds
@pytest.mark.parametrize("devices", [2, 4])
def test_a_kernel_on_each_device_in_turn_reads_what_the_last_one_wrote(devices: int) -> None:
    out = _run(
        """
a = sa.SmartArray(np.arange(16.0))
seen = []
for step in range(2):
    for dev in range(len(cuda.gpus)):
        with cuda.gpus[dev]:
            add_one[1, 16](a)
            seen.append(a.valid_at)
print(json.dumps({"values": np.asarray(a).tolist(), "seen": seen, "gpus": len(cuda.gpus)}))
""",
        devices,
    )
    assert out["gpus"] == devices
    assert out["values"] == (np.arange(16.0) + 2 * devices).tolist()
    # Right after each launch the launch's device holds the only current copy.
    assert out["seen"] == [["gpu"]] * (2 * devices)


@pytest.mark.parametrize("how", ["prefetch", "get", "launch"])
def test_an_array_never_written_reaches_a_second_device_first(how: str) -> None:
    # Bytes never written are current everywhere (garbage, never stale): the second device's
    # copy needs nothing from the first's, which was never made.
    out = _run(
        f"""
a = sa.SmartArray(shape=(16,), dtype=np.float64)
with cuda.gpus[1]:
    if {how!r} == "prefetch":
        a.prefetch("gpu")
    elif {how!r} == "get":
        a.get("gpu")
    else:
        add_one[1, 16](sa.Out(a))
a[:] = np.arange(16.0)
with cuda.gpus[1]:
    add_one[1, 16](a)
print(json.dumps({{"values": np.asarray(a).tolist(), "h2d": sa.stats().h2d_bytes}}))
"""
    )
    assert out["values"] == (np.arange(16.0) + 1).tolist()
    assert out["h2d"] == 16 * 8  # the host's write, once; nothing for the bytes never written


def test_the_topology_reset_asks_the_driver_again_and_arrays_keep_working() -> None:
    """``smartarray._memory.devices.reset()``: a fresh process's topology (the device count,
    the peer answers, asked again at next use); a copy between devices goes peer to peer
    again afterwards."""
    out = _run(
        """
from smartarray._memory import devices
a = sa.SmartArray(np.arange(8.0))
for dev in (1, 0):
    with cuda.gpus[dev]:
        add_one[1, 8](a)
known = [devices.count(), devices.several, len(devices._peer)]
devices.reset()
forgot = [devices._count, devices.several, len(devices._peer)]
for dev in (1, 0):
    with cuda.gpus[dev]:
        add_one[1, 8](a)
again = [devices.count(), devices.several, len(devices._peer)]
print(json.dumps({"known": known, "forgot": forgot, "again": again, "peer": peer(),
                  "values": np.asarray(a).tolist()}))
"""
    )
    assert out["known"] == [2, True, 2]
    assert out["forgot"] == [None, False, 0]
    assert out["again"] == [2, True, 2]
    assert out["values"] == (np.arange(8.0) + 4).tolist()
    # Device 1's first copy came from the host; every later one from the other device.
    assert out["peer"] == {"1->0": 2, "0->1": 1}


@pytest.mark.seeds
@pytest.mark.parametrize("devices", [2, 4])
def test_stale_bytes_go_peer_to_peer_counted_d2d_with_both_devices(devices: int) -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))  # 512 bytes
with cuda.gpus[0]:
    add_one[1, 64](a)  # up once, then current on device 0 only
last = len(cuda.gpus) - 1
before = peer()
with sa.trace() as t, cuda.gpus[last]:
    add_one[1, 64](a)
print(json.dumps({"moved": moved(t), "before": before, "after": peer(),
                  "values": np.asarray(a).tolist(), "valid": a.valid_at}))
""",
        devices,
    )
    last = devices - 1
    assert out["moved"] == [["d2d", "gpu:0", f"gpu:{last}", 0, 512]]
    assert out["after"].get(f"0->{last}", 0) - out["before"].get(f"0->{last}", 0) == 1
    assert out["values"] == [2.0] * 64
    # (Current: device 0, whose copy is stale; the host read made the host current.)
    assert out["valid"] == ["host", f"gpu:{last}"]


@pytest.mark.seeds
def test_without_peer_access_stale_bytes_go_through_the_host_copy() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)
before = peer()
with sa.trace() as t, cuda.gpus[1]:
    add_one[1, 64](a)
    staged = a.valid_at
new_peer = {k: v - before.get(k, 0) for k, v in peer().items()}
print(json.dumps({"moved": moved(t), "new_peer": new_peer,
                  "values": np.asarray(a).tolist(), "staged": staged}))
""",
        peer="0",
    )
    # Down from device 0 into the host copy, up to device 1: both counted, nothing peer.
    assert out["moved"] == [["d2h", "gpu:0", "host", 0, 512], ["h2d", "host", "gpu:1", 0, 512]]
    assert not any(out["new_peer"].values())
    assert out["values"] == [2.0] * 64
    assert out["staged"] == ["gpu"]  # device 1 wrote: the host copy is stale again


@pytest.mark.parametrize("refused", ["h2d", "d2h"])
def test_a_guard_refusing_the_copies_through_the_host_refuses_before_anything_moves(
    refused: str,
) -> None:
    """Without peer access a device reads another's bytes through the host copy: a transfer
    guard that refuses the download or the upload raises before the first copy, and the
    copies and their validity are as they were."""
    out = _run(
        f"""
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)  # current on device 0 only
before = a.valid_at
error = None
with sa.trace() as t, cuda.gpus[1]:
    try:
        with sa.transfer_guard("disallow", {refused!r}):
            add_one[1, 64](a)
    except sa.TransferGuardError as exc:
        error = str(exc)
after = a.valid_at
with cuda.gpus[1]:
    add_one[1, 64](a)  # allowed now: the bytes come through the host copy
print(json.dumps({{"moved": moved(t), "error": error, "before": before, "after": after,
                  "values": np.asarray(a).tolist()}}))
""",
        peer="0",
    )
    assert out["error"] is not None and refused in out["error"]
    assert out["moved"] == []
    assert out["before"] == out["after"] == ["gpu"]  # (device 0, the current one)
    assert out["values"] == [2.0] * 64


@pytest.mark.seeds
def test_only_the_bytes_a_device_wrote_move_to_the_next_device() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)
with cuda.gpus[1]:
    add_one[1, 64](a)      # device 1 now holds everything current
with cuda.gpus[0]:
    add_one[1, 8](a[8:16])   # device 0 needs bytes 64..128 from device 1: only those move
with sa.trace() as t, cuda.gpus[1]:
    add_one[1, 64](a)      # device 1 needs back only what device 0 wrote
print(json.dumps({"moved": moved(t), "values": np.asarray(a).tolist()}))
"""
    )
    assert out["moved"] == [["d2d", "gpu:0", "gpu:1", 64, 128]]
    expected = [3.0] * 64
    expected[8:16] = [4.0] * 8
    assert out["values"] == expected


@pytest.mark.seeds
def test_a_kernel_on_another_device_after_a_host_write_uploads_only_the_written_bytes() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(64))
with cuda.gpus[0]:
    add_one[1, 64](a)
with cuda.gpus[1]:
    add_one[1, 64](a)
    np.asarray(a)          # down from device 1 (not held: no refresh after launches)
    a[0:4] = 10.0          # a host write: the host holds bytes 0..32 alone
with sa.trace() as t, cuda.gpus[0]:
    add_one[1, 64](a)      # device 0: 0..32 from the host, the rest from device 1
print(json.dumps({"moved": moved(t), "values": np.asarray(a).tolist()}))
"""
    )
    assert out["moved"] == [["d2d", "gpu:1", "gpu:0", 32, 512], ["h2d", "host", "gpu:0", 0, 32]]
    assert out["values"] == [11.0] * 4 + [3.0] * 60


# -- the current device decides; an explicit form names one ----------------------------------


def test_gpu_names_the_current_device_and_gpu_n_names_device_n() -> None:
    out = _run(
        """
a = sa.SmartArray(np.arange(8.0))
with cuda.gpus[1]:
    d1 = a.gpu()
    here = a.valid_at
d0 = a.gpu(device=0)
with cuda.gpus[1]:
    explicit = ordinal(a.get("gpu:1"))
    d1_again = ordinal(a.gpu())
    d0_from_1 = ordinal(a.gpu(device=0))
    d0_get_from_1 = ordinal(a.get("gpu:0"))
print(json.dumps({"d1": ordinal(d1), "d0": ordinal(d0), "explicit": explicit,
                  "d0_from_1": [d0_from_1, d0_get_from_1],
                  "again": d1_again, "here": here, "at0": a.valid_at,
                  "values0": d0.copy_to_host().tolist()}))
"""
    )
    assert (out["d1"], out["d0"], out["explicit"], out["again"]) == (1, 0, 1, 1)
    assert out["d0_from_1"] == [0, 0]  # device 0 named while device 1 is current
    assert out["here"] == ["host", "gpu"]  # (current: device 1)
    assert out["at0"] == ["host", "gpu", "gpu:1"]  # (current: device 0)
    assert out["values0"] == list(range(8))


@pytest.mark.seeds
def test_a_write_marked_on_one_device_is_read_on_another_and_on_the_host() -> None:
    out = _run(
        """
a = sa.SmartArray(np.zeros(8))
with cuda.gpus[1]:
    d = a.gpu()
    add_one[1, 8](d)          # a plain device array: smartarray does not see this write
    cuda.synchronize()
a.mark_changed("gpu:1")       # ... until it is told
with sa.trace() as t:
    d0 = a.gpu()              # device 0 (current): from device 1
print(json.dumps({"moved": moved(t), "dev0": d0.copy_to_host().tolist(),
                  "host": np.asarray(a).tolist()}))
"""
    )
    assert out["moved"] == [["d2d", "gpu:1", "gpu:0", 0, 64]]
    assert out["dev0"] == [1.0] * 8
    assert out["host"] == [1.0] * 8


@pytest.mark.seeds
def test_an_array_made_on_a_device_lives_there() -> None:
    out = _run(
        """
a = sa.SmartArray(np.arange(4.0), where="gpu:1")
print(json.dumps({"valid": a.valid_at, "on1": ordinal(a.get("gpu:1")),
                  "host": np.asarray(a).tolist()}))
"""
    )
    assert out["valid"] == ["gpu:1"]
    assert out["on1"] == 1
    assert out["host"] == [0.0, 1.0, 2.0, 3.0]


# -- residency per device --------------------------------------------------------------------


@pytest.mark.seeds
def test_each_device_has_its_own_budget_and_evicts_only_its_own_copies() -> None:
    out = _run(
        """
sa.set_device_budget(1024)   # bytes per device
xs = [sa.SmartArray(np.full(64, float(i))) for i in range(3)]   # 512 bytes each
with cuda.gpus[0]:
    add_one[1, 64](xs[0]); add_one[1, 64](xs[1])   # device 0 full
with cuda.gpus[1]:
    add_one[1, 64](xs[2]); add_one[1, 64](xs[0])   # device 1 full; device 0 untouched
budget0, budget1 = sa.device_budget(0), sa.device_budget(1)
evictions = sa.stats().evictions
with sa.trace() as t, cuda.gpus[0]:
    add_one[1, 64](xs[2])    # device 0 must make room: evicts there only
evicted = [(e.direction, e.array, e.source) for e in t.events if e.reason == "eviction"]
print(json.dumps({
    "evictions": sa.stats().evictions - evictions,
    "moved": moved(t),
    "used": [budget0.used, budget1.used],
    "names0": sorted(r.name for r in budget0.resident),
    "names1": sorted(r.name for r in budget1.resident),
    "after1": sorted(r.name for r in sa.device_budget(1).resident),
    "after0": sorted(r.name for r in sa.device_budget(0).resident),
    "evicted": evicted,
    "names": [x.name for x in xs],
    "values": [np.asarray(x).tolist()[:1] for x in xs],
}))
"""
    )
    n = out["names"]
    assert out["used"] == [1024, 1024]
    assert out["names0"] == sorted([n[0], n[1]])
    assert out["names1"] == sorted([n[0], n[2]])
    assert out["after1"] == sorted([n[0], n[2]])  # device 1's copies stay
    # x0 is current on device 1 (its latest launch): device 0's copy of it goes first, without
    # a download; x1 (current on device 0 only) stays. x2 comes from device 1, peer to peer.
    assert out["after0"] == sorted([n[1], n[2]])
    assert out["evictions"] == 1 and out["evicted"] == []
    assert out["moved"] == [["d2d", "gpu:1", "gpu:0", 0, 512]]
    assert out["values"] == [[2.0], [2.0], [4.0]]


def test_device_budget_refuses_a_device_the_process_does_not_see() -> None:
    with pytest.raises(ValueError, match="CUDA device"):
        sa.device_budget(7)


@pytest.mark.parametrize("device", [True, False, np.True_, 1.5, 0.0, "0", None.__class__])
def test_device_budget_refuses_what_is_not_a_device_number_naming_the_argument(device) -> None:
    with pytest.raises(TypeError, match=r"device must be an int \(a CUDA device\) or None"):
        sa.device_budget(device)
    with pytest.raises(TypeError, match="device must be an int"):
        sa.device_budget(device=device)


@pytest.mark.parametrize(
    "name", ["gpu:\u00b2", "gpu:00", "gpu:01", "gpu:\uff10", "gpu:-0", "gpu: 0", "gpu:0 ", "gpu:"]
)
@pytest.mark.parametrize("use", ["get", "is_valid", "mark_changed", "construct"])
def test_device_names_take_ascii_digits_without_leading_zeros(name: str, use: str) -> None:
    """'gpu:N' takes N in ASCII decimal digits without leading zeros: a superscript or
    full-width digit, a leading zero or a space is refused, showing the accepted form, before
    anything moves."""
    a = sa.SmartArray(np.arange(4.0))
    accepted = r"'gpu:N' with N a device number in ASCII decimal digits without leading zeros"
    with sa.trace() as t, pytest.raises(ValueError, match=accepted + r" \('gpu:0' to"):
        if use == "get":
            a.get(name)
        elif use == "is_valid":
            a.is_valid(name)
        elif use == "mark_changed":
            a.mark_changed(name)
        else:
            sa.SmartArray(np.arange(4.0), where=name)
    assert t.events == []
    assert a.valid_at == ("host",)


THREADS_FIRST_TOUCH = """
import threading
arrays = [sa.SmartArray(np.arange(8.0)) for _ in range(4)]
barrier = threading.Barrier(4)
errors = []

def run(k):
    try:
        barrier.wait()
        arrays[k].gpu(device=k)  # smartarray's first touch of the driver, in 4 threads at once
        with cuda.gpus[k]:
            add_one[1, 8](arrays[k])
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"errors": errors, "values": [np.asarray(a).tolist() for a in arrays],
                  "valid": [a.valid_at for a in arrays]}))
"""


def test_threads_that_first_touch_the_driver_at_once_see_every_device_quietly() -> None:
    """Four threads whose first smartarray call touches the driver at the same time: each
    sees the four devices, its kernel runs, and the process ends with nothing on stderr."""
    out = _run(THREADS_FIRST_TOUCH, devices=4)
    assert out["errors"] == []
    assert out["values"] == [(np.arange(8.0) + 1).tolist()] * 4
    assert out["_stderr"] == ""


@pytest.mark.parametrize("memory", ["8M", "64M", "100M"])
def test_the_default_budget_of_a_small_device_leaves_room_to_work(memory: str) -> None:
    """A device with less than 128 MiB free still gets a budget (a margin that scales with
    the device): arrays are used on it, on each of several devices."""
    env = {"SMARTARRAY_FAKE_GPU_DEVICES": "2", "SMARTARRAY_FAKE_GPU_MEMORY": memory}
    out = run_fake(
        PRELUDE
        + """
a = sa.SmartArray(np.arange(1024.0))
for dev in range(2):
    with cuda.gpus[dev]:
        add_one[1, 1024](a)
info = [sa.device_budget(dev) for dev in range(2)]
free = []
for dev in range(2):
    with cuda.gpus[dev]:
        free.append(cuda.current_context().get_memory_info().free)
print(json.dumps({"values": np.asarray(a)[:3].tolist(), "budgets": [b.budget for b in info],
                  "used": [b.used for b in info], "free": free}))
""",
        env=env,
    )
    assert out["values"] == [2.0, 3.0, 4.0]
    assert all(b > 0 for b in out["budgets"])
    assert out["used"] == [8192, 8192]


@pytest.mark.parametrize("total", [1 << 20, 8 << 20, 100 << 20, 1 << 30, 2 << 30, 80 << 30])
@pytest.mark.parametrize("share", [1.0, 0.5, 0.01, 1e-6])
def test_the_default_margin_scales_with_the_device_and_leaves_a_budget(
    total: int, share: float
) -> None:
    from smartarray._engine.residency import DEFAULT_MARGIN, default_margin

    free = max(1, int(total * share))
    margin = default_margin(free, total)
    assert 0 <= margin <= free // 2  # free memory: never a budget of 0
    assert margin >= free // 10  # at least a tenth of what is free
    if total >= 2 << 30 and free >= 2 * DEFAULT_MARGIN:
        assert margin >= DEFAULT_MARGIN  # a large device keeps the 128 MiB floor


# -- one device: the names it accepts --------------------------------------------------------


def test_one_device_accepts_gpu_0_and_refuses_gpu_1_before_anything_moves() -> None:
    a = sa.SmartArray(np.arange(4.0))
    with sa.trace() as t:
        with pytest.raises(ValueError, match="device '1'.*gpu:0"):
            a.get("gpu:1")
        with pytest.raises(ValueError, match="'host', 'gpu'"):
            a.get("gpu1")
    assert t.events == []
    assert a.valid_at == ("host",)
    np.testing.assert_array_equal(a.get("gpu:0").copy_to_host(), np.arange(4.0))
    assert a.valid_at == ("host", "gpu")
    assert a.is_valid("gpu:0") and a.is_valid("gpu")


# -- on a machine with two or more GPUs (or the fake driver with several devices) --------------


@pytest.mark.gpu
def test_gpu_every_device_reads_what_the_previous_one_wrote_peer_to_peer_where_it_can() -> None:
    from numba import cuda

    from smartarray._memory import devices as _devices
    from tests._kernels import add_one

    if len(cuda.gpus) < 2:
        pytest.skip("needs two or more CUDA devices")
    n = len(cuda.gpus)
    a = sa.SmartArray(np.zeros(1 << 16, np.float32))  # 256 KiB
    nbytes = a.nbytes
    with sa.trace() as t:
        for dev in range(n):
            with cuda.gpus[dev]:
                add_one[(a.size + 255) // 256, 256](a)
        result = np.asarray(a)
    np.testing.assert_array_equal(result, np.full(a.size, float(n), np.float32))
    moved = [(e.direction, e.source, e.target, e.nbytes) for e in t.events]
    expected = [("h2d", "host", "gpu:0", nbytes)]
    for dev in range(1, n):
        src, dst = f"gpu:{dev - 1}", f"gpu:{dev}"
        if _devices.peer(dev - 1, dev):
            expected.append(("d2d", src, dst, nbytes))
        else:
            expected += [("d2h", src, "host", nbytes), ("h2d", "host", dst, nbytes)]
    expected.append(("d2h", f"gpu:{n - 1}", "host", nbytes))
    assert moved == expected


def test_info_lists_the_devices_and_the_pairs_that_copy_peer_to_peer() -> None:
    out = _run(
        """
from smartarray.__main__ import info
print(json.dumps(info("CUDA GPU")))
""",
        devices=3,
        peer="0:1,1:0",
    )
    assert out["devices"].startswith("3 ")
    assert out["peer copies"] == "0->1, 1->0"


@pytest.mark.parametrize(
    ("device", "error", "match"),
    [
        (1, ValueError, "device names device '1'"),
        ("0", TypeError, "device must be an int"),
        (True, TypeError, "device must be an int"),
        (-1, ValueError, "device names device '-1'"),
    ],
)
def test_gpu_device_refuses_what_is_not_a_visible_device_naming_the_argument(
    device: object, error: type, match: str
) -> None:
    a = sa.SmartArray(np.arange(4.0))
    with sa.trace() as t, pytest.raises(error, match=match):
        a.gpu(device=device)
    assert t.events == [] and a.valid_at == ("host",)


def test_peer_pairs_checks_its_argument_before_asking():
    assert sa.peer_pairs() == [] if sa.memory.SIMULATOR else isinstance(sa.peer_pairs(), list)
    with pytest.raises(TypeError, match="devices must hold device ordinals"):
        sa.peer_pairs(["0"])
    with pytest.raises(ValueError, match="devices: no device 99"):
        sa.peer_pairs([0, 99])
    with pytest.raises(TypeError, match="iterable of device ordinals"):
        sa.peer_pairs(3)


# -- page-locked host copies on several devices ------------------------------------------------


def test_a_pinned_host_copy_is_page_locked_for_every_device() -> None:
    # cuMemHostAlloc without PORTABLE locks the memory for the allocating context only: the
    # other devices' copies of it are staged as pageable ones (synchronous, the staged rate).
    out = _run(
        """
a = sa.SmartArray(np.arange(64.0), pinned=True)
host = np.asarray(a)
ptr, n = host.ctypes.data, host.nbytes
print(json.dumps({"locked": [fake.host.page_locked(ptr, n, d) for d in range(len(cuda.gpus))]}))
""",
        devices=2,
    )
    assert out["locked"] == [True, True]


def test_downloads_of_two_devices_rows_run_side_by_side_on_the_clock() -> None:
    # Each device's download waits for the work that touches its bytes (its own kernel), not
    # for the other device's download queued just before it.
    out = run_fake(
        PRELUDE
        + """
from smartarray._fakegpu._clock import PCIE5
fake.clock.set_preset(PCIE5.scaled(1000))  # copies of 32 KiB modelled as 32 MB: long ones
n = 1 << 12
a = sa.SmartArray(np.zeros(2 * n), pinned=True)
streams = []
for d in range(2):
    with cuda.gpus[d]:
        s = sa.stream()
        streams.append(s)
        add_one[n // 32, 32, s](a[d * n:(d + 1) * n])
for d in range(2):
    with cuda.gpus[d]:
        a[d * n:(d + 1) * n].prefetch("host", stream=streams[d])
values = np.asarray(a)
spans = {s.engine: (s.start, s.end) for s in fake.clock.spans if s.engine.endswith("d2h")}
print(json.dumps({"ok": bool((values == 1).all()), "spans": spans}))
""",
        env={
            "SMARTARRAY_FAKE_GPU_DEVICES": "2",
            "SMARTARRAY_FAKE_GPU_PEER": "1",
            "SMARTARRAY_FAKE_GPU_TIMING": "pcie5",
        },
    )
    assert out["ok"]
    (a0, a1), (b0, b1) = out["spans"]["gpu0.d2h"], out["spans"]["gpu1.d2h"]
    assert a0 < b1 and b0 < a1  # they overlap


# -- work on one device ordered before another's reads; adoption, hand-outs, refused peers ----
# Outcomes depend on the fake driver's adversarial order: CI runs them over several seeds.


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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


@pytest.mark.seeds
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
