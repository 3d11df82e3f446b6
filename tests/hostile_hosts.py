"""Hosts that misbehave on purpose, for the property tests and the fault matrix.

No backend here ever puts a value of its arguments or cursor into an answer or an error, so
any such value found in a batch response was echoed by the plugin itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from centralmcp_batch.errors import InvalidCursor
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.models import CallContext, ToolRef

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}
UNANNOTATED: dict[str, Any] = {}
HUGE_BYTES = 400_000
VALID_CURSOR = "page:2"


@dataclass
class Behaviour:
    """One backend tool: its annotations and what it does when dispatched."""

    annotations: Mapping[str, Any]
    answer: Callable[[], Any]


class BackendExploded(RuntimeError):
    pass


def _raise() -> Any:
    raise BackendExploded("the backend exploded")


async def _hang() -> Any:
    await anyio.sleep(3600)


def _cyclic() -> dict[str, Any]:
    answer: dict[str, Any] = {"rows": []}
    answer["rows"].append(answer)
    return answer


def read_behaviours() -> dict[str, Behaviour]:
    return {
        "succeed": Behaviour(READ, lambda: {"rows": [1, 2, 3], "source": "hostile"}),
        "explode": Behaviour(READ, _raise),
        "hang": Behaviour(READ, _hang),
        "error_dict": Behaviour(READ, lambda: {"error": "the backend said no " + "x" * 600}),
        "kept_blocked": Behaviour(READ, lambda: {"status": "blocked", "error": "backend-side refusal"}),
        "huge": Behaviour(READ, lambda: {"blob": "h" * HUGE_BYTES}),
        # Written as a single read would write it (NaN as null, a set as a list): an ok answer.
        "not_plain_json": Behaviour(READ, lambda: {"value": math.nan, "set": {1, 2}}),
        "not_json": Behaviour(READ, _cyclic),  # no JSON at all: that entry's error
    }


REFUSED_BEHAVIOURS = {
    "write_ticket": Behaviour(WRITE, lambda: {"written": True}),
    "purge_all": Behaviour(DESTRUCTIVE, lambda: {"purged": True}),
    "mystery_tool": Behaviour(UNANNOTATED, lambda: {"mystery": True}),
}
ROUTER_TOOL_NAMES = ("invoke_read_tool_batch", "invoke_read_tool", "find_tool", "invoke_tool")


@dataclass
class HostileHost:
    """A host whose tools succeed, raise, hang, return error dicts, huge or unencodable answers."""

    behaviours: dict[str, Behaviour] = field(default_factory=lambda: {**read_behaviours(), **REFUSED_BEHAVIOURS})
    dispatched: list[str] = field(default_factory=list)
    running: int = 0
    cancelled: int = 0

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        behaviour = self.behaviours.get(name)
        return None if behaviour is None else ToolRef(name, "hostile", dict(behaviour.annotations))

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None if tool.read_only else f"Tool '{tool.name}' is not read-only."

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        if cursor != VALID_CURSOR:
            raise InvalidCursor("cursor was not issued by this host")
        return 2

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        await anyio.sleep(0)

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        self.dispatched.append(tool.name)
        self.running += 1
        try:
            answer = self.behaviours[tool.name].answer()
            return await answer if hasattr(answer, "__await__") else answer
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
