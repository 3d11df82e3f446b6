"""A router from a TOML file: one ``[backends.NAME]`` table per backend."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from .backends import HttpBackend, StdioBackend
from .catalog import BackendOptions
from .core import Router

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def load_router(path: Union[str, Path]) -> Router:
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    tables = data.get("backends")
    if not isinstance(tables, dict) or not tables:
        raise ValueError(f"{path}: no [backends.NAME] tables")
    backends = {name: backend_from(name, table) for name, table in tables.items()}
    options = {name: options_from(table) for name, table in tables.items()}
    return Router(backends, options=options, name=str(data.get("name", "centralmcp-batch-router")))


def backend_from(name: str, table: Mapping[str, Any]) -> Any:
    if "module" in table:
        module_name, _, attribute = str(table["module"]).partition(":")
        found = getattr(importlib.import_module(module_name), attribute or "mcp")
        return found() if callable(found) and not hasattr(found, "add_tool") else found
    if "command" in table:
        return StdioBackend(str(table["command"]), tuple(str(arg) for arg in table.get("args", ())), dict(table.get("env", {})) or None)
    if "url" in table:
        return HttpBackend(str(table["url"]))
    raise ValueError(f"backend {name!r} needs one of module, command or url")


def options_from(table: Mapping[str, Any]) -> BackendOptions:
    return BackendOptions(
        trust_annotations=bool(table.get("trust_annotations", True)),
        read_allow=frozenset(table.get("read_allow", ())),
        concurrency=table.get("concurrency"),
    )
