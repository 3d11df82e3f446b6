"""The stand-in router's own ``invoke_read_tool_batch`` (default mode), as the real router's behaves.

What the benchmarks compare the plugin against, so it must do what the real built-in does: typed
entries, an item and a status per call, per-entry bounds, whole-batch refusals and the byte budget.
"""

from __future__ import annotations

import json
import re
from types import ModuleType
from typing import Any

import pytest
from standins import monitoring_backend
from test_adapter_centralmcp import load_router

from centralmcp_batch import _compat

pytestmark = pytest.mark.anyio

TOOL = "invoke_read_tool_batch"
BUDGET_ENV = "CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES"
DEVICE_A = {"serial": "a", "status": "up"}


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    return load_router(monkeypatch, "default")


async def over_mcp(router: ModuleType, calls: Any) -> _compat.Answer:
    async with _compat.connect(router.mcp) as client:
        return await client.call_tool(TOOL, {"calls": calls})


async def both_ways(router: ModuleType, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer in process, checked to be the answer over a real MCP session too."""
    direct = await router.invoke_read_tool_batch(None, calls)
    answer = await over_mcp(router, calls)
    assert not answer.is_error, answer.text
    assert cursors_masked(answer.payload) == cursors_masked(direct)
    return direct


def cursors_masked(value: Any) -> Any:
    """``value`` with each ``next_cursor`` blanked: a cursor carries its expiry second, and the two
    calls of ``both_ways`` may fall either side of a second's edge."""
    if isinstance(value, dict):
        return {key: "<cursor>" if key == "next_cursor" else cursors_masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [cursors_masked(item) for item in value]
    return value


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


async def test_ok_entries_come_back_as_items_in_call_order(router: ModuleType) -> None:
    calls = [
        {"name": "get_device", "arguments": {"serial": "a"}, "id": "first"},
        {"name": "list_sites"},
        {"name": "get_device", "arguments": {"serial": "b"}},
    ]
    response = await both_ways(router, calls)
    assert response == {
        "ok": True,
        "results": [
            {
                "index": 0,
                "id": "first",
                "tool": "get_device",
                "server": "aruba-monitoring",
                "status": "ok",
                "result": DEVICE_A,
            },
            {
                "index": 1,
                "id": "1",
                "tool": "list_sites",
                "server": "aruba-config",
                "status": "ok",
                "result": [{"site_id": "hq"}, {"site_id": "branch"}],
            },
            {
                "index": 2,
                "id": "2",
                "tool": "get_device",
                "server": "aruba-monitoring",
                "status": "ok",
                "result": {"serial": "b", "status": "up"},
            },
        ],
        "counts": {"total": 3, "succeeded": 3, "failed": 0},
        "failed_ids": [],
        "failed_indexes": [],
        "truncated": False,
    }
    # sequential, in order, once per call per way (in process, then over MCP)
    assert [name for name, _ in monitoring_backend.calls] == ["get_device", "list_sites", "get_device"] * 2


async def test_in_process_callers_may_pass_the_routers_own_entry_model(router: ModuleType) -> None:
    entries = [router.BatchCall(name="get_device", arguments={"serial": "a"}, id="m"), {"name": "list_sites"}]
    response = await router.invoke_read_tool_batch(None, entries)
    assert [(item["id"], item["status"]) for item in response["results"]] == [("m", "ok"), ("1", "ok")]
    assert response["results"][0]["result"] == DEVICE_A


async def test_refused_and_failed_calls_are_items_of_their_own(router: ModuleType) -> None:
    calls = [
        {"name": "reboot_device", "arguments": {"serial": "x"}, "id": "boom"},
        {"name": "ping_device", "arguments": {"serial": "x"}},
        {"name": "no_such_tool"},
        {"name": "get_radio_stats", "arguments": {"serial": "AP1"}},
        {"name": "get_device", "arguments": {"serial": "a"}},
    ]
    response = await both_ways(router, calls)
    statuses = [
        (item["index"], item["id"], item["tool"], item["server"], item["status"]) for item in response["results"]
    ]
    assert statuses == [
        (0, "boom", "reboot_device", "aruba-config", "blocked"),
        (1, "1", "ping_device", "aruba-monitoring", "blocked"),
        (2, "2", "no_such_tool", None, "unknown_tool"),
        (3, "3", "get_radio_stats", "aruba-monitoring", "error"),
        (4, "4", "get_device", "aruba-monitoring", "ok"),
    ]
    blocked, diagnostic, unknown, failed, fine = response["results"]
    assert blocked["error"].startswith("Tool 'reboot_device' is not read-only.") and "result" not in blocked
    assert diagnostic["status"] == "blocked"
    assert unknown["error"] == "Unknown tool 'no_such_tool'. Use find_tool to discover."
    assert re.match(r"\w*ToolError: ", failed["error"]) and "result" not in failed
    assert fine["result"] == DEVICE_A and "error" not in fine
    assert response["ok"] is False and response["truncated"] is False
    assert response["counts"] == {"total": 5, "succeeded": 1, "failed": 4}
    assert response["failed_ids"] == ["boom", "1", "2", "3"] and response["failed_indexes"] == [0, 1, 2, 3]
    # the gate held: neither the destructive nor the diagnostic tool reached its backend
    assert {name for name, _ in monitoring_backend.calls} == {"get_radio_stats", "get_device"}


async def test_a_cursor_entry_resumes_and_a_bad_cursor_is_its_own_status(router: ModuleType) -> None:
    listing = {"name": "list_devices", "arguments": {"site_id": "hq"}}
    first = (await both_ways(router, [listing]))["results"][0]["result"]
    resumed = await both_ways(
        router, [{**listing, "cursor": first["next_cursor"]}, {**listing, "cursor": "not-a-cursor", "id": "bad"}]
    )
    page, bad = resumed["results"]
    assert page["status"] == "ok" and page["result"]["devices"][0]["serial"] == "SN00200"
    assert (bad["id"], bad["status"], bad["error"]) == ("bad", "invalid_cursor", "cursor is malformed")
    assert resumed["failed_ids"] == ["bad"]


async def test_an_exception_escaping_dispatch_is_that_items_error(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = router._dispatch_read_tool

    async def flaky(ctx: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "list_sites":
            raise RuntimeError("x" * 900)
        return await own(ctx, name, *args, **kwargs)

    monkeypatch.setattr(router, "_dispatch_read_tool", flaky)
    router._load_all_backends()  # flaky raises before dispatch would load them: the item still names its server
    response = await both_ways(router, [{"name": "list_sites"}, {"name": "get_device", "arguments": {"serial": "a"}}])
    broken, fine = response["results"]
    assert (broken["status"], broken["server"]) == ("error", "aruba-config")
    assert broken["error"].startswith("RuntimeError: xxx") and broken["error"].endswith("...")
    assert len(broken["error"]) == 500  # cut to the router's error bound
    assert fine["status"] == "ok" and response["failed_indexes"] == [0]


async def test_invalid_entries_are_rejected_alone_without_echoing_arguments(router: ModuleType) -> None:
    secret = "s3cr3t-" + "v" * 20_000
    deep: dict[str, Any] = {}
    for _ in range(9):
        deep = {"k": deep}
    calls: list[Any] = [
        {"name": "get_device", "arguments": {"serial": "a"}, "id": 7},
        {"name": "get_device", "arguments": {"serial": "a"}, "id": "x" * 101},
        {"name": "get_device", "arguments": {"serial": "a"}, "id": "   "},
        {"name": "   ", "id": "blank-name"},
        {"name": "n" * 201},
        {"name": "get_device", "arguments": ["a"]},
        {"name": "get_device", "arguments": {"serial": secret}},
        {"name": "get_device", "arguments": {"serial": "a", "extra": deep}},
        {"name": "get_device", "arguments": {"serial": "a"}, "cursor": 5},
        "get_device",
        {"name": "get_device", "arguments": {"serial": "a"}},
    ]
    response = await router.invoke_read_tool_batch(None, calls)
    rejected = [(item["id"], item["tool"], item["status"], item["error"]) for item in response["results"][:-1]]
    assert rejected == [
        ("0", "get_device", "invalid_call", "id must be a non-empty string"),
        ("1", "get_device", "invalid_call", "id exceeds the 100-character bound"),
        ("2", "get_device", "invalid_call", "id must be a non-empty string"),
        ("blank-name", "   ", "invalid_call", "name must be a non-empty string"),
        ("4", "n" * 201, "invalid_call", "name exceeds the 200-character bound"),
        ("5", "get_device", "invalid_call", "arguments must be an object"),
        ("6", "get_device", "invalid_call", "arguments exceed the 20000-byte bound"),
        ("7", "get_device", "invalid_call", "arguments exceed the 8-level nesting bound"),
        ("8", "get_device", "invalid_call", "cursor must be a string"),
        ("9", None, "invalid_call", "call must be an object"),
    ]
    assert all(item["server"] is None and "result" not in item for item in response["results"][:-1])
    assert response["results"][-1]["status"] == "ok" and response["counts"]["failed"] == 10
    assert "s3cr3t" not in json.dumps(response)
    assert monitoring_backend.calls == [("get_device", {"serial": "a"})]  # only the valid entry was dispatched


async def test_over_mcp_the_sdk_validates_entries_and_the_tool_the_rest(router: ModuleType) -> None:
    # What the schema cannot say (argument size, a blank id) is an item of its own...
    response = await both_ways(
        router,
        [
            {"name": "get_device", "arguments": {"serial": "v" * 20_001}},
            {"name": "get_device", "arguments": {"serial": "a"}, "id": " "},
            {"name": "get_device", "arguments": {"serial": "a"}},
        ],
    )
    assert [item["status"] for item in response["results"]] == ["invalid_call", "invalid_call", "ok"]
    # ...what it can say (the id cap, unknown keys, a missing name) fails the whole call in the SDK
    for entry in (
        {"name": "get_device", "id": "x" * 101},
        {"name": "get_device", "argumentz": {}},
        {"arguments": {"serial": "a"}},
        {"name": ""},
    ):
        answer = await over_mcp(router, [entry])
        assert answer.is_error, entry
    assert [name for name, _ in monitoring_backend.calls] == ["get_device", "get_device"]


async def test_whole_batch_refusals_come_before_any_dispatch(router: ModuleType) -> None:
    duplicate = [
        {"name": "get_device", "arguments": {"serial": "a"}, "id": "dup"},
        {"name": "list_sites", "id": "dup"},
    ]
    assert await both_ways(router, duplicate) == {
        "ok": False,
        "error": "duplicate call id 'dup': ids must be unique within a batch so results can be correlated",
    }
    # only explicit ids count: an entry whose id defaults to "0" does not clash with an explicit "0"
    defaulted = await both_ways(router, [{"name": "list_sites"}, {"name": "list_sites", "id": "0"}])
    assert [item["id"] for item in defaulted["results"]] == ["0", "0"]
    monitoring_backend.calls.clear()
    assert await both_ways(router, []) == {"ok": False, "error": "calls must contain at least one entry"}
    too_many = [{"name": "list_sites"}] * 26
    assert await both_ways(router, too_many) == {
        "ok": False,
        "error": "calls has 26 entries, exceeding the 25-entry bound",
    }
    assert await router.invoke_read_tool_batch(None, {"name": "list_sites"}) == {
        "ok": False,
        "error": "calls must be a list",
    }
    assert monitoring_backend.calls == []


async def test_the_published_schemas_are_the_typed_entry_and_a_loose_dict(router: ModuleType) -> None:
    async with _compat.connect(router.mcp) as client:
        published = {tool.name: tool for tool in await client.list_tools()}[TOOL]
    schema = published.input_schema
    assert schema["required"] == ["calls"]
    calls = schema["properties"]["calls"]
    assert calls["type"] == "array"
    entry = schema["$defs"][calls["items"]["$ref"].rsplit("/", 1)[1]]
    assert set(entry["properties"]) == {"name", "arguments", "id", "cursor"}
    assert entry["required"] == ["name"] and entry["additionalProperties"] is False
    name, arguments, call_id = (entry["properties"][key] for key in ("name", "arguments", "id"))
    assert (name["type"], name["minLength"], name["maxLength"]) == ("string", 1, 200)
    assert arguments["type"] == "object"
    assert {"maxLength": 100, "type": "string"} in call_id["anyOf"]
    # the return type is dict[str, Any]: the SDK's loose object schema, as the real router publishes
    assert published.output_schema["type"] == "object" and "properties" not in published.output_schema
    assert published.annotations["readOnlyHint"] is True


async def test_each_call_reads_within_its_share_of_the_budget(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUDGET_ENV, "8192")
    calls = [
        {"name": "list_devices", "arguments": {"site_id": "hq", "count": 150}},
        {"name": "get_device", "arguments": {"serial": "a"}},
    ]
    response = await both_ways(router, calls)
    page = response["results"][0]["result"]
    assert page["_response_bounds"]["byte_limit"] == 4096  # 8192 // 2 calls
    assert page["_response_bounds"]["reason"] == "byte_budget" and 0 < len(page["devices"]) < 150
    assert response["truncated"] is False and size(response["results"]) <= 8192


async def test_an_answer_over_budget_drops_ok_results_from_the_last_call_back(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [
        {"name": "get_device", "arguments": {"serial": "a"}},
        {"name": "list_devices", "arguments": {"site_id": "hq", "count": 40}},
        {"name": "no_such_tool"},
        {"name": "get_device", "arguments": {"serial": "b"}},
    ]
    roomy = await router.invoke_read_tool_batch(None, calls)
    assert roomy["truncated"] is False and size(roomy["results"]) > 1024
    monkeypatch.setenv(BUDGET_ENV, "1024")  # read at call time: the same router now has 1 KB
    response = await both_ways(router, calls)
    assert response["truncated"] is True and size(response["results"]) <= 1024
    first, listing, unknown, last = response["results"]
    assert first == roomy["results"][0]  # the budget was met before reaching the first call
    for item in (listing, last):
        assert (item["status"], item["result_truncated"], item["result"]) == ("ok", True, None)
        assert set(item) == {"index", "id", "tool", "server", "status", "result_truncated", "result"}
    assert unknown == roomy["results"][2]  # a failure is never dropped to make room
    assert response["counts"] == {"total": 4, "succeeded": 3, "failed": 1} and response["ok"] is False


async def test_failure_texts_are_squeezed_when_dropping_results_is_not_enough(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1024")
    calls = [{"name": letter * 110} for letter in "xyz"]  # 1065 bytes: squeezing the first error is enough
    response = await both_ways(router, calls)
    assert response["truncated"] is True and size(response["results"]) <= 1024
    squeezed, *kept = response["results"]
    assert squeezed["status"] == "unknown_tool" and squeezed["error_truncated"] is True
    assert len(squeezed["error"]) == 80 and squeezed["error"].endswith("...")
    assert all("error_truncated" not in item and item["error"].startswith("Unknown tool") for item in kept)


async def test_an_answer_no_shrinking_fits_becomes_the_overflow_envelope(
    router: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1024")
    calls = [{"name": f"tool_{index:02d}_" + "n" * 190, "id": f"{index:02d}" + "i" * 90} for index in range(25)]
    response = await both_ways(router, calls)
    assert response["ok"] is False and response["truncated"] is True
    assert response["error"] == "batch response exceeded the 1024-byte budget; results omitted"
    skeleton = response["results"]
    assert 0 < len(skeleton) < 25 and response["results_omitted"] == 25 - len(skeleton)
    assert size(skeleton) <= 512 and all(set(item) == {"index", "id", "status"} for item in skeleton)
    assert [item["index"] for item in skeleton] == list(range(len(skeleton)))
    assert {item["status"] for item in skeleton} == {"unknown_tool"}
    assert response["counts"] == {"total": 25, "succeeded": 0, "failed": 25}
    assert response["failed_ids"] == [call["id"] for call in calls] and response["failed_indexes"] == list(range(25))


def test_minimal_mode_has_no_builtin_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    minimal = load_router(monkeypatch, "minimal")
    assert not hasattr(minimal, TOOL) and not _compat.has_tool(minimal.mcp, TOOL)
    assert not hasattr(minimal, "BatchCall")
    assert _compat.has_tool(load_router(monkeypatch, "default").mcp, TOOL)
