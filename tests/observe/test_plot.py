"""Timeline pictures: a valid PNG whose lanes hold exactly the trace's copies."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import smartarray as sa
from tests._kernels import add_one

pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install '.[plot]')")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _bars_by_lane(ax):
    labels = [t.get_text() for t in ax.get_yticklabels()]
    lanes: dict[str, list[float]] = {label: [] for label in labels}
    for patch in ax.patches:
        y = round(patch.get_y() + patch.get_height() / 2)
        lanes[labels[y]].append(patch.get_x())
    return lanes


def test_plot_writes_a_png_whose_lanes_match_the_trace(tmp_path):
    from matplotlib.image import imread

    x = sa.SmartArray(np.zeros(64), name="x")
    y = sa.SmartArray(np.zeros(64), name="y")
    with sa.trace() as t:
        for _ in range(3):
            x[0] = 1.0
            add_one[1, 64](x)
            float(x[1])
        add_one[1, 64](y)
        sa.to_device(np.zeros(4)).copy_to_host()
    path = tmp_path / "timeline.png"
    fig = t.plot(path, title="two arrays")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert imread(path).ndim == 3  # a decodable image
    (ax,) = fig.axes
    assert ax.get_title() == "two arrays"
    lanes = _bars_by_lane(ax)
    downloads = [e for e in t.events if e.direction == "d2h"]
    uploads = [e for e in t.events if e.direction != "d2h"]
    assert len(lanes["host"]) == len(downloads) == 4
    assert len(lanes["device"]) == len(uploads) == 5
    # The bars are where the events are in time (ms since the first copy), in order.
    t0 = t.events[0].time_ns
    assert sorted(lanes["host"]) == pytest.approx([(e.time_ns - t0) / 1e6 for e in downloads])
    assert sorted(lanes["device"]) == pytest.approx([(e.time_ns - t0) / 1e6 for e in uploads])
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert "x (device use)" in legend and "y (device use)" in legend
    assert "x (host read)" in legend


def test_plot_of_an_empty_trace_still_draws_both_lanes(tmp_path):
    with sa.trace() as t:
        pass
    fig = t.plot(tmp_path / "empty.png")
    assert [x.get_text() for x in fig.axes[0].get_yticklabels()] == ["host", "device"]
    assert len(fig.axes[0].patches) == 0


def test_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with sa.trace() as t:
        pass
    # The extra is installed from a clone (smartarray is on no package index).
    with pytest.raises(ImportError, match=r"pip install matplotlib .*pip install '\.\[plot\]'"):
        t.plot()
