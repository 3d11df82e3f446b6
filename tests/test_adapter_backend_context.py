"""What a backend called for a batch entry can send and read through the Context it is handed.

The batch's progress notifications are the batch's alone: a backend that reports its own progress
(the stand-in's ``get_device_events`` reports 5 pages and logs a line) sends nothing under the
batch's token, its log messages go to the router's log instead of the client, and each entry's
backend reads a request id of its own. Checked over real MCP sessions, in memory and over stdio to
the stand-in router run as a script behind its middleware chain, on both SDK lines.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel
from recording_client import Heard, recording
from test_adapter_centralmcp import TESTS, load_router, single_read, write_adopted_router

from centralmcp_batch import _compat
from centralmcp_batch.adapters import backend_context, centralmcp

pytestmark = pytest.mark.anyio

BACKEND_LOG = "centralmcp_batch.adapters.backends"
EVENTS = "get_device_events"


def events(call_id: str, serial: str = "AP1") -> dict[str, Any]:
    return {"id": call_id, "name": EVENTS, "arguments": {"serial": serial}}


@pytest.fixture(params=["default", "minimal"])
def router(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_router(monkeypatch, request.param)
    centralmcp.adopt(module)
    module.install_router_middlewares()
    return module


def check_only_the_batch_reported(heard: Heard, entries: int) -> None:
    """One report per entry, counting up to the batch's size: none of a backend's own 5 pages."""
    progress = heard.progress
    assert heard.progress_notifications == len(progress)  # none under another token either
    assert [(done, total) for done, total, _message in progress] == [(n, entries) for n in range(1, entries + 1)]
    assert all(EVENTS in (message or "") and "page" not in (message or "") for _done, _total, message in progress)


async def test_in_a_session_the_batchs_progress_and_log_are_its_own(
    router: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=BACKEND_LOG):
        async with recording(router.mcp) as client:
            answer = await client.call("invoke_read_tool_batch", {"calls": [events("a"), events("b", "AP2")]})
    response = answer.structured
    assert response["ok"] is True, response
    assert [item["result"]["pages"] for item in response["results"]] == [5, 5]  # each backend reported its pages
    check_only_the_batch_reported(client.heard, 2)
    assert client.heard.logs == [] and client.heard.other == []
    # The backends' log lines are the router's, naming the tool and the entry.
    told = sorted(r.getMessage() for r in caplog.records if r.name == BACKEND_LOG)
    ids = [item["result"]["request_id"] for item in response["results"]]
    assert told == [
        f"{EVENTS} (batch entry {ids[0]}): read 5 pages of events for AP1",
        f"{EVENTS} (batch entry {ids[1]}): read 5 pages of events for AP2",
    ]


async def test_each_entrys_backend_reads_a_request_id_of_its_own(router: ModuleType) -> None:
    async with recording(router.mcp) as client:
        # distinct reads: identical ones share one backend call
        first = (await client.call("invoke_read_tool_batch", {"calls": [events("a"), events("b", "AP2")]})).structured
        second = (await client.call("invoke_read_tool_batch", {"calls": [events("c")]})).structured
        single = single_read(await client.call("invoke_read_tool", {"name": EVENTS, "arguments": {"serial": "AP1"}}))
    ids = [item["result"]["request_id"] for item in first["results"] + second["results"]]
    batch_ids = [entry_id.rsplit("/", 1)[0] for entry_id in ids]
    assert [entry_id.rsplit("/", 1)[1] for entry_id in ids] == ["0", "1", "0"]
    assert batch_ids[0] == batch_ids[1] != batch_ids[2] and len(set(ids)) == 3
    assert "/" not in single["request_id"]  # the router's own single read hands its own Context on


async def test_a_single_read_still_forwards_its_backends_progress_as_the_router_does(router: ModuleType) -> None:
    # Not the plugin's path: the router's invoke_read_tool hands its Context to the backend, whose progress
    # is then the read's own. The batch does not change that.
    async with recording(router.mcp) as client:
        await client.call("invoke_read_tool", {"name": EVENTS, "arguments": {"serial": "AP1"}})
    assert [done for done, _total, _message in client.heard.progress] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("mode", ["default", "minimal"])
async def test_over_stdio_the_router_run_as_a_script_sends_the_batchs_progress_only(tmp_path: Path, mode: str) -> None:
    script = write_adopted_router(tmp_path / "tool_router.py")
    env = {"PYTHONPATH": str(TESTS), "CENTRALMCP_ROUTER_MODE": mode, "CENTRALMCP_ROUTER_RATE_STORE": "memory"}
    params = _compat.StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    with (tmp_path / "router.log").open("w+") as errlog:
        async with recording(params, errlog) as client:
            calls = [events(str(n), f"AP{n}") for n in range(3)]
            answer = await client.call("invoke_read_tool_batch", {"calls": calls})
            assert [item["status"] for item in answer.structured["results"]] == ["ok"] * 3
            check_only_the_batch_reported(client.heard, 3)
            assert client.heard.logs == []
            single = await client.call("invoke_read_tool", {"name": EVENTS, "arguments": {"serial": "AP9"}})
    assert not single.is_error
    # The router's own single read forwards its Context: its backend's pages and log line are that read's.
    assert [done for done, _total, _message in client.heard.progress[3:]] == [1, 2, 3, 4, 5]
    assert client.heard.logs == ["read 5 pages of events for AP9"]


# -- the Context an entry's backend is handed, field by field ---------------------------------------


class Answer(BaseModel):
    site: str


async def test_the_entry_context_keeps_the_connection_and_drops_the_batch_requests_own_state() -> None:
    server = _compat.new_server("probe")
    seen: dict[str, Any] = {}

    @server.tool()
    async def probe(ctx: _compat.Context) -> str:
        request = dataclasses.replace(ctx.request_context, close_sse_stream=close, close_standalone_sse_stream=close)
        ctx._request_context = request  # as a streamable HTTP transport with an event store hands them
        entry = backend_context.entry_context(ctx, 3, "get_site", {"site_id": "hq"})
        seen.update(batch=ctx, entry=entry)
        return "done"

    async def close() -> None:
        raise AssertionError("a backend must not close the batch's stream")

    async with recording(server) as client:
        await client.call("probe", {})
    batch, entry = seen["batch"], seen["entry"]
    assert entry.request_id == f"{batch.request_id}/3" and batch.request_id != entry.request_id
    assert _progress_token(entry) is None  # SDK 1.x keeps the call's token in _meta (2.x in its dispatch context)
    assert entry.request_context.close_sse_stream is None and entry.request_context.close_standalone_sse_stream is None
    assert entry.request_context.lifespan_context is batch.request_context.lifespan_context
    assert entry.session.client_params == batch.session.client_params  # the connection's, as it was
    if hasattr(entry.request_context, "params"):  # SDK 2.x: the entry's own call, not the batch's
        assert entry.request_context.params == {"name": "get_site", "arguments": {"site_id": "hq"}}
    await entry.close_sse_stream()  # nothing to close: a no-op, not the batch's stream


def _progress_token(ctx: Any) -> Any:
    meta = ctx.request_context.meta
    return meta.get("progressToken") if isinstance(meta, dict) else getattr(meta, "progressToken", None)


async def test_a_backends_elicitation_rides_the_batchs_request_and_is_answered() -> None:
    # A request to the client (here an elicitation from a read) goes out related to the batch's request,
    # the one the client knows, and the entry's backend gets the client's answer.
    server = _compat.new_server("asks")
    seen: dict[str, Any] = {}

    @server.tool()
    async def probe(ctx: _compat.Context) -> str:
        session = ctx.request_context.session
        forms = session.elicit_form
        related: list[Any] = []

        async def elicit_form(*args: Any, **kwargs: Any) -> Any:
            related.append(kwargs.get("related_request_id"))
            return await forms(*args, **kwargs)

        session.elicit_form = elicit_form  # what the batch's session is asked to send, and for which request
        entry = backend_context.entry_context(ctx, 0, "pick_site", {})
        seen.update(batch=ctx.request_id, own=entry.request_id, answer=await entry.elicit("Which site?", Answer))
        seen["related"] = related
        return "done"

    async with recording(server, answer={"site": "hq"}) as client:
        await client.call("probe", {})
    assert client.heard.asked == ["Which site?"]
    assert seen["own"] == f"{seen['batch']}/0" and [str(r) for r in seen["related"]] == [seen["batch"]]
    assert seen["answer"].action == "accept" and seen["answer"].data == Answer(site="hq")


def test_none_and_a_context_outside_a_request_are_handed_on_as_they_are() -> None:
    assert backend_context.entry_context(None, 0, "t", {}) is None
    outside = _compat.Context()
    assert backend_context.entry_context(outside, 0, "t", {}) is outside


async def test_progress_and_log_notifications_a_backend_sends_through_its_session_are_told_the_same(
    caplog: pytest.LogCaptureFixture,
) -> None:
    types = importlib.import_module("mcp_types" if _compat.SDK_2 else "mcp.types")
    server = _compat.new_server("sends")

    @server.tool()
    async def probe(ctx: _compat.Context) -> str:
        entry = backend_context.entry_context(ctx, 1, "get_events", {})
        token = _progress_token(ctx) or ctx.request_id  # the batch's own token, where its _meta shows it
        session, own = entry.session, entry.request_id
        await session.send_progress_notification(progress_token=token, progress=7, total=9, related_request_id=own)
        params = {"progressToken": token, "progress": 8}
        await session.send_notification(_notification(types, "ProgressNotification", params), related_request_id=own)
        params = {"level": "warning", "data": "upstream slow"}
        await session.send_notification(_notification(types, "LoggingMessageNotification", params), own)
        await session.send_log_message(level="error", data={"upstream": 503}, logger="api", related_request_id=own)
        await ctx.report_progress(1, 1, "the batch's own")
        return "done"

    with caplog.at_level(logging.INFO, logger=BACKEND_LOG):
        async with recording(server) as client:
            await client.call("probe", {})
    assert client.heard.progress_notifications == 1 and client.heard.progress == [(1, 1, "the batch's own")]
    assert client.heard.logs == []
    assert [(r.levelname, r.getMessage().split(": ", 1)[1]) for r in caplog.records if r.name == BACKEND_LOG] == [
        ("WARNING", "upstream slow"),
        ("ERROR", "{'upstream': 503}"),
    ]


def _notification(types: ModuleType, kind: str, params: dict[str, Any]) -> Any:
    made = getattr(types, kind).model_validate(
        {"method": getattr(types, kind).model_fields["method"].default, "params": params}
    )
    return made if _compat.SDK_2 else types.ServerNotification(made)
