"""Timeline pictures of recorded transfers (matplotlib, the optional ``plot`` extra).

Each panel has two lanes: **device** (copies that land in device memory: ``h2d`` and
``d2d``) and **host** (``d2h``). Each copy is a bar from the moment it was issued, as long as
issuing it took (at least a sliver, so every copy shows); bars are coloured and labelled by
array and reason. Events that name their own ``lane`` (the spans of the fake driver's modelled
clock, one lane per engine) are drawn in those lanes instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LANES", "lane_of", "plot_timelines"]

#: The lanes, bottom to top.
LANES = ("host", "device")


def lane_of(direction: str) -> str:
    """The lane a copy in ``direction`` is drawn in: where its bytes land."""
    return "host" if direction == "d2h" else "device"


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "Trace.plot needs matplotlib: pip install matplotlib (or, from a clone of "
            "smartarray, pip install '.[plot]')"
        ) from None
    return Figure


def plot_timelines(
    panels: Mapping[str, Sequence[Any]], path: str | os.PathLike[str] | None = None
) -> Any:
    """Draw one timeline panel per entry of ``panels`` (title -> events), side by side.

    Parameters
    ----------
    panels : mapping of str to sequence of TransferEvent
    path : str or path-like, optional
        Where to save the picture (the format follows the extension, e.g. ``.png``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    figure_class = _figure_class()
    from matplotlib import colormaps

    n = max(len(panels), 1)
    fig = figure_class(figsize=(6.0 * n, 2.8), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    keys = sorted({(e.array, e.reason) for events in panels.values() for e in events})
    palette = colormaps["tab10"]
    colours = {k: palette(i % 10) for i, k in enumerate(keys)}
    for ax, (title, events) in zip(axes, panels.items(), strict=False):
        _panel(ax, title, events, colours)
    handles = [_patch(colours[(array, reason)], f"{array} ({reason})") for array, reason in keys]
    if handles:
        fig.legend(handles=handles, loc="outside right upper", fontsize="small", frameon=False)
    if path is not None:
        fig.savefig(os.fspath(path), dpi=100)
    return fig


def _patch(colour: Any, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label)


def _lane(event: Any) -> str:
    """The lane of ``event``: its own ``lane`` when it names one, else by direction."""
    return getattr(event, "lane", None) or lane_of(event.direction)


def _panel(ax: Any, title: str, events: Sequence[Any], colours: dict) -> None:
    ax.set_title(title, fontsize="medium")
    own = sorted({e.lane for e in events if getattr(e, "lane", None)})
    lanes = LANES
    if own:  # the lanes the events name, and the default ones still used
        lanes = (
            *own,
            *(la for la in LANES if la not in own and any(_lane(e) == la for e in events)),
        )
    ax.set_yticks(range(len(lanes)), [f"{lane}" for lane in lanes])
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel("time (ms)")
    if not events:
        ax.text(0.5, 0.5, "no transfers", transform=ax.transAxes, ha="center", va="center")
        return
    t0 = min(e.time_ns for e in events)
    end = max(e.time_ns + e.duration_ns for e in events)
    span = max(end - t0, 1)
    sliver = span / 400  # the shortest bar drawn
    label_bars = len(events) <= 12
    for e in events:
        left = (e.time_ns - t0) / 1e6
        width = max(e.duration_ns, sliver) / 1e6
        y = lanes.index(_lane(e))
        ax.barh(y, width, left=left, height=0.6, color=colours[(e.array, e.reason)])
        if label_bars:
            ax.text(left, y + 0.35, f"{e.array} {e.reason}", fontsize="x-small", va="bottom")
    ax.set_xlim(-span / 50 / 1e6, (span + span / 50) / 1e6)
