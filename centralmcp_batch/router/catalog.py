"""The router's catalog: every backend tool by name, with its server and effective annotations."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._compat import ToolInfo
from ..errors import HostContractError
from ..models import ToolRef

# An allow list beside trusted annotations would change nothing: the backend's own readOnlyHint decides.
# Refused, so an operator never believes a tool allowed that stays blocked (or the reverse).
ALLOW_LIST_NEEDS_DISTRUST = (
    "read_allow applies only with trust_annotations = false: while the backend's annotations are trusted "
    "(the default) they alone decide what is a read, and the list would change nothing. Set trust_annotations "
    "= false to make exactly these tools reads, or drop read_allow"
)


@dataclass(frozen=True)
class BackendOptions:
    """How far to trust a backend: untrusted annotations are ignored and only ``read_allow`` reads."""

    trust_annotations: bool = True
    read_allow: frozenset[str] = frozenset()
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.read_allow and self.trust_annotations:
            raise HostContractError(ALLOW_LIST_NEEDS_DISTRUST)


def capability(annotations: dict[str, Any]) -> str:
    """CentralMCP's classification, in its order: read, destructive, diagnostic, write."""
    if annotations.get("readOnlyHint") is True:
        return "read"
    if annotations.get("destructiveHint") is True:
        return "destructive"
    if annotations.get("title") == "Diagnostic":
        return "diagnostic"
    return "write"


@dataclass
class Entry:
    ref: ToolRef
    description: str
    input_schema: dict[str, Any]

    @property
    def capability(self) -> str:
        return capability(dict(self.ref.annotations))


@dataclass
class Catalog:
    entries: dict[str, Entry] = field(default_factory=dict)

    def add_backend(self, server: str, tools: Iterable[ToolInfo], options: BackendOptions) -> None:
        staged = {
            tool.name: Entry(
                ToolRef(tool.name, server, _effective(tool, options), options.concurrency),
                tool.description,
                tool.input_schema,
            )
            for tool in tools
        }
        for name in staged:
            if name in self.entries and self.entries[name].ref.server != server:
                raise HostContractError(
                    f"duplicate backend tool name {name!r}: served by {self.entries[name].ref.server!r} and {server!r}"
                )
        self.entries.update(staged)

    def replace_backend(self, server: str, tools: Iterable[ToolInfo], options: BackendOptions) -> dict[str, str]:
        """Make ``server``'s entries exactly ``tools``: after a reconnect the gate must see the current list.

        A tool whose name another server already serves is left out (the first server keeps it);
        the names left out are returned, each with the server that keeps it, for the caller to report.
        """
        others = {name: entry for name, entry in self.entries.items() if entry.ref.server != server}
        listed = list(tools)
        left_out = {tool.name: others[tool.name].ref.server or "" for tool in listed if tool.name in others}
        self.entries = others
        self.add_backend(server, [tool for tool in listed if tool.name not in left_out], options)
        return left_out

    def find(self, name: str) -> ToolRef | None:
        entry = self.entries.get(name)
        return entry.ref if entry else None

    def input_schema(self, name: str) -> dict[str, Any]:
        entry = self.entries.get(name)
        return entry.input_schema if entry else {}

    def search(self, query: str, top_k: int, server: str | None, wanted: str | None) -> list[dict[str, Any]]:
        words = [word for word in re.split(r"[^a-z0-9]+", query.lower()) if word]
        scored = []
        for entry in self.entries.values():
            if (server and entry.ref.server != server) or (wanted and entry.capability != wanted):
                continue
            name, text = entry.ref.name.lower(), entry.description.lower()
            score = sum(2 * (word in name) + (word in text) for word in words) if words else 1
            if score:
                scored.append((-score, entry.ref.name, entry))
        return [_hit(entry) for _, _, entry in sorted(scored)[: max(0, top_k)]]


def _effective(tool: ToolInfo, options: BackendOptions) -> dict[str, Any]:
    if options.trust_annotations:
        return dict(tool.annotations)
    return {"readOnlyHint": True} if tool.name in options.read_allow else {}


def _hit(entry: Entry) -> dict[str, Any]:
    kind = entry.capability
    return {
        "name": entry.ref.name,
        "server": entry.ref.server,
        "description": entry.description,
        "params": sorted(entry.input_schema.get("properties", {})),
        "capability": kind,
        "recommended_dispatcher": "invoke_read_tool" if kind == "read" else "invoke_tool",
        "read_only": entry.ref.read_only,
    }
