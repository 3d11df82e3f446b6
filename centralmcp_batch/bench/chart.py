"""A small SVG line chart with no dependencies: axes, ticks, labels, a legend, and per series a
polyline with markers over a light band from each point's min to its max.

Built with ``xml.etree`` so that whatever the labels hold, the file is well-formed XML. Styles are
attributes, not CSS, so the file looks the same as an ``<img>`` in any viewer.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

SVG_NS = "http://www.w3.org/2000/svg"
# Okabe-Ito: told apart by readers with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
GRID = "#dddddd"
INK = "#333333"


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    low: float | None = None  # the band's bottom (the min over the rounds); none: no band here
    high: float | None = None


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    subtitle: str = ""
    width: int = 720
    height: int = 420


@dataclass(frozen=True)
class Box:
    """The plot area in pixels, inside the margins the labels and the legend need."""

    left: float
    top: float
    right: float
    bottom: float


@dataclass(frozen=True)
class Scale:
    """Data values from ``low`` to ``high`` onto pixels from ``start`` to ``end``."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


def nice_step(span: float, wanted_ticks: int = 5) -> float:
    """A tick step of 1, 2 or 5 times a power of ten that gives about ``wanted_ticks`` ticks."""
    rough = span / wanted_ticks
    power = 10.0 ** math.floor(math.log10(rough))
    return next(factor * power for factor in (1, 2, 5, 10) if factor * power >= rough)


def y_ticks(top_value: float) -> list[float]:
    """Ticks from 0 up to the first one at or above ``top_value``: the axis starts at zero, honestly."""
    step = nice_step(top_value if top_value > 0 else 1.0)
    count = max(1, math.ceil(top_value / step - 1e-9))
    return [step * i for i in range(count + 1)]


def x_ticks(chart: Chart) -> list[float]:
    # The measured x values themselves (sizes, client counts): a tick between them would be a value no run had.
    return sorted({point.x for series in chart.series for point in series.points})


def tick_label(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.3g}"


def highest(chart: Chart) -> float:
    return max(max(point.y, point.high or point.y) for series in chart.series for point in series.points)


def plot_box(chart: Chart) -> Box:
    return Box(left=72, top=64, right=chart.width - 190, bottom=chart.height - 56)


def scales(chart: Chart, box: Box) -> tuple[Scale, Scale, list[float], list[float]]:
    xs, ys = x_ticks(chart), y_ticks(highest(chart))
    x_high = xs[-1] if xs[-1] > 0 else 1.0
    return Scale(0.0, x_high, box.left, box.right), Scale(0.0, ys[-1], box.bottom, box.top), xs, ys


def coordinates(pairs: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in pairs)


def element(parent: ET.Element, tag: str, text: str = "", **attributes: object) -> ET.Element:
    """A child element; ``font_size`` becomes ``font-size`` and ``class_`` (a keyword in Python) ``class``."""
    names = {key: key.rstrip("_").replace("_", "-") for key in attributes}
    child = ET.SubElement(parent, tag, {names[key]: str(value) for key, value in attributes.items()})
    if text:
        child.text = text
    return child


def draw_frame(svg: ET.Element, chart: Chart, box: Box) -> None:
    element(svg, "rect", x=0, y=0, width=chart.width, height=chart.height, fill="#ffffff")
    element(svg, "text", chart.title, x=box.left, y=24, font_size=16, font_weight="bold", fill=INK)
    if chart.subtitle:
        element(svg, "text", chart.subtitle, x=box.left, y=44, font_size=12, fill="#666666")
    middle_x, middle_y = (box.left + box.right) / 2, (box.top + box.bottom) / 2
    element(svg, "text", chart.x_label, x=middle_x, y=chart.height - 14, text_anchor="middle", fill=INK)
    element(
        svg, "text", chart.y_label, x=18, y=middle_y, text_anchor="middle", fill=INK,
        transform=f"rotate(-90 18 {middle_y:.1f})",
    )  # fmt: skip


def draw_axes(svg: ET.Element, box: Box, x: Scale, y: Scale, xs: Sequence[float], ys: Sequence[float]) -> None:
    axes = element(svg, "g", class_="axes", stroke=INK, font_size=12)
    for value in ys:
        level = y(value)
        element(axes, "line", x1=box.left, x2=box.right, y1=f"{level:.1f}", y2=f"{level:.1f}", stroke=GRID)
        label = tick_label(value)
        element(axes, "text", label, x=box.left - 8, y=f"{level + 4:.1f}", text_anchor="end", stroke="none", fill=INK)
    for value in xs:
        at = x(value)
        element(axes, "line", x1=f"{at:.1f}", x2=f"{at:.1f}", y1=box.bottom, y2=box.bottom + 5)
        label = tick_label(value)
        element(axes, "text", label, x=f"{at:.1f}", y=box.bottom + 20, text_anchor="middle", stroke="none", fill=INK)
    element(axes, "line", x1=box.left, x2=box.right, y1=box.bottom, y2=box.bottom)
    element(axes, "line", x1=box.left, x2=box.left, y1=box.top, y2=box.bottom)


def draw_band(group: ET.Element, series: Series, x: Scale, y: Scale, colour: str) -> None:
    banded = [point for point in series.points if point.low is not None and point.high is not None]
    if not banded:
        return
    upper = [(x(point.x), y(point.high or point.y)) for point in banded]
    lower = [(x(point.x), y(point.low or point.y)) for point in reversed(banded)]
    element(group, "polygon", class_="band", points=coordinates(upper + lower), fill=colour, fill_opacity=0.15)


def draw_series(svg: ET.Element, series: Series, x: Scale, y: Scale, colour: str) -> None:
    group = element(svg, "g", class_="series", data_label=series.label)
    draw_band(group, series, x, y, colour)
    pixels = [(x(point.x), y(point.y)) for point in series.points]
    element(group, "polyline", points=coordinates(pixels), fill="none", stroke=colour, stroke_width=2)
    for point, (at_x, at_y) in zip(series.points, pixels, strict=True):
        marker = element(group, "circle", cx=f"{at_x:.1f}", cy=f"{at_y:.1f}", r=3.5, fill=colour)
        element(marker, "title", hover_text(series.label, point))


def hover_text(label: str, point: Point) -> str:
    has_spread = point.low is not None and point.high is not None
    spread = f" ({tick_label(point.low or 0.0)}–{tick_label(point.high or 0.0)})" if has_spread else ""
    return f"{label}: {tick_label(point.x)} → {tick_label(point.y)}{spread}"


def draw_legend(svg: ET.Element, chart: Chart, box: Box) -> None:
    legend = element(svg, "g", class_="legend", font_size=12)
    for number, series in enumerate(chart.series):
        colour, row_y = PALETTE[number % len(PALETTE)], box.top + 8 + 20 * number
        element(legend, "line", x1=box.right + 16, x2=box.right + 40, y1=row_y, y2=row_y, stroke=colour, stroke_width=2)
        element(legend, "circle", cx=box.right + 28, cy=row_y, r=3.5, fill=colour)
        element(legend, "text", series.label, x=box.right + 48, y=row_y + 4, fill=INK)


def line_chart_svg(chart: Chart) -> str:
    """The chart as an SVG document; every series needs at least one point."""
    if not chart.series or not all(series.points for series in chart.series):
        raise ValueError("a chart needs at least one series, and every series at least one point")
    box = plot_box(chart)
    x, y, xs, ys = scales(chart, box)
    svg = ET.Element(
        "svg",
        {
            "xmlns": SVG_NS,
            "width": str(chart.width),
            "height": str(chart.height),
            "viewBox": f"0 0 {chart.width} {chart.height}",
            "font-family": "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif",
            "font-size": "13",
        },
    )
    element(svg, "title", chart.title)  # what a screen reader announces
    draw_frame(svg, chart, box)
    draw_axes(svg, box, x, y, xs, ys)
    for number, series in enumerate(chart.series):
        draw_series(svg, series, x, y, PALETTE[number % len(PALETTE)])
    draw_legend(svg, chart, box)
    ET.indent(svg)
    return ET.tostring(svg, encoding="unicode") + "\n"
