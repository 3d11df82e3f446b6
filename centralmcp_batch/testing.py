"""Fixtures for host authors and a host conformance kit.

The fixtures, which ``pytest_plugin`` (the ``pytest11`` entry point) makes of ``inline_host``:
``centralmcp_host`` (a small in-process host with read, write, slow and paged tools that records
what reaches it), ``centralmcp_server`` (an MCP server with that host installed through
``hosting.install`` and entry-point discovery), ``centralmcp_call`` (call a tool on a server over a
real in-memory MCP client session).

Kit: subclass :class:`HostConformance`, give it a ``host_plugins`` fixture and the names of one
read tool and one write tool of your host, and pytest checks your hooks against the contract.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from . import _compat, budget, hosting
from .errors import InvalidCursor
from .hookspecs import hookimpl
from .host import await_me_maybe
from .inline_host import READ, WRITE, InlineHost, call, sample_host, server_of
from .items import MIN_SHARE
from .models import CallContext, ToolRef

# A conftest that names this module as a plugin (``pytest_plugins``, ``-p``), as 0.1.0's entry point did,
# still gets the fixtures.
from .pytest_plugin import centralmcp_call, centralmcp_host, centralmcp_server
from .settings import SHARE_READS

__all__ = [
    "READ",
    "WRITE",
    "HostConformance",
    "InlineHost",
    "call",
    "centralmcp_call",
    "centralmcp_host",
    "centralmcp_server",
    "sample_host",
    "server_of",
]

# A share no answer of a kit's read comes near: the read's whole answer.
UNBOUNDED = 1_000_000
# The write the kit asks a gate about for a host that publishes none (HostConformance.write_tool None).
STAND_IN_WRITE = "centralmcp-conformance-write"


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
    """The contract a host's hooks must keep. Subclass and provide the fixtures below.

    Set ``read_tool``, ``write_tool`` (None when your host publishes no write tool) and
    ``read_arguments``, and give a ``host_plugins`` fixture.
    What only your host knows, the kit asks for, and skips the check that needs it without:
    ``read_server`` (the backend that serves ``read_tool``), ``tokens_drawn(host_plugins)`` (how
    many tokens your own limiter has handed out) and ``next_cursor(result)`` (where your bounded
    answers carry their cursor, when not in a top-level ``next_cursor``).
    """

    read_tool: str = ""
    #: A tool of your host that is not read-only, or None when it publishes none: the gate is then
    #: asked about a stand-in write, and the checks that need a write by name are skipped.
    write_tool: str | None = ""
    read_arguments: Mapping[str, Any] = {}
    #: The backend that serves ``read_tool``, as your clients know it; None skips the check that
    #: ``centralmcp_find_tool`` names it.
    read_server: str | None = None

    def tokens_drawn(self, host_plugins: list[object]) -> int | None:
        """How many tokens your host's own rate limiter has handed out so far, or None.

        The kit reads it around a batch of three reads and three refusals and expects three more:
        its spy counts calls of ``centralmcp_acquire_rate_token``, which cannot tell a hook that
        returns without drawing, or a dispatch that draws again, from one token per read. Override
        it to read your limiter's count (``host_plugins`` is what your fixture gave); with None,
        the default, that check is skipped.
        """
        return None

    def next_cursor(self, result: Any) -> str | None:
        """The continuation cursor in one of your host's bounded answers, or None.

        The cursor checks read ``read_tool`` with ``read_arguments`` at the smallest share and
        resume from this; override it when your answers carry their cursor elsewhere than a
        top-level ``next_cursor``. With no cursor in that answer, they are skipped.
        """
        return result.get("next_cursor") if isinstance(result, Mapping) else None

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def host_plugins(self) -> list[object]:  # pragma: no cover - the subclass provides it
        raise NotImplementedError("give HostConformance a host_plugins fixture")

    def _names_are_set(self) -> None:
        if not self.read_tool:
            pytest.fail("set read_tool to the name of a read tool of your host", pytrace=False)
        if self.write_tool == "":
            pytest.fail(
                "set write_tool to the name of a write tool of your host, or to None when it publishes none",
                pytrace=False,
            )

    def _needs_write_tool(self) -> str:
        if self.write_tool is None:
            pytest.skip("write_tool is None: this check needs a write tool of your host by name")
        return self.write_tool

    @pytest.fixture
    def conformance(self, host_plugins: list[object], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _Spy]:
        self._names_are_set()
        # The checks count one token and one dispatch per read, and read the same tool with the same
        # arguments several times: shared, those reads would be one call.
        monkeypatch.setenv(SHARE_READS, "0")
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
        write_tool = self._needs_write_tool()
        response = await self.batch(server, [{"name": write_tool, "arguments": {}}])
        item = response["results"][0]
        assert item["status"] == "blocked", f"the write tool {write_tool!r} was not blocked: {item}"
        assert spy.dispatches == [] and spy.tokens == 0, "a blocked call drew a token or reached dispatch"

    def reads_and_refusals(self) -> list[dict[str, Any]]:
        """Three reads of ``read_tool``, then a blocked (with a ``write_tool``), an unknown and an invalid entry."""
        calls: list[dict[str, Any]] = [
            {"name": self.read_tool, "arguments": dict(self.read_arguments)} for _ in range(3)
        ]
        blocked = [] if self.write_tool is None else [{"name": self.write_tool}]
        return calls + blocked + [{"name": "no-such-tool-anywhere"}, {"name": 7}]

    async def test_one_token_per_backend_call(self, conformance: tuple[Any, _Spy]) -> None:
        server, spy = conformance
        response = await self.batch(server, self.reads_and_refusals())
        refusals = (
            ["unknown_tool", "invalid_call"] if self.write_tool is None else ["blocked", "unknown_tool", "invalid_call"]
        )
        assert [item["status"] for item in response["results"]][3:] == refusals, (
            f"expected the reads ok, then {', '.join(refusals)}: {_outline(response)}"
        )
        assert spy.tokens == len(spy.dispatches) == 3, (
            f"3 reads called centralmcp_acquire_rate_token {spy.tokens} times and made {len(spy.dispatches)} "
            "dispatches; expected 3 and 3"
        )

    async def test_each_read_draws_one_token_from_the_hosts_limiter(
        self, conformance: tuple[Any, _Spy], host_plugins: list[object]
    ) -> None:
        server, _ = conformance
        before = self.tokens_drawn(host_plugins)
        if before is None:
            pytest.skip("tokens_drawn(host_plugins) answers None: the kit cannot count your limiter's tokens")
        await self.batch(server, self.reads_and_refusals())
        drawn = (self.tokens_drawn(host_plugins) or 0) - before
        fix = (
            "centralmcp_acquire_rate_token must draw one (await the limiter your single reads use)"
            if drawn < 3
            else "draw only in centralmcp_acquire_rate_token, not again in dispatch or another hook, "
            "or each entry costs the account more than a single read"
        )
        assert drawn == 3, (
            f"3 reads of {self.read_tool!r} and 3 refused entries drew {drawn} tokens from your limiter "
            f"(tokens_drawn); expected 3, one per read: {fix}"
        )

    async def test_cursor_refusals(self, conformance: tuple[Any, _Spy]) -> None:
        server, spy = conformance
        calls = [
            {"name": self.read_tool, "arguments": dict(self.read_arguments), "cursor": "not-a-cursor-this-host-issued"}
        ]
        response = await self.batch(server, calls)
        item = response["results"][0]
        assert item["status"] == "invalid_cursor" and item["error"], (
            f"a cursor the host never issued must be refused: raise InvalidCursor from centralmcp_resume_cursor: {item}"
        )
        assert "not-a-cursor-this-host-issued" not in item["error"], "the InvalidCursor message echoes the cursor"
        assert spy.dispatches == [] and spy.tokens == 0, "a refused cursor drew a token or reached dispatch"

    async def test_results_in_call_order(self, conformance: tuple[Any, _Spy]) -> None:
        server, _ = conformance
        calls = [{"name": self.read_tool, "arguments": dict(self.read_arguments), "id": f"call-{i}"} for i in range(6)]
        response = await self.batch(server, calls)
        assert [item["id"] for item in response["results"]] == [f"call-{i}" for i in range(6)]
        assert [item["index"] for item in response["results"]] == list(range(6))
        assert response["ok"] is True and response["counts"] == {"total": 6, "succeeded": 6, "failed": 0}, (
            f"6 reads of {self.read_tool!r} with read_arguments did not all succeed: {_outline(response)}"
        )

    # -- the hooks asked directly: what the batch's own answer cannot show ------------------

    @pytest.fixture
    def host_hooks(self, host_plugins: list[object]) -> Any:
        """The host's hooks as pluggy calls them, on a fresh server, with no spy in between."""
        self._names_are_set()
        return hosting.install(_compat.new_server("centralmcp-conformance-hooks"), *host_plugins).hook

    async def found(self, hooks: Any, name: str) -> ToolRef:
        tool = await await_me_maybe(hooks.centralmcp_find_tool(name=name))
        assert isinstance(tool, ToolRef), f"centralmcp_find_tool({name!r}) answered {tool!r}, not a ToolRef"
        return tool

    async def test_find_tool_answers_the_tool_asked_for(self, host_hooks: Any) -> None:
        for name in (self.read_tool, self.write_tool):
            if name is None:
                continue
            tool = await self.found(host_hooks, name)
            assert tool.name == name, (
                f"centralmcp_find_tool({name!r}) answered a ToolRef named {tool.name!r}: "
                "its name must be the name asked for, the one dispatch and the client see"
            )

    async def test_find_tool_names_the_server_that_serves_the_tool(self, host_hooks: Any) -> None:
        if self.read_server is None:
            pytest.skip("read_server is not set: the kit does not know which backend serves the read tool")
        server = (await self.found(host_hooks, self.read_tool)).server
        assert server == self.read_server, (
            f"centralmcp_find_tool({self.read_tool!r}) answered server {server!r}, but {self.read_tool!r} is served "
            f"by {self.read_server!r} (read_server): name the backend that serves the tool; the batch's items, "
            "the per-server concurrency cap and the metrics go by it, and a dispatch by name never shows it wrong"
        )

    async def test_find_tool_answers_none_for_an_unknown_name(self, host_hooks: Any) -> None:
        try:
            tool = await await_me_maybe(host_hooks.centralmcp_find_tool(name="no-such-tool-anywhere"))
        except Exception as exc:
            pytest.fail(f"centralmcp_find_tool raised {type(exc).__name__} for an unknown name: answer None")
        assert tool is None, f"centralmcp_find_tool answered {tool!r} for an unknown name: answer None"

    async def gate_answers(self, hooks: Any, tool: ToolRef) -> list[Any]:
        return [await await_me_maybe(answer) for answer in hooks.centralmcp_read_gate(tool=tool)]

    async def write_ref(self, hooks: Any) -> ToolRef:
        """The write tool as the catalog answers it; with no ``write_tool``, a stand-in write on the read's server."""
        if self.write_tool is not None:
            return await self.found(hooks, self.write_tool)
        read = await self.found(hooks, self.read_tool)
        return ToolRef(STAND_IN_WRITE, read.server, WRITE, read.concurrency)

    async def test_gate_answers_none_or_a_message(self, host_hooks: Any) -> None:
        read = await self.found(host_hooks, self.read_tool)
        allowed = await self.gate_answers(host_hooks, read)
        # A gate that goes by ToolRef.read_only refuses a read whose annotations lack the camelCase key.
        why = (
            ""
            if read.read_only
            else f" (its ToolRef's read_only is False: annotations {dict(read.annotations)}, and read_only is "
            "annotations['readOnlyHint'] is True, MCP's camelCase key)"
        )
        assert all(answer is None for answer in allowed), (
            f"centralmcp_read_gate answered {allowed} for the read tool {self.read_tool!r}{why}: None allows"
        )
        write = await self.write_ref(host_hooks)
        refused = [answer for answer in await self.gate_answers(host_hooks, write) if answer is not None]
        assert refused, f"no centralmcp_read_gate refused the write tool {write.name!r} ({dict(write.annotations)})"
        # Any non-None answer refuses, but only a string is a message the client can read.
        assert all(isinstance(answer, str) and answer.strip() for answer in refused), (
            f"centralmcp_read_gate refused {write.name!r} with {refused}: refuse with a non-empty string"
        )

    async def test_gate_refuses_a_write_that_is_not_destructive(self, host_hooks: Any) -> None:
        # Read-only means readOnlyHint true: a gate that only looks for destructiveHint lets
        # plain writes (create, update) through.
        tool = replace(await self.write_ref(host_hooks), annotations={"readOnlyHint": False})
        assert any(answer is not None for answer in await self.gate_answers(host_hooks, tool)), (
            f"centralmcp_read_gate allowed {tool}: refuse every tool whose readOnlyHint is not true"
        )

    async def dispatch(self, hooks: Any, arguments: dict[str, Any], max_bytes: int, resume: Any = None) -> Any:
        tool = await self.found(hooks, self.read_tool)
        context = CallContext(index=0, call_id="0", in_batch=True)
        answer = hooks.centralmcp_dispatch_read(
            tool=tool, arguments=arguments, resume=resume, max_bytes=max_bytes, context=context
        )
        return await await_me_maybe(answer)

    async def test_dispatch_keeps_within_max_bytes(self, host_hooks: Any) -> None:
        # The smallest share a batch ever gives an entry: a read_arguments whose answer is
        # larger than this makes the check bite, and one whose answer fits proves nothing.
        whole = budget.size(
            budget.as_json(await self.dispatch(host_hooks, copy.deepcopy(dict(self.read_arguments)), UNBOUNDED))
        )
        if whole <= MIN_SHARE:
            pytest.skip(
                f"{self.read_tool!r} with read_arguments answers {whole} bytes at max_bytes={UNBOUNDED}, within "
                f"{MIN_SHARE}: any dispatch keeps that bound; choose read_arguments whose answer is larger"
            )
        answer = await self.dispatch(host_hooks, dict(copy.deepcopy(self.read_arguments)), MIN_SHARE)
        size = budget.size(budget.as_json(answer))
        assert size <= MIN_SHARE, (
            f"centralmcp_dispatch_read answered {size} bytes of JSON for max_bytes={MIN_SHARE}: "
            "bound the answer to max_bytes (page it or cut it)"
        )

    async def test_dispatch_leaves_the_arguments_alone(self, host_hooks: Any) -> None:
        arguments = copy.deepcopy(dict(self.read_arguments))
        await self.dispatch(host_hooks, arguments, UNBOUNDED)
        assert arguments == dict(self.read_arguments), (
            f"centralmcp_dispatch_read changed the arguments it was given to {arguments}: "
            "they belong to the caller; copy them before adding defaults"
        )

    # -- cursors the host issued: skipped when read_tool's smallest answer carries none ---------

    async def first_page(self, hooks: Any) -> tuple[Any, str]:
        page = await self.dispatch(hooks, copy.deepcopy(dict(self.read_arguments)), MIN_SHARE)
        cursor = self.next_cursor(page)
        if cursor is None:
            pytest.skip(f"{self.read_tool!r} answered no cursor at max_bytes={MIN_SHARE} (see next_cursor)")
        return page, cursor

    async def resume(self, hooks: Any, name: str, arguments: Mapping[str, Any], cursor: str) -> Any:
        tool = await self.found(hooks, name)
        return await await_me_maybe(hooks.centralmcp_resume_cursor(tool=tool, arguments=arguments, cursor=cursor))

    async def test_dispatch_resumes_where_the_cursor_says(self, host_hooks: Any) -> None:
        page, cursor = await self.first_page(host_hooks)
        resume = await self.resume(host_hooks, self.read_tool, self.read_arguments, cursor)
        arguments = copy.deepcopy(dict(self.read_arguments))
        assert await self.dispatch(host_hooks, arguments, MIN_SHARE, resume) != page, (
            "centralmcp_dispatch_read answered the first page again for its own next cursor: "
            "read from the resume that centralmcp_resume_cursor returned"
        )

    async def test_cursor_is_refused_for_other_arguments(self, host_hooks: Any) -> None:
        _, cursor = await self.first_page(host_hooks)
        other = {**self.read_arguments, "centralmcp-conformance": 1}
        try:
            await self.resume(host_hooks, self.read_tool, other, cursor)
        except InvalidCursor:
            return
        pytest.fail("centralmcp_resume_cursor accepted a cursor for other arguments: bind it to its arguments")

    async def test_cursor_is_refused_for_another_tool(self, host_hooks: Any) -> None:
        write_tool = self._needs_write_tool()
        _, cursor = await self.first_page(host_hooks)
        try:
            await self.resume(host_hooks, write_tool, self.read_arguments, cursor)
        except InvalidCursor:
            return
        pytest.fail(
            f"centralmcp_resume_cursor accepted {self.read_tool!r}'s cursor for {write_tool!r}: bind it to its tool"
        )


def _outline(response: Mapping[str, Any]) -> list[str]:
    """A batch answer as a failure shows it: each entry's tool and status, and its error (results can be long)."""
    return [
        f"{item.get('tool')}: {item['status']}" + (f" ({item['error']})" if item.get("error") else "")
        for item in response.get("results", [])
    ]
