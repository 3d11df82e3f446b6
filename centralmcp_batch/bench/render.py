"""A report as markdown: a table per scenario, then the targets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TABLES = {
    "latency_bound": (
        "1. Latency-bound: backend calls wait L, in-process router over an in-memory MCP session",
        ["n", "mode", "ideal_ms", "wall_ms", "speedup_over_c1", "speedup_over_singles", "efficiency"],
    ),
    "transports": (
        "2. Real transports: router subprocess, one batch vs single invoke_read_tool calls",
        ["transport", "n", "batch_ms", "singles_ms", "speedup"],
    ),
    "overhead": (
        "3. Overhead: zero-latency backend, batch cost beyond the backend calls",
        ["n", "direct_us", "batch_us", "overhead_us_per_entry", "mcp_in_memory_us", "cpu_share"],
    ),
    "budget": (
        "4. Budget: large results under the default 300,000-byte budget",
        [
            "n", "result_kb", "input_mb", "fit_us", "fit_us_per_entry", "fit_us_per_mb",
            "batch_ms", "batch_ms_per_mb", "bytes_returned", "results_dropped",
        ],
    ),
    "load": (
        "5. Load: concurrent clients over streamable HTTP, batches of 25 zero-latency entries",
        [
            "clients", "n", "batches_per_s", "entries_per_s", "p50_ms", "p99_ms",
            "batches", "entries", "lost_or_reordered",
        ],
    ),
    "rate_bound": (
        "6. Rate-bound: zero-latency entries against the reference router's default token bucket",
        ["n", "rate_per_s", "burst", "ideal_ms", "wall_ms", "efficiency"],
    ),
}  # fmt: skip


def cell(value: Any) -> str:
    if isinstance(value, dict) and "median" in value:
        return f"{fmt(value['median'])} ({fmt(value['min'])}–{fmt(value['max'])})"
    return fmt(value) if isinstance(value, float) else str(value)


def fmt(number: float) -> str:
    if abs(number) >= 100:
        return f"{number:.0f}"
    return f"{number:.2f}" if abs(number) >= 1 else f"{number:.3f}"


def table(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column, "")) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def render(report: Mapping[str, Any]) -> str:
    parts = [f"Figures: median (min–max) of {report['config']['repeat']} rounds; times in ms or us as named.", ""]
    parts += [table(title, report[key], columns) + "\n" for key, (title, columns) in TABLES.items() if key in report]
    parts.append("### Targets\n")
    parts += [f"- {item['target']}: {item['value']} -> {verdict(item['met'])}" for item in report["targets"]]
    return "\n".join(parts)


def verdict(met: bool | None) -> str:
    return "not measured in this run" if met is None else ("met" if met else "NOT met")
