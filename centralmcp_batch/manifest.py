"""Reading and validating a plugin's ``plugin.toml``."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ManifestError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FILENAME = "plugin.toml"
SCHEMA_VERSION = 1
CAPABILITIES = ("read", "diagnostic", "write", "destructive")


@dataclass(frozen=True)
class Manifest:
    name: str
    distribution: str
    group: str
    entry_point: str
    tools: tuple[Mapping[str, str], ...]
    implements: tuple[str, ...]
    requires: tuple[str, ...]
    optional: tuple[str, ...]
    settings: tuple[Mapping[str, Any], ...]
    source: str = FILENAME


def parse(text: str, source: str = FILENAME) -> Manifest:
    """The main plugin of a ``plugin.toml``: its ``[plugin]`` table."""
    return parse_all(text, source)[0]


def parse_all(text: str, source: str = FILENAME) -> tuple[Manifest, ...]:
    """Every plugin a ``plugin.toml`` describes: ``[plugin]`` first, then each ``[[plugins]]`` entry.

    A distribution with several ``centralmcp`` entry points describes each of them; the further
    ones share the main plugin's distribution and group and carry their own hooks, tools and settings.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML ({exc})") from exc
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(f"{source}: schema_version must be {SCHEMA_VERSION}")
    main = _plugin(_table(data, "plugin", source), data, source)
    further = data.get("plugins", [])
    if not isinstance(further, list) or not all(isinstance(entry, dict) for entry in further):
        raise ManifestError(f"{source}: plugins must be an array of tables ([[plugins]])")
    found = (main,) + tuple(_further(entry, main, source) for entry in further)
    _refuse_duplicates(found, source)
    return found


def _plugin(plugin: Mapping[str, Any], sections: Mapping[str, Any], source: str) -> Manifest:
    """One plugin from its identifying table and the table holding its hooks, tools and settings."""
    hooks = _table(sections, "hooks", source)
    tools = tuple(sections.get("tools", ()))
    for tool in tools:
        if not isinstance(tool.get("name"), str) or tool.get("capability") not in CAPABILITIES:
            raise ManifestError(f"{source}: each [[tools]] needs a name and a capability in {CAPABILITIES}")
    return Manifest(
        name=_text(plugin, "name", source),
        distribution=_text(plugin, "distribution", source),
        group=_text(plugin, "group", source),
        entry_point=_text(plugin, "entry_point", source),
        tools=tools,
        implements=_names(hooks, "implements", source),
        requires=_names(hooks, "requires", source),
        optional=_names(hooks, "optional", source),
        settings=tuple(sections.get("settings", ())),
        source=source,
    )


def _further(entry: Mapping[str, Any], main: Manifest, source: str) -> Manifest:
    # The distribution and the group are the main plugin's: one file ships with one distribution.
    shared = {"distribution": main.distribution, "group": main.group}
    where = f"{source} [[plugins]] {entry.get('name')!r}"
    differing = sorted(key for key, value in shared.items() if entry.get(key, value) != value)
    if differing:
        raise ManifestError(f"{where}: {', '.join(differing)} must be the main [plugin]'s, or left out")
    return dataclasses.replace(_plugin({**entry, **shared}, entry, where), source=source)


def _refuse_duplicates(found: tuple[Manifest, ...], source: str) -> None:
    for key in ("name", "entry_point"):
        values = [getattr(plugin, key) for plugin in found]
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            raise ManifestError(f"{source}: two plugins with the same {key}: {repeated}")


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ManifestError(f"{source}: missing [{key}] table")
    return value


def _text(table: Mapping[str, Any], key: str, source: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{source}: {key!r} must be a non-empty string")
    return value


def _names(table: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ManifestError(f"{source}: hooks.{key} must be a list of hook names")
    return tuple(value)


def for_entry_point(value: str) -> Manifest | None:
    """The manifest of the plugin whose entry point is ``value`` (``module`` or ``module:attribute``).

    The ``plugin.toml`` shipped with the entry point's top-level package is read, and the plugin in it
    whose ``entry_point`` is exactly ``value`` is the answer: a manifest never describes another
    module of the same package. None when the package ships no manifest or its manifest does not
    describe this entry point.
    """
    return next((found for found in _shipped(value.split(".")[0]) if found.entry_point == value), None)


def _shipped(package: str) -> tuple[Manifest, ...]:
    """Every plugin in the manifest shipped with ``package``; empty when it ships none.

    An installed wheel carries it inside the package; a source checkout (an editable install)
    keeps it beside the package directory, where only a manifest naming this package counts.
    """
    try:
        shipped = resources.files(package).joinpath(FILENAME)
    except ModuleNotFoundError:
        return ()
    if shipped.is_file():
        return parse_all(shipped.read_text(encoding="utf-8"), f"{package}/{FILENAME}")
    beside = Path(str(resources.files(package))).parent / FILENAME
    if not beside.is_file():
        return ()
    found = parse_all(beside.read_text(encoding="utf-8"), str(beside))
    return found if found[0].entry_point.split(".")[0] == package else ()


def own() -> Manifest:
    """The batch plugin's manifest: the main plugin of this package's ``plugin.toml``."""
    found = _shipped(__name__.split(".")[0])
    if not found:
        raise ManifestError(f"centralmcp-batch ships no {FILENAME}: the installation is incomplete")
    return found[0]
