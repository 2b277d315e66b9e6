"""Time, not bytes: the modelled makespan of GPU programs written five ways.

The fake driver's clock (``SMARTARRAY_FAKE_GPU_TIMING``, :mod:`smartarray._fakegpu._clock`)
models copy engines, the compute engine, the host's API costs and its waits; each workload
runs under five variants on it and this prints each variant's modelled seconds (the host's
clock from the first call of the timed region to the results being in host memory). On a GPU
(``.ci/gpu``) the same variants run at the modelled sizes and their measured seconds are
printed beside the model's.

Variants: what code each may use (written down before building them)
---------------------------------------------------------------------
``numba_auto``
    NumPy arrays passed straight to ``@cuda.jit`` kernels: numba copies every array argument
    to the device before the launch and back after it, synchronously, on the default stream.
``hand_sync``
    Device arrays allocated once before the timed region; ``cuda.to_device`` /
    ``copy_to_device`` and ``copy_to_host`` with no stream (synchronous copies from and to
    pageable NumPy arrays), launches on the default stream; only the bytes needed move.
``hand_async``
    The CUDA C++ Best Practices Guide's "asynchronous and overlapping transfers with
    computation": page-locked host buffers (``cuda.pinned_array``, allocated before the timed
    region, as a program that produces its data into them), three streams, per stream its own
    device buffers, every chunk's upload, kernel and download queued on its stream, one
    synchronisation at the end; for the iterative workloads, the same with the downloads of a
    check or residual queued right after the kernel that makes it, on a second stream ordered
    by an event, and the host waiting only for that.
``smartarray``
    Bare SmartArrays (made before the timed region, pageable host copies, outputs made with
    ``SmartArray(shape=..., dtype=...)``, valid nowhere) passed to the same ``@cuda.jit``
    kernels on the default stream; results read with ``.host()``.
``smartarray_options``
    What smartarray documents for speed: ``pinned=True`` host copies (made before the timed
    region: page-locking costs time), a stream per chunk (``sa.stream()``, three in turn)
    passed to the launch, ``sa.In`` / ``sa.Out`` hints (an output's stale host bytes are not
    uploaded), ``prefetch(where, stream=)`` to start an upload early; reads as above.

Every variant charges the host clock smartarray's own per-call overhead
(:attr:`~smartarray._fakegpu._clock.Preset.smartarray_call_s`) for each SmartArray launch
and host read: the smartarray variants only, so the comparison is against numba's own cost.
Host arrays: the smartarray variants hold the host arrays ``.host()`` returned (a held array
is refreshed as soon as the device copy changes: the streamed batch writes each output once,
so holding costs nothing there).

Workloads and regimes
---------------------
``streamed_batch``
    ``chunks`` independent chunks of ``float32`` input: upload, a kernel that sums each four
    consecutive values (the output is a quarter of the input), download. Modelled: chunks of
    16 MiB over PCIe 5 (bandwidth-bound: a chunk's upload takes 340 us against 6 us of
    latencies), so every rate is divided by ``16 MiB / chunk bytes``
    (:meth:`~smartarray._fakegpu._clock.Preset.scaled`).

The kernel-duration rule, one for every variant: a kernel takes a quarter of its chunk's
page-locked upload time (a kernel that keeps pace with the link: the pipeline's busiest
engine is the upload's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["VARIANTS", "WORKLOADS", "format_figures", "run"]

VARIANTS = ("numba_auto", "hand_sync", "hand_async", "smartarray", "smartarray_options")
MODELLED_CHUNK_BYTES = 16 << 20
PRESET = "pcie5"


@dataclass(frozen=True)
class Params:
    """Sizes of the streamed batch."""

    chunks: int
    n: int  # float32 elements per input chunk (a multiple of 4)


QUICK = Params(chunks=4, n=1024)
FULL = Params(chunks=16, n=4096)


class Timer:
    """The modelled clock on the fake driver (with a preset), else wall time."""

    def __init__(self) -> None:
        from smartarray import _fakegpu

        driver = _fakegpu.current()
        self.clock: Any = getattr(driver, "clock", None)
        self._start = 0.0

    @property
    def modelled(self) -> bool:
        return self.clock is not None

    def now(self) -> float:
        return self.clock.host if self.clock is not None else time.perf_counter()

    def start(self) -> None:
        from numba import cuda

        cuda.synchronize()
        self._start = self.now()

    def stop(self) -> float:
        return self.now() - self._start

    def smartarray_calls(self, count: int = 1) -> None:
        """Charge smartarray's own host overhead for ``count`` calls (the model only)."""
        if self.clock is not None:
            self.clock.host_work(count * self.clock.preset.smartarray_call_s, "smartarray")


# -- the streamed batch ----------------------------------------------------------------------


def _kernels() -> Any:
    from numba import cuda

    @cuda.jit
    def reduce4(a, out):  # noqa: ANN001, ANN202
        start = cuda.grid(1)
        stride = cuda.gridsize(1)
        for j in range(start, out.size, stride):
            out[j] = a[4 * j] + a[4 * j + 1] + a[4 * j + 2] + a[4 * j + 3]

    return reduce4


_KERNELS: list[Any] = []


def _reduce4() -> Any:
    if not _KERNELS:
        _KERNELS.append(_kernels())
    return _KERNELS[0]


def _grid(outputs: int) -> tuple[int, int]:
    """Few simulated threads on the fake driver (each loops over its share); a full grid on a
    GPU. The kernel-duration rule, not the grid, sets the modelled time."""
    from smartarray import _fakegpu, memory

    if memory.SIMULATOR or _fakegpu.current() is not None:
        return (1, 32)
    return ((outputs + 255) // 256, 256)


def batch_inputs(p: Params) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.random(p.n, dtype=np.float32) for _ in range(p.chunks)]


def batch_numba_auto(inputs: list[np.ndarray], timer: Timer) -> list[np.ndarray]:
    k = _reduce4()
    outs = [np.empty(a.size // 4, np.float32) for a in inputs]
    timer.start()
    for a, out in zip(inputs, outs, strict=True):
        k[_grid(out.size)](a, out)
    return outs


def batch_hand_sync(inputs: list[np.ndarray], timer: Timer) -> list[np.ndarray]:
    from numba import cuda

    k = _reduce4()
    outs = [np.empty(a.size // 4, np.float32) for a in inputs]
    d_a = cuda.device_array(inputs[0].size, np.float32)
    d_out = cuda.device_array(inputs[0].size // 4, np.float32)
    timer.start()
    for a, out in zip(inputs, outs, strict=True):
        d_a.copy_to_device(a)
        k[_grid(d_out.size)](d_a, d_out)
        d_out.copy_to_host(out)
    return outs


def batch_hand_async(inputs: list[np.ndarray], timer: Timer) -> list[np.ndarray]:
    from numba import cuda

    k = _reduce4()
    n = inputs[0].size
    h_a = []
    for a in inputs:  # the program produces its data into page-locked buffers
        buf = cuda.pinned_array(n, np.float32)
        buf[:] = a
        h_a.append(buf)
    h_out = [cuda.pinned_array(n // 4, np.float32) for _ in inputs]
    streams = [cuda.stream() for _ in range(3)]
    d_a = [cuda.device_array(n, np.float32) for _ in streams]
    d_out = [cuda.device_array(n // 4, np.float32) for _ in streams]
    timer.start()
    for i in range(len(inputs)):
        j = i % len(streams)
        s = streams[j]
        d_a[j].copy_to_device(h_a[i], stream=s)
        k[(*_grid(d_out[j].size), s)](d_a[j], d_out[j])
        d_out[j].copy_to_host(h_out[i], stream=s)
    cuda.synchronize()
    return h_out


def batch_smartarray(inputs: list[np.ndarray], timer: Timer) -> list[np.ndarray]:
    import smartarray as sa

    k = _reduce4()
    arrays = [sa.SmartArray(a) for a in inputs]
    outs = [sa.SmartArray(shape=a.size // 4, dtype=np.float32) for a in inputs]
    timer.start()
    for a, out in zip(arrays, outs, strict=True):
        timer.smartarray_calls()
        k[_grid(out.size)](a, out)
    results = []
    for out in outs:
        timer.smartarray_calls()
        results.append(out.host())
    return results


def batch_smartarray_options(inputs: list[np.ndarray], timer: Timer) -> list[np.ndarray]:
    import smartarray as sa

    k = _reduce4()
    arrays = [sa.SmartArray(a, pinned=True) for a in inputs]
    # Page-locked host copies are made here, before the loop (page-locking costs time).
    outs = [sa.SmartArray(np.empty(a.size // 4, np.float32), pinned=True) for a in inputs]
    streams = [sa.stream() for _ in range(3)]
    timer.start()
    for i, (a, out) in enumerate(zip(arrays, outs, strict=True)):
        timer.smartarray_calls()
        k[(*_grid(out.size), streams[i % len(streams)])](sa.In(a), sa.Out(out))
    results = []
    for out in outs:
        timer.smartarray_calls()
        results.append(out.host())
    return results


BATCH: dict[str, Callable[[list[np.ndarray], Timer], list[np.ndarray]]] = {
    "numba_auto": batch_numba_auto,
    "hand_sync": batch_hand_sync,
    "hand_async": batch_hand_async,
    "smartarray": batch_smartarray,
    "smartarray_options": batch_smartarray_options,
}
WORKLOADS = {"streamed_batch": BATCH}


def _configure(timer: Timer, p: Params) -> None:
    """Scale the preset to model 16 MiB chunks; set the kernel-duration rule."""
    from smartarray._fakegpu._clock import PRESETS

    if timer.clock is None:
        return
    preset = PRESETS[PRESET].scaled(MODELLED_CHUNK_BYTES / (4 * p.n))
    timer.clock.set_preset(preset)
    timer.clock.set_kernel_seconds("reduce4", 4 * p.n / preset.h2d_Bps / 4)


def measure(p: Params) -> dict[str, Any]:
    """Every workload under every variant, in this process: seconds, busiest engine."""
    timer = Timer()
    _configure(timer, p)
    inputs = batch_inputs(p)
    expected = [a.reshape(-1, 4).sum(axis=1, dtype=np.float32) for a in inputs]
    rows: dict[str, Any] = {}
    for name, variants in WORKLOADS.items():
        figures: dict[str, Any] = {}
        agree = True
        for variant, fn in variants.items():
            fn([a[:8].copy() for a in inputs[:1]], timer)  # compile outside the timed region
            spans = len(timer.clock.spans) if timer.clock is not None else 0
            results = fn(inputs, timer)
            seconds = timer.stop()
            agree = agree and all(
                np.allclose(r, e, rtol=1e-5) for r, e in zip(results, expected, strict=True)
            )
            figure: dict[str, Any] = {"seconds": seconds}
            if timer.clock is not None:
                busy: dict[str, float] = {}
                for s in timer.clock.spans[spans:]:
                    if s.label != "wait" and s.end > timer._start:
                        start = max(s.start, timer._start)
                        busy[s.engine] = busy.get(s.engine, 0.0) + s.end - start
                engine = max(busy, key=busy.__getitem__)
                figure.update(busiest_engine=engine, busiest_seconds=busy[engine])
            figures[variant] = figure
        rows[name] = {"results_agree": agree, "variants": figures}
    return {
        "params": asdict(p),
        "modelled": timer.modelled,
        "preset": timer.clock.preset.name if timer.clock is not None else None,
        "workloads": rows,
    }


def targets(rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's targets per workload: ratios and whether each holds."""
    out = {}
    for name, w in rows.items():
        v = w["variants"]
        sec = {k: f["seconds"] for k, f in v.items()}
        t = {
            "sync_over_async": sec["hand_sync"] / sec["hand_async"],
            "async_over_bound": sec["hand_async"] / v["hand_async"].get("busiest_seconds", 1.0),
            "default_over_sync": sec["smartarray"] / sec["hand_sync"],
            "options_over_async": sec["smartarray_options"] / sec["hand_async"],
        }
        t["ok"] = {
            "async >= 1.3x sync": t["sync_over_async"] >= 1.3,
            "async within 5% of bound": t["async_over_bound"] <= 1.05,
            "default <= sync": t["default_over_sync"] <= 1.0,
            "options within 1.1x async": t["options_over_async"] <= 1.1,
        }
        out[name] = t
    return out


def _in_child(quick: bool) -> dict[str, Any]:
    """The modelled figures, from a child process on the fake driver with the clock on."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM",)}
    env.pop("SMARTARRAY_STRICT", None)
    env.update(
        SMARTARRAY_FAKE_GPU="1",
        SMARTARRAY_FAKE_GPU_TIMING=PRESET,
        NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    argv = [sys.executable, __file__, "--json-figures"] + (["--quick"] if quick else [])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"the fake-driver child failed: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False, measured: bool = False) -> dict[str, Any]:
    """The modelled figures (a child on the fake driver's clock) and, with ``measured`` on a
    GPU, the same variants' measured seconds at the modelled sizes.

    Returns
    -------
    dict
        ``{"model": {"params", "modelled", "preset", "workloads": {name: {"results_agree",
        "variants": {variant: {"seconds", "busiest_engine", "busiest_seconds"}}}}},
        "targets": {name: {...ratios, "ok": {target: bool}}}, "measured": same layout as
        "model" or None}``.
    """
    model = _in_child(quick)
    out: dict[str, Any] = {"model": model, "measured": None}
    if "workloads" in model:
        out["targets"] = targets(model["workloads"])
    if measured:
        p = QUICK if quick else FULL
        scale = MODELLED_CHUNK_BYTES // (4 * p.n)
        out["measured"] = measure(Params(chunks=p.chunks, n=p.n * scale))
    return out


def format_figures(figures: dict[str, Any]) -> str:
    """The figures as text: per workload, each variant's modelled seconds (and measured)."""
    model = figures["model"]
    if "error" in model:
        return f"modelled time: not measured ({model['error']})"
    lines = [
        f"modelled time on the fake driver's clock (preset {model['preset']}; "
        f"{model['params']['chunks']} chunks modelled as 16 MiB each):"
    ]
    measured = (figures.get("measured") or {}).get("workloads", {})
    for name, w in model["workloads"].items():
        agree = "" if w["results_agree"] else "  (RESULTS DIFFER)"
        lines.append(f"  {name}{agree}")
        for variant, f in w["variants"].items():
            gpu = measured.get(name, {}).get("variants", {}).get(variant)
            extra = f"   measured {gpu['seconds'] * 1e3:9.3f} ms" if gpu else ""
            lines.append(
                f"    {variant:20s} {f['seconds'] * 1e3:9.3f} ms   busiest "
                f"{f['busiest_engine']} {f['busiest_seconds'] * 1e3:.3f} ms{extra}"
            )
        t = figures["targets"][name]
        lines.append(
            f"    sync/async {t['sync_over_async']:.2f}x, async/bound "
            f"{t['async_over_bound']:.3f}, smartarray/sync {t['default_over_sync']:.3f}, "
            f"options/async {t['options_over_async']:.3f}"
        )
        lines += [f"    [{'ok' if ok else 'MISSED'}] {k}" for k, ok in t["ok"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller chunks")
    parser.add_argument(
        "--measured", action="store_true", help="also run the variants here (on a GPU)"
    )
    parser.add_argument("--json-figures", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json_figures:  # in this process (a child of run(), on the fake driver's clock)
        print(json.dumps(measure(QUICK if args.quick else FULL)))
        return
    figures = run(args.quick, args.measured)
    print(format_figures(figures))


if __name__ == "__main__":
    import smartarray  # noqa: F401 - loads the fake driver first when SMARTARRAY_FAKE_GPU=1

    main()
