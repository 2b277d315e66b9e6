"""Per-call overhead of SmartArray arguments, next to what numba itself costs.

- ``njit``: calling a no-op ``@numba.njit`` function with one argument that is (a) a plain
  ndarray, (b) a coherent SmartArray (current on the host only: the fast path), (c) the
  *floor*: a plain object with a cached ``_numba_type_`` (a ``types.Array`` subclass with the
  array data model) whose unbox only reads one attribute (through an interned name) and hands
  the ndarray found there to numba's array unboxer. (c) is the least any non-ndarray argument
  can cost in numba's dispatcher; issue 5's target is (b) <= 1.2 x (c), issue 14's 1.1 x.
  ``*_floor_issue5_*``: the floor as issue 5 defined it, its unbox reading the attribute with
  a new name string per call (as ``pyapi.object_getattr_string`` does), about 25 ns more.
- ``kernel launch preparation``: ``SmartArray.to_device(retr, 0)`` plus running the callbacks
  it appends to ``retr``, on an array whose device copy is already current, against numba's
  own ``numba.cuda.args.In(devary).to_device(retr, 0)`` (plus its callbacks) for a device
  array. On the CUDA simulator these are simulator figures (its ``In`` is simpler than a
  GPU's); issue 5's target is at most 1 us over numba's.

- ``smartarray.jit`` launch: the per-launch cost of the inferred hints (the proxy, the plan
  look-up, wrapping read-only SmartArrays in ``In``) over a plain dispatcher, around a stand-in
  dispatcher that prepares arguments as numba does (no GPU needed); issue 15's goal is under
  1 us per launch.

Run as a script (``python benchmarks/bench_overhead.py [--quick] [--spread N]``) or call
:func:`run`. The variants compared run interleaved, in short batches timed in thread CPU time;
each figure is the best batch's mean time per call, in nanoseconds (see :mod:`bench_timing`:
the figures hold on a machine shared with other work). ``--spread N`` runs the whole benchmark
in N fresh processes and prints each figure's min / median / max.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from bench_timing import format_spread, interleaved, spread

__all__ = ["CallCount", "FloorArg", "python_calls", "run"]


def _floor_class() -> type:
    """Build the floor argument class and register its type with numba (once)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.core.extending import NativeValue, models, register_model, unbox

    class FloorType(types.Array):
        """A ``types.Array`` subclass: the type of :class:`FloorArg` arguments."""

        def __init__(self, dtype: Any, ndim: int, layout: str, interned: bool) -> None:
            self.interned = interned
            kind = "Floor" if interned else "Floor issue 5"
            super().__init__(dtype, ndim, layout, name=f"{kind}({dtype}, {ndim}d, {layout})")

    register_model(FloorType)(models.ArrayModel)

    def interned_name(c: Any, name: str) -> Any:
        # The attribute name as an interned str made once (a module global), as smartarray's
        # unbox does: ``object_getattr_string`` would make, hash and free a new string per
        # call, and miss CPython's type attribute cache. The floor is the least an unbox
        # costs, so it reads its attribute the cheapest way too.
        builder, pyapi = c.builder, c.pyapi
        symbol = f"_floor_attr_{name}"
        try:
            slot = builder.module.get_global(symbol)
        except KeyError:
            slot = ir.GlobalVariable(builder.module, pyapi.pyobj, symbol)
            slot.linkage = "internal"
            slot.initializer = ir.Constant(pyapi.pyobj, None)
        with builder.if_then(cgutils.is_null(builder, builder.load(slot)), likely=False):
            fnty = ir.FunctionType(pyapi.pyobj, [pyapi.cstring])
            intern = pyapi._get_function(fnty, name="PyUnicode_InternFromString")
            cstr = c.context.insert_const_string(builder.module, name)
            builder.store(builder.call(intern, [cstr]), slot)
        return builder.load(slot)

    @unbox(FloorType)
    def _unbox_floor(typ: Any, obj: Any, c: Any) -> NativeValue:
        if typ.interned:
            ary = c.pyapi.object_getattr(obj, interned_name(c, "_ary"))  # the only work
        else:  # issue 5's floor: a new name string per call
            ary = c.pyapi.object_getattr_string(obj, "_ary")
        native = c.unbox(types.Array(typ.dtype, typ.ndim, typ.layout), ary)
        c.pyapi.decref(ary)  # the native array's meminfo holds its own reference
        return NativeValue(native.value, is_error=native.is_error)

    class FloorArg:
        """A plain object carrying an ndarray, with a cached ``_numba_type_``: the floor."""

        __slots__ = ("_ary", "_numba_type_")

        def __init__(self, ary: np.ndarray, interned: bool = True) -> None:
            from numba import typeof

            plain = typeof(ary)
            self._ary = ary
            self._numba_type_ = FloorType(plain.dtype, plain.ndim, plain.layout, interned)

    return FloorArg


_FLOOR: type | None = None


def FloorArg(ary: np.ndarray, interned: bool = True) -> Any:  # noqa: N802 - used like a class
    """The floor argument wrapping ``ary`` (its class is built on first use).

    ``interned=False``: the floor as issue 5 defined it, whose unbox reads its attribute with
    ``pyapi.object_getattr_string`` (a new name string per call, about 25 ns more).
    """
    global _FLOOR
    if _FLOOR is None:
        _FLOOR = _floor_class()
    return _FLOOR(ary, interned)


def njit_call(quick: bool = False) -> dict[str, float]:
    """Nanoseconds per call of a no-op njit function: ndarray, SmartArray, floor argument.

    The three run interleaved (see :func:`bench_timing.interleaved`), each call a ``timeit``
    statement (no Python function around it), so the ratio compares the calls themselves.
    """
    import numba

    import smartarray as sa

    @numba.njit
    def noop(a: Any) -> int:  # pragma: no cover - compiled
        return 0

    ary = np.zeros(16)
    smart = sa.SmartArray(np.zeros(16))
    floor = FloorArg(np.zeros(16))
    floor5 = FloorArg(np.zeros(16), interned=False)
    for arg in (ary, smart, floor, floor5, smart):  # compile; arm the SmartArray's fast path
        noop(arg)
    number, rounds = (1_000, 30) if quick else (2_000, 200)
    ns = {"noop": noop, "ary": ary, "smart": smart, "floor": floor, "floor5": floor5}
    out = interleaved(
        {
            "njit_noop_ndarray_ns": "noop(ary)",
            "njit_noop_smartarray_ns": "noop(smart)",
            "njit_noop_floor_ns": "noop(floor)",
            "njit_noop_floor_issue5_ns": "noop(floor5)",
        },
        number,
        rounds,
        ns,
    )
    out["njit_smartarray_over_floor_ratio"] = (
        out["njit_noop_smartarray_ns"] / out["njit_noop_floor_ns"]
    )
    out["njit_smartarray_over_floor_issue5_ratio"] = (
        out["njit_noop_smartarray_ns"] / out["njit_noop_floor_issue5_ns"]
    )
    out["njit_smartarray_over_ndarray_ratio"] = (
        out["njit_noop_smartarray_ns"] / out["njit_noop_ndarray_ns"]
    )
    return out


def launch_preparation(quick: bool = False) -> dict[str, float]:
    """Nanoseconds to prepare one kernel argument that is already current on the device."""
    from numba.cuda import args as numba_args

    import smartarray as sa

    smart = sa.SmartArray(np.zeros(1024))
    smart.get("gpu")  # device copy current; no host view kept (it would be refreshed)
    devary = sa.to_device(np.zeros(1024))

    def prepare_smart() -> None:
        retr: list[Any] = []
        smart.to_device(retr, 0)
        for callback in retr:
            callback()

    def prepare_numba() -> None:
        retr: list[Any] = []
        numba_args.In(devary).to_device(retr, 0)
        for callback in retr:
            callback()

    prepare_smart()
    before = sa.stats()
    number, rounds = (200, 30) if quick else (400, 200)
    out = interleaved(
        {
            "launch_prep_smartarray_ns": prepare_smart,
            "launch_prep_device_array_ns": prepare_numba,
        },
        number,
        rounds,
    )
    assert sa.stats() == before, "an already current SmartArray moved bytes"
    out["launch_prep_overhead_ns"] = (
        out["launch_prep_smartarray_ns"] - out["launch_prep_device_array_ns"]
    )
    return out


def _stub_body(out: Any, x: Any, y: Any) -> None:  # pragma: no cover - analysed, never run
    out[0] = x[0] + y[0]


def _arg_hint() -> type:
    from numba.cuda.args import ArgHint  # after the CUDA target was chosen

    return ArgHint


class _StubLaunch:
    """What a launch does with its arguments, minus the GPU: each ``ArgHint`` prepared, then
    the post-launch callbacks run (numba-cuda's dispatcher does this around every launch)."""

    def __call__(self, *args: Any) -> None:
        retr: list[Any] = []
        for a in args:
            if isinstance(a, _arg_hint()):
                a.to_device(retr, 0)
        for callback in retr:
            callback()


class _StubDispatcher:
    """A ``cuda.jit`` dispatcher stand-in: ``[grid, block]`` gives :class:`_StubLaunch`."""

    py_func = staticmethod(_stub_body)
    _launch = _StubLaunch()

    def __getitem__(self, config: Any) -> _StubLaunch:
        return self._launch


def jit_launch(quick: bool = False) -> dict[str, float]:
    """Nanoseconds per launch of ``smartarray.jit`` over a plain ``cuda.jit`` dispatcher.

    Both wrap the same stand-in dispatcher (argument preparation and callbacks as numba runs
    them, no GPU), launched as ``k[1, 32](out, x, y)`` where ``x`` and ``y`` are read only,
    in the steady state of a loop of launches (everything current on the device):

    - ``jit_launch_plain_smartarray_ns``: bare SmartArrays to a plain kernel (``x``, ``y`` end
      up current on the device only: the host pays a download to read them);
    - ``jit_launch_annotated_smartarray_ns``: the plain kernel with ``sa.In(x), sa.In(y)``
      written by hand;
    - ``jit_launch_inferred_smartarray_ns``: bare SmartArrays to ``smartarray.jit``;
    - ``jit_launch_overhead_ns``: inferred minus annotated: what the inference costs a launch;
    - ``jit_launch_*_device_array_ns``: device arrays, to which no hint applies (the proxy and
      the per-launch look-up alone), plain and inferred, and their difference.
    """
    import smartarray as sa
    from smartarray.jit import _Kernel, _new

    plain, inferred = _StubDispatcher(), _new(_Kernel, _StubDispatcher())
    number, rounds = (100, 30) if quick else (200, 150)

    def smart() -> Any:
        return sa.SmartArray(np.zeros(1024))

    def device() -> Any:
        return sa.to_device(np.zeros(1024))

    def bare(k: Any, a: tuple) -> None:
        k[1, 32](*a)

    def annotated(k: Any, a: tuple) -> None:
        k[1, 32](a[0], sa.In(a[1]), sa.In(a[2]))

    calls = {}
    for key, kernel, make, launch in (
        ("jit_launch_plain_smartarray_ns", plain, smart, bare),
        ("jit_launch_annotated_smartarray_ns", plain, smart, annotated),
        ("jit_launch_inferred_smartarray_ns", inferred, smart, bare),
        ("jit_launch_plain_device_array_ns", plain, device, bare),
        ("jit_launch_inferred_device_array_ns", inferred, device, bare),
    ):
        args = (make(), make(), make())
        for _ in range(3):  # reach the steady state of a loop of launches
            launch(kernel, args)
        calls[key] = lambda k=kernel, a=args, f=launch: f(k, a)
    # Rounds interleave the variants, each figure the best round: differences of a few
    # hundred nanoseconds survive a machine shared with other work.
    before = sa.stats()
    out = interleaved(calls, number, rounds)
    assert sa.stats() == before, "a launch of current arguments moved bytes"
    out["jit_launch_overhead_ns"] = (
        out["jit_launch_inferred_smartarray_ns"] - out["jit_launch_annotated_smartarray_ns"]
    )
    out["jit_launch_overhead_device_array_ns"] = (
        out["jit_launch_inferred_device_array_ns"] - out["jit_launch_plain_device_array_ns"]
    )
    return out


def budgeted_launch(quick: bool = False) -> dict[str, float]:
    """``jit_launch_budgeted_smartarray_ns``: bare SmartArrays to the plain kernel, as in
    :func:`jit_launch`, with a device-memory budget in effect (the default on a GPU: each
    launch pins its arguments against eviction), next to the device-array launch again."""
    import smartarray as sa

    kernel = _StubDispatcher()
    number, rounds = (100, 30) if quick else (200, 150)
    smart = tuple(sa.SmartArray(np.zeros(1024)) for _ in range(3))
    device = tuple(sa.to_device(np.zeros(1024)) for _ in range(3))
    old = sa.device_budget().budget
    sa.set_device_budget(1 << 30)
    try:
        for _ in range(3):
            kernel[1, 32](*smart)
        before = sa.stats()
        out = interleaved(
            {
                "jit_launch_budgeted_smartarray_ns": lambda: kernel[1, 32](*smart),
                "jit_launch_budgeted_device_array_ns": lambda: kernel[1, 32](*device),
            },
            number,
            rounds,
        )
        assert sa.stats() == before, "a launch of current arguments moved bytes"
    finally:
        sa.set_device_budget(old)
    return out


def _ratios(out: dict[str, float]) -> dict[str, float]:
    """Each SmartArray launch over the same launch with device arrays (issue 28: <= 1.2)."""
    ratios = {}
    for variant, reference in (
        ("plain", "plain"),
        ("annotated", "plain"),
        ("inferred", "inferred"),
        ("budgeted", "budgeted"),
    ):
        smart = out.get(f"jit_launch_{variant}_smartarray_ns")
        device = out.get(f"jit_launch_{reference}_device_array_ns")
        if smart and device:
            ratios[f"jit_launch_{variant}_over_device_array_ratio"] = smart / device
    return ratios


def real_launch(quick: bool = False) -> dict[str, float]:
    """Nanoseconds per launch of ``k[1, 32](out, x, y)`` through numba-cuda's real dispatcher.

    Only off the simulator: on a GPU, or on the fake CUDA driver (``SMARTARRAY_FAKE_GPU=1``),
    where numba-cuda's ``_LaunchConfiguration``, ``_Kernel.launch``, cuda.core and
    cuda-bindings run unmodified and only the driver is a stand-in (its calls cost a Python
    callback each, more than a GPU driver's; kernels run at the next synchronisation,
    outside the timed batches). Steady state, everything current on the device; a budget is
    in effect (the default on a GPU). Variants: device arrays, bare SmartArrays, ``sa.In`` on
    the inputs, bare SmartArrays through ``smartarray.jit``, bare SmartArrays with a budget
    set explicitly; ``real_launch_*_ratio`` is each
    over the device-array launch (issue 28: at most 1.2). On the fake driver also: the time
    above the driver (the fake driver's own time subtracted: what numba-cuda, cuda.core,
    cuda-bindings and smartarray cost, as on a GPU), its ratios, and the driver calls per
    launch.
    """
    import warnings

    from numba import cuda

    import smartarray as sa
    from smartarray import memory

    if memory.SIMULATOR:
        return {}

    def body(out: Any, x: Any, y: Any) -> None:  # pragma: no cover - compiled
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    plain = cuda.jit(body)
    inferred = sa.jit(body)
    smart = tuple(sa.SmartArray(np.zeros(32)) for _ in range(3))
    device = tuple(sa.to_device(np.zeros(32)) for _ in range(3))
    variants = {
        "device_array": lambda: plain[1, 32](*device),
        "smartarray": lambda: plain[1, 32](*smart),
        "annotated_smartarray": lambda: plain[1, 32](smart[0], sa.In(smart[1]), sa.In(smart[2])),
        "inferred_smartarray": lambda: inferred[1, 32](*smart),
        "budgeted_smartarray": lambda: plain[1, 32](*smart),  # with a budget set: see below
    }
    number, rounds = (20, 10) if quick else (50, 40)
    best = dict.fromkeys(variants, float("inf"))
    host = dict.fromkeys(variants, float("inf"))  # without the fake driver's own time
    calls = dict.fromkeys(variants, 0.0)  # driver calls per launch
    from smartarray import _fakegpu

    fake = _fakegpu.current()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's low-occupancy warning, once per launch
        for call in variants.values():
            call()
        cuda.synchronize()
        before = sa.stats()
        for r in range(rounds):
            names = list(variants)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                call = variants[name]
                # An explicit budget (the default is in effect anyway off the simulator).
                sa.set_device_budget(1 << 30 if name == "budgeted_smartarray" else None)
                per_call, above_driver, driver_calls = _timed_round(call, number, fake)
                best[name] = min(best[name], per_call)
                if fake is not None:
                    host[name] = min(host[name], above_driver)
                    calls[name] = driver_calls
                cuda.synchronize()  # the queued kernels run here, untimed
        sa.set_device_budget(None)  # the default again
        assert sa.stats() == before, "a launch of current arguments moved bytes"
    out = {f"real_launch_{name}_ns": value for name, value in best.items()}
    for name in variants:
        if name != "device_array":
            out[f"real_launch_{name}_ratio"] = best[name] / best["device_array"]
    if fake is not None:
        # The fake driver's calls are Python callbacks (several us each, a GPU driver's far
        # less): what the launch costs above the driver, and how many driver calls it makes.
        for name in variants:
            out[f"real_launch_{name}_above_driver_ns"] = host[name]
            out[f"real_launch_{name}_driver_calls"] = calls[name]
        for name in variants:
            if name != "device_array":
                out[f"real_launch_{name}_above_driver_ratio"] = host[name] / host["device_array"]
    return out


def _timed_round(call: Any, number: int, fake: Any) -> tuple[float, float, float]:
    """``number`` calls of ``call`` in thread CPU time: nanoseconds per call, those spent
    outside the fake driver (``fake``, or None: then 0) and its driver calls per call."""
    in_driver = fake.thread_time_ns if fake is not None else 0
    made = sum(fake.calls.values()) if fake is not None else 0
    start = time.thread_time_ns()
    for _ in range(number):
        call()
    elapsed = time.thread_time_ns() - start
    if fake is None:
        return elapsed / number, 0.0, 0.0
    in_driver = fake.thread_time_ns - in_driver
    return (
        elapsed / number,
        (elapsed - in_driver) / number,
        (sum(fake.calls.values()) - made) / number,
    )


@contextlib.contextmanager
def _kernels_off(fake: Any) -> Iterator[None]:
    """Time the host with the fake driver's kernel bodies off (``fake``: the driver or None).

    A GPU runs kernels off the host. The fake driver interprets them on the host's own core
    inside the wait that needs them, and the next call finds the host's caches cold: the
    host time of the same code moved by 20% from run to run (1.27-1.66 for the solver's
    ratio). Off, every launch is still decoded, queued, ordered
    and timed as before; only device memory is left as it was, which no timing here reads.
    """
    if fake is None:
        yield
        return
    before = fake.run_kernels
    fake.run_kernels = False
    try:
        yield
    finally:
        fake.run_kernels = before


#: Where the fake driver's own frames are (its entry points, the kernels it runs through
#: numba's simulator): what they call is the driver's work, not counted by :class:`CallCount`.
_DRIVER_FRAMES = ("/smartarray/_fakegpu/", "/numba/cuda/simulator/")


class CallCount:
    """Python function calls made in this thread between :meth:`start` and :meth:`stop`,
    those the fake driver makes (inside its entry points) left out; C functions are not
    counted.

    Deterministic where time is not: on a shared machine the host time above the driver of
    the same code moves by 20% between runs, this count only with the code. A proxy for host
    work (calls differ in cost), given beside the times, not instead of them.
    """

    def __init__(self) -> None:
        self.calls = 0
        self._driver: Any = None  # the driver's outermost frame, while inside it

    def _event(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if self._driver is None:
                if any(part in frame.f_code.co_filename for part in _DRIVER_FRAMES):
                    self._driver = frame
                else:
                    self.calls += 1
        elif event == "return" and frame is self._driver:
            self._driver = None

    def start(self) -> None:
        sys.setprofile(self._event)

    def stop(self) -> int:
        sys.setprofile(None)
        self.calls -= 1  # (this call itself)
        return self.calls


def python_calls(call: Any, number: int) -> float:
    """Python function calls per call of ``call`` outside the fake driver (:class:`CallCount`)."""
    count = CallCount()
    count.start()
    try:
        for _ in range(number):
            call()
    finally:
        count.stop()
    return count.calls / number


def real_launch_read(quick: bool = False) -> dict[str, float]:
    """Nanoseconds per launch that writes an array, followed by the host's read of it, through
    numba-cuda's real dispatcher (the iterative solver's loop, issue 41): a device array's
    ``k[1, 32](out, x, y)`` and ``out.copy_to_host(h)`` against a SmartArray's launch and
    ``out.host()`` (the launch after a host read takes smartarray's slow path each time).

    Only off the simulator; on the fake driver (its kernel bodies off while timed, as a GPU
    runs them off the host: :func:`_kernels_off`) also the time above the driver, its ratio
    (``real_launch_read_smartarray_above_driver_ratio``: what
    :attr:`smartarray._fakegpu._clock.Preset.smartarray_call_s` is derived from, with
    :func:`real_launch`'s) and the driver calls per launch and read.
    """
    import warnings

    from numba import cuda

    import smartarray as sa
    from smartarray import _fakegpu, memory

    if memory.SIMULATOR:
        return {}

    def body(out: Any, x: Any, y: Any) -> None:  # pragma: no cover - compiled
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    plain = cuda.jit(body)
    smart = tuple(sa.SmartArray(np.zeros(32)) for _ in range(3))
    device = tuple(sa.to_device(np.zeros(32)) for _ in range(3))
    landing = np.zeros(32)

    def numba_step() -> None:
        plain[1, 32](*device)
        device[0].copy_to_host(landing)

    def smart_step() -> None:
        plain[1, 32](*smart)
        smart[0].host()

    variants = {"device_array": numba_step, "smartarray": smart_step}
    number, rounds = (10, 6) if quick else (30, 30)
    best = dict.fromkeys(variants, float("inf"))
    host = dict.fromkeys(variants, float("inf"))
    calls = dict.fromkeys(variants, 0.0)
    fake = _fakegpu.current()
    with warnings.catch_warnings(), _kernels_off(fake):
        warnings.simplefilter("ignore")  # numba's low-occupancy warning, once per launch
        for call in variants.values():
            call()
        for r in range(rounds):
            names = list(variants) if r % 2 == 0 else list(variants)[::-1]
            for name in names:
                call = variants[name]
                per_call, above_driver, driver_calls = _timed_round(call, number, fake)
                best[name] = min(best[name], per_call)
                if fake is not None:
                    host[name] = min(host[name], above_driver)
                    calls[name] = driver_calls
                cuda.synchronize()
    out = {f"real_launch_read_{name}_ns": value for name, value in best.items()}
    out["real_launch_read_smartarray_ratio"] = best["smartarray"] / best["device_array"]
    if fake is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, call in variants.items():
                out[f"real_launch_read_{name}_python_calls"] = python_calls(call, number)
        for name in variants:
            out[f"real_launch_read_{name}_above_driver_ns"] = host[name]
            out[f"real_launch_read_{name}_driver_calls"] = calls[name]
        out["real_launch_read_smartarray_above_driver_ratio"] = (
            host["smartarray"] / host["device_array"]
        )
    return out


def real_solver_loop(quick: bool = False) -> dict[str, float]:
    """Host time above the fake driver per sweep of ``bench_time.py``'s iterative solver, each
    variant running its own code (the loop the model's solver charges stand for): hand-written
    synchronous copies against bare SmartArrays, the hand-written asynchronous pipeline against
    SmartArrays with their options. Small vectors, the kernels' bodies off (:func:`_kernels_off`);
    the timed region is the variant's, its uploads and final download included, divided by
    its sweeps; the best of several rounds, the variants interleaved.

    ``real_solver_smartarray_above_driver_ratio`` (over ``hand_sync``) and
    ``real_solver_smartarray_options_above_driver_ratio`` (over ``hand_async``) are what
    ``bench_time.py`` charges its solver's SmartArray calls from. Only on the fake driver.
    """
    import warnings

    import bench_time

    from smartarray import _fakegpu, memory

    fake = _fakegpu.current()
    if memory.SIMULATOR or fake is None:
        return {}

    class HostTimer(bench_time.Timer):
        """The variant's timed region in thread CPU time, the fake driver's own subtracted."""

        def __init__(self) -> None:
            super().__init__()
            self.clock = None  # (no modelled charges here: this measures the real cost)
            self.above = 0.0
            self._began = (0, 0)

        def start(self) -> None:
            bench_time.settle()
            self._began = (time.thread_time_ns(), fake.thread_time_ns)

        def done(self, results: Any) -> Any:
            host, driver = self._began
            self.above = (time.thread_time_ns() - host) - (fake.thread_time_ns - driver)
            return results

    sweeps = 10 if quick else 40
    p = bench_time.Params(chunks=1, n=32, field=32, k=1, checks=1, vector=32, iterations=sweeps)
    names = ("hand_sync", "smartarray", "hand_async", "smartarray_options")
    inputs = bench_time.solver_inputs(p)
    timer = HostTimer()
    best = dict.fromkeys(names, float("inf"))
    with warnings.catch_warnings(), _kernels_off(fake):
        warnings.simplefilter("ignore")  # numba's low-occupancy warning
        for name in names:  # compilation and the pools warm
            bench_time.SOLVER[name](inputs, p, timer)
        for r in range(2 if quick else 6):
            for name in names if r % 2 == 0 else names[::-1]:
                bench_time.SOLVER[name](inputs, p, timer)
                best[name] = min(best[name], timer.above / sweeps)
    out = {f"real_solver_{name}_above_driver_ns": best[name] for name in names}

    class CallCounter(HostTimer):
        """The variant's timed region's Python calls outside the driver (see python_calls)."""

        def start(self) -> None:
            super().start()
            self.count = CallCount()
            self.count.start()

        def done(self, results: Any) -> Any:
            self.calls = self.count.stop()
            return super().done(results)

    counter = CallCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            bench_time.SOLVER[name](inputs, p, counter)
            out[f"real_solver_{name}_python_calls"] = counter.calls / sweeps
    out["real_solver_smartarray_above_driver_ratio"] = best["smartarray"] / best["hand_sync"]
    out["real_solver_smartarray_options_above_driver_ratio"] = (
        best["smartarray_options"] / best["hand_async"]
    )
    return out


def run(quick: bool = False) -> dict[str, float]:
    """All overhead figures: ``njit_*``, ``launch_prep_*``, ``jit_launch_*`` (units in names)
    on the simulator; ``real_launch_*`` and ``real_launch_read_*`` (numba-cuda's real
    dispatcher) off it, and ``real_solver_*`` on the fake driver."""
    import smartarray as sa

    if not sa.memory.SIMULATOR:
        return {**real_launch(quick), **real_launch_read(quick), **real_solver_loop(quick)}
    out = {**njit_call(quick), **launch_preparation(quick), **jit_launch(quick)}
    out.update(budgeted_launch(quick))
    out.update(_ratios(out))
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the figures (``--quick`` for fewer iterations)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    parser.add_argument("--spread", type=int, metavar="N", help="N runs in fresh processes")
    parser.add_argument("--json-figures", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spread:
        print(format_spread(spread(__file__, ["--quick"] if args.quick else [], args.spread)))
        return
    fake = os.environ.get("SMARTARRAY_FAKE_GPU", "") not in ("", "0")
    if "numba.cuda" not in sys.modules and "NUMBA_ENABLE_CUDASIM" not in os.environ and not fake:
        from numba import cuda

        if not cuda.is_available():
            print("no CUDA GPU: run with NUMBA_ENABLE_CUDASIM=1 for simulator figures")
            return
    figures = run(args.quick)
    if args.json_figures:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"  {key:40s} {value:10.2f}")


if __name__ == "__main__":
    main()
