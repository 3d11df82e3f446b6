"""How a host adopts the contract: ``install(server, *host_plugins)`` is the whole of it."""

from __future__ import annotations

import difflib
import inspect
import logging
import re
import weakref
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any, NamedTuple

import pluggy

from . import hookspecs, manifest
from .errors import HostContractError, ManifestError, PluginError, ToolNameTaken
from .hookspecs import PROJECT

log = logging.getLogger(__name__)

REGISTER_TOOLS = "centralmcp_register_tools"


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
    error naming the plugin and the hook: a batch must never run behind a missing gate. An
    installed plugin that is broken (it does not import, names no such attribute, implements a
    hook with no spec or with arguments the spec lacks, fails to add its tools, or adds a tool
    under a name the server already publishes), and two distributions giving the same entry
    point name, stop it too, with a ``PluginError`` naming the entry point and the distribution.
    """
    _check_server(server)
    _check_host_plugins(host_plugins)
    pm = plugin_manager(*host_plugins)
    pm.check_pending()  # the host's own implementations: pluggy's error, which names the plugin object
    if entry_points:
        load_entry_points(pm)
    for report in plugin_reports(pm):
        if report.missing:
            raise HostContractError(f"{report.unsatisfied()}. {_how_to_implement(report.missing, host_plugins)}")
    published = _tool_names(server)
    _register_tools(server, pm)
    _INSTALLED[server] = frozenset(_tool_names(server) - published)
    return pm


# The tools ``install`` added to each server it served: a second install while they are published would
# add them twice. One that removed them first (the CentralMCP adapter's ``replace``) installs anew.
_INSTALLED: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()


def _tool_names(server: Any) -> set[str]:
    from . import _compat  # here, so that the rest of hosting imports without the MCP SDK (and its OpenTelemetry)

    return set(_compat.tool_names(server))


def _check_server(server: Any) -> None:
    from . import _compat  # here, so that the rest of hosting imports without the MCP SDK (and its OpenTelemetry)

    if not _compat.is_server(server):
        # As it is imported (mcp.server.fastmcp.FastMCP), not where it is defined (….fastmcp.server.FastMCP).
        kind = f"{_compat.Server.__module__.removesuffix('.server')}.{_compat.Server.__qualname__}"
        raise HostContractError(
            f"hosting.install needs your MCP server, a {kind} (the MCP SDK line installed here), "
            f"as its first argument; it was given {_what(server)}"
        )
    if _INSTALLED.get(server, frozenset()) & _tool_names(server):
        raise HostContractError(
            "hosting.install was already called on this server: call it once per server (the PluginManager it "
            "returned holds every plugin, and pm.register(plugin) adds one later)"
        )


def _check_host_plugins(host_plugins: tuple[object, ...]) -> None:
    """A host's own mistakes, told in its terms before pluggy tells them in its own (or not at all)."""
    seen: set[int] = set()
    for plugin in host_plugins:
        if id(plugin) in seen:
            raise HostContractError(f"hosting.install was given {_what(plugin)} twice: pass each host plugin once")
        seen.add(id(plugin))
        marked = _marked(plugin)
        if isinstance(plugin, type) and any(_takes_self(plugin, attribute) for attribute in marked):
            raise HostContractError(
                f"hosting.install was given the class {plugin.__name__}, not an instance: its hooks take self, "
                f"so pass {plugin.__name__}(...)"
            )
        for attribute, hook in marked.items():
            _check_marked(plugin, attribute, hook)


def _marked(plugin: object) -> dict[str, str]:
    """The attributes of ``plugin`` marked with ``hookimpl``, as pluggy finds them, and the hook each implements."""
    probe = pluggy.PluginManager(PROJECT)
    found = {}
    for attribute in dir(plugin):
        opts = probe.parse_hookimpl_opts(plugin, attribute)
        if opts is not None:
            found[attribute] = opts.get("specname") or attribute
    return found


def _takes_self(cls: type, name: str) -> bool:
    function = inspect.getattr_static(cls, name)
    return inspect.isfunction(function) and next(iter(inspect.signature(function).parameters), None) == "self"


def _check_marked(plugin: object, attribute: str, name: str) -> None:
    """A marked hook of the host names a hook of the contract and takes only arguments the hook passes."""
    hook = getattr(hookspecs, name, None)
    where = f"{_what(plugin)}.{attribute}"
    if hook is None or not hasattr(hook, f"{PROJECT}_spec"):
        close = difflib.get_close_matches(name, _SPECS, n=1)
        guess = f": did you mean {close[0]!r}?" if close else f". The hooks are {', '.join(_SPECS)}"
        raise pluggy.PluginValidationError(plugin, f"{where} is marked @hookimpl, but there is no hook {name!r}{guess}")
    spec = list(inspect.signature(hook).parameters)
    function = getattr(plugin, attribute)
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a callable without a signature: pluggy will tell
        return
    required = [
        p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    unknown = [arg for arg in required if arg not in spec]
    if unknown:
        raise pluggy.PluginValidationError(
            plugin,
            f"{where} takes {', '.join(map(repr, unknown))}, which {name} does not pass: it is called with "
            f"({', '.join(spec)}) by name, and an implementation may take any of them, spelled so",
        )


_SPECS = tuple(name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), f"{PROJECT}_spec"))


def _how_to_implement(missing: tuple[str, ...], host_plugins: tuple[object, ...]) -> str:
    """What the host author can do about required hooks nobody implements."""
    if not host_plugins:
        return "Pass the object that implements them to hosting.install(server, your_hooks)"
    for plugin in host_plugins:
        for hook in missing:
            function = getattr(plugin, hook, None)
            if callable(function):
                markers = getattr(getattr(function, "__func__", function), "__dict__", {})
                other = [key.removesuffix("_impl") for key in markers if key.endswith("_impl")]
                marker = f" (it is marked for the project {other[0]!r})" if other else ""
                return (
                    f"{_what(plugin)}.{hook} is not marked as a hook{marker}: decorate it with "
                    "centralmcp_batch.hookspecs.hookimpl"
                )
    return "Implement them with centralmcp_batch.hookspecs.hookimpl on an object passed to hosting.install"


def _what(value: object) -> str:
    """A host plugin as its author knows it: its class, or the class or module it is."""
    return value.__name__ if isinstance(value, (type, ModuleType)) else type(value).__name__


def load_entry_points(pm: pluggy.PluginManager) -> None:
    """Load and check every ``centralmcp`` entry point, one at a time, so a failure names its own.

    Pluggy would load the first of two distributions giving one name and skip the other unseen,
    which a name the batch plugin uses ("batch") would turn into a router without the batch.
    """
    for entry_point, dist in _entry_points():
        try:
            pm.load_setuptools_entrypoints(PROJECT, name=entry_point.name)
            pm.check_pending()
        except (Exception, SystemExit) as exc:  # a plugin that exits at import must not end the host unnamed
            told = f"{_named(entry_point, dist)} cannot be loaded: {_told(exc)}"
            raise PluginError(f"{told}. {_remedy(_name(dist))}") from exc


def _entry_points() -> list[tuple[metadata.EntryPoint, metadata.Distribution]]:
    """Each name of the group once, from the distribution pluggy would load it from (the first on the path).

    One distribution found twice on the path (a user site and a virtualenv, say) is one; two
    distributions giving one name is an error naming both.
    """
    found: dict[str, tuple[metadata.EntryPoint, metadata.Distribution]] = {}
    for dist in metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group != PROJECT:
                continue
            first, first_dist = found.setdefault(entry_point.name, (entry_point, dist))
            if _key(first_dist) != _key(dist):
                raise PluginError(
                    f"two distributions give the {PROJECT!r} entry point {entry_point.name!r}: "
                    f"{_label(first_dist)} ({first.value}) and {_label(dist)} ({entry_point.value}), and only "
                    f"one can load. {_remedy(_name(first_dist), _name(dist))}"
                )
    return list(found.values())


def _register_tools(server: Any, pm: pluggy.PluginManager) -> None:
    """Call each plugin's ``centralmcp_register_tools`` on its own, in pluggy's order, so a failure names it.

    A plugin may add tools, never take a name the server already publishes: the SDK would keep the
    first tool and drop the second with a warning naming neither plugin.
    """
    from . import _compat  # here, so that the rest of hosting imports without the MCP SDK (and its OpenTelemetry)

    impls = list(reversed(getattr(pm.hook, REGISTER_TOOLS).get_hookimpls()))  # pluggy calls the last first
    owners = dict.fromkeys(_compat.tool_names(server), _HOST)
    for impl in impls:
        others = [other.plugin for other in impls if other.plugin is not impl.plugin]
        origin = _origin(pm, impl.plugin)
        before = set(owners)
        try:
            with _compat.refusing_duplicate_tools(server):
                pm.subset_hook_caller(REGISTER_TOOLS, others)(server=server, pluginmanager=pm)
        except ToolNameTaken as exc:
            owner = owners.get(exc.name, _HOST)
            raise PluginError(
                f"{origin.who} cannot add its tool: the server already publishes {exc.name!r}, registered by "
                f"{owner.who}, and keeps one tool per name. {_remedy(origin.distribution, owner.distribution)}"
            ) from exc
        except Exception as exc:
            told = f"{origin.who} failed to register its tools: {_told(exc)}"
            raise PluginError(f"{told}. {_remedy(origin.distribution)}") from exc
        owners.update(dict.fromkeys(set(_compat.tool_names(server)) - before, origin))


class _Origin(NamedTuple):
    """Who did something, as an error names them, and the distribution they came in (None: the host)."""

    who: str
    distribution: str | None


_HOST = _Origin("the host", None)


def _origin(pm: pluggy.PluginManager, plugin: object) -> _Origin:
    name = pm.get_name(plugin)
    for loaded, dist in pm.list_plugin_distinfo():
        if loaded is plugin:
            found = [ep for ep in dist.entry_points if ep.group == PROJECT and ep.name == name]
            who = _named(found[0], dist) if found else f"{PROJECT} plugin {name!r} of {_label(dist)}"
            return _Origin(who, _name(dist))
    return _Origin(f"the host's plugin {getattr(plugin, '__name__', type(plugin).__name__)}", None)


def _remedy(*distributions: str | None) -> str:
    """What the operator can do: with one distribution to blame, fix or remove it; with two, keep one."""
    dists = list(dict.fromkeys(dist for dist in distributions if dist is not None))
    if not dists:
        return "Fix the host's plugin"
    if len(dists) == 1:
        return f"Upgrade or fix {dists[0]}, or uninstall it (pip uninstall {dists[0]})"
    return "Uninstall one of them (" + " or ".join(f"pip uninstall {dist}" for dist in dists) + ")"


def _named(entry_point: metadata.EntryPoint, dist: Any) -> str:
    return f"{PROJECT} plugin {entry_point.name!r} (entry point {entry_point.value} of {_label(dist)})"


def _name(dist: Any) -> str:
    return str(dist.metadata["name"])


def _key(dist: Any) -> str:
    return re.sub(r"[-_.]+", "-", _name(dist)).lower()  # names compare as packaging normalises them (PEP 503)


def _label(dist: Any) -> str:
    return f"{_name(dist)} {dist.version}"


def _told(exc: BaseException) -> str:
    """The exception in one line, as a client app's log shows it: pluggy's own texts span several."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {'; '.join(lines)}" if lines else type(exc).__name__


@dataclass(frozen=True)
class PluginReport:
    """One loaded plugin, its manifest and what the host lacks of it."""

    name: str
    distribution: str | None
    manifest: manifest.Manifest | None
    missing: tuple[str, ...]
    registered: tuple[str, ...] | None = None  # the hooks it implements here; None: not asked

    @property
    def satisfied(self) -> bool:
        return not self.missing

    @property
    def inactive(self) -> bool:
        """Its manifest lists hooks it implements, and it registered none (an optional dependency missing)."""
        return self.registered == () and self.manifest is not None and bool(self.manifest.implements)

    def unsatisfied(self) -> str:
        hooks = ", ".join(repr(name) for name in self.missing)
        noun = "hook" if len(self.missing) == 1 else "hooks"
        return f"plugin {self.name!r} requires host {noun} {hooks}, which no registered plugin implements"

    def raise_if_unsatisfied(self) -> None:
        if self.missing:
            raise HostContractError(self.unsatisfied())


def plugin_reports(pm: pluggy.PluginManager) -> list[PluginReport]:
    """A report for every plugin that came from an entry point."""
    return [_report(pm, plugin, dist) for plugin, dist in pm.list_plugin_distinfo()]


def _report(pm: pluggy.PluginManager, plugin: object, dist: Any) -> PluginReport:
    name = pm.get_name(plugin) or repr(plugin)
    try:
        found = manifest.for_entry_point(_entry_point_value(plugin, name, dist))
    except ManifestError as exc:  # its source is a path inside the package; say whose it is
        raise ManifestError(f"{PROJECT} plugin {name!r} of {_label(dist)}: {exc}. {_remedy(_name(dist))}") from exc
    if found is None:
        log.warning("centralmcp plugin %r ships no plugin.toml; its host requirements are not checked", name)
        return PluginReport(name, dist.metadata["name"], None, (), _registered(pm, plugin))
    unknown = [hook for hook in found.requires + found.optional if not hasattr(pm.hook, hook)]
    if unknown:
        raise HostContractError(f"plugin {name!r} names hooks this host does not define: {unknown!r}")
    missing = tuple(hook for hook in found.requires if not _implemented_by_others(pm, hook, plugin))
    return PluginReport(name, dist.metadata["name"], found, missing, _registered(pm, plugin))


def _registered(pm: pluggy.PluginManager, plugin: object) -> tuple[str, ...]:
    return tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))


def _entry_point_value(plugin: object, name: str, dist: Any) -> str:
    """The entry point that brought ``plugin`` (pluggy registers each under its entry point's name)."""
    for entry_point in dist.entry_points:
        if entry_point.group == PROJECT and entry_point.name == name:
            return str(entry_point.value)
    return str(getattr(plugin, "__name__", type(plugin).__module__))  # pragma: no cover - renamed after loading


def _implemented_by_others(pm: pluggy.PluginManager, hook: str, plugin: object) -> bool:
    return any(impl.plugin is not plugin for impl in getattr(pm.hook, hook).get_hookimpls())
