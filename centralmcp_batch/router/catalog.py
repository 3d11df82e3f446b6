"""The router's catalog: every backend tool by name, with its server and effective annotations."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._compat import ToolInfo
from ..entries import is_utf8
from ..errors import HostContractError
from ..models import ToolRef

# What one find_tool call may ask for. The search compares every distinct word with every tool's
# name and description, so its cost is the words times the catalog's text: bounding the words bounds
# the work one call can put on the event loop, whatever the catalog (see ``search_problem``).
MAX_QUERY_CHARS = 1_000
MAX_QUERY_WORDS = 16
MAX_TOP_K = 50
MAX_SERVER_CHARS = 200
# A query word is letters and digits only, so it can match only inside one such run of a tool's text:
# the search reads each distinct run once, cut to this length (no word is longer), which bounds the cost
# of one comparison whatever the text (a long run of one letter made each one slow).
MAX_WORD_CHARS = 64
CAPABILITIES = ("read", "diagnostic", "write", "destructive")
_WORD_BREAKS = re.compile(r"[^a-z0-9]+")

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
    # The texts the search reads (see ``searched``), made once rather than on every search.
    searched_name: str = field(init=False, repr=False)
    searched_text: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.searched_name, self.searched_text = searched(self.ref.name), searched(self.description)

    def score(self, words: Counter[str]) -> int:
        """A word in the name counts twice, in the description once; a word repeated in the query as often."""
        name, text = self.searched_name, self.searched_text
        return sum(times * (2 * (word in name) + (word in text)) for word, times in words.items())

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
        """The best ``top_k`` matches; the arguments are those ``search_problem`` passed."""
        words = query_words(query)
        scored = []
        for entry in self.entries.values():
            if (server and entry.ref.server != server) or (wanted and entry.capability != wanted):
                continue
            score = entry.score(words) if words else 1
            if score:
                scored.append((-score, entry.ref.name, entry))
        return [_hit(entry) for _, _, entry in sorted(scored)[: max(0, top_k)]]


def words_of(text: str) -> list[str]:
    return [word for word in _WORD_BREAKS.split(text.lower()) if word]


def searched(text: str) -> str:
    """``text`` as the search reads it: each distinct run of letters and digits once, cut to MAX_WORD_CHARS,
    separated by spaces. A query word is found in it exactly where it is found in such a run of ``text``."""
    return " ".join(dict.fromkeys(word[:MAX_WORD_CHARS] for word in words_of(text)))


def query_words(query: str) -> Counter[str]:
    """The query's distinct words, each with how often it is given; one longer than any searched run matches nothing."""
    return Counter(word for word in words_of(query) if len(word) <= MAX_WORD_CHARS)


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (``5`` or ``5.0``, not ``True``); else None."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def search_problem(query: Any, top_k: Any, server: Any, capability: Any) -> str | None:
    """Why find_tool refuses these arguments, stating the bound and never a value; None when it does not."""
    if not isinstance(query, str):
        return "query must be a string"
    if len(query) > MAX_QUERY_CHARS:
        return f"query must be at most {MAX_QUERY_CHARS:,} characters"
    if not is_utf8(query):
        return "query must be valid Unicode text"
    if len(query_words(query)) > MAX_QUERY_WORDS:
        return f"query must have at most {MAX_QUERY_WORDS} distinct words"
    if whole_number(top_k) not in range(1, MAX_TOP_K + 1):
        return f"top_k must be a whole number from 1 to {MAX_TOP_K}"
    if server is not None and (not isinstance(server, str) or len(server) > MAX_SERVER_CHARS):
        return f"server must be a server name of at most {MAX_SERVER_CHARS} characters, or null"
    if capability is not None and capability not in CAPABILITIES:
        return f"capability must be one of {', '.join(CAPABILITIES)}, or null"
    return None


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
