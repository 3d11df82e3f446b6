"""The adopted batch behind the CentralMCP router's middleware chain (stand-ins of both), over real sessions."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import jsonschema
import pytest
from standins import monitoring_backend
from standins.centralmcp_middleware import TOKEN_PREFIX, AuditLogMiddleware
from test_adapter_centralmcp import TESTS, load_router, single_read, write_adopted_router

from centralmcp_batch import _compat, budget
from centralmcp_batch.adapters import centralmcp

pytestmark = pytest.mark.anyio

TOKEN = re.compile(re.escape(TOKEN_PREFIX) + "[0-9a-f]{32}")
SECRET = monitoring_backend.WEBHOOK_SECRET
WEBHOOK = {"name": "get_webhook", "arguments": {"site_id": "hq"}}


@pytest.fixture(params=["default", "minimal"])
def router(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The router as it serves: the documented adoption at import, its middleware chain from __main__."""
    monkeypatch.setenv("CENTRALMCP_TOKENIZE_SECRETS", "1")
    module = load_router(monkeypatch, request.param)
    centralmcp.adopt(module)
    module.chain = module.install_router_middlewares()
    return module


def audit(router: ModuleType) -> AuditLogMiddleware:
    return next(m for m in router.chain if isinstance(m, AuditLogMiddleware))


@pytest.fixture
async def client(router: ModuleType) -> AsyncIterator[_compat.ClientHandle]:
    async with _compat.connect(router.mcp) as handle:
        yield handle


async def test_an_entrys_secret_is_tokenized_exactly_as_a_single_reads(client: _compat.ClientHandle) -> None:
    single = await client.call_tool("invoke_read_tool", {"name": "get_webhook", "arguments": {"site_id": "hq"}})
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [WEBHOOK, {"id": "again", **WEBHOOK}]})
    assert not answer.is_error, answer.text
    entries = [item["result"] for item in answer.structured["results"]]
    for read in [single_read(single), *entries]:
        assert TOKEN.fullmatch(read["signing_secret"]), read
        assert {k: v for k, v in read.items() if k != "signing_secret"} == {
            "site_id": "hq",
            "url": "https://hooks.example/hq",
        }
    assert SECRET not in answer.text and SECRET not in json.dumps(answer.structured)
    assert len({read["signing_secret"] for read in [single_read(single), *entries]}) == 3  # one token per value shown


async def test_what_middleware_changed_is_both_the_structured_content_and_the_compact_text(
    client: _compat.ClientHandle,
) -> None:
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [WEBHOOK]})
    assert answer.text == budget.encode(answer.structured).decode()  # compact JSON, not the SDK's indented default
    assert TOKEN.search(answer.text)


async def test_tokens_in_entry_arguments_are_resolved_before_dispatch(client: _compat.ClientHandle) -> None:
    shown = single_read(
        await client.call_tool("invoke_read_tool", {"name": "get_webhook", "arguments": {"site_id": "hq"}})
    )
    token = shown["signing_secret"]
    check = {"name": "check_webhook_secret", "arguments": {"site_id": "hq", "signing_secret": token}}
    wrong = {"name": "check_webhook_secret", "arguments": {"site_id": "hq", "signing_secret": "guess"}}
    monitoring_backend.calls.clear()
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [check, wrong]})
    assert [item["result"]["valid"] for item in answer.structured["results"]] == [True, False]
    # def tools run in worker threads, so the two entries may reach the backend in either order
    assert sorted(monitoring_backend.calls, key=repr) == sorted(
        [
            ("check_webhook_secret", {"site_id": "hq", "signing_secret": SECRET}),
            ("check_webhook_secret", {"site_id": "hq", "signing_secret": "guess"}),
        ],
        key=repr,
    )
    # the value the backend got goes back out as a token, not in plaintext
    assert SECRET not in answer.text


async def test_a_secret_in_a_previewed_result_is_blanked_where_the_tokenizer_cannot_reach(
    client: _compat.ClientHandle,
) -> None:
    # 25 entries each get about 11.8 KB of the budget, so a 20 KB result with nothing to page through
    # becomes the router's preview of its JSON text, in which the tokenizer finds no keys. A single read
    # of the same result stays whole (under the router's 200 KB) and is tokenized.
    report = {"name": "get_webhook_report", "arguments": {"site_id": "hq"}}
    single = await client.call_tool("invoke_read_tool", report)
    assert TOKEN.fullmatch(single_read(single)["webhook"]["signing_secret"])
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [{"id": f"r{i}", **report} for i in range(25)]})
    assert not answer.is_error and not answer.structured["truncated"], answer.text[:300]
    previews = [item["result"]["preview"] for item in answer.structured["results"]]
    assert all('"signing_secret": "******", "apiKey": "******"' in preview for preview in previews)
    assert SECRET not in answer.text and SECRET not in json.dumps(answer.structured)


async def test_results_previewed_to_their_share_all_come_back_though_json_escapes_them(
    client: _compat.ClientHandle,
) -> None:
    # The router cuts a preview's text to the share; inside the batch's JSON each of its quotes is escaped
    # again, and the bounds marker comes on top. Each is bounded again to fit, so nothing is dropped.
    config = {"name": "get_running_config", "arguments": {"serial": "a"}}
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [{"id": f"c{i}", **config} for i in range(25)]})
    response = answer.structured
    assert response["ok"] and not response["truncated"], answer.text[:300]
    results = [item["result"] for item in response["results"]]
    assert all(result["_response_bounds"]["resumable"] is False and result["preview"] for result in results)
    assert len(budget.encode(response)) <= 300_000


async def test_an_argument_the_backend_refuses_is_named_in_the_error_never_its_value(
    client: _compat.ClientHandle,
) -> None:
    # The tokenizer puts the secret back before dispatch; the backend's argument check then fails on it,
    # and the SDK's own text would quote it.
    token = single_read(await client.call_tool("invoke_read_tool", WEBHOOK))["signing_secret"]
    wrong = {"name": "get_webhook_by_number", "arguments": {"number": token}}
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [wrong]})
    item = answer.structured["results"][0]
    assert item["status"] == "error" and "invalid arguments: number: Input should be a valid integer" in item["error"]
    assert SECRET not in answer.text and token not in answer.text


async def test_an_invalid_argument_is_retold_without_a_key_the_caller_chose_or_a_validators_text(
    client: _compat.ClientHandle,
) -> None:
    # pydantic puts a nested dict key in the error's location and a custom validator's own words in its
    # message; both may be a secret. The error names the schema's field and pydantic's error type only.
    token = single_read(await client.call_tool("invoke_read_tool", WEBHOOK))["signing_secret"]
    calls = [
        {"name": "count_devices_by_tag", "arguments": {"tags": {token: "many"}}},
        {"name": "get_site_by_code", "arguments": {"code": token}},
    ]
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": calls})
    errors = [item["error"] for item in answer.structured["results"]]
    not_an_integer = "Input should be a valid integer, unable to parse string as an integer [int_parsing]"
    assert errors[0].endswith(f"invalid arguments: tags[<key>]: {not_an_integer}")
    assert errors[1].endswith("invalid arguments: code: the value is not valid [value_error]")
    assert SECRET not in answer.text and token not in answer.text and "upper case" not in answer.text


@pytest.mark.skipif(_compat.SDK_MAJOR >= 2, reason="SDK 2.x has no session object that outlives a request")
async def test_tokens_are_kept_per_client_session(router: ModuleType) -> None:
    async with _compat.connect(router.mcp) as first:
        token = single_read(
            await first.call_tool("invoke_read_tool", {"name": "get_webhook", "arguments": {"site_id": "hq"}})
        )["signing_secret"]
    check = {"name": "check_webhook_secret", "arguments": {"site_id": "hq", "signing_secret": token}}
    async with _compat.connect(router.mcp) as second:
        answer = await second.call_tool("invoke_read_tool_batch", {"calls": [check]})
    assert answer.structured["results"][0]["result"]["valid"] is False


async def test_the_audit_outcome_is_error_for_a_failed_entry_and_success_when_all_are_ok(
    router: ModuleType, client: _compat.ClientHandle
) -> None:
    fine = [{"name": "get_device", "arguments": {"serial": "a"}}, WEBHOOK]
    await client.call_tool("invoke_read_tool_batch", {"calls": fine})
    await client.call_tool(
        "invoke_read_tool_batch", {"calls": [*fine, {"name": "reboot_device", "arguments": {"serial": "a"}}]}
    )
    await client.call_tool(
        "invoke_read_tool_batch", {"calls": [{"name": "get_radio_stats", "arguments": {"serial": "a"}}]}
    )
    await client.call_tool("invoke_read_tool_batch", {"calls": []})
    batches = [r for r in audit(router).records if r["tool"] == "invoke_read_tool_batch"]
    assert [r["outcome"] for r in batches] == ["success", "error", "error", "error"]
    assert {tuple(r["argument_keys"]) for r in batches} == {("calls",)}


async def test_a_null_calls_is_stripped_before_the_batch_and_the_audit_see_it(
    router: ModuleType, client: _compat.ClientHandle
) -> None:
    # The router's chain starts with a null strip (checked on the real router: "calls": null is audited
    # with no argument keys); the batch answers it as a batch with no calls.
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": None})
    assert answer.structured["data"] == {"ok": False, "error": "calls must be a list"}
    assert [(r["argument_keys"], r["outcome"]) for r in audit(router).records] == [([], "error")]


async def test_a_batch_the_client_cancels_is_audited_cancelled_as_the_router_audits_it(
    router: ModuleType, client: _compat.ClientHandle
) -> None:
    # CentralMCP's installer hands an exception the tool raised, a cancellation too, to each middleware's
    # on_error, and its audit records the call so (checked on the real router over stdio).
    reached = anyio.Event()

    async def held() -> None:
        reached.set()
        await anyio.sleep_forever()

    router.set_dispatch_rate_gate(held)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(client.call_tool, "invoke_read_tool_batch", {"calls": [WEBHOOK]})
        await reached.wait()
        tasks.cancel_scope.cancel()
    with anyio.move_on_after(5):
        while not audit(router).records:
            await anyio.sleep(0.01)
    assert audit(router).records == [
        {
            "tool": "invoke_read_tool_batch",
            "argument_keys": ["calls"],
            "outcome": "cancelled",
            "error_type": "CancelledError",
        }
    ]


async def test_a_read_failing_in_an_errors_list_is_an_ok_entry_where_a_single_read_is_enveloped(
    router: ModuleType, client: _compat.ClientHandle
) -> None:
    # As documented: the envelope and the audit judge the whole answer of a call, so a read answering
    # {"errors": [...]} with no error key fails as a single read and is an ok entry of an ok batch.
    details = {"name": "get_client_details", "arguments": {"mac": "aa:bb"}}
    single = single_read(await client.call_tool("invoke_read_tool", details))
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [details]})
    read = {"mac": "aa:bb", "details": None, "errors": ["404 at /clients/aa:bb"]}
    assert single == {
        "ok": False,
        "status": 500,
        "data": read,
        "message": "404 at /clients/aa:bb",
        "tool": "invoke_read_tool",
        "platform": None,
    }
    assert answer.structured["ok"] is True and answer.structured["results"][0]["result"] == read
    assert [r["outcome"] for r in audit(router).records] == ["error", "success"]


def own_batch_router(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The router in default mode serving its own batch, with the same middleware chain."""
    module = load_router(monkeypatch, "default")
    module.install_router_middlewares()
    return module


REJECTED = {
    "empty": [],
    "duplicate ids": [{"id": "x", "name": "get_device"}, {"id": "x", "name": "get_device"}],
}


@pytest.mark.parametrize("calls", REJECTED.values(), ids=REJECTED.keys())
async def test_rejected_batches_are_enveloped_as_the_routers_own_are(
    client: _compat.ClientHandle, monkeypatch: pytest.MonkeyPatch, calls: list[Any]
) -> None:
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": calls})
    async with _compat.connect(own_batch_router(monkeypatch).mcp) as own_client:
        own = await own_client.call_tool("invoke_read_tool_batch", {"calls": calls})
    assert not answer.is_error, answer.text  # the client's output-schema check passed
    assert answer.structured == own.payload
    assert answer.structured["ok"] is False and answer.structured["status"] == 500
    assert answer.structured["tool"] == "invoke_read_tool_batch" and answer.structured["data"]["ok"] is False
    assert answer.text == budget.encode(answer.structured).decode()


async def test_a_batch_with_failed_entries_is_not_enveloped_as_the_routers_own_is_not(
    client: _compat.ClientHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [{"name": "get_device", "arguments": {"serial": "a"}}, {"name": "no_such_tool"}]
    answer = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
    async with _compat.connect(own_batch_router(monkeypatch).mcp) as own_client:
        own = (await own_client.call_tool("invoke_read_tool_batch", {"calls": calls})).payload
    shape = {"ok", "results", "counts", "failed_ids", "failed_indexes", "truncated"}
    # neither answer is the envelope's {ok, status, data, message, tool}; the plugin's adds its rate report
    assert set(answer) == shape | {"rate"} and set(own) == shape
    assert answer["ok"] is own["ok"] is False
    assert [item["status"] for item in answer["results"]] == [item["status"] for item in own["results"]]


async def test_the_adopted_router_publishes_a_flat_schema_that_admits_the_envelope(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = {t.name: t for t in await _listed(router)}["invoke_read_tool_batch"]
    assert published.output_schema == centralmcp.adopted_output_schema()
    assert "anyOf" not in published.output_schema and "enveloped" in published.output_schema["description"]
    # What the router's own middleware makes of a rejection (its own batch, refused the same way) passes it.
    async with _compat.connect(own_batch_router(monkeypatch).mcp) as own_client:
        enveloped = (await own_client.call_tool("invoke_read_tool_batch", {"calls": []})).payload
    assert {"ok", "status", "data", "message", "tool"} <= set(enveloped) and enveloped["ok"] is False
    jsonschema.validate(enveloped, published.output_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ok": "no", "data": {}}, published.output_schema)


async def _listed(router: ModuleType) -> list[_compat.ToolInfo]:
    async with _compat.connect(router.mcp) as handle:
        return await handle.list_tools()


async def test_a_secret_is_tokenized_in_a_batch_over_stdio_on_the_router_run_as_a_script(tmp_path: Path) -> None:
    script = write_adopted_router(tmp_path / "tool_router.py")
    env = {"PYTHONPATH": str(TESTS), "CENTRALMCP_ROUTER_MODE": "default", "CENTRALMCP_TOKENIZE_SECRETS": "1"}
    env["CENTRALMCP_ROUTER_RATE_STORE"] = "memory"  # a bucket of its own, not the user's shared SQLite file
    params = _compat.StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    async with _compat.connect(params) as client:
        answer = await client.call_tool("invoke_read_tool_batch", {"calls": [WEBHOOK]})
        token = answer.structured["results"][0]["result"]["signing_secret"]
        assert TOKEN.fullmatch(token) and SECRET not in answer.text
        check = {"name": "check_webhook_secret", "arguments": {"site_id": "hq", "signing_secret": token}}
        resolved = await client.call_tool("invoke_read_tool_batch", {"calls": [check]})
        assert resolved.structured["results"][0]["result"]["valid"] is True
        rejected = await client.call_tool("invoke_read_tool_batch", {"calls": []})
        assert not rejected.is_error and rejected.structured["data"] == {
            "ok": False,
            "error": "calls must contain at least one entry",
        }


async def test_an_all_ok_answer_cut_to_its_skeleton_is_neither_enveloped_nor_audited_as_an_error(
    router: ModuleType, client: _compat.ClientHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", "1024")
    calls = [{"id": str(i) * 90, "name": "get_device", "arguments": {"serial": "a"}} for i in range(1, 10)]
    answer = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
    assert (answer["ok"], answer["truncated"], answer["skeleton"]) == (True, True, True)
    assert audit(router).records[-1]["outcome"] == "success"
