"""The fault matrix: each way a backend, a host hook or the client can fail, one test each.

Every batch here runs over a real in-memory MCP session against ``hosts.HostileHost``
installed with ``hosting.install`` (real entry-point discovery), so "no protocol error" is
checked as a client sees it. A remote stdio backend that dies mid-batch needs the reference
router's backends and is covered with the router's tests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import anyio
import hosts
import pytest
from hosts import HostileHost

from centralmcp_batch import HostContractError, InvalidCursor, _compat, batch_tool, hosting
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.host import HostHooks
from centralmcp_batch.items import MAX_RESULT_DEPTH
from centralmcp_batch.models import ToolRef
from centralmcp_batch.testing import call

# Python 3.10 has no Task.cancelling(): a CancelledError a backend raises itself counts as a real
# cancellation there, as docs/reference/batch.md says, so the batch does not answer.
TELLS_OWN_CANCELLATION = sys.version_info >= (3, 11)
needs_cancelling = pytest.mark.skipif(
    not TELLS_OWN_CANCELLATION, reason="Python 3.10 cannot tell an own CancelledError"
)

pytestmark = pytest.mark.anyio
TOOL = batch_tool.TOOL_NAME


def serve(*plugins: object) -> Any:
    server = _compat.new_server("centralmcp-batch-faults")
    hosting.install(server, *plugins)
    return server


async def batch(server: Any, calls: list[Any]) -> dict[str, Any]:
    with anyio.fail_after(20):
        answer = await call(server, TOOL, {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


def statuses(response: dict[str, Any]) -> list[str]:
    return [item["status"] for item in response["results"]]


# -- backends -------------------------------------------------------------------------


async def test_a_backend_that_raises_fails_only_its_entry() -> None:
    host = HostileHost()
    response = await batch(
        serve(host), [{"name": "read_ok"}, {"name": "read_raises", "id": "boom"}, {"name": "read_empty"}]
    )
    assert statuses(response) == ["ok", "error", "ok"]
    assert response["results"][1]["error"] == "BackendExploded: the backend exploded"
    assert response["ok"] is False and response["failed_ids"] == ["boom"] and response["failed_indexes"] == [1]
    assert sorted(host.dispatched) == ["read_empty", "read_ok", "read_raises"]


async def test_a_backend_error_text_is_cut_to_the_documented_length() -> None:
    response = await batch(serve(HostileHost()), [{"name": "read_long_error"}])
    error = response["results"][0]["error"]
    assert error.startswith("BackendExploded: EEE") and len(error) == 500


async def test_a_backend_that_hangs_past_the_call_timeout_is_really_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS", "0.5")
    host = HostileHost()
    started = anyio.current_time()
    response = await batch(serve(host), [{"name": hosts.HANGING}, {"name": "read_ok"}])
    assert anyio.current_time() - started < 10  # the hang is unbounded; only the timeout ends it
    assert statuses(response) == ["error", "ok"]
    assert response["results"][0]["error"] == "TimeoutError: the backend call timed out after 0.5s"
    assert host.hang_started == host.hang_cancelled == 1, "the backend coroutine did not see its cancellation"
    assert host.in_flight == 0


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_the_batch_deadline_passing_mid_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS", "1")
    host = HostileHost()
    calls = [
        {"name": "read_ok", "id": "done"},
        {"name": hosts.HANGING, "id": "running"},
        {"name": "read_ok", "id": "waiting"},
        {"name": "write_delete", "id": "refused"},
    ]
    response = await batch(serve(host), calls)
    done, running, waiting, refused = response["results"]
    assert done["status"] == "ok"
    assert (
        running["status"] == "error"
        and "cancelled while running: the batch time limit of 1s passed" in running["error"]
    )
    assert (
        waiting["status"] == "error" and "not dispatched: the batch time limit of 1s passed first" in waiting["error"]
    )
    assert refused["status"] == "blocked"  # every entry meets the gate before any call starts
    assert host.dispatched == ["read_ok", hosts.HANGING]
    assert host.hang_started == host.hang_cancelled == 1 and host.in_flight == 0
    assert response["counts"] == {"total": 4, "succeeded": 1, "failed": 3}


@pytest.mark.parametrize("tool", ["read_circular", "read_deep", "read_surrogate", "read_bigint"])
async def test_a_result_json_cannot_encode_is_an_error_item_not_a_protocol_error(tool: str) -> None:
    response = await batch(serve(HostileHost()), [{"name": tool}, {"name": "read_ok"}])
    assert statuses(response) == ["error", "ok"]
    assert response["results"][0]["error"].endswith("the tool's result is not JSON-serializable")


@pytest.mark.parametrize("levels", [MAX_RESULT_DEPTH, MAX_RESULT_DEPTH + 1, 300, 2_000])
async def test_a_result_nested_deeper_than_the_sdks_write_is_an_error_item(
    levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # json writes 300 levels (2,000 on Python 3.13), pydantic's serializer, which the SDKs
    # answer with, about 250: that deep a result used to fail the whole answer.
    monkeypatch.setitem(hosts.BEHAVIOURS, "read_deep", ("error", lambda: hosts._deep(levels - 1)))
    response = await batch(serve(HostileHost()), [{"name": "read_deep"}, {"name": "read_ok"}])
    if levels <= MAX_RESULT_DEPTH:
        assert statuses(response) == ["ok", "ok"] and response["results"][0]["result"] == hosts._deep(levels - 1)
    else:
        assert statuses(response) == ["error", "ok"]
        assert response["results"][0]["error"] == "RecursionError: the tool's result is not JSON-serializable"


@pytest.mark.parametrize(
    ("tool", "written"),
    [
        ("read_set", {"values": [1, 2, 3]}),
        ("read_nan", {"ratio": None}),  # JSON has no NaN: a strict client would refuse the whole answer
        ("read_object", "<an odd object>"),
    ],
)
async def test_a_result_that_is_not_plain_json_comes_back_as_a_single_read_would_write_it(
    tool: str, written: Any
) -> None:
    response = await batch(serve(HostileHost()), [{"name": tool}, {"name": "read_ok"}])
    assert statuses(response) == ["ok", "ok"]
    assert response["results"][0]["result"] == written


async def test_a_huge_result_is_shrunk_to_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "2048")
    server = serve(HostileHost())
    with anyio.fail_after(20):
        answer = await call(server, TOOL, {"calls": [{"name": "read_huge"}, {"name": "read_raises"}]})
    assert not answer.is_error and len(answer.text.encode()) <= 2048
    huge, failed = answer.structured["results"]
    assert huge == {
        "index": 0,
        "id": "0",
        "tool": "read_huge",
        "server": huge["server"],
        "status": "ok",
        "result": None,
        "result_truncated": True,
    }
    assert failed["status"] == "error" and answer.structured["truncated"] is True


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


class Opaque(Exception):
    """An exception whose own text raises one of its kind: reading it inside an ``except Exception`` raises again."""

    def __str__(self) -> str:
        raise Opaque()


class UnprintableTexts(HostileHost):
    """A backend that raises, answers an error, or refuses a cursor, each with a text whose ``str()`` raises."""

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Any, cursor: str) -> Any:
        raise InvalidCursor(hosts.StrRaises())

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Any, resume: Any, max_bytes: int, context: Any
    ) -> Any:
        if arguments.get("raise") == "unprintable":
            raise Unprintable()
        if arguments.get("raise") == "opaque":
            raise Opaque()
        if arguments.get("answer") == "error":
            return {"error": hosts.StrRaises()}
        return {"fine": True}


NO_TEXT = "<its text could not be read: str() raised"


@pytest.mark.parametrize("concurrency", ["1", "4"])
async def test_a_text_that_cannot_be_read_fails_only_its_entry_and_names_what_was_raised(
    monkeypatch: pytest.MonkeyPatch, concurrency: str
) -> None:
    # Before, reading such a text inside the pipeline's own handler raised again: an exception whose text
    # raises another kind was told by that other kind, without its server; one whose text raises its own
    # kind failed the whole batch, and on SDK 1.x at a concurrency of 1 a stdio router process exited.
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", concurrency)
    calls = [
        {"name": "read_ok", "arguments": {"raise": "unprintable"}},
        {"name": "read_ok", "arguments": {"raise": "opaque"}},
        {"name": "read_ok", "arguments": {"answer": "error"}},
        {"name": "read_ok", "cursor": "any"},
        {"name": "read_ok"},
    ]
    results = (await batch(serve(UnprintableTexts()), calls))["results"]
    assert [(item["status"], item.get("error", "")[:40]) for item in results] == [
        ("error", f"Unprintable: {NO_TEXT}"[:40]),
        ("error", f"Opaque: {NO_TEXT}"[:40]),
        ("error", NO_TEXT[:40]),
        ("invalid_cursor", NO_TEXT[:40]),
        ("ok", ""),
    ], results
    assert results[0]["error"] == f"Unprintable: {NO_TEXT} RuntimeError>"
    assert results[1]["error"] == f"Opaque: {NO_TEXT} Opaque>"
    assert {item["server"] for item in results} == {hosts.HostileHost().catalog["read_ok"].server}


NOT_CANCELLED = "no time limit passed and the client did not cancel"


class Abort(BaseException):
    """A library's own BaseException subclass."""


def _cancelled_by_someone_else() -> BaseException:
    return asyncio.CancelledError()  # raised by hand, as after awaiting a future another task cancelled


def base_raising_backend(raised: Callable[[], BaseException], asynchronous: bool) -> object:
    """A dispatch that raises ``raised()`` for ``read_raises`` (at once or when awaited); the host answers the rest."""

    def dispatch(tool: ToolRef, arguments: Any, resume: Any, max_bytes: int, context: Any) -> Any:
        if tool.name != "read_raises":
            return None  # firstresult: the host's own dispatch answers
        if not asynchronous:
            raise raised()

        async def later() -> None:
            await anyio.sleep(0)
            raise raised()

        return later()

    return SimpleNamespace(centralmcp_dispatch_read=hookimpl(tryfirst=True)(dispatch))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["def", "async"])
@pytest.mark.parametrize(
    ("raised", "error"),
    [
        (lambda: SystemExit(2), "SystemExit: 2"),
        (KeyboardInterrupt, "KeyboardInterrupt"),
        (lambda: Abort("the backend aborted"), "Abort: the backend aborted"),
        pytest.param(
            _cancelled_by_someone_else,
            f"CancelledError: raised by the call itself; {NOT_CANCELLED}",
            marks=needs_cancelling,
        ),
    ],
    ids=["SystemExit", "KeyboardInterrupt", "BaseException", "own-CancelledError"],
)
async def test_a_base_exception_from_dispatch_fails_only_its_entry_and_the_session_serves_on(
    raised: Callable[[], BaseException], error: str, asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")  # the entries after it run on the same worker
    host = HostileHost()
    server = serve(host, base_raising_backend(raised, asynchronous))
    async with _compat.connect(server) as client:
        with anyio.fail_after(20):
            calls = [{"name": "read_ok"}, {"name": "read_raises", "id": "x"}, {"name": "read_ok"}]
            calls.append({"name": "read_empty"})
            first = await client.call_tool(TOOL, {"calls": calls})
            after = await client.call_tool(TOOL, {"calls": [{"name": "read_raises"}, {"name": "read_ok"}]})
    assert not first.is_error and statuses(first.structured) == ["ok", "error", "ok", "ok"]
    assert first.structured["results"][1]["error"] == error and first.structured["failed_ids"] == ["x"]
    assert statuses(after.structured) == ["error", "ok"]


# -- the budget on the wire (issue 11, items 10 and 11) ----------------------------------


class FillingBackend(HostileHost):
    """Every read answers exactly its share of the budget, as compact JSON."""

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Any, resume: Any, max_bytes: int, context: Any
    ) -> Any:
        self.dispatched.append(tool.name)
        return {"blob": "x" * (max_bytes - len('{"blob":""}'))}


@pytest.mark.parametrize(("n", "budget"), [(1, 4_096), (3, 20_000), (25, 60_000), (25, 300_000)])
async def test_full_shares_come_back_whole_and_each_copy_fits_the_budget(
    n: int, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", str(budget))
    names = ["read_ok", "read_empty", "read_big"]
    with anyio.fail_after(20):
        calls = [{"name": names[i % 3], "id": f"entry-{i}"} for i in range(n)]
        answer = await call(serve(FillingBackend()), TOOL, {"calls": calls})
    structured = answer.structured
    assert structured["truncated"] is False and statuses(structured) == ["ok"] * n
    assert all(len(item["result"]["blob"]) > 100 for item in structured["results"])
    # The budget bounds the structured content and its text copy each: on the wire, about twice the budget.
    structured_bytes = len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False).encode())
    text_bytes = len(answer.text.encode())
    assert structured_bytes == text_bytes and budget - n * 80 < text_bytes <= budget


async def test_calls_sent_as_a_json_string_are_parsed_by_the_sdk_and_run() -> None:
    host = HostileHost()
    with anyio.fail_after(20):
        as_text = json.dumps([{"name": "read_ok", "id": "a"}, {"name": "write_delete", "id": "b"}])
        answer = await call(serve(host), TOOL, {"calls": as_text})
    assert not answer.is_error and statuses(answer.structured) == ["ok", "blocked"]
    assert host.dispatched == ["read_ok"]


# -- the client -----------------------------------------------------------------------


async def wait_until(condition: Any, seconds: float = 10) -> None:
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.01)


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_a_client_that_cancels_mid_batch_stops_everything_and_the_session_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "2")
    host = HostileHost()
    server = serve(host)
    calls = [{"name": "read_ok"}, {"name": "read_empty"}, {"name": hosts.HANGING}, {"name": hosts.HANGING}] + [
        {"name": "read_ok"}
    ] * 8
    async with _compat.connect(server) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, TOOL, {"calls": calls})
            await wait_until(lambda: host.hang_started == 2)
            tasks.cancel_scope.cancel()
        await wait_until(lambda: host.hang_cancelled == 2)
        dispatched = len(host.dispatched)
        await anyio.sleep(0.3)  # room for any further dispatch to show itself
        assert len(host.dispatched) == dispatched == 4, "entries were dispatched after the client cancelled"
        assert host.in_flight == 0
        with anyio.fail_after(20):
            after = await client.call_tool(TOOL, {"calls": [{"name": "read_ok"}]})
    assert not after.is_error and after.structured["ok"] is True


# -- host hooks that raise -----------------------------------------------------------

RAISES = "BackendExploded: {hook} failed"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_gate_that_raises_fails_closed(asynchronous: bool) -> None:
    host = HostileHost()
    response = await batch(
        serve(host, hosts.raising_plugin("centralmcp_read_gate", asynchronous)),
        [{"name": "read_ok"}, {"name": "read_empty"}],
    )
    assert statuses(response) == ["blocked", "blocked"]
    assert response["results"][0]["error"] == "refused: the read gate failed (BackendExploded)"
    assert host.dispatched == [] and host.tokens == []


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_limiter_that_raises_lets_the_call_proceed(
    asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    host = HostileHost()
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.host"):
        response = await batch(
            serve(host, hosts.raising_plugin("centralmcp_acquire_rate_token", asynchronous)), [{"name": "read_ok"}]
        )
    assert statuses(response) == ["ok"] and host.dispatched == ["read_ok"]
    assert any("proceeding" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("hook", "entry"),
    [
        ("centralmcp_find_tool", {"name": "read_ok"}),
        ("centralmcp_resume_cursor", {"name": "read_ok", "cursor": hosts.valid_cursor("read_ok", 1)}),
        ("centralmcp_dispatch_read", {"name": "read_ok"}),
    ],
)
async def test_a_catalog_cursor_or_dispatch_hook_that_raises_is_an_error_item(
    hook: str, entry: dict[str, Any], asynchronous: bool
) -> None:
    host = HostileHost()
    response = await batch(
        serve(host, hosts.raising_plugin(hook, asynchronous)), [entry, {"name": "invalid", "arguments": []}]
    )
    assert statuses(response) == ["error", "invalid_call"]
    assert response["results"][0]["error"] == RAISES.format(hook=hook)
    assert host.dispatched == []  # the raising hook ran first; the host's own dispatch never did
    assert host.tokens == (["read_ok"] if hook == "centralmcp_dispatch_read" else [])


class NoGate(HostileHost):
    centralmcp_read_gate = None  # type: ignore[assignment] # hides the parent's gate from pluggy


class NoCatalog(HostileHost):
    centralmcp_find_tool = None  # type: ignore[assignment]


class NoDispatch(HostileHost):
    centralmcp_dispatch_read = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("host_class", "hook"),
    [(NoGate, "centralmcp_read_gate"), (NoCatalog, "centralmcp_find_tool"), (NoDispatch, "centralmcp_dispatch_read")],
)
def test_a_host_missing_a_required_hook_does_not_start(host_class: type, hook: str) -> None:
    server = _compat.new_server("incomplete")
    with pytest.raises(HostContractError, match=f"plugin 'batch' requires host hook '{hook}'"):
        hosting.install(server, host_class())
    assert not _compat.has_tool(server, TOOL)


# -- found by the property tests; the fix is described in the report ------------------


class GarbageCatalog(HostileHost):
    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return "read_ok" if name == "read_ok" else None  # type: ignore[return-value] # a host bug


async def test_a_catalog_that_answers_something_else_is_an_error_item() -> None:
    response = await batch_tool.run(
        HostHooks(hosting.plugin_manager(GarbageCatalog())), [{"name": "read_ok"}, {"name": "other"}]
    )
    assert statuses(response) == ["error", "unknown_tool"]


@pytest.mark.parametrize(
    "entry", [{"name": "bad\ud800name"}, {"name": "read_ok", "id": "id\udc00"}], ids=["name", "id"]
)
async def test_a_name_or_id_utf8_cannot_encode_is_an_invalid_call(entry: dict[str, Any]) -> None:
    response = await batch_tool.run(
        HostHooks(hosting.plugin_manager(HostileHost())), [entry, {"name": "read_ok", "id": "fine"}]
    )
    assert statuses(response) == ["invalid_call", "ok"]


class SlowObserver:
    """An observer that takes its time: the batch deadline may pass while it listens."""

    @hookimpl
    async def centralmcp_batch_item_completed(self, item: Any, seconds: float) -> None:
        await anyio.sleep(0.2)


async def test_the_batch_deadline_passing_while_invalid_entries_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS", "0.05")
    hooks = HostHooks(hosting.plugin_manager(HostileHost(), SlowObserver()))
    with anyio.fail_after(20):
        response = await batch_tool.run(hooks, [{"name": 1}, {"name": 2}, {"name": "read_ok"}])
    assert statuses(response)[:2] == ["invalid_call", "invalid_call"]
