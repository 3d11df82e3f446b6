"""pytest plugin (``pytest11``): fixtures for host authors and a host conformance kit.

Fixtures: ``centralmcp_host`` (a small in-process host with read, write and slow tools that
records what reaches it), ``centralmcp_server`` (an MCP server with that host installed through
``hosting.install`` and entry-point discovery), ``centralmcp_call`` (call a tool on a server
over a real in-memory MCP client session).

Kit: subclass :class:`HostConformance`, give it a ``host_plugins`` fixture and the names of one
read tool and one write tool of your host, and pytest checks your hooks against the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from . import _compat, hosting
from .errors import InvalidCursor
from .hookspecs import hookimpl
from .models import CallContext, ToolRef

READ = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True}


@dataclass
class InlineHost:
    """A host whose backends are plain functions; it records every token and dispatch."""

    handlers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    refs: dict[str, ToolRef] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    dispatched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

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
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        expected = f"{tool.name}:page:"
        page = cursor[len(expected) :]
        if not cursor.startswith(expected) or not (page.isascii() and page.isdigit()):  # int() refuses "²"
            raise InvalidCursor("cursor was not issued for this tool")
        return int(page)

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        self.tokens.append(tool.name)

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        self.dispatched.append((tool.name, dict(arguments)))
        answer = self.handlers[tool.name](resume=resume, **arguments)
        return await answer if hasattr(answer, "__await__") else answer


def sample_host() -> InlineHost:
    host = InlineHost()
    host.add("echo", lambda resume=None, **arguments: {"arguments": arguments, "page": resume})

    async def slow(seconds: float = 0.05, resume: Any = None) -> dict[str, Any]:
        await anyio.sleep(seconds)
        return {"slept": seconds}

    host.add("slow", slow)
    host.add("delete_everything", lambda resume=None, **arguments: {"deleted": True}, WRITE)
    return host


@pytest.fixture
def centralmcp_host() -> InlineHost:
    """A fresh :class:`InlineHost` with ``echo``, ``slow`` (read) and ``delete_everything`` (write)."""
    return sample_host()


@pytest.fixture
def centralmcp_server(centralmcp_host: InlineHost) -> Any:
    """An MCP server with ``centralmcp_host`` installed and the ``centralmcp`` plugins loaded."""
    server = _compat.new_server("centralmcp-batch-test")
    hosting.install(server, centralmcp_host)
    return server


async def call(server: Any, tool: str, arguments: Mapping[str, Any] | None = None, **options: Any) -> _compat.Answer:
    """Call ``tool`` on ``server`` over a fresh in-memory MCP client session."""
    async with _compat.connect(server) as client:
        return await client.call_tool(tool, arguments, **options)


@pytest.fixture
def centralmcp_call() -> Callable[..., Any]:
    """``await centralmcp_call(server, tool, arguments)``: the tool's answer over a real session."""
    return call


class _Spy:
    """Counts what the host is asked for, around whatever the host does."""

    def __init__(self) -> None:
        self.tokens = 0
        self.dispatches: list[str] = []

    @hookimpl(wrapper=True)
    def centralmcp_acquire_rate_token(self, tool: ToolRef):  # type: ignore[no-untyped-def]
        self.tokens += 1
        return (yield)

    @hookimpl(wrapper=True)
    def centralmcp_dispatch_read(self, tool: ToolRef, context: CallContext):  # type: ignore[no-untyped-def]
        self.dispatches.append(tool.name)
        return (yield)


@pytest.mark.anyio
class HostConformance:
    """The contract a host's hooks must keep. Subclass and provide the fixtures below."""

    read_tool: str = ""
    write_tool: str = ""
    read_arguments: Mapping[str, Any] = {}

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def host_plugins(self) -> list[object]:  # pragma: no cover - the subclass provides it
        raise NotImplementedError("give HostConformance a host_plugins fixture")

    @pytest.fixture
    def conformance(self, host_plugins: list[object]) -> tuple[Any, _Spy]:
        spy = _Spy()
        server = _compat.new_server("centralmcp-conformance")
        hosting.install(server, *host_plugins, spy)
        return server, spy

    async def batch(self, server: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
        answer = await call(server, "invoke_read_tool_batch", {"calls": calls})
        assert not answer.is_error, answer.text
        structured: dict[str, Any] | None = answer.structured
        assert structured is not None, answer.text
        return structured

    async def test_gate_refusals_never_reach_dispatch(self, conformance: tuple[Any, _Spy]) -> None:
        server, spy = conformance
        response = await self.batch(server, [{"name": self.write_tool, "arguments": {}}])
        assert response["results"][0]["status"] == "blocked"
        assert spy.dispatches == [] and spy.tokens == 0

    async def test_one_token_per_backend_call(self, conformance: tuple[Any, _Spy]) -> None:
        server, spy = conformance
        calls: list[dict[str, Any]] = [
            {"name": self.read_tool, "arguments": dict(self.read_arguments)} for _ in range(3)
        ]
        calls += [{"name": self.write_tool}, {"name": "no-such-tool-anywhere"}, {"name": 7}]
        response = await self.batch(server, calls)
        assert [item["status"] for item in response["results"][3:]] == ["blocked", "unknown_tool", "invalid_call"]
        assert spy.tokens == len(spy.dispatches) == 3

    async def test_cursor_refusals(self, conformance: tuple[Any, _Spy]) -> None:
        server, spy = conformance
        calls = [
            {"name": self.read_tool, "arguments": dict(self.read_arguments), "cursor": "not-a-cursor-this-host-issued"}
        ]
        response = await self.batch(server, calls)
        item = response["results"][0]
        assert item["status"] == "invalid_cursor" and item["error"]
        assert "not-a-cursor-this-host-issued" not in item["error"]
        assert spy.dispatches == [] and spy.tokens == 0

    async def test_results_in_call_order(self, conformance: tuple[Any, _Spy]) -> None:
        server, _ = conformance
        calls = [{"name": self.read_tool, "arguments": dict(self.read_arguments), "id": f"call-{i}"} for i in range(6)]
        response = await self.batch(server, calls)
        assert [item["id"] for item in response["results"]] == [f"call-{i}" for i in range(6)]
        assert [item["index"] for item in response["results"]] == list(range(6))
        assert response["ok"] is True and response["counts"] == {"total": 6, "succeeded": 6, "failed": 0}
