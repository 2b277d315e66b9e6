"""Draw the SVG figures of the documentation: ``python docs/figures.py`` (no GPU needed).

- ``images/coherence.svg``: the coherence model on the eight-element array of
  :doc:`getting_started`: two copies, which bytes of each are current, what a host read, a
  host write and a kernel launch move;
- ``images/transfer_timeline.svg``: the bytes each kernel launch of the demo (2-D heat
  diffusion, ``python -m smartarray demo``) moves under numba's automatic copies, hand-written
  transfers and SmartArrays, counted with :func:`smartarray.trace`.

Both figures are computed: the first from a SmartArray's validity after each step, the
second from traced runs of the demo on the CUDA simulator (bytes do not depend on the
target). ``tests/structure/test_docs.py`` checks that the committed files are what this
script draws, so the pictures cannot drift from the library. Plain SVG text, written here,
so the Sphinx build needs no plotting library.
"""

from __future__ import annotations

import os
import sys
from html import escape
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
IMAGES = HERE / "images"

# numba.cuda picks the simulator or a GPU once, at import; the bytes are the same on both.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import smartarray as sa  # noqa: E402
from smartarray import _demo  # noqa: E402

FONT = "font-family:DejaVu Sans,Helvetica,Arial,sans-serif"
VALID, STALE, HOST_C, DEV_C = "#3a9d5d", "#e4e4e4", "#1f6fb2", "#d9822b"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" style="{FONT}">',
            f"<title>{escape(title)}</title>",
            '<rect width="100%" height="100%" fill="white"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def _text(x: float, y: float, s: str, size: int = 13, anchor: str = "start", **kw: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in kw.items())
    return (
        f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}"{extra}>'
        f"{escape(s)}</text>"
    )


# -- the coherence model -------------------------------------------------------------------------


@cuda.jit
def add_one(x: Any) -> None:  # pragma: no cover - runs as a kernel
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


def coherence_steps() -> list[tuple[str, str, Any, list[tuple[str, int, int]]]]:
    """Run the getting-started steps; after each: caption, the code, validity, the copies."""
    a = sa.SmartArray(np.arange(8.0), name="a")
    add_one[1, 32](a)  # the kernel wrote a: only the device copy is current

    def state() -> tuple[list[bool], list[bool]]:
        # a one-element view's validity is that element's bytes (making a view moves nothing)
        return (
            [a[i : i + 1].is_valid("host") for i in range(a.size)],
            [a[i : i + 1].is_valid("gpu") for i in range(a.size)],
        )

    steps = [("after a kernel wrote a", "add_one[1, 32](a)", state(), [])]
    for caption, code, action in (
        ("the host reads one element", "x = a[3]", lambda: a[3]),
        ("the host writes one element", "a[0] = -1.0", lambda: a.__setitem__(0, -1.0)),
        ("a kernel uses a again", "add_one[1, 32](a)", lambda: add_one[1, 32](a)),
    ):
        with sa.trace() as t:
            action()
        moved = [(e.direction, e.start // a.itemsize, e.nbytes) for e in t.events]
        steps.append((caption, code, state(), moved))
    return steps


def coherence_svg() -> str:
    """Four states of one array: the host and device copies, valid elements in green."""
    steps = coherence_steps()
    cell, left, top, row_h, block_h = 44, 150, 56, 30, 132
    width = left + 8 * cell + 250
    body = [
        _text(
            16,
            26,
            "One SmartArray of 8 float64: which bytes of each copy are current",
            16,
            font_weight="bold",
        ),
        f'<rect x="{width - 290}" y="36" width="14" height="14" fill="{VALID}"/>',
        _text(width - 270, 48, "current (valid)", 12),
        f'<rect x="{width - 160}" y="36" width="14" height="14" fill="{STALE}" stroke="#999"/>',
        _text(width - 140, 48, "stale", 12),
    ]
    for n, (caption, code, (host, dev), moved) in enumerate(steps):
        y0 = top + n * block_h
        body.append(_text(16, y0 + 18, f"{n + 1}. {caption}", 14, font_weight="bold"))
        body.append(_text(16, y0 + 36, code, 12, font_family="DejaVu Sans Mono,monospace"))
        for r, (label, valid) in enumerate((("host copy", host), ("device copy", dev))):
            y = y0 + 46 + r * (row_h + 22)
            body.append(_text(left - 10, y + 20, label, 13, "end"))
            for i, ok in enumerate(valid):
                body.append(
                    f'<rect x="{left + i * cell}" y="{y}" width="{cell - 4}" height="{row_h}" '
                    f'rx="3" fill="{VALID if ok else STALE}" stroke="#999"/>'
                )
                body.append(
                    _text(
                        left + i * cell + (cell - 4) / 2,
                        y + 20,
                        str(i),
                        12,
                        "middle",
                        fill="white" if ok else "#666",
                    )
                )
        notes = []
        for direction, index, nbytes in moved:
            x = left + index * cell + (cell - 4) / 2
            y_host, y_dev = y0 + 46 + row_h, y0 + 46 + row_h + 22
            if direction == "d2h":
                a, b, color = y_dev - 2, y_host + 4, HOST_C
            else:
                a, b, color = y_host + 2, y_dev - 4, DEV_C
            body.append(
                f'<line x1="{x}" y1="{a}" x2="{x}" y2="{b}" stroke="{color}" stroke-width="3" '
                'marker-end="url(#arrow)"/>'
            )
            notes.append(f"{direction} {nbytes} B (element {index})")
        if n == 0:
            notes = ["the kernel wrote every element:", "only the device copy is current"]
        elif not notes:
            notes = [
                "nothing moved:",
                "the write covers those bytes;",
                "the device copy",
                "of element 0 is now stale",
            ]
        for k, note in enumerate(notes):
            body.append(_text(left + 8 * cell + 14, y0 + 70 + 18 * k, note, 12))
    body.insert(
        0,
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="5" '
        'markerHeight="5" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#333"/></marker></defs>',
    )
    height = top + len(steps) * block_h + 4
    return _svg(width, height, body, "The coherence model: two copies, valid byte ranges")


# -- the transfer timeline -----------------------------------------------------------------------

DEMO = {"size": 16, "steps": 10, "every": 5}


def demo_per_launch() -> dict[str, list[tuple[int, int]]]:
    """Each demo strategy's (h2d, d2h) bytes per launch; the last entry is after the loop."""
    result: dict[str, list[tuple[int, int]]] = {}
    for key, (_, fn) in _demo.STRATEGIES.items():
        marks: list[int] = []
        with sa.trace() as t:
            fn(
                DEMO["size"],
                DEMO["steps"],
                DEMO["every"],
                lambda done, total, marks=marks: marks.append(len(t.events)),
            )
        bounds = [0, *marks, len(t.events)]
        per = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            events = t.events[lo:hi]
            per.append(
                (
                    sum(e.nbytes for e in events if e.direction == "h2d"),
                    sum(e.nbytes for e in events if e.direction == "d2h"),
                )
            )
        result[key] = per
    return result


def timeline_svg() -> str:
    """Per launch, bars up (uploads) and down (downloads), one lane per strategy."""
    data = demo_per_launch()
    labels = {key: label for key, (label, _) in _demo.STRATEGIES.items()}
    slots = DEMO["steps"] + 1
    left, slot_w, lane_h, top = 40, 60, 150, 84
    width = left + slots * slot_w + 30
    peak = max(max(u, d) for per in data.values() for u, d in per) or 1
    scale = 50 / peak
    body = [
        _text(
            16,
            24,
            "Bytes moved per kernel launch, three ways (python -m smartarray demo)",
            15,
            font_weight="bold",
        ),
        _text(
            16,
            44,
            f"2-D heat diffusion, {DEMO['size']}x{DEMO['size']} float64, {DEMO['steps']} "
            f"launches, the host sets the boundary rows every {DEMO['every']} launches",
            12,
        ),
        f'<rect x="{left}" y="54" width="14" height="14" fill="{DEV_C}"/>',
        _text(left + 20, 66, "uploaded (host to device), above the line", 12),
        f'<rect x="{left + 300}" y="54" width="14" height="14" fill="{HOST_C}"/>',
        _text(left + 320, 66, "downloaded (device to host), below", 12),
    ]
    for n, (key, per) in enumerate(data.items()):
        y0 = top + n * lane_h
        mid = y0 + 80
        up, down = sum(u for u, _ in per), sum(d for _, d in per)
        body.append(_text(left, y0 + 18, f"{key}: {labels[key]}", 14, font_weight="bold"))
        body.append(_text(width - 20, y0 + 18, f"{up + down:,} bytes in all", 13, "end"))
        body.append(
            f'<line x1="{left}" y1="{mid}" x2="{left + slots * slot_w}" y2="{mid}" stroke="#555"/>'
        )
        for i, (u, d) in enumerate(per):
            x = left + i * slot_w + 8
            for nbytes, color, sign in ((u, DEV_C, -1), (d, HOST_C, 1)):
                if not nbytes:
                    continue
                h = max(2.0, nbytes * scale)
                y = mid - h if sign < 0 else mid
                body.append(
                    f'<rect x="{x}" y="{y:.1f}" width="{slot_w - 16}" height="{h:.1f}" '
                    f'fill="{color}"/>'
                )
                if h < 14:
                    ty = mid - h - 4 if sign < 0 else mid + h + 12
                    body.append(_text(x + (slot_w - 16) / 2, ty, f"{nbytes} B", 10, "middle"))
            tick = str(i + 1) if i < slots - 1 else "end"
            body.append(
                _text(left + i * slot_w + slot_w / 2, y0 + 146, tick, 11, "middle", fill="#555")
            )
    body.append(
        _text(
            left + slots * slot_w / 2,
            top + 3 * lane_h + 14,
            "kernel launch (bytes moved to prepare it and by it); end: the result read on the host",
            12,
            "middle",
        )
    )
    height = top + 3 * lane_h + 26
    return _svg(width, height, body, "Transfer timeline of the demo, three strategies")


FIGURES = {"coherence.svg": coherence_svg, "transfer_timeline.svg": timeline_svg}


def main(argv: list[str]) -> int:
    """Write the figures (``--check``: only compare them with the committed files)."""
    stale = []
    for name, draw in FIGURES.items():
        text = draw()
        path = IMAGES / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    for name in stale:
        print(f"docs/images/{name} is out of date: run python docs/figures.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
