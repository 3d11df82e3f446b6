"""The host hooks as the plugin calls them: a fresh PluginManager and inline hosts per test."""

from __future__ import annotations

from typing import Any

import anyio
import mcp.types
import pluggy
import pytest

from centralmcp_batch import HostContractError, InvalidCursor, ToolRef, _compat, batch_tool, engine, hosting
from centralmcp_batch.entries import parse_entry
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.host import HostHooks
from centralmcp_batch.items import entry_share
from centralmcp_batch.models import CallContext
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio
READ = {"readOnlyHint": True}


class SyncHost:
    """Every host hook as a plain function."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.dispatched: list[tuple[str, Any, int]] = []

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        annotations = READ if name.startswith("get") else {"readOnlyHint": False}
        return None if name == "missing" else ToolRef(name, "sync-srv", annotations)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None if tool.read_only else f"Tool '{tool.name}' is not read-only."

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Any, cursor: str) -> Any:
        if cursor != "good":
            raise InvalidCursor("cursor does not match this tool and arguments")
        return {"page": 2}

    @hookimpl
    def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        self.tokens.append(tool.name)

    @hookimpl
    def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Any, resume: Any, max_bytes: int) -> Any:
        self.dispatched.append((tool.name, resume, max_bytes))
        return {"tool": tool.name, "resume": resume}


class AsyncHost(SyncHost):
    """The same hooks as coroutines."""

    @hookimpl
    async def centralmcp_find_tool(self, name: str) -> ToolRef | None:  # type: ignore[override]
        return SyncHost.centralmcp_find_tool(self, name)

    @hookimpl
    async def centralmcp_read_gate(self, tool: ToolRef) -> str | None:  # type: ignore[override]
        return SyncHost.centralmcp_read_gate(self, tool)

    @hookimpl
    async def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Any, cursor: str) -> Any:  # type: ignore[override]
        return SyncHost.centralmcp_resume_cursor(self, tool, arguments, cursor)

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:  # type: ignore[override]
        self.tokens.append(tool.name)

    @hookimpl
    async def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Any, resume: Any, max_bytes: int) -> Any:  # type: ignore[override]
        return SyncHost.centralmcp_dispatch_read(self, tool, arguments, resume, max_bytes)


def hooks_for(*plugins: object) -> HostHooks:
    return HostHooks(hosting.plugin_manager(*plugins))


CALLS = [
    {"name": "get_a", "id": "a"},
    {"name": "set_b", "id": "b"},
    {"name": "missing", "id": "c"},
    {"name": "get_d", "id": "d", "cursor": "good"},
    {"name": "get_e", "id": "e", "cursor": "forged"},
    {"name": "", "id": "f"},
]


@pytest.mark.parametrize("host_class", [SyncHost, AsyncHost])
async def test_every_status_through_sync_and_async_hosts(host_class: type) -> None:
    host = host_class()
    response = await batch_tool.run(hooks_for(host), CALLS)
    by_id = {item["id"]: item for item in response["results"]}
    assert [item["status"] for item in response["results"]] == [
        "ok",
        "blocked",
        "unknown_tool",
        "ok",
        "invalid_cursor",
        "invalid_call",
    ]
    assert by_id["a"]["result"] == {"tool": "get_a", "resume": None} and by_id["a"]["server"] == "sync-srv"
    assert by_id["b"]["error"] == "Tool 'set_b' is not read-only."
    assert by_id["c"]["error"] == "Unknown tool 'missing'. Use find_tool to discover."
    assert by_id["d"]["result"]["resume"] == {"page": 2}
    assert by_id["e"]["error"] == "cursor does not match this tool and arguments" and "forged" not in str(response)
    # one token per backend call, drawn only after every local rejection
    assert sorted(host.tokens) == ["get_a", "get_d"]
    assert sorted(name for name, _, _ in host.dispatched) == ["get_a", "get_d"]
    entries = [parse_entry(index, entry) for index, entry in enumerate(CALLS)]
    share = entry_share(entries, 300_000, extras={"rate": engine.RATE_PLACEHOLDER})
    assert {max_bytes for _, _, max_bytes in host.dispatched} == {share}


async def test_a_gate_that_raises_blocks() -> None:
    class BrokenGate:
        @hookimpl
        def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
            raise RuntimeError("policy service down")

    host = SyncHost()
    response = await batch_tool.run(hooks_for(host, BrokenGate()), [{"name": "get_a"}])
    item = response["results"][0]
    assert item["status"] == "blocked" and "RuntimeError" in item["error"]
    assert host.dispatched == [] and host.tokens == []


async def test_any_gate_refusal_wins_over_others_that_allow() -> None:
    class Strict:
        @hookimpl
        async def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
            return "maintenance window" if tool.name == "get_a" else None

    host = SyncHost()
    response = await batch_tool.run(hooks_for(host, Strict()), [{"name": "get_a"}, {"name": "get_x"}])
    assert [item["status"] for item in response["results"]] == ["blocked", "ok"]
    assert response["results"][0]["error"] == "maintenance window"


async def test_a_gate_answer_that_is_not_none_or_a_string_refuses() -> None:
    class Confused:
        @hookimpl
        def centralmcp_read_gate(self, tool: ToolRef) -> Any:
            return True

    response = await batch_tool.run(hooks_for(SyncHost(), Confused()), [{"name": "get_a"}])
    assert response["results"][0]["status"] == "blocked"


async def test_no_gate_at_all_refuses_every_read() -> None:
    class NoGate(SyncHost):
        centralmcp_read_gate = None  # type: ignore[assignment]

    host = NoGate()
    response = await batch_tool.run(hooks_for(host), [{"name": "get_a"}])
    assert response["results"][0]["status"] == "blocked" and host.dispatched == []


async def test_a_raising_limiter_is_logged_and_the_call_proceeds(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenLimiter:
        @hookimpl
        async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
            raise ConnectionError("redis unavailable")

    class Host(SyncHost):
        centralmcp_acquire_rate_token = None  # type: ignore[assignment]

    host = Host()
    response = await batch_tool.run(hooks_for(host, BrokenLimiter()), [{"name": "get_a"}])
    assert response["results"][0]["status"] == "ok"
    assert "centralmcp_acquire_rate_token failed" in caplog.text


async def test_without_a_cursor_hook_every_cursor_is_refused() -> None:
    class NoCursors(SyncHost):
        centralmcp_resume_cursor = None  # type: ignore[assignment]

    host = NoCursors()
    response = await batch_tool.run(hooks_for(host), [{"name": "get_a", "cursor": "good"}, {"name": "get_b"}])
    assert [item["status"] for item in response["results"]] == ["invalid_cursor", "ok"]
    assert host.tokens == ["get_b"]


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ({"error": "backend 503"}, "error"),
        ({"error": "no such tool", "status": "unknown_tool"}, "unknown_tool"),
        ({"error": "policy", "status": "blocked"}, "blocked"),
        ({"error": "stale", "status": "invalid_cursor"}, "invalid_cursor"),
        ({"status": "blocked"}, "blocked"),
        ({"error": "x", "status": "weird"}, "error"),
        ({"data": [1, 2]}, "ok"),
        ([1, 2, 3], "ok"),
        ("plain text", "ok"),
        (None, "ok"),
    ],
)
async def test_dispatch_answers_are_classified(answer: Any, status: str) -> None:
    class Answering(SyncHost):
        @hookimpl
        def centralmcp_dispatch_read(self, tool: ToolRef) -> Any:  # type: ignore[override]
            return answer

    response = await batch_tool.run(hooks_for(Answering()), [{"name": "get_a"}])
    item = response["results"][0]
    assert item["status"] == status
    if status == "ok":
        assert item["result"] == answer


async def test_dispatch_is_told_each_entrys_index_id_and_request() -> None:
    class Recording(SyncHost):
        @hookimpl
        def centralmcp_dispatch_read(self, tool: ToolRef, context: CallContext) -> Any:  # type: ignore[override]
            told.append(context)
            return {"tool": tool.name}

    told: list[CallContext] = []
    request = object()
    response = await batch_tool.run(hooks_for(Recording()), [{"name": "get_a", "id": "x"}, {"name": "get_b"}], request)
    assert response["ok"] and told == [CallContext(0, "x", True, request), CallContext(1, "1", True, request)]
    assert [(c.index, c.call_id, c.in_batch, c.request) for c in told] == [
        (0, "x", True, request),
        (1, "1", True, request),
    ]


@pytest.mark.parametrize("failing", ["centralmcp_find_tool", "centralmcp_dispatch_read", "centralmcp_resume_cursor"])
async def test_a_raising_catalog_dispatch_or_cursor_hook_is_an_error_item(failing: str) -> None:
    def boom(self: Any, **kwargs: Any) -> Any:
        raise LookupError("host hook exploded")

    class Host(SyncHost):
        pass

    setattr(Host, failing, hookimpl(lambda self, tool=None, name=None, arguments=None, cursor=None: boom(self)))
    response = await batch_tool.run(hooks_for(Host()), [{"name": "get_a", "cursor": "good"}, {"name": "x", "id": "z"}])
    assert response["results"][0]["status"] == "error"
    assert response["results"][0]["error"] == "LookupError: host hook exploded"
    assert response["counts"]["total"] == 2


async def test_observers_see_items_and_batches_and_their_failures_are_ignored() -> None:
    seen: dict[str, list[Any]] = {"items": [], "batches": []}

    class Audit:
        @hookimpl
        async def centralmcp_batch_item_completed(self, item: Any, seconds: float) -> None:
            seen["items"].append((item["id"], seconds >= 0))

        @hookimpl
        def centralmcp_batch_completed(self, response: Any, seconds: float) -> None:
            seen["batches"].append(response["counts"])

    class Broken:
        @hookimpl
        def centralmcp_batch_item_completed(self, item: Any) -> None:
            raise RuntimeError("metrics sink down")

        @hookimpl
        async def centralmcp_batch_completed(self, response: Any) -> None:
            raise RuntimeError("metrics sink down")

    response = await batch_tool.run(
        hooks_for(SyncHost(), Broken(), Audit()), [{"name": "get_a", "id": "one"}, {"name": "set", "id": "two"}]
    )
    assert response["counts"]["total"] == 2
    assert sorted(seen["items"]) == [("one", True), ("two", True)]
    assert seen["batches"] == [{"total": 2, "succeeded": 1, "failed": 1}]


async def test_observers_are_told_how_long_each_token_and_entry_took() -> None:
    seen: dict[str, list[float]] = {"tokens": [], "items": []}

    class SlowTokens(SyncHost):
        @hookimpl
        async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:  # type: ignore[override]
            await anyio.sleep(0.02)

    class Timings:
        @hookimpl
        def centralmcp_rate_token_waited(self, tool: ToolRef, seconds: float) -> None:
            seen["tokens"].append(seconds)

        @hookimpl
        def centralmcp_batch_item_completed(self, item: Any, seconds: float) -> None:
            seen["items"].append(seconds)

    response = await batch_tool.run(hooks_for(SlowTokens(), Timings()), [{"name": "get_a"}, {"name": "get_b"}])
    assert response["ok"] is True
    assert len(seen["tokens"]) == 2 and all(0.02 <= seconds < 4 for seconds in seen["tokens"])
    assert len(seen["items"]) == 2 and all(0.02 <= seconds < 4 for seconds in seen["items"])


# -- a host author's mistakes, told at install in the author's terms --------------------


class MyHooks(SyncHost):
    """A complete host: the base every mistake below changes one thing of."""


class Misspelled(MyHooks):
    @hookimpl
    def centralmcp_findtool(self, name: str) -> None:
        return None


class WrongArgument(MyHooks):
    @hookimpl
    def centralmcp_find_tool(self, tool_name: str) -> None:  # type: ignore[override]
        return None


class Unmarked:
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return None

    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None

    def centralmcp_dispatch_read(self, tool: ToolRef) -> Any:
        return {}


other_project = pluggy.HookimplMarker("myrouter")


class MarkedForAnotherProject:
    @other_project
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return None


TWICE = MyHooks()


@pytest.mark.parametrize(
    ("host_plugins", "error", "told"),
    [
        (
            (Misspelled(),),
            pluggy.PluginValidationError,
            "Misspelled.centralmcp_findtool is marked @hookimpl, but "
            "there is no hook 'centralmcp_findtool': did you mean 'centralmcp_find_tool'?",
        ),
        (
            (WrongArgument(),),
            pluggy.PluginValidationError,
            "WrongArgument.centralmcp_find_tool takes 'tool_name', "
            "which centralmcp_find_tool does not pass: it is called with (name) by name",
        ),
        (
            (Unmarked(),),
            HostContractError,
            "Unmarked.centralmcp_find_tool is not marked as a hook: decorate it "
            "with centralmcp_batch.hookspecs.hookimpl",
        ),
        ((MarkedForAnotherProject(),), HostContractError, "(it is marked for the project 'myrouter')"),
        ((), HostContractError, "Pass the object that implements them to hosting.install(server, your_hooks)"),
        ((MyHooks,), HostContractError, "was given the class MyHooks, not an instance: its hooks take self"),
        ((TWICE, TWICE), HostContractError, "was given MyHooks twice: pass each host plugin once"),
    ],
    ids=["misspelled", "wrong-argument", "unmarked", "other-marker", "none", "class", "twice"],
)
def test_a_host_plugin_mistake_is_told_in_the_authors_terms(
    host_plugins: tuple[object, ...], error: type[Exception], told: str
) -> None:
    server = _compat.new_server("mistake")
    with pytest.raises(error) as refused:
        hosting.install(server, *host_plugins)
    assert told in str(refused.value)
    assert not _compat.has_tool(server, batch_tool.TOOL_NAME)


def test_install_refuses_what_is_not_the_mcp_server_and_a_second_install() -> None:
    with pytest.raises(HostContractError, match=r"hosting.install needs your MCP server, a mcp\.server\.\w+\.\w+ "):
        hosting.install(object(), MyHooks())
    server = _compat.new_server("installed")
    hosting.install(server, MyHooks())
    with pytest.raises(HostContractError, match="hosting.install was already called on this server"):
        hosting.install(server, MyHooks())


class FewerArgumentsAndASpecname:
    """Within the contract: fewer arguments than the spec, one with a default, a hook under another name."""

    @hookimpl(specname="centralmcp_find_tool")
    def catalog(self, name: str, flavour: str = "plain") -> ToolRef | None:
        return ToolRef(name, "srv", READ)

    @hookimpl
    def centralmcp_read_gate(self) -> None:
        return None

    @hookimpl
    def centralmcp_dispatch_read(self, tool: ToolRef) -> Any:
        return {"read": tool.name}


async def test_what_the_contract_allows_still_installs_and_reads() -> None:
    server = _compat.new_server("allowed")
    hosting.install(server, FewerArgumentsAndASpecname())
    answer = await call(server, batch_tool.TOOL_NAME, {"calls": [{"name": "get_a"}]})
    assert answer.structured is not None and answer.structured["results"][0]["result"] == {"read": "get_a"}


class ListedToolAnnotations(SyncHost):
    """A catalog that keeps the backends' listed MCP tools and passes their annotations on as they are."""

    LISTED = {
        "get_a": mcp.types.ToolAnnotations(readOnlyHint=True),
        "set_b": mcp.types.ToolAnnotations(readOnlyHint=False),
        "get_c": None,
    }

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return ToolRef(name, "srv", self.LISTED[name]) if name in self.LISTED else None


async def test_a_tool_ref_takes_mcps_tool_annotations_and_none() -> None:
    # Before, a ToolAnnotations had no .get: the gate raised and every read was blocked as 'the read gate failed'.
    server = _compat.new_server("listed")
    hosting.install(server, ListedToolAnnotations())
    answer = await call(
        server, batch_tool.TOOL_NAME, {"calls": [{"name": name} for name in ListedToolAnnotations.LISTED]}
    )
    assert answer.structured is not None
    assert [item["status"] for item in answer.structured["results"]] == ["ok", "blocked", "blocked"]
    assert answer.structured["results"][1]["error"] == "Tool 'set_b' is not read-only."
    with pytest.raises(TypeError, match=r"ToolRef 'x': annotations must be MCP ToolAnnotations as a mapping"):
        ToolRef("x", "srv", ["readOnlyHint"])  # type: ignore[arg-type]


class ServerOfAnotherType(SyncHost):
    """A catalog whose tools name their server with bytes: the batch writes the server into its answer."""

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return ToolRef(name, b"srv" if name == "odd" else "srv", {"readOnlyHint": True})  # type: ignore[arg-type]


async def test_a_tool_ref_whose_server_is_not_text_fails_its_entry_alone() -> None:
    # Before, such a server made the item unencodable and the whole batch raised.
    server = _compat.new_server("odd-server")
    hosting.install(server, ServerOfAnotherType())
    answer = await call(server, batch_tool.TOOL_NAME, {"calls": [{"name": "odd"}, {"name": "fine"}]})
    assert answer.structured is not None
    odd, fine = answer.structured["results"]
    assert odd["status"] == "error" and odd["server"] is None
    assert odd["error"] == "TypeError: ToolRef 'odd': server must be a string or None; got a bytes"
    assert fine["status"] == "ok" and fine["server"] == "srv"
    with pytest.raises(TypeError, match=r"ToolRef 'x': server must be a string or None; got a int"):
        ToolRef("x", 7)  # type: ignore[arg-type]
