"""A plugin report (``hosting.PluginReport``) as the text and the JSON that ``plugins`` prints."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ..hookspecs import PROJECT
from ..hosting import PluginReport


def distribution_version(name: str | None) -> str | None:
    try:
        return None if name is None else version(name)
    except PackageNotFoundError:
        return None


def report_json(report: PluginReport) -> dict[str, Any]:
    found = report.manifest
    return {
        "name": report.name,
        "distribution": report.distribution,
        "version": distribution_version(report.distribution),
        "satisfied": report.satisfied,
        "missing": list(report.missing),
        "registered": None if report.registered is None else list(report.registered),
        "inactive": report.inactive,
        "manifest": None
        if found is None
        else {
            "source": found.source,
            "entry_point": found.entry_point,
            "tools": [dict(tool) for tool in found.tools],
            "implements": list(found.implements),
            "requires": list(found.requires),
            "optional": list(found.optional),
            "settings": [dict(setting) for setting in found.settings],
        },
    }


def reports_text(reports: list[PluginReport]) -> str:
    if not reports:
        return f"no {PROJECT!r} plugins are installed"
    return "\n\n".join(report_text(report) for report in reports)


# The otel plugin without opentelemetry is one: it loads, and does nothing.
INACTIVE = "  inactive:    it implements none of these here (an optional dependency not installed?)"


def report_text(report: PluginReport) -> str:
    verdict = "satisfied" if report.satisfied else "NOT satisfied: missing " + ", ".join(report.missing)
    dist = report.distribution or "?"
    heading = f"{report.name}  ({dist} {distribution_version(report.distribution) or ''})".replace(" )", ")")
    lines = [f"{heading}  {verdict}"]
    found = report.manifest
    if found is None:
        lines.append("  no plugin.toml: its host requirements are not checked")
        return "\n".join(lines)
    tools = ", ".join(f"{tool['name']} ({tool['capability']})" for tool in found.tools) or "-"
    lines += [
        f"  entry point: {found.entry_point}",
        f"  manifest:    {found.source}",
        f"  tools:       {tools}",
        f"  implements:  {', '.join(found.implements) or '-'}",
        f"  requires:    {', '.join(found.requires) or '-'}",
        f"  optional:    {', '.join(found.optional) or '-'}",
    ]
    if report.inactive:
        lines.insert(5, INACTIVE)
    lines += [f"  setting:     {setting.get('env')} (default {setting.get('default')})" for setting in found.settings]
    return "\n".join(lines)
