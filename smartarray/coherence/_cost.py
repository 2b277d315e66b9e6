"""The transfer cost model: what one copy between two locations costs, in seconds.

A copy of ``b`` bytes costs ``latency_s + b / bandwidth_Bps``: a fixed price per copy (the
driver call, the DMA set-up, the synchronisation) plus the bytes over the link's bandwidth. The
planner (:mod:`._state`) uses it to decide when fewer, larger copies beat more, smaller ones:

* two copies of one read are merged into one when the bytes between them take less than one
  copy's latency to move (:attr:`TransferCost.break_even_bytes`);
* when reads keep splitting a location's valid set (scattered small reads), the planner copies
  the whole span they touch once the latencies already paid add up to that span's transfer time,
  and remembers it, so the next time that location goes stale the first read copies the span.

The figures are a model, not a measurement: they only rank plans. Pure Python, standard library
only.

Presets
-------
:data:`PCIE5_X16`
    A discrete GPU on PCI Express 5.0 x16: 32 GT/s per lane, 16 lanes, 128b/130b encoding give
    about 63 GB/s per direction on the wire (PCI-SIG, PCI Express Base Specification 5.0);
    host-device copies of large pinned buffers reach about 50 GB/s in practice (CUDA's
    ``bandwidthTest`` on H100 PCIe systems), pageable copies less. A small ``cudaMemcpy``
    costs about 5-10 us end to end (API call, DMA set-up, completion), so 10 us is taken, which
    also covers the Python layers above the driver.
:data:`PCIE4_X16`
    PCI Express 4.0 x16: 16 GT/s per lane give about 31.5 GB/s per direction on the wire;
    page-locked copies reach about 25 GB/s (A100 PCIe systems), pageable ones about 10.
    Same per-copy latency as PCIe 5.
:data:`NVLINK_C2C`
    A Grace Hopper superchip: NVLink-C2C gives 900 GB/s in total, 450 GB/s per direction
    (NVIDIA Grace Hopper Superchip Architecture whitepaper, 2023); measured host-device copies
    reach about 400 GB/s. A small copy still pays the CUDA API and completion, about 2-5 us;
    3 us is taken.

Measure your own machine (copy 8 bytes and 64 MiB many times) and call
:func:`set_transfer_cost` with what you find.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = [
    "DEFAULT_TRANSFER_COST",
    "NVLINK_C2C",
    "PCIE4_X16",
    "PCIE5_X16",
    "TransferCost",
    "set_transfer_cost",
    "transfer_cost",
]


class TransferCost(NamedTuple):
    """The cost of one copy: ``latency_s + nbytes / bandwidth_Bps`` seconds.

    Attributes
    ----------
    latency_s : float
        Seconds every copy pays, whatever its size (> 0).
    bandwidth_Bps : float
        Bytes per second once the copy runs (> 0).

    Examples
    --------
    >>> cost = TransferCost(latency_s=10e-6, bandwidth_Bps=50e9)
    >>> cost.break_even_bytes
    500000
    >>> round(cost.seconds(copies=2, nbytes=1_000_000) * 1e6, 3)
    40.0
    """

    latency_s: float
    bandwidth_Bps: float

    @property
    def break_even_bytes(self) -> int:
        """int: the bytes whose transfer takes one copy's latency (``latency * bandwidth``).

        Copying fewer extra bytes than this costs less than one more copy.
        """
        return int(self.latency_s * self.bandwidth_Bps)

    def seconds(self, copies: int, nbytes: int) -> float:
        """Modelled seconds of ``copies`` copies moving ``nbytes`` bytes in all.

        Parameters
        ----------
        copies : int
            The number of separate copies.
        nbytes : int
            The bytes they move together.

        Returns
        -------
        float
        """
        return copies * self.latency_s + nbytes / self.bandwidth_Bps


def _checked(cost: object) -> TransferCost:
    if not isinstance(cost, TransferCost):
        raise TypeError(
            "cost must be a TransferCost(latency_s, bandwidth_Bps), e.g. "
            f"smartarray.PCIE5_X16 or smartarray.NVLINK_C2C; got {cost!r}"
        )
    for name, value in (("latency_s", cost.latency_s), ("bandwidth_Bps", cost.bandwidth_Bps)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"TransferCost.{name} must be a number, got {value!r}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"TransferCost.{name} must be finite and > 0, got {value!r}")
    product = cost.latency_s * cost.bandwidth_Bps
    if not math.isfinite(product):
        raise ValueError(
            "TransferCost's break-even bytes (latency_s * bandwidth_Bps) must be finite, got "
            f"{cost.latency_s!r} * {cost.bandwidth_Bps!r} = {product!r}"
        )
    return cost


PCIE5_X16 = TransferCost(latency_s=10e-6, bandwidth_Bps=50e9)
"""A discrete GPU on PCI Express 5.0 x16: 10 us per copy, 50 GB/s (see the module docstring)."""

PCIE4_X16 = TransferCost(latency_s=10e-6, bandwidth_Bps=25e9)
"""A discrete GPU on PCI Express 4.0 x16: 10 us per copy, 25 GB/s (see the module docstring)."""

NVLINK_C2C = TransferCost(latency_s=3e-6, bandwidth_Bps=400e9)
"""Grace Hopper's NVLink-C2C: 3 us per copy, 400 GB/s (see the module docstring)."""

DEFAULT_TRANSFER_COST = PCIE5_X16
"""The process-wide cost model until :func:`set_transfer_cost` changes it."""

# [model, its break-even bytes]: read without a lock by the planner, replaced in one assignment
_current: list = [DEFAULT_TRANSFER_COST, DEFAULT_TRANSFER_COST.break_even_bytes]


def transfer_cost() -> TransferCost:
    """Return the process-wide transfer cost model.

    Returns
    -------
    TransferCost
        :data:`DEFAULT_TRANSFER_COST` (:data:`PCIE5_X16`) unless :func:`set_transfer_cost`
        changed it.
    """
    return _current[0]


def set_transfer_cost(cost: TransferCost | None) -> TransferCost:
    """Set the process-wide transfer cost model used to plan copies.

    It takes effect at the next copy planned, for every array (a state made with its own
    ``cost`` keeps that one).

    Parameters
    ----------
    cost : TransferCost or None
        The model, e.g. :data:`PCIE5_X16`, :data:`NVLINK_C2C` or your own measurement;
        ``None`` restores :data:`DEFAULT_TRANSFER_COST`.

    Returns
    -------
    TransferCost
        The model in effect before the call (to restore it later).

    Raises
    ------
    TypeError
        If ``cost`` is not a :class:`TransferCost` (or None), or a field is not a number.
    ValueError
        If a field is not finite and positive, or their product (the break-even bytes) is
        not finite. Nothing changes.
    """
    new = DEFAULT_TRANSFER_COST if cost is None else _checked(cost)
    previous = _current[0]
    _current[:] = [new, new.break_even_bytes]
    return previous
