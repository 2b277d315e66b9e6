"""Review of several GPUs (issue 29): defects found, each shown on the fake driver.

Each test runs a child process on the fake CUDA driver with two devices (see
``tests/test_devices.py``): the driver runs queued work only when the host waits for it, so a
copy or launch that is not ordered after the work it reads sees the bytes from before.
"""

from __future__ import annotations

from tests.test_devices import _run


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
