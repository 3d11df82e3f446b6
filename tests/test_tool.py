"""The tool as a client meets it: a real in-memory MCP session on the installed SDK line."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import jsonschema
import pytest

from centralmcp_batch import HostContractError, _compat, batch_tool, hosting
from centralmcp_batch.testing import call, sample_host

pytestmark = pytest.mark.anyio


async def listed(server: Any) -> _compat.ToolInfo:
    async with _compat.connect(server) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    return tools["invoke_read_tool_batch"]


async def test_published_annotations_and_description(centralmcp_server: Any) -> None:
    tool = await listed(centralmcp_server)
    assert tool.annotations == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    assert "bounded concurrency" in tool.description and "sequential" not in tool.description


async def test_published_input_schema_states_the_call_object_and_bounds(centralmcp_server: Any) -> None:
    schema = (await listed(centralmcp_server)).input_schema
    calls = schema["properties"]["calls"]
    assert calls["type"] == "array" and calls["minItems"] == 1 and calls["maxItems"] == 25
    entry = calls["items"]
    assert set(entry["properties"]) == {"name", "arguments", "id", "cursor"} and entry["required"] == ["name"]
    assert entry["properties"]["name"]["maxLength"] == 200
    assert "$ref" not in str(schema)
    jsonschema.validate({"calls": [{"name": "echo", "id": "a", "arguments": {"q": 1}}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"calls": []}, schema)


async def test_responses_are_structured_and_match_the_output_schema(centralmcp_server: Any) -> None:
    schema = (await listed(centralmcp_server)).output_schema
    assert schema is not None and schema["type"] == "object"
    for arguments in (
        {"calls": [{"name": "echo", "arguments": {"q": 1}}, {"name": "delete_everything"}]},
        {"calls": []},
    ):
        answer = await call(centralmcp_server, "invoke_read_tool_batch", arguments)
        assert not answer.is_error
        jsonschema.validate(answer.structured, schema)
        assert answer.payload == answer.structured  # the text block is the same JSON


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "calls must be a list"),
        ({"calls": "echo"}, "calls must be a list"),
        ({"calls": 42}, "calls must be a list"),
        ({"calls": []}, "calls must contain at least one entry"),
        ({"calls": [{"name": "echo"}] * 30}, "calls has 30 entries, exceeding the 25-entry bound"),
        ({"calls": [{"name": "echo", "id": "a"}, {"name": "slow", "id": "a"}]}, "duplicate call id 'a'"),
    ],
)
async def test_whole_batch_problems_are_a_structured_result_not_a_protocol_error(
    centralmcp_server: Any, centralmcp_host: Any, arguments: dict[str, Any], error: str
) -> None:
    answer = await call(centralmcp_server, "invoke_read_tool_batch", arguments)
    assert not answer.is_error
    assert answer.structured["ok"] is False and answer.structured["error"].startswith(error)
    assert "results" not in answer.structured
    assert centralmcp_host.dispatched == []


async def test_a_mixed_batch_end_to_end(centralmcp_server: Any, centralmcp_host: Any) -> None:
    calls = [
        {"name": "echo", "id": "first", "arguments": {"q": "a"}},
        {"name": "delete_everything", "id": "write"},
        {"name": "no_such_tool", "id": "unknown"},
        {"name": "rows", "id": "paged", "cursor": centralmcp_host.cursors.issue("rows", {}, 97)},
        {"name": "echo", "id": "forged", "cursor": "slow:page:1"},
        {"name": "echo", "id": "bad", "arguments": "not an object"},
    ]
    answer = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    response = answer.structured
    assert [item["status"] for item in response["results"]] == [
        "ok",
        "blocked",
        "unknown_tool",
        "ok",
        "invalid_cursor",
        "invalid_call",
    ]
    assert [row["n"] for row in response["results"][3]["result"]["rows"]] == [97, 98, 99]
    assert response["failed_ids"] == ["write", "unknown", "forged", "bad"]
    assert centralmcp_host.tokens == ["echo", "rows"]


async def test_a_misspelled_key_over_mcp_is_an_invalid_call_not_a_call_without_arguments(
    centralmcp_server: Any, centralmcp_host: Any
) -> None:
    calls = [{"name": "echo", "id": "typo", "argumnts": {"q": "a"}}, {"name": "echo", "id": "fine", "arguments": {}}]
    answer = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    typo, fine = answer.structured["results"]
    assert typo["status"] == "invalid_call" and typo["error"].startswith("unknown key 'argumnts'")
    assert fine["status"] == "ok" and centralmcp_host.dispatched == [("echo", {})]


async def test_the_sample_host_pages_a_large_answer_and_binds_its_cursors(
    centralmcp_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One entry's share of 3,000 bytes: 300 rows (about 7.9 kB) come back over several pages.
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "3000")
    arguments, seen, cursors = {"count": 300}, [], []
    for _ in range(100):  # far more pages than 300 rows can take
        entry = {"name": "rows", "arguments": arguments, **({"cursor": cursors[-1]} if cursors else {})}
        response = (await call(centralmcp_server, "invoke_read_tool_batch", {"calls": [entry]})).structured
        assert response["ok"] is True and response["truncated"] is False, response
        result = response["results"][0]["result"]
        seen += [row["n"] for row in result["rows"]]
        if "next_cursor" not in result:
            break
        cursors.append(result["next_cursor"])
    assert seen == list(range(300)) and len(cursors) > 2, len(cursors)
    misused = [
        {"name": "rows", "arguments": {"count": 299}, "cursor": cursors[0]},
        {"name": "echo", "arguments": arguments, "cursor": cursors[0]},
        # well formed, for this tool and these arguments, but issued by another host
        {"name": "rows", "arguments": arguments, "cursor": sample_host().cursors.issue("rows", arguments, 50)},
    ]
    response = (await call(centralmcp_server, "invoke_read_tool_batch", {"calls": misused})).structured
    assert [item["status"] for item in response["results"]] == ["invalid_cursor"] * 3
    assert [item["error"] for item in response["results"]] == [
        "cursor was issued for other arguments",
        "cursor was issued for another tool",
        "cursor is malformed or its signature does not match",
    ]


async def test_progress_one_notification_per_entry(centralmcp_server: Any) -> None:
    seen: list[tuple[float, Any, Any]] = []

    async def on_progress(progress: float, total: Any, message: Any) -> None:
        seen.append((progress, total, message))

    calls = [{"name": "slow", "id": f"s{i}", "arguments": {"seconds": 0.01 * i}} for i in range(5)] + [
        {"name": "x" * 300}
    ]
    answer = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls}, progress=on_progress)
    assert answer.structured["counts"]["total"] == 6
    with anyio.fail_after(5):
        while len(seen) < 6:  # notifications may trail the response by a scheduling step
            await anyio.sleep(0.01)
    assert [progress for progress, _, _ in seen] == [1, 2, 3, 4, 5, 6]
    assert {total for _, total, _ in seen} == {6}
    assert all(isinstance(message, str) and message for _, _, message in seen)
    assert any("s4" in message for _, _, message in seen)


def progress_probe(name: str) -> tuple[Any, list[bool]]:
    """A server whose one tool records, per call, whether progress could be heard."""
    server = _compat.new_server(name)
    heard: list[bool] = []

    async def probe(ctx: _compat.Context) -> dict[str, Any]:
        heard.append(_compat.progress_may_be_heard(ctx))
        return {"ok": True}

    _compat.add_tool(server, probe, name="probe", description="", annotations={"readOnlyHint": True})
    return server, heard


async def ignore_progress(progress: float, total: Any, message: Any) -> None:
    return None


async def test_progress_is_skipped_only_when_the_request_shows_nobody_can_hear_it() -> None:
    server, heard = progress_probe("progress-probe")
    async with _compat.connect(server) as client:  # real JSON-RPC over memory streams on both lines
        await client.call_tool("probe", {})
        await client.call_tool("probe", {}, progress=ignore_progress)
    assert heard == [False, True]  # no token: nothing to send; a token: told


@pytest.mark.skipif(not _compat.SDK_2, reason="SDK 2.x's modern in-process client")
async def test_an_in_process_client_of_the_modern_era_still_hears_every_entry() -> None:
    # Its callback is handed over in process, not through the request's _meta: the batch cannot tell it apart.
    from mcp.client.client import Client

    server = _compat.new_server("modern")
    hosting.install(server, sample_host())
    seen: list[float] = []

    async def on_progress(progress: float, total: Any, message: Any) -> None:
        seen.append(progress)

    async with Client(server) as client:
        calls = [{"name": "echo", "id": f"e{i}"} for i in range(3)]
        answer = await client.call_tool("invoke_read_tool_batch", {"calls": calls}, progress_callback=on_progress)
    assert answer.structured_content is not None and answer.structured_content["counts"]["total"] == 3
    assert seen == [1, 2, 3]


@pytest.mark.skipif(not _compat.SDK_2, reason="SDK 2.x's dispatch contexts")
async def test_a_modern_client_without_a_callback_is_not_told() -> None:
    # Its dispatch context has no callback, so each report would be dropped: the batch does not make them.
    from mcp.client.client import Client

    server, heard = progress_probe("modern-probe")
    async with Client(server) as client:
        await client.call_tool("probe", {})
        await client.call_tool("probe", {}, progress_callback=ignore_progress)
    assert heard == [False, True]


async def test_settings_are_read_per_call(centralmcp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host bounds each answer to its share, never less than 1,024 bytes: five such overflow 4,000.
    calls = [{"name": "echo", "arguments": {"blob": "b" * 3000}} for _ in range(5)]
    roomy = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    assert roomy.structured["truncated"] is False
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "4000")
    tight = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    assert tight.structured["truncated"] is True and len(tight.text.encode()) <= 4000
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "12")  # below the minimum: the minimum
    clamped = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    assert clamped.structured["truncated"] is True and len(clamped.text.encode()) <= 1024
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "lots")  # not a number: the default
    again = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    assert again.structured["truncated"] is False


async def test_the_call_timeout_over_mcp(centralmcp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS", "0.05")
    calls = [{"name": "slow", "arguments": {"seconds": 30}}, {"name": "echo"}]
    with anyio.fail_after(10):
        answer = await call(centralmcp_server, "invoke_read_tool_batch", {"calls": calls})
    first, second = answer.structured["results"]
    assert first["status"] == "error" and "timed out after 0.05s" in first["error"]
    assert second["status"] == "ok"


def test_minimal_mode_registers_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", "minimal")
    server = _compat.new_server("minimal")
    with caplog.at_level(logging.INFO, logger="centralmcp_batch.plugin"):
        hosting.install(server, sample_host())
    assert not _compat.has_tool(server, "invoke_read_tool_batch")
    # Before, nothing said why a router (the reference router's serve and demo too) had no batch tool.
    assert any(
        "CENTRALMCP_ROUTER_MODE=minimal: invoke_read_tool_batch is not registered" in record.getMessage()
        for record in caplog.records
    ), caplog.records


def test_a_server_that_already_has_the_tool_is_refused() -> None:
    server = _compat.new_server("twice")
    server.tool(name="invoke_read_tool_batch")(lambda: "the host's own batch")
    with pytest.raises(HostContractError, match="already publishes 'invoke_read_tool_batch'"):
        hosting.install(server, sample_host())
    assert batch_tool.TOOL_NAME == "invoke_read_tool_batch"


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_a_client_that_cancels_stops_every_call_in_flight_and_dispatches_no_more(
    centralmcp_server: Any, centralmcp_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "3")
    state = {"started": 0, "cancelled": 0}

    async def hang() -> None:
        state["started"] += 1
        try:
            await anyio.sleep(60)
        finally:
            state["cancelled"] += 1

    centralmcp_host.add("hang", hang)
    async with _compat.connect(centralmcp_server) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, "invoke_read_tool_batch", {"calls": [{"name": "hang"}] * 12})
            with anyio.fail_after(10):
                while state["started"] < 3:
                    await anyio.sleep(0.01)
            tasks.cancel_scope.cancel()
        with anyio.fail_after(10):
            while state["cancelled"] < 3:
                await anyio.sleep(0.01)
        await anyio.sleep(0.3)  # room for any further dispatch to show itself
    assert state == {"started": 3, "cancelled": 3}
    assert len(centralmcp_host.dispatched) == 3
