"""Random programs run by several host threads on their own views of shared arrays.

Each program is drawn in the main thread: a few threads, each owning a slice of every shared
SmartArray, each with a list of steps on its slices (kernel launches on the default stream,
a stream of its own or its per-thread default stream, on one of the visible devices; host
writes; ``njit`` calls, with and without the GIL; host reads of its slice or of the whole
array). The threads then run at once. A thread's slices change only by its own steps, so a
NumPy model per thread is exact whatever the interleaving: every read a thread makes of its
slice is checked against it, and at the end the whole arrays, and every byte any copy marks
valid, against the model.

Time cap: ``max_examples`` below keeps each mode under about a minute on two cores (the
fake driver runs its kernels in Python: fewer examples there; its several-devices run is a
child process on 3 fake devices with fewer still). Measured: about 10 s per mode.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import cuda

import smartarray as sa
from smartarray import _fakegpu, memory
from smartarray._strict import state as _strict_state
from smartarray.testing import strict

FAKE_GPU = _fakegpu.current() is not None
# (not imported from tests.conftest: a second import of it in a fake-driver session sets
# NUMBA_ENABLE_CUDASIM in the environment, which later tests read)
STRICT = _strict_state.get() is not None
SLICE = 8  # elements each thread owns in each array
ARRAYS = 2


@cuda.jit
def k_add(x, value):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += value


@numba.njit
def j_add(x, value):
    for i in range(x.size):
        x[i] += value


@numba.njit(nogil=True)
def j_add_nogil(x, value):
    for i in range(x.size):
        x[i] += value


STREAMS = ("default", "own", "per-thread")
step = st.one_of(
    st.tuples(
        st.just("launch"),
        st.integers(0, ARRAYS - 1),
        st.integers(1, 9),
        st.sampled_from(STREAMS),
        st.integers(0, 2),  # device (modulo the visible ones)
    ),
    st.tuples(st.just("host"), st.integers(0, ARRAYS - 1), st.integers(1, 9)),
    st.tuples(st.just("njit"), st.integers(0, ARRAYS - 1), st.integers(1, 9), st.booleans()),
    st.tuples(st.just("read"), st.integers(0, ARRAYS - 1)),
    st.tuples(st.just("read_all"), st.integers(0, ARRAYS - 1)),
)
programs = st.lists(st.lists(step, min_size=1, max_size=6), min_size=2, max_size=4)


def _devices() -> int:
    return len(cuda.gpus) if FAKE_GPU else 1


def _run_thread(
    number: int, steps: list[tuple[Any, ...]], arrays: list[sa.SmartArray], model: np.ndarray
) -> None:
    """One thread's steps on its slices; checks its own reads against its model."""
    lo, hi = number * SLICE, (number + 1) * SLICE
    own_stream = cuda.stream()
    devices = _devices()
    for kind, which, *rest in steps:
        view = arrays[which][lo:hi]
        if kind == "launch":
            value, stream_kind, device = rest
            with cuda.gpus[device % devices]:
                stream = {
                    "default": 0,
                    "own": own_stream,
                    "per-thread": cuda.per_thread_default_stream(),
                }[stream_kind]
                if stream_kind == "own" and devices > 1:
                    stream = cuda.stream()  # (a stream of this device)
                k_add[1, 32, stream](view, float(value))
            model[which, lo:hi] += value
        elif kind == "host":
            view += float(rest[0])
            model[which, lo:hi] += rest[0]
        elif kind == "njit":
            value, nogil = rest
            (j_add_nogil if nogil else j_add)(view, float(value))
            model[which, lo:hi] += value
        elif kind == "read":
            np.testing.assert_array_equal(np.asarray(view), model[which, lo:hi])
        else:  # the whole array: others' slices may be anywhere in their programs
            whole = np.array(arrays[which])
            np.testing.assert_array_equal(whole[lo:hi], model[which, lo:hi])


def _check_valid_bytes(a: sa.SmartArray, expect: np.ndarray) -> None:
    """Every byte a copy marks valid holds the current value (read without counting)."""
    buf = a._buf
    state = buf.state
    item = expect.itemsize
    for where in state.locations:
        if where == "host":
            values = buf.host_bytes
        else:
            dev = buf.device_copy(where)
            if dev is None:
                continue
            device = int(where.partition(":")[2] or 0)
            with cuda.gpus[device]:
                values = memory._Uncounted(dev).copy_to_host()
        if values is None:
            continue
        values = values.view(expect.dtype)
        for i in range(expect.size):
            if state.is_valid(where, i * item, (i + 1) * item):
                assert values[i] == expect[i], (where, i)


def run_program(program: list[list[tuple[Any, ...]]]) -> None:
    threads = len(program)
    for device in range(_devices()):  # the driver touched first here, not by two threads at once
        with cuda.gpus[device]:
            cuda.current_context()
            # numba-cuda loads a kernel's module into a context at its first launch there, and
            # two threads doing that at once fail ("key already in dictionary"): load it here,
            # for the type the threads launch with (a SmartArray is its own specialization).
            k_add[1, 32](sa.SmartArray(np.zeros(2 * SLICE))[:SLICE], 0.0)
            cuda.synchronize()
    arrays = [sa.SmartArray(np.zeros(threads * SLICE)) for _ in range(ARRAYS)]
    model = np.zeros((ARRAYS, threads * SLICE))
    errors: list[BaseException] = []

    def worker(number: int) -> None:
        try:
            _run_thread(number, program[number], arrays, model)
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: more interleavings per program
    try:
        workers = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in workers), "a thread did not finish (deadlock?)"
    if errors:
        raise errors[0]
    for which, a in enumerate(arrays):
        np.testing.assert_array_equal(np.asarray(a), model[which])
    for device in range(_devices()):
        with cuda.gpus[device]:
            cuda.synchronize()
    for which, a in enumerate(arrays):
        _check_valid_bytes(a, model[which])


# (a child on several fake devices sets its own, smaller number)
EXAMPLES = int(os.environ.get("SMARTARRAY_THREAD_PROGRAMS", "8" if FAKE_GPU else "40"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False)
@given(program=programs)
def check_programs(program):
    run_program(program)


@pytest.mark.skipif(
    not (FAKE_GPU or STRICT), reason="the plain simulator cannot run two launches at once"
)
def test_threads_on_their_own_views_of_shared_arrays_match_numpy():
    check_programs()


@pytest.mark.strict_mode
@pytest.mark.parametrize("per_thread", [False, True])
def test_strict_threads_on_their_own_views_of_shared_arrays_match_numpy(per_thread):
    with strict(seed=7, per_thread_default_stream=per_thread):
        check_programs()


SEVERAL_DEVICES = """
from tests.engine.test_threads_properties import check_programs
check_programs()
print(json.dumps({"ok": True}))
"""


@pytest.mark.parametrize(("devices", "peer"), [("1", "1"), ("3", "1"), ("3", "0")])
def test_threads_on_fake_devices_match_numpy(devices, peer):
    from tests.doubles.test_fakegpu import run_fake

    env = {
        "SMARTARRAY_FAKE_GPU_DEVICES": devices,
        "SMARTARRAY_FAKE_GPU_PEER": peer,
        "SMARTARRAY_THREAD_PROGRAMS": "6",
    }
    assert run_fake(SEVERAL_DEVICES, env=env)["ok"]
