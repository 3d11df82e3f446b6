"""The benchmark's plots: the SVG line chart is well-formed and true to its data, and ``--plots`` writes them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from centralmcp_batch import bench
from centralmcp_batch.bench.chart import Chart, Point, Series, line_chart_svg, y_ticks
from centralmcp_batch.bench.plot import LATENCY_PLOT, LOAD_PLOT, write_plots

SVG = "{http://www.w3.org/2000/svg}"


def pixels(polyline: ET.Element) -> list[tuple[float, float]]:
    pairs = [pair.split(",") for pair in polyline.attrib["points"].split()]
    return [(float(x), float(y)) for x, y in pairs]


def chart_of(*series: Series) -> ET.Element:
    return ET.fromstring(line_chart_svg(Chart("title", "x", "y", series)))


def order(values: list[float]) -> list[int]:
    return sorted(range(len(values)), key=values.__getitem__)


def test_one_polyline_per_series_with_its_label_marker_and_band() -> None:
    rising = Series("rising", (Point(1, 10, 9, 12), Point(5, 50, 45, 55), Point(25, 250, 240, 260)))
    flat = Series("flat", (Point(1, 10), Point(5, 12), Point(25, 14)))
    svg = chart_of(rising, flat)
    groups = svg.findall(f"{SVG}g[@class='series']")
    assert [group.attrib["data-label"] for group in groups] == ["rising", "flat"]
    assert len(svg.findall(f".//{SVG}polyline")) == 2
    assert [len(group.findall(f"{SVG}circle")) for group in groups] == [3, 3]
    assert [len(group.findall(f"{SVG}polygon")) for group in groups] == [1, 0]  # a band only where min–max is known
    legend = svg.find(f"{SVG}g[@class='legend']")
    assert legend is not None and [text.text for text in legend.iter(f"{SVG}text")] == ["rising", "flat"]


def test_the_points_follow_the_data_in_order() -> None:
    data = [Point(1, 30), Point(8, 5), Point(16, 60), Point(32, 20)]  # up and down, so order matters
    (polyline,) = chart_of(Series("s", tuple(data))).iter(f"{SVG}polyline")
    xs, ys = zip(*pixels(polyline), strict=True)
    assert list(xs) == sorted(xs) and len(set(xs)) == 4  # left to right, as the data goes
    assert order([-y for y in ys]) == order([point.y for point in data])  # higher value, higher on the page
    heights = [ys[0] - y for y in ys]  # the y scale is linear: distances keep their proportions
    assert heights[2] / heights[1] == pytest.approx((60 - 30) / (5 - 30), rel=0.02)


def test_labels_are_escaped_and_the_axis_ends_at_a_round_tick() -> None:
    svg = line_chart_svg(Chart("a <b> & 'c'", "x & y", "y", (Series("<s>", (Point(1, 984),)),)))
    title = ET.fromstring(svg).find(f"{SVG}title")
    assert title is not None and title.text == "a <b> & 'c'"
    assert y_ticks(984) == [0, 200, 400, 600, 800, 1000]
    assert y_ticks(0.042) == pytest.approx([0, 0.01, 0.02, 0.03, 0.04, 0.05])


def test_a_chart_without_points_is_refused() -> None:
    with pytest.raises(ValueError):
        line_chart_svg(Chart("t", "x", "y", (Series("empty", ()),)))


def test_only_the_scenarios_that_ran_are_plotted(tmp_path: Path) -> None:
    report: dict[str, Any] = {"config": {"repeat": 3, "latency_ms": 50.0}}
    assert write_plots(report, tmp_path / "none") == [] and not (tmp_path / "none").exists()
    figure = {"median": 900.0, "min": 850.0, "max": 950.0, "runs": 3}
    report["load"] = [{"clients": c, "n": 25, "entries_per_s": figure} for c in (1, 8, 32)]
    assert write_plots(report, tmp_path) == [tmp_path / LOAD_PLOT]


def test_quick_run_with_plots_writes_both_svgs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    argv = ["--quick", "--scenarios", "latency,load", "--json", str(out), "--plots", str(tmp_path / "img")]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    printed = capsys.readouterr()
    assert printed.out.count("\n### ") == 3  # the two tables and the targets: the plots do not change stdout
    assert "plots: " in printed.err
    latency = ET.parse(tmp_path / "img" / LATENCY_PLOT).getroot()
    modes = [group.attrib["data-label"] for group in latency.iter(f"{SVG}g") if group.get("class") == "series"]
    assert modes == ["batch c=1", "batch c=4", "batch c=8", "singles"]
    load = ET.parse(tmp_path / "img" / LOAD_PLOT).getroot()
    (polyline,) = load.iter(f"{SVG}polyline")
    assert len(pixels(polyline)) == len(report["load"]) == 2  # one point per client count of the quick plan
