"""``SmartArray.prefetch(where, stream=)``: copies started early, waited for only where needed.

The values are checked in every mode; in strict mode and on the fake driver queued copies run
lazily, in a seeded adversarial order, so a host access that did not wait for a prefetched
download would read (or have its write overwritten by) bytes that land later.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numba import cuda

import smartarray as sa


@cuda.jit
def add_one(x):  # noqa: ANN001, ANN201
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def _moved(t: sa.Trace) -> list[tuple[str, int, str]]:
    return [(e.direction, e.nbytes, e.reason) for e in t.events]


@pytest.mark.parametrize("pinned", [True, False])
def test_prefetch_to_the_device_uploads_once_and_the_launch_moves_nothing(pinned: bool) -> None:
    a = sa.SmartArray(np.arange(8.0), pinned=pinned)
    s = sa.stream()
    with sa.trace() as t:
        a.prefetch("gpu", stream=s)
        add_one[1, 8, s](a)
    assert _moved(t) == [("h2d", 64, "prefetch")]
    np.testing.assert_array_equal(a.host(), np.arange(8.0) + 1)


@pytest.mark.parametrize("pinned", [True, False])
def test_prefetch_to_the_host_downloads_once_and_the_read_waits_for_it(pinned: bool) -> None:
    a = sa.SmartArray(np.arange(8.0), pinned=pinned)
    s = sa.stream()
    add_one[1, 8, s](a)
    with sa.trace() as t:
        a.prefetch("host")
        values = a.copy_to_host()  # a read-only access: it waits for the download only
    assert _moved(t) == [("d2h", 64, "prefetch")]
    np.testing.assert_array_equal(values, np.arange(8.0) + 1)


@pytest.mark.parametrize("held", [False, True])
def test_a_prefetched_download_waits_only_for_a_host_array_still_held(held: bool) -> None:
    # The solver's loop with options: the residual read in place and dropped, relaunched,
    # prefetched. A dropped array needs no refresh: the download stays in flight until the
    # next host access. One the user still holds is read without smartarray: waited for.
    r = sa.SmartArray(np.zeros(4), pinned=True)
    s = sa.stream()
    add_one[1, 4, s](r)
    kept = r.host()
    assert float(kept[0]) == 1.0
    if not held:
        del kept
    add_one[1, 4, s](r)
    r.prefetch("host", stream=s)
    assert bool(r._buf.arriving) is not held
    np.testing.assert_array_equal(r.host(), np.full(4, 2.0))
    if held:
        np.testing.assert_array_equal(kept, np.full(4, 2.0))


@pytest.mark.parametrize(
    "access",
    [
        pytest.param(lambda a: a.host(), id="host()"),
        pytest.param(lambda a: a.get("host"), id="get('host')"),
        pytest.param(lambda a: a.__setitem__(0, 1.0), id="a[0] = 1"),
    ],
)
def test_a_host_access_after_a_prefetched_download_waits_for_it_once(access: Any) -> None:
    """The solver's read with options: the download's arrival event is the buffer's entry for
    its stream, after the kernel, so the wait for it is the only one (a second wait for the
    same event is a driver call the hand-written pipeline does not make)."""
    from smartarray import _fakegpu

    fake = _fakegpu.current()
    if fake is None:
        pytest.skip("counts the fake driver's calls")
    r = sa.SmartArray(np.zeros(4), pinned=True)
    s = sa.stream()
    add_one[1, 4, s](r)
    r.prefetch("host", stream=s)
    before = fake.calls.copy()
    access(r)
    calls = fake.calls - before
    assert calls["cuEventSynchronize"] == 1 and calls["cuStreamSynchronize"] == 0, calls
    np.testing.assert_array_equal(r.copy_to_host()[1:], np.ones(3))
    add_one[1, 4, s](r)  # later work on the stream is waited for again
    np.testing.assert_array_equal(r.host()[1:], np.full(3, 2.0))


def test_a_host_write_after_a_prefetched_download_is_not_overwritten_by_it() -> None:
    a = sa.SmartArray(np.zeros(8), pinned=True)
    s = sa.stream()
    add_one[1, 8, s](a)
    a.prefetch("host", stream=s)
    a[0] = 5.0  # the download lands first, then this write
    expected = np.ones(8)
    expected[0] = 5.0
    np.testing.assert_array_equal(a.host(), expected)


def test_a_kernel_after_a_prefetched_download_runs_after_it() -> None:
    a = sa.SmartArray(np.zeros(8), pinned=True)
    s1, s2 = sa.stream(), sa.stream()
    add_one[1, 8, s1](a)
    a.prefetch("host", stream=s2)
    first = a.copy_to_host()
    add_one[1, 8, s1](a)  # ordered after the download on the device
    np.testing.assert_array_equal(first, np.ones(8))
    np.testing.assert_array_equal(a.copy_to_host(), np.full(8, 2.0))


def test_prefetch_of_current_bytes_moves_nothing() -> None:
    a = sa.SmartArray(np.arange(4.0))
    with sa.trace() as t:
        a.prefetch("host")
    assert t.events == []


def test_prefetch_to_the_device_of_data_valid_nowhere_allocates_its_copy_ahead() -> None:
    """An array made without data (``shape=``), prefetched to the device, gets its device
    copy there now (no byte moves): a launch that writes it or uploads the data produced into
    its host copy later allocates nothing (an allocation between two streams' work is implicit
    synchronisation on a GPU). Counted in the budget as any device copy."""
    used = sa.device_budget().used
    a = sa.SmartArray(shape=8, dtype=np.float64, pinned=True)
    with sa.trace() as t:
        a.prefetch("gpu")
    assert t.events == []
    assert sa.device_budget().used == used + a.nbytes
    assert "gpu" in a.valid_at  # (uninitialised data is current wherever a copy is)
    a[:] = np.arange(8.0)  # the program produces its data into the host copy
    with sa.trace() as t:
        add_one[1, 8](a)
    assert _moved(t) == [("h2d", 64, "device use")]
    assert sa.device_budget().used == used + a.nbytes  # the copy allocated ahead, reused
    np.testing.assert_array_equal(a.host(), np.arange(8.0) + 1)


@pytest.mark.parametrize(
    "where, stream, error, match",
    [
        ("disk", None, ValueError, "where"),
        ("gpu", 3, ValueError, "stream"),
        ("gpu", "s", TypeError, "stream"),
    ],
)
def test_bad_arguments_are_refused_before_anything_moves(
    where: object, stream: object, error: type, match: str
) -> None:
    a = sa.SmartArray(np.arange(4.0))
    with sa.trace() as t, pytest.raises(error, match=match):
        a.prefetch(where, stream=stream)  # type: ignore[arg-type]
    assert t.events == []
    assert a.valid_at == ("host",)


@pytest.mark.seeds
def test_a_prefetch_waits_for_another_streams_kernel_on_the_same_bytes_only() -> None:
    # Work on another stream is ordered before a prefetch where it touches the same bytes
    # (a kernel writing the half downloaded); a kernel on the other half needs no order, and
    # the host read still waits for it.
    a = sa.SmartArray(np.zeros(16), pinned=True)
    s1, s2, s3 = sa.stream(), sa.stream(), sa.stream()
    a.prefetch("gpu", stream=s1)
    add_one[1, 8, s1](a[8:])
    add_one[1, 8, s2](a[:8])
    a[8:].prefetch("host", stream=s3)
    np.testing.assert_array_equal(a.host(), np.ones(16))


@pytest.mark.seeds
def test_launches_on_disjoint_halves_on_two_streams_then_one_over_both() -> None:
    a = sa.SmartArray(np.zeros(16), pinned=True)
    s1, s2, s3 = sa.stream(), sa.stream(), sa.stream()
    for _ in range(3):
        add_one[1, 8, s1](sa.InOut(a[:8]))
        add_one[1, 8, s2](a[8:])
    add_one[1, 16, s3](a)  # reads and writes what both wrote: ordered after both
    a[4:12].prefetch("host", stream=s1)
    np.testing.assert_array_equal(a.host(), np.full(16, 4.0))


def test_a_loop_of_launches_prefetches_and_reads_creates_no_events_once_warm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The solver's loop (bench_time.py): each sweep's events (the prefetched download's
    arrival, the buffers' own events, cross-stream orders) are reused once nothing holds them,
    not created (and destroyed) per call: an event creation is a driver call the
    hand-written pipeline does not make."""
    from smartarray._memory import streams as _streams

    s = sa.stream()
    x = sa.SmartArray(np.zeros(8), pinned=True)
    res = [sa.SmartArray(np.zeros(1), pinned=True) for _ in range(2)]
    made = []
    real = _streams.new_event

    def counted() -> object:
        made.append(1)
        return real()

    def sweep(i: int) -> float:
        r = res[i % 2]
        add_one[1, 8, s](x)
        add_one[1, 1, s](r)
        r.prefetch("host", stream=s)
        return float(res[1 - i % 2].copy_to_host()[0])

    for i in range(4):  # warm: the pools fill
        sweep(i)
    monkeypatch.setattr(_streams, "new_event", counted)
    for i in range(4, 12):
        sweep(i)
    assert made == []
    np.testing.assert_array_equal(x.host(), np.full(8, 12.0))
    assert [float(r.host()[0]) for r in res] == [6.0, 6.0]
