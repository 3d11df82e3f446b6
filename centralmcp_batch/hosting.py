"""How a host adopts the contract: ``install(server, *host_plugins)`` is the whole of it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs, manifest
from .errors import HostContractError
from .hookspecs import PROJECT

log = logging.getLogger(__name__)


def plugin_manager(*host_plugins: object) -> pluggy.PluginManager:
    """A PluginManager with the specs and the host's implementations, no entry points yet."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for plugin in host_plugins:
        pm.register(plugin)
    return pm


def install(server: Any, *host_plugins: object, entry_points: bool = True) -> pluggy.PluginManager:
    """Make the PluginManager, load the ``centralmcp`` plugins, check them, register their tools.

    A plugin whose manifest requires a host hook nobody implements stops the start-up with an
    error naming the plugin and the hook: a batch must never run behind a missing gate.
    """
    pm = plugin_manager(*host_plugins)
    if entry_points:
        pm.load_setuptools_entrypoints(PROJECT)
    pm.check_pending()
    for report in plugin_reports(pm):
        report.raise_if_unsatisfied()
    pm.hook.centralmcp_register_tools(server=server, pluginmanager=pm)
    return pm


@dataclass(frozen=True)
class PluginReport:
    """One loaded plugin, its manifest and what the host lacks of it."""

    name: str
    distribution: str | None
    manifest: manifest.Manifest | None
    missing: tuple[str, ...]

    @property
    def satisfied(self) -> bool:
        return not self.missing

    def raise_if_unsatisfied(self) -> None:
        if self.missing:
            hooks = ", ".join(repr(name) for name in self.missing)
            raise HostContractError(
                f"plugin {self.name!r} requires host hook {hooks}, which no registered plugin implements"
            )


def plugin_reports(pm: pluggy.PluginManager) -> list[PluginReport]:
    """A report for every plugin that came from an entry point."""
    return [_report(pm, plugin, dist) for plugin, dist in pm.list_plugin_distinfo()]


def _report(pm: pluggy.PluginManager, plugin: object, dist: Any) -> PluginReport:
    name = pm.get_name(plugin) or repr(plugin)
    found = manifest.for_entry_point(_entry_point_value(plugin, name, dist))
    if found is None:
        log.warning("centralmcp plugin %r ships no plugin.toml; its host requirements are not checked", name)
        return PluginReport(name, dist.metadata["name"], None, ())
    unknown = [hook for hook in found.requires + found.optional if not hasattr(pm.hook, hook)]
    if unknown:
        raise HostContractError(f"plugin {name!r} names hooks this host does not define: {unknown!r}")
    missing = tuple(hook for hook in found.requires if not _implemented_by_others(pm, hook, plugin))
    return PluginReport(name, dist.metadata["name"], found, missing)


def _entry_point_value(plugin: object, name: str, dist: Any) -> str:
    """The entry point that brought ``plugin`` (pluggy registers each under its entry point's name)."""
    for entry_point in dist.entry_points:
        if entry_point.group == PROJECT and entry_point.name == name:
            return str(entry_point.value)
    return str(getattr(plugin, "__name__", type(plugin).__module__))  # pragma: no cover - renamed after loading


def _implemented_by_others(pm: pluggy.PluginManager, hook: str, plugin: object) -> bool:
    return any(impl.plugin is not plugin for impl in getattr(pm.hook, hook).get_hookimpls())
