"""Porting code written for Numba's removed experimental ``SmartArray``.

Numba 0.3x shipped ``numba.SmartArray`` with ``host()``, ``host_changed()``, ``gpu()`` and
``gpu_changed()`` (and ``get(where)`` / ``mark_changed(where)``). Code written that way runs
unchanged on ``smartarray.SmartArray``: ``old_style`` below is such code, with only the import
changed. ``new_style`` is the same computation written for smartarray: pass the array to the
kernel and let the launch do the bookkeeping. Both must agree, and both move only what is
needed. One difference to know: a host ndarray you keep from ``host()`` is refreshed after
every ``gpu_changed()`` (the reference pages promise it), so holding one across launches
costs a download each time; ask for ``host()`` when you need it instead.

Run: python examples/porting_numba_smartarray.py [--n N] [--steps STEPS]
(no GPU: it restarts itself on the CUDA simulator, with small sizes, and says so;
--help lists the options)
"""

from __future__ import annotations

import numpy as np

# isort: off
from smartarray import SmartArray, TransferStats, trace  # was: from numba import SmartArray
from numba import cuda
from smartarray._cli import Option, parse_example_args

# isort: on


@cuda.jit
def scale(x, factor):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x.size, step):
        x[i] *= factor


def old_style(n: int, steps: int) -> np.ndarray:
    """The pattern of Numba's SmartArray: explicit gpu()/gpu_changed()/host()/host_changed()."""
    blocks = min((n + 127) // 128, 64)
    a = SmartArray(np.ones(n), where="host")
    for step in range(steps):
        scale[blocks, 128](a.gpu(), 2.0)  # a.gpu(): the device copy, uploaded if stale
        a.gpu_changed()  # the kernel wrote it
        h = a.host()  # the host copy, downloaded if stale
        h[0] = step  # write through it ...
        a.host_changed()  # ... and say so: the device copy of a goes stale
        del h  # no held host array: later launches leave the data on the device
    return np.array(a.get("host"))


def new_style(n: int, steps: int) -> np.ndarray:
    """The same with smartarray: the kernel takes ``a``; host writes are plain indexing."""
    blocks = min((n + 127) // 128, 64)
    a = SmartArray(np.ones(n))
    for step in range(steps):
        scale[blocks, 128](a, 2.0)
        a[0] = step  # writes 8 bytes; only they go back up before the next launch
    return np.array(a)


def reference(n: int, steps: int) -> np.ndarray:
    """The same computation with NumPy."""
    a = np.ones(n)
    for step in range(steps):
        a *= 2.0
        a[0] = step
    return a


def main(n: int = 256, steps: int = 3) -> tuple[np.ndarray, TransferStats, TransferStats]:
    """Run both versions; check them against NumPy; return the result and what each moved."""
    with trace() as old:
        before = old_style(n, steps)
    with trace() as new:
        after = new_style(n, steps)
    expected = reference(n, steps)
    np.testing.assert_array_equal(before, expected)
    np.testing.assert_array_equal(after, expected)
    print(f"{steps} steps on {n} floats; result sum {after.sum()}")
    for label, t in (("old style (gpu()/gpu_changed())", old), ("new style (kernel(a))", new)):
        s = t.stats
        print(
            f"{label}: {s.h2d_count} upload(s) {s.h2d_bytes} bytes, "
            f"{s.d2h_count} download(s) {s.d2h_bytes} bytes"
        )
    return after, old.stats, new.stats


if __name__ == "__main__":
    args = parse_example_args(
        __doc__,
        [
            Option("n", "number of float64 elements", gpu=1 << 20, simulator=256),
            Option("steps", "kernel launches, each after one host edit", gpu=10, simulator=3),
        ],
    )
    main(args.n, args.steps)
