"""``--plots DIR``: SVG charts of a run's own figures, wall time against n and throughput against clients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .chart import Chart, Point, Series, line_chart_svg

LATENCY_PLOT = "bench-latency-wall-time.svg"
LOAD_PLOT = "bench-load-throughput.svg"


def point(x: float, figure: Mapping[str, float]) -> Point:
    """A figure of the report (median, min, max over the rounds) at ``x``."""
    return Point(x, figure["median"], figure["min"], figure["max"])


def rounds_note(report: Mapping[str, Any]) -> str:
    repeat = report["config"]["repeat"]
    return f"median of {repeat} round{'s' if repeat != 1 else ''}; the band is their min–max"


def latency_chart(report: Mapping[str, Any]) -> Chart | None:
    rows: Sequence[Mapping[str, Any]] = report.get("latency_bound") or []
    modes = list(dict.fromkeys(row["mode"] for row in rows))  # in the order the scenario ran them
    series = tuple(
        Series(mode, tuple(point(row["n"], row["wall_ms"]) for row in rows if row["mode"] == mode)) for mode in modes
    )
    if not series:
        return None
    latency = report["config"]["latency_ms"]
    return Chart(
        title=f"Wall time of n calls that each wait {latency:g} ms",
        subtitle=f"in-process router, in-memory MCP session; {rounds_note(report)}",
        x_label="n (entries in the batch, or single invoke_read_tool calls)",
        y_label="wall time (ms)",
        series=series,
    )


def load_chart(report: Mapping[str, Any]) -> Chart | None:
    rows: Sequence[Mapping[str, Any]] = report.get("load") or []
    if not rows:
        return None
    n = rows[0]["n"]
    return Chart(
        title="Throughput against concurrent clients",
        subtitle=f"streamable HTTP, batches of {n} zero-latency entries; {rounds_note(report)}",
        x_label="clients",
        y_label="entries per second",
        series=(Series(f"batches of {n}", tuple(point(row["clients"], row["entries_per_s"]) for row in rows)),),
    )


def write_plots(report: Mapping[str, Any], directory: str | Path) -> list[Path]:
    """The plots the report has figures for, written into ``directory``; the paths written."""
    charts = {LATENCY_PLOT: latency_chart(report), LOAD_PLOT: load_chart(report)}
    drawn = {name: chart for name, chart in charts.items() if chart is not None}
    if drawn:
        Path(directory).mkdir(parents=True, exist_ok=True)
    written = []
    for name, chart in drawn.items():
        path = Path(directory) / name
        path.write_text(line_chart_svg(chart), encoding="utf-8")
        written.append(path)
    return written
