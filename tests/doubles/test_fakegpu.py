"""The fake CUDA driver (``SMARTARRAY_FAKE_GPU=1``): numba-cuda's real target without a GPU.

Each test runs a child process on the fake driver (this session runs on the simulator), which
prints one JSON line with what it observed; the test asserts on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._targets import real_target_env, with_checkout

ROOT = Path(__file__).resolve().parents[2]


def _child(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run this Python with ``args`` in the checkout, its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def run_fake(
    code: str,
    *,
    seed: int | None = None,
    check: bool = True,
    simulator: bool = False,
    env: dict[str, str] | None = None,
) -> dict:
    """Run ``code`` in a child on the fake driver (or the simulator); it prints JSON last.

    ``env`` adds variables to the child's environment (the fake driver reads its settings,
    such as ``SMARTARRAY_FAKE_GPU_DEVICES``, when it is loaded). The child's adversarial order
    is ``seed``'s, by default this session's ``SMARTARRAY_FAKE_GPU_SEED`` (0 when unset), so
    that CI's seeded runs reach the children too.
    """
    extra = env
    env = real_target_env()
    env.update(extra or {})
    with_checkout(env)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        if seed is None:
            seed = int(os.environ.get("SMARTARRAY_FAKE_GPU_SEED", "0"))
        env.update(SMARTARRAY_FAKE_GPU="1", SMARTARRAY_FAKE_GPU_SEED=str(seed))
    prelude = "import json, numpy as np, smartarray as sa\nfrom numba import cuda\n"
    done = _child(["-c", prelude + textwrap.dedent(code)], env)
    if check and done.returncode != 0:
        raise AssertionError(f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    try:  # the whole output (an indented report), or its last line after other prints
        out = json.loads(done.stdout)
    except ValueError:
        lines = done.stdout.strip().splitlines()
        out = json.loads(lines[-1]) if lines else {}
    out.update(_stderr=done.stderr, _returncode=done.returncode)
    return out


KERNEL = """
@cuda.jit
def scale(a, x):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * x + i
"""


def test_the_real_stack_runs_over_the_fake_driver() -> None:
    """numba-cuda's dispatcher and devicearray, cuda.core's launch and cuda-bindings all run."""
    out = run_fake(
        KERNEL
        + """
import sys
from smartarray import _fakegpu
d = cuda.to_device(np.arange(40.0))
scale[2, 32](d, 2.0)  # compile and warm up outside the trace
seen = set()
def profile(frame, event, arg):
    if event == "call":
        seen.add(frame.f_code.co_filename.replace("\\\\", "/"))
    elif event == "c_call":
        seen.add("C:" + str(getattr(arg, "__module__", "") or getattr(type(arg), "__module__", "")))
sys.setprofile(profile)
scale[2, 32](d, 2.0)
sys.setprofile(None)
fake = _fakegpu.current()
print(json.dumps({
    "simulator": cuda.simulator_available() if hasattr(cuda, "simulator_available") else None,
    "is_sim": type(cuda.get_current_device()).__module__,
    "values": d.copy_to_host().tolist(),
    "files": sorted(seen),
    "calls": dict(fake.calls),
    "stack": fake.launch_stack,
    "launch_module": sys.modules["numba.cuda.dispatcher"].launch.__module__,
}))
"""
    )
    expected = ((np.arange(40.0) * 2 + np.arange(40)) * 2 + np.arange(40)).tolist()
    assert out["values"] == expected
    assert "simulator" not in out["is_sim"]
    files = "\n".join(out["files"])
    assert "numba_cuda/numba/cuda/dispatcher.py" in files  # _Kernel.launch
    assert "numba_cuda/numba/cuda/cudadrv/devicearray.py" in files
    # The frames above the driver: the fake driver's own callback wrapper, then numba-cuda's
    # _Kernel.launch, which called cuda.core's compiled launch (no Python frame between).
    callers = [(Path(f).name, fn) for f, fn in out["stack"] if "_fakegpu" not in f]
    assert callers[0] == ("dispatcher.py", "launch")
    assert any("numba_cuda/numba/cuda/dispatcher.py" in f for f, _ in out["stack"])
    assert out["launch_module"] == "cuda.core._launcher"
    assert out["calls"].get("cuLaunchKernelEx", 0) + out["calls"].get("cuLaunchKernel", 0) >= 2
    assert out["calls"]["cuLibraryLoadData"] >= 1  # the cubin nvJitLink made was loaded


import numpy as np  # noqa: E402


def test_copies_streams_and_events_on_the_real_target() -> None:
    out = run_fake(
        """
s = cuda.stream()
h = cuda.pinned_array(8)
h[:] = np.arange(8)
d = cuda.to_device(h, stream=s)   # async from page-locked memory: reads h when it runs
h[:] = -1                         # CUDA lets this race; the fake driver runs the copy late
s.synchronize()
raced = d.copy_to_host().tolist()
e = cuda.event()
d2 = cuda.to_device(np.arange(8.0) + 10)
e.record()
e.synchronize()
print(json.dumps({"raced": raced, "d2": d2.copy_to_host().tolist(), "done": e.query()}))
"""
    )
    assert out["raced"] == [-1.0] * 8  # the DMA read the host bytes when it ran
    assert out["d2"] == (np.arange(8.0) + 10).tolist()
    assert out["done"] is True


def test_use_after_free_and_destroyed_streams_are_errors() -> None:
    out = run_fake(
        """
from cuda.bindings import driver as drv
cuda.current_context()  # numba-cuda initialises the driver and makes its context current
_, dptr = drv.cuMemAlloc(32)
drv.cuMemFree(dptr)
host = np.empty(4)
err, = drv.cuMemcpyDtoH(host.ctypes.data, dptr, 32)
err2, h = drv.cuStreamCreate(0)
err3, = drv.cuStreamDestroy(h)
err4, = drv.cuStreamSynchronize(h)
codes = {"after_free": err, "create": err2, "destroy": err3, "dead": err4}
print(json.dumps({k: int(v) for k, v in codes.items()}))
"""
    )
    assert out["after_free"] == 1  # CUDA_ERROR_INVALID_VALUE: freed memory is no longer mapped
    assert (out["create"], out["destroy"]) == (0, 0)
    assert out["dead"] == 400  # CUDA_ERROR_INVALID_HANDLE


def test_an_out_of_bounds_access_faults_the_context_naming_the_kernel() -> None:
    out = run_fake(
        """
from numba.cuda.cudadrv.driver import CudaAPIError
@cuda.jit
def unchecked(values):
    i = cuda.grid(1)
    values[i] = 1.0   # no bounds check: 64 threads, 10 elements
d = cuda.to_device(np.zeros(10))
unchecked[1, 64](d)
codes = []
for step in (cuda.synchronize, lambda: cuda.to_device(np.zeros(2))):
    try:
        step()
        codes.append(0)
    except CudaAPIError as exc:
        codes.append(int(exc.code))
print(json.dumps({"codes": codes}))
"""
    )
    assert out["codes"] == [700, 700]  # CUDA_ERROR_ILLEGAL_ADDRESS, sticky as on a GPU
    assert "kernel unchecked" in out["_stderr"] and "out of bounds" in out["_stderr"]


@pytest.mark.parametrize("debug", [True, False])
def test_a_kernel_exception_is_reported_only_with_debug(debug: bool) -> None:
    out = run_fake(
        f"""
@cuda.jit(debug={debug}, opt=False)
def boom(values):
    i = cuda.grid(1)
    if i == 3:
        raise ValueError("three")
    values[i] = 1.0
d = cuda.to_device(np.zeros(16))
try:
    boom[2, 8](d)  # two blocks: the second runs after the first one's exception
    cuda.synchronize()
    error = None
except ValueError as exc:
    error = str(exc)
print(json.dumps({{"error": error, "values": d.copy_to_host().tolist()}}))
"""
    )
    if debug:
        assert "three" in out["error"] and "tid=[0, 0, 3]" in out["error"]
    else:
        assert out["error"] is None  # a GPU does not check without debug
        assert out["values"][:3] == [1.0, 1.0, 1.0]
        # Only the faulting thread stops: the rest of its block and the next block run on.
        assert out["values"] == [1.0] * 3 + [0.0] + [1.0] * 12


def test_a_smartarray_through_a_kernel_moves_only_stale_bytes() -> None:
    out = run_fake(
        """
@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0
a = sa.SmartArray(np.zeros(1000))
add_one[8, 128](a)
a[10:20] = 5.0
with sa.trace() as t:
    add_one[8, 128](a)
values = np.asarray(a).tolist()
print(json.dumps({"h2d": t.stats.h2d_bytes, "values": values}))
"""
    )
    expected = np.full(1000, 2.0)
    expected[10:20] = 6.0
    assert out["values"] == expected.tolist()
    assert out["h2d"] == 80


DEMO_STRATEGIES = """
from smartarray import _demo
figures = {}
for key in ("hand", "smartarray"):
    with sa.trace() as t:
        final = _demo.STRATEGIES[key][1](16, 6, 3)
    figures[key] = [t.stats.h2d_bytes, t.stats.d2h_bytes, float(np.asarray(final).sum())]
print(json.dumps(figures))
"""


def test_the_demo_strategies_move_the_same_bytes_as_on_the_simulator() -> None:
    fake = run_fake(DEMO_STRATEGIES)
    simulated = run_fake(DEMO_STRATEGIES, simulator=True)
    for key in ("hand", "smartarray"):
        assert fake[key][:2] == simulated[key][:2], key
        assert fake[key][2] == pytest.approx(simulated[key][2])


DEMO = (
    "import runpy, sys; "
    "sys.argv = ['smartarray', 'demo', '--size', '16', '--steps', '6', '--every', '3', '--json']; "
    "runpy.run_module('smartarray', run_name='__main__')"
)


def test_python_m_smartarray_demo_runs_on_the_real_target() -> None:
    """The automatic-copy strategy forwards numba-cuda's cuda.core Stream to sa.to_device."""
    code = DEMO.replace("; ", "\n") + "\n"
    fake = run_fake(code, check=False)
    assert fake["_returncode"] == 0, fake["_stderr"][-2000:]
    simulated = run_fake(code, simulator=True)
    for key, figures in simulated["strategies"].items():
        got = fake["strategies"][key]
        assert (got["h2d_bytes"], got["d2h_bytes"]) == (figures["h2d_bytes"], figures["d2h_bytes"])


ADD_ONE = """
@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0
"""


def test_a_host_read_after_the_launch_stream_was_destroyed() -> None:
    """The buffer must wait on an event it owns, not on the (now dead) launch stream handle."""
    out = run_fake(
        ADD_ONE
        + """
from cuda.bindings import driver as drv
cuda.current_context()
_, handle = drv.cuStreamCreate(1)  # a non-blocking stream that a library owns (CuPy-like)
a = sa.SmartArray(np.zeros(64))
add_one[1, 64, cuda.external_stream(int(handle))](a)
destroyed, = drv.cuStreamDestroy(handle)   # the owner drops its stream: legal in CUDA
print(json.dumps({"destroyed": int(destroyed), "values": np.asarray(a).tolist()}))
""",
        check=False,
    )
    assert out.get("destroyed") == 0, out["_stderr"][-2000:]
    assert out["values"] == [1.0] * 64


def test_a_hint_may_forward_numba_cudas_stream_to_smartarray() -> None:
    """numba-cuda hands ArgHint.to_device a cuda.core Stream (sync(), __cuda_stream__)."""
    out = run_fake(
        ADD_ONE
        + """
from numba.cuda import args as numba_args
class Forwarding(numba_args.ArgHint):
    def __init__(self, value):
        self.value = value
    @property
    def _numba_type_(self):
        from numba import typeof
        return typeof(self.value)
    def to_device(self, retr, stream=0):
        self.stream_type = type(stream).__module__ + "." + type(stream).__name__
        dev = sa.to_device(self.value, stream=stream)
        retr.append(lambda: dev.copy_to_host(self.value, stream=stream))
        # numba-cuda reads .ptr of what to_device returns: what its own In returns
        return numba_args.In(dev).to_device(retr, stream)
host = np.zeros(8)
hint = Forwarding(host)
add_one[1, 8](hint)
print(json.dumps({"values": host.tolist(), "stream": hint.stream_type}))
""",
        check=False,
    )
    assert out.get("values") == [1.0] * 8, out["_stderr"][-2000:]


def test_a_cuda_array_interface_export_with_a_held_host_array() -> None:
    """The consumer's writes must reach the host: the held range is stale once exported."""
    out = run_fake(
        ADD_ONE
        + """
a = sa.SmartArray(np.zeros(4))
view = np.asarray(a)              # a held host array
add_one[1, 32](cuda.as_cuda_array(a))
cuda.synchronize()
print(json.dumps({"read": np.asarray(a).tolist()}))
"""
    )
    assert out["read"] == [1.0] * 4


def test_sa_jit_with_a_page_locked_input_is_done_reading_it_when_the_launch_returns() -> None:
    """``sa.jit`` makes it numba's ``In``: an async upload a host write right after races."""
    out = run_fake(
        """
@sa.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]
src = cuda.pinned_array(64)
src[:] = np.arange(64)
dst = sa.SmartArray(np.zeros(64))
copy[1, 64](src, dst)
src[:] = -1                       # plain cuda.jit (InOut) waited before returning
print(json.dumps({"read": np.asarray(dst).tolist()}))
"""
    )
    assert out["read"] == np.arange(64.0).tolist()


# The queue of the fake driver, in this process (pure Python: no driver is loaded) -----------


def _queue(seed: int):
    import itertools

    from smartarray._fakegpu import _queue

    session_seed = os.environ.get("SMARTARRAY_FAKE_GPU_SEED")  # (a seeded CI run's)
    os.environ["SMARTARRAY_FAKE_GPU_SEED"] = str(seed)
    try:
        ids = itertools.count(0x100, 0x10)
        return _queue.Queue(lambda: next(ids))
    finally:
        if session_seed is None:
            del os.environ["SMARTARRAY_FAKE_GPU_SEED"]
        else:
            os.environ["SMARTARRAY_FAKE_GPU_SEED"] = session_seed


def test_queued_work_keeps_stream_and_event_order_in_every_seeded_order() -> None:
    orders = set()
    for seed in range(12):
        q = _queue(seed)
        a, b = q.create_stream(1), q.create_stream(1)  # two non-blocking streams
        for i in range(3):
            q.enqueue(a, lambda: None, f"a{i}")
            q.enqueue(b, lambda: None, f"b{i}")
        e = q.create_event(0)
        e.op = q.enqueue(a, lambda: None, "record")
        q.enqueue(b, lambda: None, "wait", after=[e.op])
        q.enqueue(b, lambda: None, "b_after")
        q.synchronize_all()
        ran = q.ran  # labels in the order the work ran
        assert [x for x in ran if x in ("a0", "a1", "a2", "record")] == ["a0", "a1", "a2", "record"]
        assert [x for x in ran if x.startswith("b")] == ["b0", "b1", "b2", "b_after"]
        assert ran.index("b_after") > ran.index("record")  # the event wait
        orders.add(tuple(ran))
    assert len(orders) > 1  # the seed changes the interleaving


def test_a_wait_that_starts_inside_another_wait_does_not_run_work_twice() -> None:
    """A host wait made while another is choosing what to run (a finalizer that frees device
    memory, which waits, run by a garbage collection in the same thread) ran the work the
    outer wait had already picked: the outer one then failed with ``list.remove(x): x not in
    list`` (seen once in CI). The inner wait must not run queued work then."""
    q = _queue(0)
    a = q.create_stream(1)
    ran: list[str] = []
    first = q.enqueue(a, lambda: ran.append("first"), "first")
    second = q.enqueue(a, lambda: ran.append("second"), "second")

    class Deps(list):
        collected = False

        def __iter__(self):  # the outer wait reads what ``second`` waits for: a collection
            if not Deps.collected:  # runs a finalizer then, which waits for the stream
                Deps.collected = True
                q.synchronize(a)
            return super().__iter__()

    second.deps = Deps(second.deps)
    q.run_until([second])
    assert ran == ["first", "second"] and first.done and second.done and not q.ops


def test_waiting_for_one_stream_runs_only_what_it_needs() -> None:
    q = _queue(0)
    a, b = q.create_stream(1), q.create_stream(1)
    ran: list[str] = []
    q.enqueue(a, lambda: ran.append("a"), "a")
    q.enqueue(b, lambda: ran.append("b"), "b")
    q.synchronize(a)
    assert ran == ["a"] and not q.idle(b)


@pytest.mark.parametrize(("flags", "waits"), [(0, True), (1, False)])
def test_the_legacy_default_stream_waits_only_for_blocking_streams(flags: int, waits: bool) -> None:
    q = _queue(0)
    s = q.create_stream(flags)
    ran: list[str] = []
    q.enqueue(s, lambda: ran.append("side"), "side")
    q.enqueue(q.stream(0), lambda: ran.append("legacy"), "legacy")
    q.synchronize(q.stream(0))
    assert ran == (["side", "legacy"] if waits else ["legacy"])


def test_a_destroyed_stream_handle_is_refused_but_its_work_still_runs() -> None:
    from smartarray._fakegpu._errors import CudaError

    q = _queue(0)
    s = q.create_stream(0)
    ran: list[str] = []
    q.enqueue(s, lambda: ran.append("work"), "work")
    q.destroy_stream(s.handle)
    with pytest.raises(CudaError) as info:
        q.stream(s.handle)
    assert info.value.code == 400
    q.synchronize_all()
    assert ran == ["work"]


def test_polling_an_event_sees_it_pending_once_then_done() -> None:
    out = run_fake(
        """
s = cuda.stream()
d = cuda.to_device(np.zeros(4), stream=s)
e = cuda.event()
e.record(s)
polls = [e.query() for _ in range(3)]
print(json.dumps({"polls": polls}))
"""
    )
    assert out["polls"] == [False, True, True]


def test_numba_cudas_own_kernels_run_on_the_fake_driver() -> None:
    """``d[:] = 1.0`` launches numba-cuda's ``_assign_kernel``, which closes over ``numba.cuda``."""
    out = run_fake(
        """
d = cuda.device_array(8)
d[:] = 1.5
d[2:4] = np.array([7.0, 8.0])
print(json.dumps({"values": d.copy_to_host().tolist()}))
"""
    )
    assert out["values"] == [1.5, 1.5, 7.0, 8.0, 1.5, 1.5, 1.5, 1.5]


def test_with_run_kernels_off_a_launch_is_checked_queued_and_timed_but_writes_nothing() -> None:
    """Host-time benchmarks turn the kernels' bodies off: the launch is still the driver's
    (counted, ordered on its stream, timed by the clock), its memory untouched, and a bad
    launch still fails."""
    out = run_fake(
        """
from smartarray import _fakegpu
fake = _fakegpu.current()

@cuda.jit
def fill(a):
    a[cuda.grid(1)] = 7.0

d = cuda.to_device(np.zeros(4, np.float32))
fill[1, 4](d)
ran = d.copy_to_host().tolist()
d = cuda.to_device(np.zeros(4, np.float32))

def launches():
    return fake.calls["cuLaunchKernelEx"] + fake.calls["cuLaunchKernel"]

def compute_busy():
    return sum(v for k, v in fake.clock.busy().items() if "compute" in str(k))

fake.run_kernels = False
before, busy = launches(), compute_busy()
fill[1, 4](d)
skipped = d.copy_to_host().tolist()
launched, timed = launches() - before, compute_busy() - busy
before = launches()
try:
    fill[1, 2048](d)  # (more threads per block than the device allows: the driver refuses)
    refused = False
except Exception as exc:
    refused = type(exc).__name__
reached = launches() - before
fake.run_kernels = True
fill[1, 4](d)
print(json.dumps({"ran": ran, "skipped": skipped, "launched": launched, "timed": timed,
                  "refused": refused, "reached": reached, "again": d.copy_to_host().tolist()}))
""",
        env={"SMARTARRAY_FAKE_GPU_TIMING": "pcie5"},
    )
    assert out["ran"] == [7.0] * 4
    assert out["skipped"] == [0.0] * 4
    assert out["launched"] == 1
    assert out["timed"] > 0  # (the skipped kernel's modelled duration on the compute engine)
    assert out["refused"] == "CUDAError"  # (cuda.core's, from the driver's error code)
    assert out["reached"] == 1  # (refused by the fake driver, not before it)
    assert out["again"] == [7.0] * 4


def test_what_the_fake_driver_cannot_run_fails_the_launch_loudly() -> None:
    """A kernel calling what has no Python equivalent fails its launch: never a silent no-op."""
    out = run_fake(
        """
from numba.cuda.cudadrv.driver import CudaAPIError
from numba import types
from numba.cuda.extending import intrinsic

@intrinsic
def forty_two(typingctx):  # an intrinsic has no Python body
    def codegen(context, builder, sig, args):
        return context.get_constant(types.float64, 42.0)
    return types.float64(), codegen

@cuda.jit
def uses_an_intrinsic(x):
    x[0] = forty_two()

d = cuda.to_device(np.zeros(2))
try:
    uses_an_intrinsic[1, 1](d)
    cuda.synchronize()
    error = None
except CudaAPIError as exc:
    error = str(exc)
print(json.dumps({"error": error}))
"""
    )
    # The fake driver's limit, not a GPU fault: its own error (not sticky), never a silent no-op.
    assert out["error"] is not None and "CUDA_ERROR_NOT_SUPPORTED" in out["error"], out
    assert "uses_an_intrinsic" in out["_stderr"] and "forty_two" in out["_stderr"]


def test_an_ellipsis_indexes_a_smartarrays_device_view_on_the_real_target() -> None:
    """numba-cuda's device arrays have no ``...`` (``d[...] = 0`` raises on a GPU): ours do."""
    out = run_fake(
        """
a = sa.SmartArray(np.zeros((2, 3)))
d = a.gpu()
d[...] = 1.0
d[..., 1] = 2.0
d[0, ...] = d[1, ...]
col = d[..., 2].copy_to_host().tolist()
a.gpu_changed()
print(json.dumps({"values": np.asarray(a).tolist(), "col": col}))
"""
    )
    assert out["values"] == [[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]]
    assert out["col"] == [1.0, 1.0]


def test_kernels_made_in_a_factory_call_the_device_functions_they_close_over() -> None:
    """A kernel factory (as numba-cuda's ``cuda.reduce`` is one) closes over device functions."""
    out = run_fake(
        """
def make(scale):
    @cuda.jit(device=True)
    def inner(v):
        return v * scale

    @cuda.jit(device=True)
    def outer(v):
        return inner(v) + 1.0

    @cuda.jit
    def kernel(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = outer(x[i])

    return kernel

a = sa.SmartArray(np.arange(4.0))
make(3.0)[1, 4](a)
print(json.dumps({"values": np.asarray(a).tolist()}))
"""
    )
    assert out["values"] == [1.0, 4.0, 7.0, 10.0], out["_stderr"][-2000:]


def test_a_kernel_exception_keeps_its_own_message_beside_numbas_raise_sites() -> None:
    """numba's compiled ``range`` has a ValueError raise site of its own: the user's is reported."""
    out = run_fake(
        """
@cuda.jit(debug=True, opt=False)
def raises_after_a_loop(x):
    if cuda.grid(1) == 0:
        for j in range(x.size):
            x[j] += 1.0
        raise ValueError("kernel raised after writing")

try:
    raises_after_a_loop[1, 32](cuda.to_device(np.zeros(4)))
    error = None
except ValueError as exc:
    error = str(exc)
print(json.dumps({"error": error}))
"""
    )
    assert out["error"] is not None and "kernel raised after writing" in out["error"], out


def test_a_fake_driver_session_spread_over_xdist_workers_runs_on_it(tmp_path: Path) -> None:
    """``SMARTARRAY_FAKE_GPU=1 python -m pytest -n 2``: every pytest-xdist worker runs on the
    fake driver (they start after the session's conftest removed the switch, and ran on the
    simulator: half the suite's time, none of its real-target paths)."""
    pytest.importorskip("xdist")
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import os, numba\n"
        "def test_on_the_fake_driver():\n"
        "    assert os.environ.get('PYTEST_XDIST_WORKER')\n"
        "    assert not numba.config.ENABLE_CUDASIM\n"
        "    from numba import cuda\n"
        "    assert cuda.is_available()\n",
        encoding="utf-8",
    )
    env = with_checkout(real_target_env())
    env["SMARTARRAY_FAKE_GPU"] = "1"
    args = ["-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
    done = _child(["-m", "pytest", *args, "--rootdir", str(tmp_path), str(probe)], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


SYNC_CALLS = """
import warnings
from cuda.bindings import driver as drv
from smartarray import _fakegpu
warnings.simplefilter("ignore")  # numba's low-occupancy warning

@cuda.jit
def add_hundred(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 100.0

def ptr(d):
    return int(d.device_ctypes_pointer.value)

fake = _fakegpu.current()
cuda.current_context()
err, handle = drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
side = cuda.external_stream(int(handle))
"""


@pytest.mark.seeds
def test_synchronous_copies_and_memset_return_with_the_work_queued_on_the_legacy_stream() -> None:
    """CUDA's "API synchronization behavior": ``cuMemcpyDtoD`` and ``cuMemsetD8`` of device
    memory need no host-side wait, and ``cuMemcpyHtoD`` from pageable memory returns once the
    source is staged. The fake leaves all three queued on the legacy stream, so a kernel on a
    non-blocking stream (not ordered after that stream) may run first."""
    out = run_fake(
        SYNC_CALLS
        + """
src = cuda.to_device(np.ones(4))
dst = cuda.device_array(4)
zeroed = cuda.to_device(np.ones(4))
staged = cuda.device_array(4)
host = np.full(4, 7.0)
cuda.synchronize()
drv.cuMemcpyHtoD(ptr(staged), host.ctypes.data, 32)  # (it synchronises the legacy stream)
host[:] = -1.0  # staged at the call: the copy keeps the bytes it had
drv.cuMemcpyDtoD(ptr(dst), ptr(src), 32)
drv.cuMemsetD8(ptr(zeroed), 0, 32)
queued = sorted(op.label for op in fake.queue.ops)
add_hundred[1, 32, side](src)
add_hundred[1, 32, side](zeroed)
side.synchronize()  # runs the kernels only: nothing orders them after the legacy stream
print(json.dumps({
    "queued": queued,
    "dst": dst.copy_to_host().tolist(),
    "zeroed": zeroed.copy_to_host().tolist(),
    "staged": staged.copy_to_host().tolist(),
}))
"""
    )
    assert out["queued"] == ["DtoD", "HtoD", "memset"]
    assert out["dst"] == [101.0] * 4  # the kernel ran before the copy read its source
    assert out["zeroed"] == [0.0] * 4  # the memset ran after the kernel's write
    assert out["staged"] == [7.0] * 4


def test_a_copy_from_page_locked_memory_is_synchronous() -> None:
    out = run_fake(
        SYNC_CALLS
        + """
h = cuda.pinned_array(4)
h[:] = 3.0
d = cuda.device_array(4)
drv.cuMemcpyHtoD(ptr(d), h.ctypes.data, 32)
print(json.dumps({"queued": [op.label for op in fake.queue.ops]}))
"""
    )
    assert out["queued"] == []


def test_a_free_waits_for_the_freeing_device_only() -> None:
    """What drivers do (the API documents no wait): ``cuMemFree`` waits for its context's
    device; another device's queued work stays queued."""
    out = run_fake(
        SYNC_CALLS
        + """
with cuda.gpus[1]:
    other = cuda.to_device(np.zeros(4))
    s1 = cuda.stream()
    add_hundred[1, 32, s1](other)
mine = cuda.to_device(np.zeros(4))
s0 = cuda.stream()
add_hundred[1, 32, s0](mine)
err, scratch = drv.cuMemAlloc(64)
drv.cuMemFree(scratch)
labels = [op.label for op in fake.queue.ops]
print(json.dumps({"devices": sorted({op.stream.device for op in fake.queue.ops})}))
""",
        env={"SMARTARRAY_FAKE_GPU_DEVICES": "2"},
    )
    assert out["devices"] == [1]


def test_page_locking_honours_portable_devicemap_and_overlap() -> None:
    """``cuMemHostRegister`` without PORTABLE page-locks for the registering context only
    (another device's asynchronous copy stages it as pageable memory); a registered range is
    kernel-accessible only with DEVICEMAP, where mapped; overlapping ranges are refused;
    READ_ONLY memory is read-only to kernels."""
    out = run_fake(
        SYNC_CALLS
        + """
from numba.cuda.cudadrv.driver import CudaAPIError

def code(call):
    try:
        result = call()
    except CudaAPIError as exc:
        return int(exc.code)
    return int(result[0] if isinstance(result, tuple) else result)

R = drv.CU_MEMHOSTREGISTER_DEVICEMAP
base = np.zeros(4096)
h = base[:4]
p = h.ctypes.data
assert code(lambda: drv.cuMemHostRegister(p, 32, 0)) == 0
overlap = code(lambda: drv.cuMemHostRegister(p - 8, 64, 0))
locked_here = fake.host.page_locked(p, 32, 0)
locked_there = fake.host.page_locked(p, 32, 1)
with cuda.gpus[1]:
    d = cuda.device_array(4)
    s1 = cuda.stream()
    h[:] = 5.0
    drv.cuMemcpyHtoDAsync(ptr(d), p, 32, s1.handle)  # pageable for device 1: staged now
    h[:] = -5.0
    s1.synchronize()
    staged = d.copy_to_host().tolist()
cuda.current_context()  # (leaving the block left no context current)
unmapped = code(lambda: drv.cuMemHostGetDevicePointer(p, 0))
drv.cuMemHostUnregister(p)

q = base[1000:1004]
pq = q.ctypes.data
drv.cuMemHostRegister(pq, 32, drv.CU_MEMHOSTREGISTER_DEVICEMAP)
mapped_here = code(lambda: drv.cuMemHostGetDevicePointer(pq, 0))
with cuda.gpus[1]:
    mapped_there = code(lambda: drv.cuMemHostGetDevicePointer(pq, 0))
cuda.current_context()
drv.cuMemHostUnregister(pq)
flags = drv.CU_MEMHOSTREGISTER_DEVICEMAP | drv.CU_MEMHOSTREGISTER_PORTABLE
drv.cuMemHostRegister(pq, 32, flags)
with cuda.gpus[1]:
    portable_there = code(lambda: drv.cuMemHostGetDevicePointer(pq, 0))
cuda.current_context()
drv.cuMemHostUnregister(pq)
print(json.dumps({
    "overlap": overlap, "locked_here": locked_here, "locked_there": locked_there,
    "staged": staged, "unmapped": unmapped, "mapped_here": mapped_here,
    "mapped_there": mapped_there, "portable_there": portable_there,
}))
""",
        env={"SMARTARRAY_FAKE_GPU_DEVICES": "2"},
    )
    assert out["overlap"] == 712  # CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    assert out["locked_here"] and not out["locked_there"]
    assert out["staged"] == [5.0] * 4
    assert out["unmapped"] == 1  # CUDA_ERROR_INVALID_VALUE: registered without DEVICEMAP
    assert out["mapped_here"] == 0 and out["mapped_there"] == 1
    assert out["portable_there"] == 0


def test_a_kernel_writing_read_only_registered_memory_faults() -> None:
    out = run_fake(
        SYNC_CALLS
        + """
from numba.cuda.cudadrv.driver import CudaAPIError

h = np.zeros(4)
flags = drv.CU_MEMHOSTREGISTER_DEVICEMAP | drv.CU_MEMHOSTREGISTER_READ_ONLY
drv.cuMemHostRegister(h.ctypes.data, h.nbytes, flags)
desc = {"shape": (4,), "typestr": "<f8", "data": (h.ctypes.data, False), "version": 3}
d = cuda.from_cuda_array_interface(desc, owner=h, sync=False)
add_hundred[1, 32](d)
try:
    cuda.synchronize()
    code = 0
except CudaAPIError as exc:
    code = int(exc.code)
print(json.dumps({"code": code, "host": h.tolist()}))
"""
    )
    assert out["code"] == 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    assert out["host"] == [0.0] * 4


GAP_THEN_A_KERNEL = """
@cuda.jit
def uses_a_gap(a):
    i = cuda.grid(1)
    if i < a.size:
        # which lanes are converged at this instant: threads the interpreter runs one by
        # one in Python do not model it
        a[i] = cuda.activemask()

@cuda.jit
def plain(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] + 1.0

d = cuda.to_device(np.zeros(4))
error = ""
try:
    uses_a_gap[1, 4](d)
    cuda.synchronize()
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
a = sa.SmartArray(np.arange(4.0))
plain[1, 4](a)
print(json.dumps({"error": error, "after": np.asarray(a).tolist()}))
"""


def test_a_kernel_the_interpreter_cannot_run_fails_its_launch_only_and_loudly() -> None:
    """An interpreter gap is not a GPU fault: that launch fails (CUDA_ERROR_NOT_SUPPORTED,
    named on stderr), and the process goes on; a GPU fault (an illegal address) stays sticky."""
    out = run_fake(GAP_THEN_A_KERNEL)
    assert "CUDA_ERROR_NOT_SUPPORTED" in out["error"] or "801" in out["error"], out["error"]
    assert "cannot run in Python" in out["_stderr"]
    assert out["after"] == [1.0, 2.0, 3.0, 4.0]  # later work runs: nothing sticky
