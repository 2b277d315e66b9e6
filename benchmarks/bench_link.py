"""The link and the driver calls this machine has, against the fake driver's clock preset.

The modelled clock (:mod:`smartarray._fakegpu._clock`) takes its rates and latencies from a
preset (``pcie5`` by default: nvbandwidth's figures and CUDA's documentation, cited there).
This benchmark measures the same quantities on the target it runs on, so that the model's
error on a real machine is known, quantity by quantity:

==========================  ==================================================================
quantity                    how
==========================  ==================================================================
``h2d`` / ``d2h``           a page-locked copy of ``n`` bytes (``cuda.pinned_array``) on a
                            stream, then a stream synchronisation; the host's time
``h2d_pageable`` /          the same from and to pageable NumPy memory (written once before,
``d2h_pageable``            so no first-touch page fault is counted)
``launch``                  an empty kernel: host time per launch of 100 queued launches
``kernel_round_trip``       one empty kernel launched and waited for
``device_alloc`` /          ``cuda.device_array`` of 16 MiB; its free (numba-cuda's deferred
``device_free``             deallocations flushed)
``pinned_alloc``            ``cuda.pinned_array`` of 16 MiB (``cuMemHostAlloc``)
==========================  ==================================================================

For each copy direction the smallest size gives the latency (API call, engine latency and the
synchronisation together) and the two largest give the bandwidth, as nvbandwidth reports it.
Each figure is the median of ``--repeat`` runs (5 by default). On the fake driver with
``SMARTARRAY_FAKE_GPU_TIMING`` set the "measured" column is the clock's own answer (so it must
equal the preset: a test checks it); elsewhere it is wall time.

Run as a script: ``python benchmarks/bench_link.py [--quick] [--repeat N] [--json PATH]``
(``.ci/gpu`` runs it on a GPU).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["QUICK_SIZES", "SIZES", "format_figures", "run"]

#: Copy sizes in bytes: the smallest is latency-bound, the two largest bandwidth-bound.
SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
QUICK_SIZES = (4 << 10, 1 << 20, 4 << 20)
ALLOC_BYTES = 16 << 20
DIRECTIONS = ("h2d", "d2h", "h2d_pageable", "d2h_pageable")


class _Clock:
    """The fake driver's modelled host clock when it runs, else ``time.perf_counter``."""

    def __init__(self) -> None:
        from smartarray import _fakegpu

        self.model = getattr(_fakegpu.current(), "clock", None)

    def now(self) -> float:
        return self.model.host if self.model is not None else time.perf_counter()


def _median_seconds(clock: _Clock, action: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = clock.now()
        action()
        times.append(clock.now() - began)
    return statistics.median(times)


def _upload(d: Any, host: np.ndarray, stream: Any) -> None:
    d.copy_to_device(host, stream=stream)
    stream.synchronize()


def _download(d: Any, host: np.ndarray, stream: Any) -> None:
    d.copy_to_host(host, stream=stream)
    stream.synchronize()


def _copies(clock: _Clock, sizes: tuple[int, ...], repeat: int) -> dict[str, dict[int, float]]:
    """Seconds per copy, per direction and size."""
    from numba import cuda

    stream = cuda.stream()
    out: dict[str, dict[int, float]] = {d: {} for d in DIRECTIONS}
    for n in sizes:
        d = cuda.device_array(n, np.uint8)
        pinned = cuda.pinned_array(n, np.uint8)
        pageable = np.ones(n, np.uint8)  # touched: no first-touch fault in the timed copy
        pinned[:] = 1
        d.copy_to_device(pinned, stream=stream)  # the first use of each buffer: untimed
        d.copy_to_host(pageable, stream=stream)
        stream.synchronize()

        for direction, copy, host in (
            ("h2d", _upload, pinned),
            ("d2h", _download, pinned),
            ("h2d_pageable", _upload, pageable),
            ("d2h_pageable", _download, pageable),
        ):
            out[direction][n] = _median_seconds(
                clock, functools.partial(copy, d, host, stream), repeat
            )
        del d, pinned
        gc.collect()
    return out


def _calls(clock: _Clock, repeat: int) -> dict[str, float]:
    """Seconds per launch, per launched-and-waited kernel, per allocation and free."""
    from numba import cuda

    @cuda.jit
    def empty(x):  # noqa: ANN001, ANN202
        pass

    x = cuda.device_array(1, np.float32)
    empty[1, 1](x)  # compile
    cuda.synchronize()
    launches = 100

    def queue() -> None:
        for _ in range(launches):
            empty[1, 1](x)

    figures = {"launch": _median_seconds(clock, queue, repeat) / launches}
    cuda.synchronize()

    def round_trip() -> None:
        empty[1, 1](x)
        cuda.synchronize()

    figures["kernel_round_trip"] = _median_seconds(clock, round_trip, repeat)
    context = cuda.current_context()
    gc.collect()
    _flush(context)  # the copies' buffers freed now: only each loop's own free is timed
    cuda.synchronize()
    allocs, frees, pins = [], [], []
    for _ in range(repeat):
        began = clock.now()
        d = cuda.device_array(ALLOC_BYTES, np.uint8)
        allocs.append(clock.now() - began)
        began = clock.now()
        del d
        _flush(context)
        frees.append(clock.now() - began)
        began = clock.now()
        h = cuda.pinned_array(ALLOC_BYTES, np.uint8)
        pins.append(clock.now() - began)
        del h
        _flush(context)
    figures["device_alloc"] = statistics.median(allocs)
    figures["device_free"] = statistics.median(frees)
    figures["pinned_alloc"] = statistics.median(pins)
    return figures


def _flush(context: Any) -> None:
    """Free what numba-cuda deferred (the simulator defers nothing): device allocations queue
    their frees on the memory manager's list (numba-cuda 0.2x and later), streams and modules
    on the context's."""
    for owner in (getattr(context, "memory_manager", None), context):
        deallocations = getattr(owner, "deallocations", None)
        if deallocations is not None:
            deallocations.clear()


def _fit(seconds: dict[int, float]) -> dict[str, float]:
    """Latency (the smallest copy's time) and bandwidth (between the two largest sizes)."""
    sizes = sorted(seconds)
    small, big, bigger = sizes[0], sizes[-2], sizes[-1]
    slope = seconds[bigger] - seconds[big]
    return {
        "latency_s": seconds[small],
        "Bps": (bigger - big) / slope if slope > 0 else float("inf"),
    }


def _preset_figures(name: str) -> dict[str, float]:
    """What the clock's preset ``name`` predicts for each quantity this measures."""
    from smartarray._fakegpu._clock import PRESETS

    p = PRESETS[name]
    copy = p.copy_call_s + p.copy_latency_s + p.call_s  # the call, the engine, the sync
    return {
        "h2d_Bps": p.h2d_Bps,
        "d2h_Bps": p.d2h_Bps,
        "h2d_pageable_Bps": p.pageable_Bps,
        "d2h_pageable_Bps": p.pageable_Bps,
        "h2d_latency_s": copy,
        "d2h_latency_s": copy,
        "launch_s": p.launch_call_s,
        "kernel_round_trip_s": p.launch_call_s + p.kernel_latency_s + p.call_s,
        "pinned_alloc_s": p.pin_latency_s + ALLOC_BYTES / p.pin_Bps,
        # (the clock's memory-management rules: the call, then the allocation or the free)
        "device_alloc_s": p.call_s + p.alloc_latency_s + ALLOC_BYTES / p.alloc_Bps,
        "device_free_s": p.call_s + p.free_latency_s + ALLOC_BYTES / p.free_Bps,
    }


def run(quick: bool = False, repeat: int = 5, preset: str = "pcie5") -> dict[str, Any]:
    """Measure the link and the driver calls on the current target; beside each figure, what
    the clock's ``preset`` predicts.

    Returns
    -------
    dict
        ``{"target": str, "modelled": bool, "measured": {quantity: value},
        "preset": {quantity: value}, "copies_s": {direction: {bytes: seconds}}}``; quantities
        end in ``_Bps`` (bytes per second) or ``_s`` (seconds).
    """
    from smartarray import _fakegpu, memory

    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat!r}")
    clock = _Clock()
    copies = _copies(clock, QUICK_SIZES if quick else SIZES, repeat)
    measured: dict[str, float] = {}
    for direction, seconds in copies.items():
        fit = _fit(seconds)
        measured[f"{direction}_Bps"] = fit["Bps"]
        if not direction.endswith("pageable"):
            measured[f"{direction}_latency_s"] = fit["latency_s"]
    measured.update({f"{k}_s": v for k, v in _calls(clock, repeat).items()})
    if memory.SIMULATOR:
        target = "simulator"
    elif _fakegpu.current() is not None:
        target = "fake driver"
    else:
        from numba import cuda

        target = cuda.get_current_device().name
        target = target.decode() if isinstance(target, bytes) else str(target)
    return {
        "target": target,
        "modelled": clock.model is not None,
        "preset_name": preset,
        "measured": measured,
        "preset": _preset_figures(preset),
        "copies_s": {d: {str(n): s for n, s in v.items()} for d, v in copies.items()},
    }


def _show(quantity: str, value: float) -> str:
    if quantity.endswith("_Bps"):
        return f"{value / 1e9:9.2f} GB/s"
    return f"{value * 1e6:9.2f} us"


def format_figures(figures: dict[str, Any]) -> str:
    """The figures as a table: each quantity measured, the preset's, their ratio."""
    kind = "the clock's model" if figures["modelled"] else "wall time"
    lines = [
        f"link and driver calls on {figures['target']} ({kind}) against preset "
        f"{figures['preset_name']}:",
        f"  {'quantity':<24}{'measured':>14}{'preset':>14}  measured/preset",
    ]
    preset = figures["preset"]
    for quantity, value in figures["measured"].items():
        model = preset.get(quantity)
        shown = _show(quantity, model) if model is not None else f"{'-':>14}"
        ratio = f"{value / model:8.2f}" if model else ""
        lines.append(f"  {quantity:<24}{_show(quantity, value):>14}{shown:>14}  {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small copies only (CI)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--preset", default="pcie5", help="the clock preset to compare with")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args(argv)
    figures = run(args.quick, args.repeat, args.preset)
    print(format_figures(figures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
