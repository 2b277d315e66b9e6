"""Text reports of recorded transfers: :meth:`Trace.summary <smartarray.Trace.summary>`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_bytes", "summary"]

_DIRECTIONS = ("h2d", "d2h", "d2d")


def format_bytes(nbytes: int) -> str:
    """``'32 B'``, ``'1.5 KiB'``, ``'2.0 MiB'``, ``'1.2 GiB'``."""
    if nbytes < 1024:
        return f"{nbytes} B"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _cell(count: int, nbytes: int) -> str:
    """``'2.0 KiB in 4'``: the bytes moved in all, then in how many copies."""
    return f"{format_bytes(nbytes)} in {count}" if count else ""


def summary(events: Sequence[Any]) -> str:
    """A table of ``events`` grouped by array, reason and line, largest group first."""
    groups: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    totals = {d: [0, 0] for d in _DIRECTIONS}
    for e in events:
        row = groups.setdefault((e.array, e.reason, e.line), {d: [0, 0] for d in _DIRECTIONS})
        row[e.direction][0] += 1
        row[e.direction][1] += e.nbytes
        totals[e.direction][0] += 1
        totals[e.direction][1] += e.nbytes
    ordered = sorted(groups.items(), key=lambda item: -sum(nb for _, nb in item[1].values()))
    header = ["array", "reason", "line", *_DIRECTIONS]
    rows = [header]
    for (array, reason, line), counts in ordered:
        rows.append([array, reason, line, *(_cell(*counts[d]) for d in _DIRECTIONS)])
    rows.append(["total", "", "", *(_cell(*totals[d]) for d in _DIRECTIONS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
