"""SmartArrays in a thread with no current CUDA context.

A CUDA context is current per thread. A new thread has none, and ``with cuda.gpus[n]:`` pops
the one it pushed on exit, leaving none when none was current before. numba-cuda's own calls
make one current first (``require_context``); smartarray's queued copies, events and waits on
the default stream must too: a GPU refuses them with ``CUDA_ERROR_INVALID_CONTEXT`` (seen on
an H100, `bash .ci/gpu`), and so does the fake driver. On the simulator there are no contexts:
these tests pass trivially there; they bite under ``SMARTARRAY_FAKE_GPU=1`` and on a GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numba import cuda

import smartarray as sa
from tests._kernels import add_one

N = 64


def in_a_new_thread(fn: Callable[[], Any], leave_a_device_block: bool = False) -> Any:
    """Run ``fn`` in a new thread (no current context), or after a ``with cuda.gpus[0]:``
    block there (a context pushed and popped again), and return its result or raise."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            if leave_a_device_block:
                with cuda.gpus[0]:
                    pass
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the thread did not finish"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def current_on_the_device_only() -> sa.SmartArray:
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    add_one[1, N](a)  # the host copy is stale now
    return a


def on_a_stream() -> sa.SmartArray:
    a = sa.SmartArray(np.arange(N, dtype=np.float64))
    s = cuda.stream()
    add_one[1, N, s](a)  # the buffer's latest work: on a user's stream
    s.synchronize()
    return a


#: What a user does with an array from a thread, and the values it must then hold.
OPERATIONS: dict[str, Callable[[sa.SmartArray], np.ndarray]] = {
    "np.asarray (download)": lambda a: np.array(a),
    "get('host')": lambda a: np.array(a.get("host")),
    "a NumPy method": lambda a: np.array(a * 1.0),
    "host write, then upload": lambda a: (a.__setitem__(0, 7.0), a.get("gpu"), np.array(a))[2],
    "a kernel launch": lambda a: (add_one[1, N](a), np.array(a))[1],
    "gpu()": lambda a: a.gpu().copy_to_host(),
}
EXPECTED = {
    "np.asarray (download)": np.arange(N) + 1.0,
    "get('host')": np.arange(N) + 1.0,
    "a NumPy method": np.arange(N) + 1.0,
    "host write, then upload": np.concatenate([[7.0], np.arange(1, N) + 1.0]),
    "a kernel launch": np.arange(N) + 2.0,
    "gpu()": np.arange(N) + 1.0,
}


@pytest.mark.parametrize("leave_a_device_block", [False, True], ids=["new thread", "after with"])
@pytest.mark.parametrize(
    "made", [current_on_the_device_only, on_a_stream], ids=["default stream", "a stream"]
)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_thread_without_a_current_context_uses_a_smartarray(
    operation: str, made: Callable[[], sa.SmartArray], leave_a_device_block: bool
) -> None:
    a = made()
    got = in_a_new_thread(lambda: OPERATIONS[operation](a), leave_a_device_block)
    np.testing.assert_array_equal(got, EXPECTED[operation])
    np.testing.assert_array_equal(np.array(a), EXPECTED[operation])  # and in this thread


def test_the_main_thread_after_its_only_device_block_ended() -> None:
    """The heat_devices example's shape: the first device work inside ``with cuda.gpus[0]:``,
    a host read after it (in a thread that had no context before the block)."""

    def run() -> np.ndarray:
        with cuda.gpus[0]:
            a = current_on_the_device_only()
        return np.array(a)

    np.testing.assert_array_equal(in_a_new_thread(run), np.arange(N) + 1.0)


def test_a_smartarray_made_and_released_in_a_thread_without_a_context() -> None:
    """Allocation, upload, download and freeing the device copy, all from such a thread."""

    def run() -> float:
        a = sa.SmartArray(np.ones(N))
        a.get("gpu")
        a.mark_changed("gpu")
        total = float(np.sum(a))
        del a
        return total

    assert in_a_new_thread(run) == N


def test_an_eviction_from_a_thread_without_a_context_downloads_what_it_must() -> None:
    """Making room for one device copy downloads another's newer bytes first, from a thread
    with no current context (the budget's eviction path, not a read)."""
    from smartarray._engine import residency as _residency

    a = current_on_the_device_only()  # newer on the device: must come down when evicted
    b = sa.SmartArray(np.zeros(N))
    with _residency._lock:  # other tests' copies that may go: gone, so the budget is exact
        _residency._evict(1 << 62, None, "budget")
    kept = sum(r.nbytes for r in sa.device_budget().resident if r.kept)
    sa.set_device_budget(kept + a.nbytes)  # room for one of the two
    try:
        in_a_new_thread(lambda: b.get("gpu"))
        assert not a.is_valid("gpu")  # evicted
    finally:
        sa.set_device_budget(None)
    np.testing.assert_array_equal(np.array(a), np.arange(N) + 1.0)


@pytest.mark.parametrize(
    "free",
    [lambda: sa.device_budget(), lambda: sa.empty_cache()],
    ids=["device_budget", "empty_cache"],
)
def test_device_memory_freed_from_a_thread_without_a_context_is_given_back(
    free: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead array's device copy, retired until its work ran, is freed by the next budget
    query or cache release, in whatever thread makes it. numba-cuda defers its frees and
    flushes them where a list fills up: ``cuMemFree`` then runs in that thread, which a
    thread with no current context refuses (the memory leaks, the error shows only in a
    finalizer's report)."""
    import gc
    import sys

    from numba.cuda.core import config

    a = current_on_the_device_only()
    a.gpu()  # handed out: its copy is freed when it dies, not kept for reuse
    del a
    gc.collect()  # retired now: its kernel may still run
    cuda.synchronize()
    failures: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", failures.append)
    monkeypatch.setattr(config, "CUDA_DEALLOCS_COUNT", 0)  # every free at once, where it drops
    in_a_new_thread(free)
    assert [str(f.exc_value) for f in failures] == []
