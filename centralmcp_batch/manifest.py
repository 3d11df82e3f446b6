"""Reading and validating a plugin's ``plugin.toml``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML ({exc})") from exc
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(f"{source}: schema_version must be {SCHEMA_VERSION}")
    plugin, hooks = _table(data, "plugin", source), _table(data, "hooks", source)
    tools = tuple(data.get("tools", ()))
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
        settings=tuple(data.get("settings", ())),
        source=source,
    )


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


def for_module(module_name: str) -> Optional[Manifest]:
    """The manifest shipped with the package of ``module_name``, or None when it has none.

    An installed wheel carries it inside the package; a source checkout (an editable
    install) keeps it beside the package directory.
    """
    package = module_name.split(".")[0]
    try:
        shipped = resources.files(package).joinpath(FILENAME)
    except ModuleNotFoundError:
        return None
    if shipped.is_file():
        return parse(shipped.read_text(encoding="utf-8"), f"{package}/{FILENAME}")
    beside = Path(str(resources.files(package))).parent / FILENAME
    if beside.is_file():
        found = parse(beside.read_text(encoding="utf-8"), str(beside))
        return found if found.entry_point.split(".")[0] == package else None
    return None


def own() -> Manifest:
    found = for_module(__name__)
    if found is None:
        raise ManifestError(f"centralmcp-batch ships no {FILENAME}: the installation is incomplete")
    return found
