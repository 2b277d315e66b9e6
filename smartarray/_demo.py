"""``python -m smartarray demo``: one iterative GPU workload run three ways, with byte counts.

The workload is 2-D heat diffusion: a ``cuda.jit`` stencil kernel steps two arrays (ping-pong),
and every few steps the host sets the boundary rows (a time-varying heat source on top, a cold
plate at the bottom), touching only those rows. It runs

- ``auto``: NumPy arrays handed to the kernel, so numba copies every array in before and out
  after every launch (:class:`NumbaAutoCopy` makes the same copies through smartarray's counted
  primitives, so they can be counted);
- ``hand``: explicit ``to_device`` / ``copy_to_device`` / ``copy_to_host`` calls, uploading only
  the boundary rows that changed (what an expert writes);
- ``smartarray``: :class:`~smartarray.SmartArray` arguments; the host writes rows with ordinary
  indexing and smartarray moves the stale bytes.

Every copy of every strategy goes through :mod:`smartarray.memory`, so :func:`smartarray.trace`
counts them all the same way. This module is imported only after the CUDA target was chosen
(it defines kernels).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda import args as _numba_args
from numba.cuda.typing.typeof import Purpose, typeof

import smartarray as sa

__all__ = [
    "BLOCK",
    "GRID",
    "NumbaAutoCopy",
    "Progress",
    "StrategyResult",
    "heat_step",
    "measure",
    "plot",
    "run",
    "format_table",
    "table",
]

#: Launch configuration of the demo and benchmark kernels. The kernels use grid-stride loops,
#: so any size works; a small grid keeps the CUDA simulator (one Python thread per GPU thread)
#: fast. On a GPU the kernels are memory-bound toys either way: the figures that matter are
#: the bytes moved.
GRID, BLOCK = 2, 32

ProgressFn = Callable[[int, int], None]


class NumbaAutoCopy(_numba_args.ArgHint):
    """A NumPy array argument copied the way numba copies it, through counted primitives.

    Passing a plain ``ndarray`` to a ``cuda.jit`` kernel makes numba wrap it in
    ``numba.cuda.args.InOut``: before the launch the whole array is copied to a new device
    array (``auto_device``), after the launch the whole device array is copied back into the
    ndarray. This wrapper does exactly that, byte for byte and copy for copy, with
    :func:`smartarray.to_device` and the device array's ``copy_to_host``, so that
    :func:`smartarray.trace` counts numba's automatic copies (numba's own are not counted).

    Parameters
    ----------
    value : numpy.ndarray
        A contiguous host array.
    """

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    @cached_property
    def _numba_type_(self) -> Any:
        return typeof(self.value, Purpose.argument)

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        """Copy the array in, schedule the copy out, return the kernel's argument."""
        host = self.value
        devary = sa.to_device(host, stream=stream)
        retr.append(lambda: devary.copy_to_host(host, stream=stream))
        # What the dispatcher expects for a device array (a strided view on a GPU).
        return _numba_args.In(devary).to_device(retr, stream)


@cuda.jit
def heat_step(u: Any, v: Any, alpha: float) -> None:  # pragma: no cover - runs as a kernel
    """``v = u + alpha * laplacian(u)`` inside, ``v = u`` on the boundary (grid-stride loop)."""
    rows, cols = u.shape
    start: int = cuda.grid(1)  # type: ignore[call-arg]  # (a kernel intrinsic: compiled, never called)
    stride = cuda.gridsize(1)
    for idx in range(start, rows * cols, stride):
        i = idx // cols
        j = idx % cols
        if i == 0 or j == 0 or i == rows - 1 or j == cols - 1:
            v[i, j] = u[i, j]
        else:
            v[i, j] = u[i, j] + alpha * (
                u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
            )


@dataclass(frozen=True)
class StrategyResult:
    """What one strategy moved and how long it took.

    Attributes
    ----------
    bytes : int
        Bytes copied between host and device, every direction.
    transfers : int
        Number of copies.
    seconds : float
        Wall time of the whole run, copies included.
    h2d_bytes, d2h_bytes : int
        Of ``bytes``, those uploaded (host to device) and downloaded (device to host).
    """

    bytes: int
    transfers: int
    seconds: float
    h2d_bytes: int = 0
    d2h_bytes: int = 0


def measure(
    fn: Callable[[], Any], traces: list[sa.Trace] | None = None
) -> tuple[Any, StrategyResult]:
    """Run ``fn()`` and count the copies it made (:func:`smartarray.trace`) and its wall time.

    Parameters
    ----------
    fn : callable
    traces : list, optional
        The :class:`~smartarray.Trace` of the run is appended to it.

    Returns
    -------
    tuple
        ``fn``'s return value and its :class:`StrategyResult`.
    """
    with sa.trace() as recorded:
        start = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - start
    totals = recorded.stats
    if traces is not None:
        traces.append(recorded)
    result = StrategyResult(
        totals.nbytes, totals.count, seconds, totals.h2d_bytes, totals.d2h_bytes
    )
    return value, result


class Progress:
    """A progress line on stderr, shown only once a run has lasted ``after`` seconds.

    Parameters
    ----------
    label : str
        What is running.
    after : float
        Seconds before the first line appears (short runs print nothing).
    stream : file, optional
        Where to write (default ``sys.stderr``).
    """

    def __init__(self, label: str, after: float = 1.0, stream: Any = None) -> None:
        self.label = label
        self.after = after
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        """Report ``done`` of ``total`` steps (at most 2 lines a second, 1 in 5 s off a tty)."""
        now = time.perf_counter()
        tty = getattr(self.stream, "isatty", lambda: False)()
        interval = 0.5 if tty else 5.0
        if now - self.start < self.after or (now - self.last < interval and done < total):
            return
        self.last = now
        end = "" if tty and done < total else "\n"
        prefix = "\r" if tty else ""
        print(f"{prefix}{self.label}: step {done}/{total}", end=end, file=self.stream, flush=True)
        self.shown = True

    def close(self) -> None:
        """End the line if one was shown."""
        if self.shown and getattr(self.stream, "isatty", lambda: False)():
            print(file=self.stream, flush=True)


# -- the workload, three ways ---------------------------------------------------------------


ALPHA = 0.2


def _initial(size: int) -> np.ndarray:
    u = np.zeros((size, size))
    u[size // 4 : size // 2, size // 4 : size // 2] = 1.0  # a warm patch
    return u


def _top(step: int, size: int) -> np.ndarray:
    """The heat source on the top row at ``step``: a slowly oscillating temperature profile."""
    x = np.linspace(0.0, math.pi, size)
    return (1.0 + 0.5 * math.sin(0.05 * step)) * np.sin(x)


def run_auto(size: int, steps: int, every: int, progress: ProgressFn | None = None) -> np.ndarray:
    """NumPy arrays, copied in and out of the device on every launch (numba's default)."""
    u, v = _initial(size), np.empty((size, size))
    bottom = np.zeros(size)
    for s in range(steps):
        if s % every == 0:
            u[0, :] = _top(s, size)
            u[-1, :] = bottom
        heat_step[GRID, BLOCK](NumbaAutoCopy(u), NumbaAutoCopy(v), ALPHA)
        u, v = v, u
        if progress:
            progress(s + 1, steps)
    return u


def run_hand(size: int, steps: int, every: int, progress: ProgressFn | None = None) -> np.ndarray:
    """Explicit transfers: upload once, then only the boundary rows; download once."""
    u = _initial(size)
    u[0, :] = _top(0, size)  # step 0's boundary rows, set before the one full upload
    u[-1, :] = 0.0
    d_u = sa.to_device(u)
    d_v = sa.device_array((size, size))  # written by the first launch: no upload
    bottom = np.zeros((1, size))
    for s in range(steps):
        if s > 0 and s % every == 0:
            d_u[0:1, :].copy_to_device(_top(s, size).reshape(1, size))
            d_u[size - 1 : size, :].copy_to_device(bottom)
        heat_step[GRID, BLOCK](d_u, d_v, ALPHA)
        d_u, d_v = d_v, d_u
        if progress:
            progress(s + 1, steps)
    return d_u.copy_to_host()


def run_smartarray(
    size: int, steps: int, every: int, progress: ProgressFn | None = None
) -> np.ndarray:
    """SmartArrays: the host writes rows by indexing; only stale bytes move."""
    u = sa.SmartArray(_initial(size), name="grid A")
    v = sa.SmartArray(shape=(size, size), dtype=np.float64, name="grid B")
    for s in range(steps):
        if s % every == 0:
            u[0, :] = _top(s, size)
            u[-1, :] = 0.0
        heat_step[GRID, BLOCK](sa.In(u), sa.Out(v), ALPHA)
        u, v = v, u
        if progress:
            progress(s + 1, steps)
    return np.array(u)


STRATEGIES: dict[str, tuple[str, Callable[..., np.ndarray]]] = {
    "auto": ("numba automatic copies (NumPy arguments)", run_auto),
    "hand": ("hand-written explicit transfers", run_hand),
    "smartarray": ("SmartArray arguments", run_smartarray),
}


def run(
    size: int = 48,
    steps: int = 100,
    every: int = 10,
    progress: bool = True,
    traces: dict[str, sa.Trace] | None = None,
) -> dict[str, Any]:
    """Run the demo workload under the three strategies and compare them.

    Parameters
    ----------
    size : int
        The grid is ``size`` x ``size`` float64 cells (at least 3).
    steps : int
        Kernel launches (at least 1).
    every : int
        The host updates the boundary rows every ``every`` steps.
    progress : bool
        Show a progress line on stderr for runs longer than a second.
    traces : dict, optional
        Filled with each strategy's :class:`~smartarray.Trace` (for :func:`plot`).

    Returns
    -------
    dict
        ``workload`` (a description), ``size``, ``steps``, ``boundary_every``,
        ``results_agree`` (bool: ``np.allclose`` of the three final grids), ``max_difference``
        and ``strategies``: ``auto``, ``hand``, ``smartarray`` each mapped to
        ``{"label", "bytes", "transfers", "seconds", "h2d_bytes", "d2h_bytes"}``.
    """
    if size < 3:
        raise ValueError(f"size must be at least 3, got {size}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if every < 1:
        raise ValueError(f"every must be at least 1, got {every}")
    with warnings.catch_warnings():
        # A demo of data movement on a small grid: numba's low-occupancy warning (a GPU's
        # grid of a few blocks) is not news to its reader.
        # (matched by its text: numba-cuda has its own NumbaPerformanceWarning class)
        warnings.filterwarnings("ignore", message=".*under-utilization due to low occupancy")
        return _run(size, steps, every, progress, traces)


def _run(
    size: int,
    steps: int,
    every: int,
    progress: bool,
    traces: dict[str, sa.Trace] | None,
) -> dict[str, Any]:
    # Warm up: compile the kernel (a GPU) outside the timed runs, once per strategy: numba
    # compiles one specialisation per argument type (device arrays, In/Out of SmartArrays).
    for _, warm_up in STRATEGIES.values():
        warm_up(3, 1, 1)
    results: dict[str, np.ndarray] = {}
    figures: dict[str, dict[str, Any]] = {}
    for key, (label, fn) in STRATEGIES.items():
        bar = Progress(f"demo {key}") if progress else None
        recorded: list[sa.Trace] = []
        final, result = measure(partial(fn, size, steps, every, bar), recorded)
        if traces is not None:
            traces[key] = recorded[0]
        if bar is not None:
            bar.close()
        results[key] = final
        figures[key] = {"label": label, **asdict(result)}
    reference = results["hand"]
    agree = all(np.allclose(r, reference) for r in results.values())
    worst = max(float(np.max(np.abs(r - reference))) for r in results.values())
    return {
        "workload": (
            f"2-D heat diffusion, {size}x{size} float64, {steps} steps, "
            f"boundary rows set on the host every {every} steps"
        ),
        "size": size,
        "steps": steps,
        "boundary_every": every,
        "results_agree": bool(agree),
        "max_difference": worst,
        "strategies": figures,
    }


def plot(traces: dict[str, sa.Trace], path: Any) -> Any:
    """Draw the strategies' timelines side by side (host and device lanes) into ``path``."""
    from ._observe.plot import plot_timelines

    panels = {f"{key}: {len(t.events)} transfers": t.events for key, t in traces.items()}
    return plot_timelines(panels, path)


#: Printed under a table whose seconds were measured on the CUDA simulator (``demo``, ``bench``).
SIMULATOR_TIMES_NOTE = (
    "* these seconds come from the CUDA simulator (kernels run as Python threads):\n"
    "  they say nothing about a GPU. The transfers and bytes are what a GPU would move."
)


def format_table(report: dict[str, Any], simulator: bool = False) -> str:
    """The demo's figures as a terminal table (under 100 columns), then what each row is.

    With ``simulator``, the wall-time column is starred: :data:`SIMULATOR_TIMES_NOTE`, printed
    under the table, says those seconds mean nothing for a GPU.
    """
    rows = [
        (
            "strategy",
            "transfers",
            "uploaded (h2d)",
            "downloaded (d2h)",
            "bytes moved",
            "bytes vs hand",
            "wall time*" if simulator else "wall time",
        )
    ]
    hand = report["strategies"]["hand"]["bytes"] or 1
    for key, fig in report["strategies"].items():
        rows.append(
            (
                key,
                f"{fig['transfers']:,}",
                f"{fig['h2d_bytes']:,}",
                f"{fig['d2h_bytes']:,}",
                f"{fig['bytes']:,}",
                f"{fig['bytes'] / hand:.2f}x",
                f"{fig['seconds']:.3f} s",
            )
        )
    legend = [f"{key}: {fig['label']}" for key, fig in report["strategies"].items()]
    return "\n".join([table(rows), "", *legend])


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows of cells as aligned text; the first row is the header, column 0 left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
