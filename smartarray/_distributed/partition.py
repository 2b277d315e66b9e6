"""Domain decomposition over the process's devices: a SmartArray split by rows, with halos.

:func:`decompose` splits a SmartArray along axis 0 into one :class:`DeviceBlock` per part:
the part's device, its owned rows and the view of them with ``halo`` rows on each side. It
moves nothing: the blocks are views of the array, whose bytes move when a kernel launched on
a block's device reads them (device to device for the halo rows a neighbour wrote, only those).
The counterpart across processes is :func:`smartarray.mpi.exchange_halos`; the row split is
:func:`numpy.array_split`'s, as ``examples/mpi_heat.py`` splits rows over ranks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import index

from .._memory import devices as _devices
from ..array import SmartArray

__all__ = ["DeviceBlock", "decompose"]


@dataclass(frozen=True, eq=False)
class DeviceBlock:
    """One part of a SmartArray split by rows (see :func:`decompose`).

    Attributes
    ----------
    index : int
        The part's number, ``0`` to ``parts - 1``, in row order.
    device : int
        The CUDA device the part is meant for: launch its kernel inside
        ``with numba.cuda.gpus[block.device]:``.
    rows : slice
        The rows the part owns, ``slice(first, stop)`` of the whole array.
    halo_rows : slice
        The owned rows with up to ``halo`` rows on each side: fewer at the ends of the array.
    owned : SmartArray
        ``a[rows]``: what the part's kernel writes.
    with_halos : SmartArray
        ``a[halo_rows]``: what the part's kernel reads. ``with_halos[offset + i]`` is
        ``owned[i]``.
    """

    index: int
    device: int
    rows: slice
    halo_rows: slice
    owned: SmartArray
    with_halos: SmartArray

    @property
    def first(self) -> int:
        """The row of the whole array that ``owned[0]`` is."""
        return int(self.rows.start)

    @property
    def offset(self) -> int:
        """How many halo rows come before the owned rows in ``with_halos`` (0 at the top)."""
        return int(self.rows.start - self.halo_rows.start)

    def __repr__(self) -> str:
        return (
            f"DeviceBlock(index={self.index}, device={self.device}, "
            f"rows={self.rows.start}:{self.rows.stop}, "
            f"halo_rows={self.halo_rows.start}:{self.halo_rows.stop})"
        )


def _count(value: object, argument: str, least: int) -> int:
    """``value`` as an int of at least ``least`` (bools refused), or a clear error."""
    if isinstance(value, bool):
        raise TypeError(f"{argument} must be an int, got {value!r}")
    try:
        n = index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{argument} must be an int, got {type(value).__name__}") from None
    if n < least:
        raise ValueError(f"{argument} must be at least {least}, got {n}")
    return n


def _devices_of(devices: Iterable[int] | None) -> tuple[int, ...]:
    """The device ordinals to use: all visible ones by default, else checked."""
    visible = _devices.count()
    if devices is None:
        return tuple(range(visible))
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Iterable):
        raise TypeError(
            f"devices must be a sequence of device ordinals (ints), got {type(devices).__name__}"
        )
    chosen = tuple(_count(d, "devices[...]", 0) for d in devices)
    if not chosen:
        raise ValueError("devices must name at least one device")
    for d in chosen:
        if d >= visible:
            raise ValueError(
                f"devices names device {d}, but this process sees {visible} CUDA device(s): "
                f"use ordinals 0 to {visible - 1}"
            )
    return chosen


def decompose(
    a: SmartArray,
    parts: int | None = None,
    *,
    halo: int = 0,
    devices: Iterable[int] | None = None,
) -> tuple[DeviceBlock, ...]:
    """Split ``a`` by rows (axis 0) into blocks, one per device, each with halo rows.

    Rows are split as :func:`numpy.array_split` splits them (the first ``rows % parts`` blocks
    one row longer). Block ``k`` is meant for device ``devices[k % len(devices)]``. Nothing
    moves: the blocks are views of ``a``, and a kernel launched on a block's device makes the
    bytes it reads current there, moving only the stale ones (the halo rows a neighbour wrote
    come peer to peer where the devices allow it). Rows are contiguous in a C-ordered array,
    so each block's halo is a contiguous byte range; along another layout the bounding byte
    range of each view is what moves.

    Parameters
    ----------
    a : SmartArray
        The array (or a view of one) to split, with at least one dimension.
    parts : int, optional
        How many blocks; by default one per device in ``devices``.
    halo : int, optional
        Rows of the neighbouring blocks each block reads on each side (a stencil's radius;
        :func:`smartarray.mpi.exchange_halos` calls it ``width``). Clipped at the ends of
        ``a``: the first block has no rows above, the last none below.
    devices : sequence of int, optional
        The device ordinals to use, in block order; by default every device this process sees
        (``range(len(numba.cuda.gpus))``; one on the CUDA simulator).

    Returns
    -------
    tuple of DeviceBlock
        The blocks in row order.

    Raises
    ------
    TypeError
        ``a`` is not a SmartArray; ``parts``, ``halo`` or a device is not an int; ``devices``
        is not a sequence.
    ValueError
        ``a`` is 0-d; ``parts`` below 1 or above ``a.shape[0]`` (every block owns at least a
        row); ``halo`` negative; ``devices`` empty or naming a device this process does not
        see.

    Examples
    --------
    Two blocks of a 6 x 4 grid with one halo row each side (on a machine with two devices,
    ``parts`` may be left out):

    >>> import numpy as np, smartarray as sa
    >>> u = sa.SmartArray(np.zeros((6, 4)))
    >>> blocks = sa.decompose(u, 2, halo=1, devices=[0])
    >>> for b in blocks:
    ...     print(b.device, b.rows, b.halo_rows, b.owned.shape, b.with_halos.shape, b.offset)
    0 slice(0, 3, None) slice(0, 4, None) (3, 4) (4, 4) 0
    0 slice(3, 6, None) slice(2, 6, None) (3, 4) (4, 4) 1

    A stencil step then launches one kernel per block, on its device, reading the block with
    its halos and writing the owned rows of a second array decomposed the same way
    (``examples/heat_devices.py``)::

        for bu, bv in zip(sa.decompose(u, halo=1), sa.decompose(v, halo=1)):
            with cuda.gpus[bu.device]:
                step[grid, threads](sa.In(bu.with_halos), sa.Out(bv.owned), bu.offset)
    """
    if not isinstance(a, SmartArray):
        raise TypeError(f"a must be a SmartArray, got {type(a).__name__}")
    if a.ndim < 1:
        raise ValueError("a must have at least one dimension (its rows are split), got a 0-d array")
    halo = _count(halo, "halo", 0)
    chosen = _devices_of(devices)
    parts = len(chosen) if parts is None else _count(parts, "parts", 1)
    rows = a.shape[0]
    if parts > rows:
        raise ValueError(
            f"parts must be at most the {rows} row(s) of a (every block owns a row), got {parts}"
        )
    return _blocks(a, parts, halo, chosen)


def _blocks(
    a: SmartArray, parts: int, halo: int, chosen: tuple[int, ...]
) -> tuple[DeviceBlock, ...]:
    """``parts`` blocks of ``a``'s rows as ``np.array_split`` sizes them, devices in turn."""
    rows = a.shape[0]
    size, extra = divmod(rows, parts)
    blocks = []
    start = 0
    for k in range(parts):
        stop = start + size + (k < extra)
        lo, hi = max(start - halo, 0), min(stop + halo, rows)
        blocks.append(
            DeviceBlock(
                index=k,
                device=chosen[k % len(chosen)],
                rows=slice(start, stop),
                halo_rows=slice(lo, hi),
                owned=a[start:stop],
                with_halos=a[lo:hi],
            )
        )
        start = stop
    return tuple(blocks)
