"""Random pipelines over several devices against an element-level model.

The state machine drives one SmartArray through host reads and writes, kernel launches (read,
read-write, overwrite) and explicit ``get('gpu:N')`` on random slices, each launch on a random
current device (host steps run on the last one). The model keeps, per element, where it is
current (the host and each device) and predicts the bytes each step moves: a device takes a
stale element from a device it reaches peer to peer (``d2d``), else from the host (``h2d``),
else through the host (``d2h`` then ``h2d``); a host read downloads its stale elements. It
checks values against a NumPy reference, that every byte marked valid holds the current
value (a rule, so that it does not wait for the devices after every step), and that each
byte is current somewhere.

It needs several devices: the fake CUDA driver in a child process
(:func:`test_the_pipeline_over_several_devices` starts it; the machine itself is skipped in a
process with one device).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray._memory import devices as _devices
from smartarray._strict import state as _strict_state
from smartarray.coherence import DEFAULT_MAX_RUNS, TransferCost
from tests._targets import real_target_env, with_checkout

# Outcomes depend on the fake driver's adversarial order: CI runs them over several seeds.
pytestmark = pytest.mark.seeds


ROOT = Path(__file__).resolve().parents[2]
N = 24
ITEM = 8
EXACT = TransferCost(latency_s=1e-12, bandwidth_Bps=1e9)  # no cost-based coalescing
DEVICES = _devices.count()

slices = st.one_of(
    st.sampled_from([slice(0, N), slice(0, 8), slice(4, 20)]),
    st.tuples(st.integers(0, N), st.integers(0, N)).map(lambda t: slice(min(t), max(t))),
)


@cuda.jit
def k_add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


@cuda.jit
def k_fill(x, value):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = value


@cuda.jit
def k_sum_into(x, out):
    if cuda.grid(1) == 0:
        total = 0.0
        for j in range(x.size):
            total += x[j]
        out[0] = total


# Each device step draws its device: the current device changes often, and a step on one
# device follows another device's, with no host access between them.
devices = st.integers(0, max(DEVICES - 1, 0))


class DevicesPipeline(RuleBasedStateMachine):
    @initialize(start=st.sampled_from(["host", "gpu:0", "gpu:1"]))
    def start(self, start):
        self.previous_cost = sa.set_transfer_cost(EXACT)
        self.a = sa.SmartArray(np.zeros(N), where=start)
        self.valid = {w: np.zeros(N, bool) for w in ["host", *range(DEVICES)]}
        self.valid["host" if start == "host" else int(start[4:])][:] = True
        self.ref = np.zeros(N)
        self.sums = sa.SmartArray(shape=1)
        self.device = 0

    # -- the model of what moves -------------------------------------------------------------

    def upload(self, device: int, sl: slice) -> dict[str, int]:
        """Elements of ``sl`` stale on ``device``, by the way they come (and the model moves)."""
        moved = {"h2d": 0, "d2h": 0, "d2d": 0}
        mine = self.valid[device]
        for i in range(sl.start, sl.stop):
            if mine[i]:
                continue
            peers = [
                d
                for d in range(DEVICES)
                if d != device and self.valid[d][i] and _devices.peer(d, device)
            ]
            if peers:
                moved["d2d"] += 1
            elif self.valid["host"][i]:
                moved["h2d"] += 1
            else:  # current on a device it cannot reach: through the host copy
                moved["d2h"] += 1
                moved["h2d"] += 1
                self.valid["host"][i] = True
            mine[i] = True
        return moved

    def wrote(self, where, sl: slice) -> None:
        for w, v in self.valid.items():
            v[sl] = w == where

    def expect(self, action, moved):
        """Run ``action`` on the current device; check the bytes it moved, per direction."""
        before = sa.stats()
        with cuda.gpus[self.device]:
            result = action()
        got = sa.stats() - before
        slack = 2 * N * ITEM // DEFAULT_MAX_RUNS  # the fragmentation cap's bound
        for direction, elements in moved.items():
            n = getattr(got, f"{direction}_bytes")
            assert elements * ITEM <= n <= elements * ITEM + slack, (direction, got, moved)
        return result

    # -- rules -------------------------------------------------------------------------------

    @rule(sl=slices, value=st.floats(-5, 5, allow_nan=False))
    def host_write(self, sl, value):
        self.expect(lambda: self.a.__setitem__(sl, value), {})
        self.ref[sl] = value
        self.wrote("host", sl)

    @rule(sl=slices)
    def host_read(self, sl):
        stale = int((~self.valid["host"][sl]).sum())
        got = self.expect(lambda: np.array(self.a[sl]), {"d2h": stale, "h2d": 0})
        np.testing.assert_array_equal(got, self.ref[sl])
        self.valid["host"][sl] = True

    @rule(sl=slices, device=devices)
    def kernel_add(self, sl, device):
        self.device = device
        moved = self.upload(self.device, sl)
        self.expect(lambda: k_add_one[1, 32](self.a[sl]), moved)
        self.ref[sl] += 1.0
        self.wrote(self.device, sl)

    @rule(sl=slices, value=st.floats(-5, 5, allow_nan=False), device=devices)
    def kernel_out(self, sl, value, device):
        self.device = device
        moved = {"h2d": 0, "d2h": 0, "d2d": 0}
        self.expect(lambda: k_fill[1, 32](sa.Out(self.a[sl]), value), moved)
        self.ref[sl] = value
        self.wrote(self.device, sl)

    @rule(sl=slices, device=devices)
    def kernel_reads(self, sl, device):
        self.device = device
        moved = self.upload(self.device, sl)
        self.expect(lambda: k_sum_into[1, 1](sa.In(self.a[sl]), sa.Out(self.sums)), moved)
        np.testing.assert_allclose(self.sums[0], self.ref[sl].sum())

    @rule(device=devices)
    def get_on_a_named_device(self, device):
        moved = self.upload(device, slice(0, N))
        dev = self.expect(lambda: self.a.get(f"gpu:{device}"), moved)
        with cuda.gpus[device]:
            np.testing.assert_array_equal(dev.copy_to_host(), self.ref)

    # -- checks ------------------------------------------------------------------------------

    # A rule, not an invariant: reading the device copies waits for every device's work,
    # and a race between devices shows only in steps that follow each other without it.
    @rule()
    def every_byte_marked_valid_holds_the_current_value(self):
        buf = self.a._buf
        state = buf.state
        ref = self.ref.view(np.int64)
        copies = {"host": buf.host_bytes}
        for loc in buf.device_locations():
            with cuda.gpus[_devices.ordinal(loc)]:
                copies[loc] = memory._Uncounted(buf.device_copy(loc)).copy_to_host()
        for where, raw in copies.items():
            if raw is None:
                continue
            values = raw.view(np.int64)
            for i in range(N):
                if state.is_valid(where, i * ITEM, (i + 1) * ITEM):
                    assert values[i] == ref[i], (where, i)
        for i in range(N):
            assert any(state.is_valid(w, i * ITEM, (i + 1) * ITEM) for w in state.locations)

    @invariant()
    def valid_at_names_what_the_model_says(self):
        here = _devices.current()
        expected = {"host"} if self.valid["host"].all() else set()
        for d in range(DEVICES):
            if self.valid[d].all():
                expected.add("gpu" if d == here else f"gpu:{d}")
        assert set(self.a.valid_at) == expected

    def teardown(self):
        if hasattr(self, "previous_cost"):
            sa.set_transfer_cost(self.previous_cost)


DevicesPipeline.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)


@pytest.mark.skipif(DEVICES < 2, reason="needs several devices (run by the test below)")
class TestDevicesPipeline(DevicesPipeline.TestCase):
    pass


@pytest.mark.skipif(
    _fakegpu.current() is not None or _strict_state.get() is not None,
    reason="the child runs the same on the fake driver whatever this process runs on: once, "
    "in the plain run",
)
@pytest.mark.parametrize(("devices", "peer"), [(2, "1"), (2, "0"), (4, "1"), (3, "0:1,1:0")])
def test_the_pipeline_over_several_devices(devices: int, peer: str) -> None:
    env = real_target_env()
    env.update(
        SMARTARRAY_FAKE_GPU="1",
        SMARTARRAY_FAKE_GPU_DEVICES=str(devices),
        SMARTARRAY_FAKE_GPU_PEER=peer,
    )
    with_checkout(env)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            "tests/engine/test_devices_pipeline.py::TestDevicesPipeline",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
