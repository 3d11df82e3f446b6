"""A small, complete in-process host for tests: what the ``centralmcp_*`` fixtures and the kit are made of.

Its own module, so that ``pytest_plugin`` (loaded by every pytest run) and ``testing`` (the kit) both
use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from . import _compat, budget, hosting
from .hookspecs import hookimpl
from .host import await_me_maybe
from .models import CallContext, ToolRef
from .router.bounding import Bounds, bound
from .router.core import CURSOR_TTL, MAX_ITEMS
from .router.cursors import CursorSigner

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True}


@dataclass
class InlineHost:
    """A small, complete host whose backends are plain functions; it records every token and dispatch.

    A handler is called with the entry's arguments and answers in full, as a backend does; the host
    bounds that answer to ``max_bytes`` the reference router's way: an answer that fits is passed as
    it is, one that does not has its longest top-level list paged, with a ``next_cursor`` that resumes
    the page after (an answer with no list to page becomes a bounded ``preview``). Its cursors are
    signed and bound to the tool and the arguments they were issued for; a test that needs one asks
    ``cursors.issue(tool, arguments, offset)``.
    """

    handlers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    refs: dict[str, ToolRef] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    dispatched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # A random key per host: only this host's own cursors verify.
    cursors: CursorSigner = field(default_factory=lambda: CursorSigner(None, int(CURSOR_TTL.default)), repr=False)

    def add(
        self,
        name: str,
        handler: Callable[..., Any],
        annotations: Mapping[str, Any] = READ,
        server: str = "inline",
        concurrency: int | None = None,
    ) -> None:
        self.handlers[name] = handler
        self.refs[name] = ToolRef(name, server, dict(annotations), concurrency)

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return self.refs.get(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None if tool.read_only else f"Tool '{tool.name}' is not read-only."

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> int:
        return self.cursors.verify(tool.name, arguments, cursor)  # the offset of the page it resumes

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        self.tokens.append(tool.name)

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        self.dispatched.append((tool.name, dict(arguments)))
        answer = await await_me_maybe(self.handlers[tool.name](**arguments))
        plain = budget.as_json(answer)
        if resume is None and budget.size(plain) <= max_bytes:
            return answer  # it fits: as the backend answered, with no paging marks
        bounds = Bounds(int(MAX_ITEMS.default), max_bytes)
        return bound(plain, bounds, resume or 0, lambda offset: self.cursors.issue(tool.name, arguments, offset))


def sample_host() -> InlineHost:
    host = InlineHost()
    host.add("echo", lambda **arguments: {"arguments": arguments})

    async def slow(seconds: float = 0.05) -> dict[str, Any]:
        await anyio.sleep(seconds)
        return {"slept": seconds}

    host.add("slow", slow)
    # About 2.5 kB in full: larger than the smallest share a batch gives, so it pages.
    host.add("rows", lambda count=100: {"rows": [{"n": n, "text": f"row {n}"} for n in range(count)]})
    host.add("delete_everything", lambda **arguments: {"deleted": True}, WRITE)
    return host


def server_of(host: Any) -> Any:
    """An MCP server with ``host`` installed and the ``centralmcp`` plugins loaded."""
    server = _compat.new_server("centralmcp-batch-test")
    hosting.install(server, host)
    return server


async def call(server: Any, tool: str, arguments: Mapping[str, Any] | None = None, **options: Any) -> _compat.Answer:
    """Call ``tool`` on ``server`` over a fresh in-memory MCP client session."""
    async with _compat.connect(server) as client:
        return await client.call_tool(tool, arguments, **options)
