"""``sa.decompose``: a SmartArray split by rows into per-device blocks with halos.

In-process on the one device of the simulator (or the fake driver's session); with 2 and 4
devices in a child on the fake driver (:func:`tests.doubles.test_fakegpu.run_fake`), where a kernel
per block on its device moves only the halo rows between devices, peer to peer where peer
access is on (``SMARTARRAY_FAKE_GPU_PEER=1``) and through the host copy where it is off.
``examples/heat_devices.py``, the whole stencil, is checked the same way at the end.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from tests.doubles.test_fakegpu import run_fake


@cuda.jit
def fill(x, value):
    i = cuda.grid(1)
    if i < x.shape[0]:
        for j in range(x.shape[1]):
            x[i, j] = value


# -- the split, on one device ------------------------------------------------------------------


def test_one_block_per_device_by_default_on_one_device() -> None:
    u = sa.SmartArray(np.arange(12.0).reshape(6, 2))
    (block,) = sa.decompose(u, halo=1)
    assert (block.index, block.device, block.rows, block.halo_rows) == (
        0,
        0,
        slice(0, 6),
        slice(0, 6),
    )
    assert (block.first, block.offset) == (0, 0)
    np.testing.assert_array_equal(np.asarray(block.owned), np.arange(12.0).reshape(6, 2))


@pytest.mark.parametrize(
    ("rows", "parts", "halo", "owned", "halos"),
    [
        (10, 3, 1, [(0, 4), (4, 7), (7, 10)], [(0, 5), (3, 8), (6, 10)]),
        (10, 3, 0, [(0, 4), (4, 7), (7, 10)], [(0, 4), (4, 7), (7, 10)]),
        (6, 2, 2, [(0, 3), (3, 6)], [(0, 5), (1, 6)]),
        (4, 4, 1, [(0, 1), (1, 2), (2, 3), (3, 4)], [(0, 2), (0, 3), (1, 4), (2, 4)]),
        (5, 1, 3, [(0, 5)], [(0, 5)]),
    ],
)
def test_rows_split_as_array_split_and_halos_clipped_at_the_ends(
    rows: int, parts: int, halo: int, owned: list, halos: list
) -> None:
    data = np.arange(rows * 3.0).reshape(rows, 3)
    blocks = sa.decompose(sa.SmartArray(data), parts, halo=halo)
    assert [(b.rows.start, b.rows.stop) for b in blocks] == owned
    assert [(b.halo_rows.start, b.halo_rows.stop) for b in blocks] == halos
    split = np.array_split(data, parts)
    for b, expected in zip(blocks, split, strict=True):
        np.testing.assert_array_equal(np.asarray(b.owned), expected)
        np.testing.assert_array_equal(np.asarray(b.with_halos), data[b.halo_rows])
        # with_halos[offset + i] is owned[i]
        np.testing.assert_array_equal(
            np.asarray(b.with_halos)[b.offset : b.offset + len(expected)], expected
        )
        assert b.first == b.rows.start
    assert [b.index for b in blocks] == list(range(parts))


def test_blocks_are_views_that_share_the_arrays_coherence() -> None:
    u = sa.SmartArray(np.zeros((6, 4)))
    top, bottom = sa.decompose(u, 2, halo=1)
    bottom.owned[0, 0] = 5.0  # a host write through the view
    assert u[3, 0] == 5.0 and np.asarray(top.with_halos)[3, 0] == 5.0

    with sa.trace() as t:
        fill[1, 8](sa.Out(top.owned), 1.0)
        fill[1, 8](sa.Out(bottom.owned), 2.0)
        result = np.asarray(u)
    assert (result[:3] == 1.0).all() and (result[3:] == 2.0).all()
    # Out: nothing goes up; the two written blocks come down, once each
    assert t.stats.h2d_bytes == 0 and t.stats.d2h_bytes == 6 * 4 * 8


def test_devices_round_robin_when_there_are_more_parts() -> None:
    u = sa.SmartArray(np.zeros((5, 1)))
    assert [b.device for b in sa.decompose(u, 5, devices=[0])] == [0] * 5
    assert [b.device for b in sa.decompose(u, 3, devices=(0, 0))] == [0, 0, 0]


def test_a_one_dimensional_array_and_a_view_split_too() -> None:
    a = sa.SmartArray(np.arange(10.0))
    blocks = sa.decompose(a[2:8], 2, halo=1)
    assert [np.asarray(b.with_halos).tolist() for b in blocks] == [
        [2.0, 3.0, 4.0, 5.0],
        [4.0, 5.0, 6.0, 7.0],
    ]
    assert "rows=0:3" in repr(blocks[0]) and "device=0" in repr(blocks[0])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((np.zeros(4),), {}, TypeError, "a must be a SmartArray, got ndarray"),
        ((sa.SmartArray(np.zeros(4)), 2.0), {}, TypeError, "parts must be an int, got float"),
        ((sa.SmartArray(np.zeros(4)), True), {}, TypeError, "parts must be an int"),
        ((sa.SmartArray(np.zeros(4)), 0), {}, ValueError, "parts must be at least 1, got 0"),
        ((sa.SmartArray(np.zeros(4)), 5), {}, ValueError, "at most the 4 row"),
        ((sa.SmartArray(np.zeros(4)),), {"halo": -1}, ValueError, "halo must be at least 0"),
        ((sa.SmartArray(np.zeros(4)),), {"halo": "1"}, TypeError, "halo must be an int, got str"),
        ((sa.SmartArray(np.zeros(4)),), {"devices": []}, ValueError, "at least one device"),
        ((sa.SmartArray(np.zeros(4)),), {"devices": 0}, TypeError, "devices must be a sequence"),
        ((sa.SmartArray(np.zeros(4)),), {"devices": "0"}, TypeError, "devices must be a sequence"),
        ((sa.SmartArray(np.zeros(4)),), {"devices": [7]}, ValueError, "names device 7, but"),
        ((sa.SmartArray(np.zeros(4)),), {"devices": [-1]}, ValueError, "at least 0"),
        ((sa.SmartArray(np.float64(1.0)),), {}, ValueError, "at least one dimension"),
    ],
)
def test_bad_input_is_refused_before_anything_moves(args, kwargs, error, match) -> None:
    with sa.trace() as t, pytest.raises(error, match=match):
        sa.decompose(*args, **kwargs)
    assert t.events == []


# -- several devices (fake driver, child process) ----------------------------------------------

STEPS = """
import warnings
from smartarray import _fakegpu
warnings.simplefilter("ignore")  # numba's low-occupancy warning

@cuda.jit
def smooth(u, v, offset):
    # v[i] = mean of u rows offset + i - 1 .. offset + i + 1 (clipped): a 1-D 3-point stencil
    i = cuda.grid(1)
    if i < v.size:
        k = offset + i
        lo = k - 1 if k > 0 else k
        hi = k + 1 if k + 1 < u.size else k
        v[i] = (u[lo] + u[k] + u[hi]) / 3.0

n = 64
u = sa.SmartArray(np.arange(float(n)), name="u")
v = sa.SmartArray(shape=(n,), dtype=np.float64, name="v")
pu, pv = sa.decompose(u, halo=1), sa.decompose(v, halo=1)
events = []
for step in range(3):
    with sa.trace() as t:
        for bu, bv in zip(pu, pv):
            with cuda.gpus[bu.device]:
                smooth[1, 64](sa.In(bu.with_halos), sa.Out(bv.owned), bu.offset)
    events.append(sorted((e.direction, e.source, e.target, e.start, e.stop) for e in t.events))
    pu, pv = pv, pu
    u, v = v, u
peer = {f"{a}->{b}": c for (a, b), c in _fakegpu.current().peer_copies.items()}
print(json.dumps({"devices": [b.device for b in pu], "events": events,
                  "values": np.asarray(u).tolist(), "peer": peer}))
"""


def _smooth_reference(n: int, steps: int) -> list[float]:
    u = np.arange(float(n))
    for _ in range(steps):
        padded = np.concatenate([u[:1], u, u[-1:]])
        u = (padded[:-2] + padded[1:-1] + padded[2:]) / 3.0
    return u.tolist()


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("peer", ["1", "0"])
def test_a_block_per_device_moves_only_halo_elements_between_devices(devices, peer) -> None:
    env = {"SMARTARRAY_FAKE_GPU_DEVICES": str(devices), "SMARTARRAY_FAKE_GPU_PEER": peer}
    out = run_fake(STEPS, env=env)
    assert out["devices"] == list(range(devices))
    np.testing.assert_allclose(out["values"], _smooth_reference(64, 3), rtol=1e-12)
    m = 64 // devices  # elements per block; 8 bytes each
    later = out["events"][1:]
    expected = []
    for k in range(devices):
        for j in (k - 1, k + 1):  # each neighbour's element next to block k, written by j
            if 0 <= j < devices:
                e = (j + 1) * m - 1 if j < k else j * m  # the element block k reads of j
                if peer == "1":
                    expected.append(["d2d", f"gpu:{j}", f"gpu:{k}", 8 * e, 8 * e + 8])
                else:
                    expected.append(["d2h", f"gpu:{j}", "host", 8 * e, 8 * e + 8])
                    expected.append(["h2d", "host", f"gpu:{k}", 8 * e, 8 * e + 8])
    assert later == [sorted(expected)] * 2
    copies = sum(out["peer"].values())
    if peer == "1":
        # step 1: one copy of the 2 shared elements per pair; later: 2 per pair a step
        assert copies == (devices - 1) + 2 * 2 * (devices - 1)
    else:
        assert copies == 0
