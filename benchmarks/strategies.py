"""The transfer strategies the benchmark suite compares smartarray with.

Six strategies run every workload of :mod:`workloads`:

- ``auto``: NumPy arrays passed straight to kernels. numba wraps each in
  ``numba.cuda.args.InOut`` and copies the whole array in before and out after every launch;
  :class:`~smartarray._demo.NumbaAutoCopy` makes exactly those copies through smartarray's
  counted primitives so they can be counted;
- ``hand``: hand-optimal explicit transfers (``smartarray.to_device``, device arrays'
  ``copy_to_device`` / ``copy_to_host``, on slices when only part changed);
- ``whole_array_flags``: :class:`FlagArray`, a rebuild of Numba's removed experimental
  ``SmartArray``: one valid flag per copy, whole-array copies, and the device copy marked
  changed after every launch;
- ``smartarray``: :class:`smartarray.SmartArray`, with ``In`` / ``Out`` hints where an
  expert would write them;
- ``smartarray_no_hints``: SmartArrays passed bare to the plain ``numba.cuda.jit`` kernels
  (what annotation-free code costs: every read-only input is recorded as written);
- ``smartarray_jit``: SmartArrays passed bare to the same kernels through
  :func:`smartarray.jit` / :func:`smartarray.njit`, which infer the ``In`` hints.

Every copy of every strategy goes through :mod:`smartarray.memory`, so one counting method
(:func:`smartarray.trace`) measures them all. Import this module only after the CUDA target
was chosen (``numba.cuda.args`` differs between the simulator and a GPU).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
from numba.cuda import args as _numba_args
from numba.cuda.typing.typeof import Purpose, typeof

import smartarray as sa
from smartarray._demo import NumbaAutoCopy

__all__ = ["STRATEGIES", "FlagArray", "NumbaAutoCopy"]

#: The strategy keys, in table order (the JSON layout of issue 6 uses these names).
STRATEGIES = (
    "auto",
    "hand",
    "whole_array_flags",
    "smartarray",
    "smartarray_no_hints",
    "smartarray_jit",
)


class FlagArray(_numba_args.ArgHint):
    """Whole-array dirty flags: the behaviour of Numba's removed experimental SmartArray.

    One host ndarray, one lazily allocated device array, and one flag per copy saying
    whether it is current. Making a copy current copies the *whole* array; passing the
    object to a kernel makes the device copy current and, after the launch, marks it changed
    (whether or not the kernel wrote it), so the next host access downloads everything.

    Parameters
    ----------
    host : numpy.ndarray
        The initial data (adopted, not copied); current on the host only.

    Examples
    --------
    >>> import numpy as np
    >>> f = FlagArray(np.zeros(4))
    >>> h = f.get("host"); h[0] = 1.0; f.mark_changed("host")
    >>> f.valid
    {'host': True, 'gpu': False}
    """

    def __init__(self, host: np.ndarray) -> None:
        self.value = host
        self._host = host
        self._dev: Any = None
        self.valid = {"host": True, "gpu": False}

    @cached_property
    def _numba_type_(self) -> Any:
        return typeof(self._host, Purpose.argument)

    def get(self, where: str = "host") -> Any:
        """The copy at ``where`` (``'host'`` or ``'gpu'``), made current by a whole-array copy."""
        if where == "host":
            if not self.valid["host"]:
                self._dev.copy_to_host(self._host)
                self.valid["host"] = True
            return self._host
        if self._dev is None:
            self._dev = sa.to_device(self._host)
        elif not self.valid["gpu"]:
            self._dev.copy_to_device(self._host)
        self.valid["gpu"] = True
        return self._dev

    def mark_changed(self, where: str = "host") -> None:
        """Record a write at ``where``: the other copy becomes stale, all of it."""
        other = "gpu" if where == "host" else "host"
        self.valid[where] = True
        self.valid[other] = False

    def to_device(self, retr: list[Any], stream: Any = 0) -> Any:
        """Kernel argument protocol: device copy current now, marked changed after the launch."""
        dev = self.get("gpu")
        retr.append(lambda: self.mark_changed("gpu"))
        return _numba_args.In(dev).to_device(retr, stream)
