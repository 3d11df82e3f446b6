"""A router from a TOML file: one ``[backends.NAME]`` table per backend, checked against one strict schema.

Every key has one type and no key is optional in a way that could widen the gate: a misspelled key,
a string where a boolean belongs, a string where a list belongs, all refuse to start with one error
that names the backend, the key, what was given and what was expected.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import HttpBackend, StdioBackend
from .catalog import ALLOW_LIST_NEEDS_DISTRUST, BackendOptions
from .core import Router
from .urls import is_http_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_NAME = "centralmcp-batch-router"
SOURCES = ("module", "command", "url")


class ConfigError(ValueError):
    """A router.toml that does not match the schema; the message says where and why."""


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_str_table(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(item, str) for item in value.values())


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class Key:
    check: Callable[[Any], bool]
    expected: str
    secret: bool = False  # its values may hold credentials: an error shows only their type


BACKEND_KEYS: dict[str, Key] = {
    "module": Key(_is_str, "a non-empty string 'package.module:attribute'"),
    "command": Key(_is_str, "a non-empty string, the program to start"),
    "args": Key(_is_str_list, "a list of strings"),
    "env": Key(_is_str_table, "a table of string values", secret=True),
    "url": Key(
        is_http_url, "an http:// or https:// URL with a host, the backend's streamable HTTP endpoint", secret=True
    ),
    "trust_annotations": Key(_is_bool, "true or false (a TOML boolean, not a string)"),
    "read_allow": Key(_is_str_list, "a list of tool names (strings)"),
    "concurrency": Key(_is_positive_int, "a positive whole number"),
}
ONLY_WITH_COMMAND = ("args", "env")


def _given(value: Any, secret: bool = False) -> str:
    if secret:
        return _toml_type(value)
    shown = repr(value)
    return f"{shown if len(shown) <= 80 else shown[:77] + '...'} ({_toml_type(value)})"


def _toml_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array", dict: "a table"}
    return next((name for kind, name in names.items() if isinstance(value, kind)), type(value).__name__)


def check_backend(name: str, table: Any) -> None:
    """Raise ConfigError, naming the backend and the key, at the first thing the schema does not allow."""
    where = f"backend {name!r}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a [backends.{name}] table, got {_given(table)}")
    for key, value in table.items():
        spec = BACKEND_KEYS.get(key)
        if spec is None:
            raise ConfigError(f"{where}: unknown key {key!r}; the keys are {', '.join(BACKEND_KEYS)}")
        if not spec.check(value):
            raise ConfigError(f"{where}: key {key!r} is {_given(value, spec.secret)}; expected {spec.expected}")
    sources = [key for key in SOURCES if key in table]
    if len(sources) != 1:
        given = "none of them" if not sources else " and ".join(sources)
        raise ConfigError(f"{where}: needs exactly one of module, command or url, got {given}")
    for key in ONLY_WITH_COMMAND:
        if key in table and "command" not in table:
            raise ConfigError(
                f"{where}: key {key!r} applies to a command backend only, and this one has {sources[0]!r}"
            )
    if "read_allow" in table and table.get("trust_annotations", True):
        raise ConfigError(f"{where}: {ALLOW_LIST_NEEDS_DISTRUST}")


def check_file(data: Mapping[str, Any]) -> None:
    for key in data:
        if key not in ("name", "backends"):
            raise ConfigError(f"unknown top-level key {key!r}; the keys are name and backends")
    if "name" in data and not _is_str(data["name"]):
        raise ConfigError(f"key 'name' is {_given(data['name'])}; expected a non-empty string")
    tables = data.get("backends")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError("no [backends.NAME] tables")
    for name, table in tables.items():
        check_backend(name, table)


def load_router(path: str | Path) -> Router:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        check_file(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    tables = data["backends"]
    backends = {name: backend_from(name, table) for name, table in tables.items()}
    options = {name: options_from(table) for name, table in tables.items()}
    return Router(backends, options=options, name=data.get("name", DEFAULT_NAME))


def backend_from(name: str, table: Mapping[str, Any]) -> Any:
    """The backend a checked table describes."""
    if "module" in table:
        module_name, _, attribute = table["module"].partition(":")
        found = getattr(_imported(name, module_name), attribute or "mcp")
        return found() if callable(found) and not hasattr(found, "add_tool") else found
    if "command" in table:
        return StdioBackend(table["command"], tuple(table.get("args", ())), dict(table.get("env", {})) or None)
    return HttpBackend(table["url"])


def _imported(backend: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the backend's own module was found; something it imports was not
        raise ModuleNotFoundError(
            f"backend {backend!r}: no module named {exc.name!r}. A module backend must be importable by the router's "
            "Python: install it, or put its folder on PYTHONPATH (the centralmcp-batch command does not look in the "
            "working directory or beside the config file)",
            name=exc.name,
        ) from None


def options_from(table: Mapping[str, Any]) -> BackendOptions:
    """How far a checked table trusts its backend."""
    return BackendOptions(
        trust_annotations=table.get("trust_annotations", True),
        read_allow=frozenset(table.get("read_allow", ())),
        concurrency=table.get("concurrency"),
    )
