"""``centralmcp-batch plugins``: the installed ``centralmcp`` plugins, checked against a router's hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import hosting
from ..router.urls import hosts_only
from . import CommandFailed, load_router
from .plugin_report import report_json, reports_text


def run(config: Path | None, as_json: bool) -> int:
    """Print the reports; 0 when the router satisfies every plugin, 1 when it does not."""
    try:
        reports = plugin_reports(load_router(config))
    except Exception as exc:
        raise CommandFailed(f"cannot check the plugins: {type(exc).__name__}: {hosts_only(str(exc))}") from exc
    if as_json:
        print(json.dumps([report_json(report) for report in reports], indent=2))
    else:
        print(reports_text(reports))
    return 0 if all(report.satisfied for report in reports) else 1


def plugin_reports(router: Any) -> list[hosting.PluginReport]:
    """Every installed plugin, checked against the host hooks that ``router`` registers."""
    pm = hosting.plugin_manager(*_host_plugins(router.plugin_manager))
    hosting.load_entry_points(pm)
    return hosting.plugin_reports(pm)


def _host_plugins(pm: Any) -> list[object]:
    # The host's own implementations are everything registered that no entry point brought.
    discovered = {id(plugin) for plugin, _dist in pm.list_plugin_distinfo()}
    return [plugin for plugin in pm.get_plugins() if id(plugin) not in discovered]
