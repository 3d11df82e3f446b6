"""Hostile host plugins for the property tests and the fault matrix.

``HostileHost`` is a complete host whose read tools misbehave in every way a backend can:
they succeed, raise, hang until cancelled, answer error dicts or kept statuses, return huge
payloads, and return values JSON cannot encode. It records every rate token and dispatch,
how many dispatches ran at once (overall and per server), and which hanging calls observed
their cancellation, so a test can hold the plugin to what it promises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import anyio

from centralmcp_batch import InvalidCursor, ToolRef, budget
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.models import CallContext

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True}
CAPPED_SERVER = "capped"
SERVER_CAP = 2
HUGE_CHARS = 400_000
BIG_CHARS = 40_000
LONG_ERROR_CHARS = 2_000
CURSOR_HOOK_FAILS = "explode:"
LIMITER_FAILS_FOR = "read_empty"


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


class _Odd:
    """A value JSON has no form for, with a stable str()."""

    def __str__(self) -> str:
        return "<an odd object>"


class StrRaises:
    """A value JSON has no form for, whose str() raises too."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this")

    __repr__ = __str__


class ItemsRaise(dict[str, Any]):
    """A mapping whose own items() raises: json's encoder asks for them, pydantic reads the dict itself."""

    def items(self) -> Any:
        raise RuntimeError("no items")


class IterRaises(list[Any]):
    """A list whose own __iter__ raises, as ItemsRaise's items() does."""

    def __iter__(self) -> Any:
        raise RuntimeError("no iteration")


class BackendExploded(RuntimeError):
    pass


# What each read tool's backend does; the property tests name the status it must come to.
BEHAVIOURS: dict[str, tuple[str, Callable[[], Any]]] = {
    "read_ok": ("ok", lambda: {"rows": [1, 2, 3], "note": "fine"}),
    "read_empty": ("ok", lambda: None),
    "read_big": ("ok", lambda: {"blob": "b" * BIG_CHARS}),
    "read_huge": ("ok", lambda: {"blob": "h" * HUGE_CHARS}),
    "read_error_dict": ("error", lambda: {"error": "the backend said no"}),
    "read_kept_status": ("invalid_cursor", lambda: {"status": "invalid_cursor", "error": "that page expired"}),
    # Not plain JSON, but what a server SDK writes for a single read: a list, null, the object's str().
    "read_set": ("ok", lambda: {"values": {1, 2, 3}}),
    "read_nan": ("ok", lambda: {"ratio": math.nan}),
    "read_object": ("ok", lambda: _Odd()),
    "read_items_raise": ("ok", lambda: ItemsRaise(rows=[1, 2])),
    # Nothing can write these as JSON.
    "read_circular": ("error", _circular),
    "read_deep": ("error", lambda: _deep(5_000)),
    "read_surrogate": ("error", lambda: {"text": "broken \ud800 text"}),
    "read_bigint": ("error", lambda: {"count": 10**5_000}),  # past Python's int-to-text digit limit
    "read_str_raises": ("error", lambda: {"x": StrRaises()}),
}
RAISING = {"read_raises": "error", "read_long_error": "error"}
HANGING = "read_hangs"
READ_TOOLS = (*BEHAVIOURS, *RAISING, HANGING)
# Tools the gate must refuse: write, destructive-but-claims-read, unannotated, a hint that is not True.
BLOCKED_TOOLS = {
    "write_delete": WRITE,
    "destructive_read": {"readOnlyHint": True, "destructiveHint": True},
    "unannotated": {},
    "hint_as_text": {"readOnlyHint": "true"},
}
SELF_TOOL = "invoke_read_tool_batch"
# The router's own tools: the catalog does not list them, so they are unknown to a batch.
ROUTER_TOOLS = ("find_tool", "invoke_read_tool", "invoke_tool")
# JSON-safe tools: those whose answers an MCP client can receive as they are.
JSON_SAFE_TOOLS = (
    "read_ok",
    "read_empty",
    "read_big",
    "read_huge",
    "read_error_dict",
    "read_kept_status",
    "read_raises",
    "read_long_error",
    HANGING,
)


def valid_cursor(name: str, page: int) -> str:
    return f"{name}:page:{page}"


@dataclass
class HostileHost:
    """A full host (catalog, gate, cursors, limiter, dispatch) over misbehaving backends."""

    tokens: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)
    hang_started: int = 0
    hang_cancelled: int = 0
    in_flight: int = 0
    most_in_flight: int = 0
    capped_in_flight: int = 0
    most_capped_in_flight: int = 0
    catalog: dict[str, ToolRef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for index, name in enumerate(READ_TOOLS):
            server = CAPPED_SERVER if index % 3 == 0 else f"server-{index % 2}"
            self.catalog[name] = ToolRef(name, server, dict(READ), SERVER_CAP if server == CAPPED_SERVER else None)
        for name, hints in BLOCKED_TOOLS.items():
            self.catalog[name] = ToolRef(name, "writes", dict(hints))
        # A catalog that lists the batch tool itself: the plugin must still never call it.
        self.catalog[SELF_TOOL] = ToolRef(SELF_TOOL, "router", dict(READ))

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return self.catalog.get(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        if tool.read_only and tool.annotations.get("destructiveHint") is not True:
            return None
        return f"Tool '{tool.name}' is not read-only: use invoke_tool."

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        if cursor.startswith(CURSOR_HOOK_FAILS):
            raise BackendExploded("the cursor store is down")
        prefix = valid_cursor(tool.name, 0)[:-1]
        page = cursor[len(prefix) :]
        if not cursor.startswith(prefix) or not (page.isascii() and page.isdigit()):  # int() refuses "²"
            raise InvalidCursor("cursor was not issued for this tool and these arguments")
        return int(page)

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        self.tokens.append(tool.name)
        if tool.name == LIMITER_FAILS_FOR:
            raise BackendExploded("the rate limiter is down")  # logged by the plugin; the call proceeds

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        self.dispatched.append(tool.name)
        self._enter(tool)
        try:
            return await self._backend(tool.name)
        finally:
            self._leave(tool)

    def _enter(self, tool: ToolRef) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if tool.server == CAPPED_SERVER:
            self.capped_in_flight += 1
            self.most_capped_in_flight = max(self.most_capped_in_flight, self.capped_in_flight)

    def _leave(self, tool: ToolRef) -> None:
        self.in_flight -= 1
        if tool.server == CAPPED_SERVER:
            self.capped_in_flight -= 1

    async def _backend(self, name: str) -> Any:
        await anyio.sleep(0)  # let other entries interleave, as real backends would
        if name == HANGING:
            return await self._hang()
        if name == "read_raises":
            raise BackendExploded("the backend exploded")
        if name == "read_long_error":
            raise BackendExploded("E" * LONG_ERROR_CHARS)
        return BEHAVIOURS[name][1]()

    async def _hang(self) -> None:
        self.hang_started += 1
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            self.hang_cancelled += 1
            raise


def expected_result(name: str) -> Any:
    """What an ok entry of read tool ``name`` carries as its result: the backend's answer in JSON values."""
    return budget.as_json(BEHAVIOURS[name][1]())


def expected_backend_status(name: str) -> str:
    """The status a dispatched read tool's entry must come to (a hang: the call timeout's error)."""
    if name == HANGING:
        return "error"
    if name in RAISING:
        return RAISING[name]
    return BEHAVIOURS[name][0]


class RaisingHook:
    """A plugin that implements one hook by raising, beside a host that works."""

    def __init__(self, hook: str, asynchronous: bool = False) -> None:
        self.hook = hook
        self.asynchronous = asynchronous

    def fail(self) -> Any:
        if not self.asynchronous:
            raise BackendExploded(f"{self.hook} failed")

        async def later() -> None:
            await anyio.sleep(0)
            raise BackendExploded(f"{self.hook} failed")

        return later()


def raising_plugin(hook: str, asynchronous: bool = False) -> object:
    """An object whose only hook implementation, ``hook``, raises (at once or when awaited)."""
    raiser = RaisingHook(hook, asynchronous)
    signatures: dict[str, Callable[..., Any]] = {
        "centralmcp_find_tool": lambda name: raiser.fail(),
        "centralmcp_read_gate": lambda tool: raiser.fail(),
        "centralmcp_resume_cursor": lambda tool, arguments, cursor: raiser.fail(),
        "centralmcp_acquire_rate_token": lambda tool: raiser.fail(),
        "centralmcp_dispatch_read": lambda tool, arguments, resume, max_bytes, context: raiser.fail(),
    }
    # Attributes of an instance, not of a class, so pluggy sees plain functions without ``self``.
    return SimpleNamespace(**{hook: hookimpl(tryfirst=True)(signatures[hook])})
