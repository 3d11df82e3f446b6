"""The engine on plain data: a reader function stands in for the host pipeline."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from centralmcp_batch import engine
from centralmcp_batch.engine import Guards, ValidCall
from centralmcp_batch.models import Outcome, ToolRef
from centralmcp_batch.settings import BatchSettings

pytestmark = pytest.mark.anyio
TOOL = ToolRef("read", "srv", {"readOnlyHint": True})


def settings(**overrides: Any) -> BatchSettings:
    return BatchSettings(**{"concurrency": 4, **overrides})


async def echo_reader(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
    return Outcome("ok", TOOL, result={"name": call.name, "max_bytes": max_bytes})


async def run(calls: Any, reader: Any = echo_reader, **overrides: Any) -> dict[str, Any]:
    return await engine.run_batch(calls, reader, settings(**overrides), self_names=frozenset({"invoke_read_tool_batch"}))


@pytest.mark.parametrize(
    ("calls", "error"),
    [
        ("not a list", "calls must be a list"),
        ({"name": "x"}, "calls must be a list"),
        (None, "calls must be a list"),
        ([], "calls must contain at least one entry"),
        ([{"name": "x"}] * 26, "calls has 26 entries, exceeding the 25-entry bound"),
    ],
)
async def test_whole_batch_rejections(calls: Any, error: str) -> None:
    assert await run(calls) == {"ok": False, "error": error}


async def test_duplicate_ids_reject_the_batch_including_defaulted_ones() -> None:
    explicit = await run([{"name": "a", "id": "x"}, {"name": "b", "id": "x"}])
    assert explicit == {"ok": False, "error": "duplicate call id 'x': ids must be unique within a batch so results can be correlated"}
    defaulted = await run([{"name": "a", "id": "1"}, {"name": "b"}])  # the second entry's default id is "1"
    assert defaulted["ok"] is False and "duplicate call id '1'" in defaulted["error"]


async def test_nothing_is_read_when_the_batch_is_rejected() -> None:
    seen: list[str] = []

    async def spy(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        seen.append(call.name)
        return Outcome("ok", TOOL, result=1)

    await run([{"name": "a", "id": "same"}, {"name": "b", "id": "same"}], spy)
    assert seen == []


SECRET = "s3cr3t-value"


@pytest.mark.parametrize(
    ("entry", "error", "tool"),
    [
        ("just a string", "call at index 0 must be an object", None),
        ({"name": "a", "id": 7}, "id must be a non-empty string", "a"),
        ({"name": "a", "id": ""}, "id must be a non-empty string", "a"),
        ({"name": "a", "id": "i" * 101}, "id must be at most 100 characters", "a"),
        ({"name": ""}, "name must be a non-empty string", ""),
        ({"name": 12}, "name must be a non-empty string", None),
        ({"name": "n" * 201}, "name must be at most 200 characters", None),
        ({"name": "a", "arguments": [SECRET]}, "arguments must be an object", "a"),
        ({"name": "a", "arguments": {"x": {SECRET}}}, "arguments must be JSON-serializable", "a"),
        ({"name": "a", "arguments": {"x": float("nan")}}, "arguments must be JSON-serializable", "a"),
        ({"name": "a", "arguments": {"x": SECRET * 3000}}, "arguments must be at most 20000 bytes as JSON", "a"),
        ({"name": "a", "arguments": {"a": [[[[[[[[SECRET]]]]]]]]}}, "arguments must be nested at most 8 levels deep", "a"),
        ({"name": "a", "cursor": 5}, "cursor must be a string", "a"),
    ],
)
async def test_invalid_entries_say_the_bound_and_echo_no_value(entry: Any, error: str, tool: Any) -> None:
    response = await run([entry])
    item = response["results"][0]
    assert item["status"] == "invalid_call" and item["error"] == error and item["tool"] == tool
    assert SECRET not in json.dumps(response)


async def test_validation_order_first_failure_wins() -> None:
    response = await run([{"id": 3, "name": 4, "arguments": "x", "cursor": 1}])
    assert response["results"][0]["error"] == "id must be a non-empty string"
    response = await run([{"name": 4, "arguments": "x", "cursor": 1}])
    assert response["results"][0]["error"] == "name must be a non-empty string"


def test_nesting_depth_counts_containers() -> None:
    assert engine.nesting_depth({}) == 1
    assert engine.nesting_depth({"a": [1, {"b": 2}]}) == 3
    assert engine.nesting_depth("scalar") == 0
    deep: Any = 1
    for _ in range(5000):  # deeper than Python's recursion limit: must not blow up
        deep = [deep]
    assert engine.nesting_depth(deep) == 5000


async def test_eight_levels_are_allowed_nine_are_not() -> None:
    eight = {"a": [[[[[[["x"]]]]]]]}
    assert engine.nesting_depth(eight) == 8
    response = await run([{"name": "a", "arguments": eight}, {"name": "b", "arguments": {"a": eight}}])
    assert [item["status"] for item in response["results"]] == ["ok", "invalid_call"]


async def test_item_keys_counts_and_failed_lists() -> None:
    async def mixed(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        if call.name == "bad":
            return Outcome("error", TOOL, error="boom")
        return Outcome("ok", TOOL, result=[call.id])

    response = await run([{"name": "good", "id": "g"}, {"name": "bad", "id": "b"}, 3, {"name": "good"}], mixed)
    assert list(response) == ["ok", "results", "counts", "failed_ids", "failed_indexes", "truncated"]
    assert list(response["results"][0]) == ["index", "id", "tool", "server", "status", "result"]
    assert list(response["results"][1]) == ["index", "id", "tool", "server", "status", "error"]
    assert response["ok"] is False
    assert response["counts"] == {"total": 4, "succeeded": 2, "failed": 2}
    assert response["failed_ids"] == ["b", "2"] and response["failed_indexes"] == [1, 2]
    assert response["results"][3]["id"] == "3" and response["truncated"] is False


async def test_per_entry_budget_is_split_evenly_with_a_floor() -> None:
    response = await run([{"name": "a"}] * 5, response_max_bytes=300_000)
    assert {item["result"]["max_bytes"] for item in response["results"]} == {60_000}
    response = await run([{"name": "a"}] * 25, response_max_bytes=2_000)
    assert {item["result"]["max_bytes"] for item in response["results"] if item.get("result")} <= {1024}


async def test_the_batch_never_calls_itself() -> None:
    response = await run([{"name": "invoke_read_tool_batch", "arguments": {"calls": []}}])
    item = response["results"][0]
    assert item["status"] == "blocked" and "cannot be called from inside a batch" in item["error"]


async def test_errors_are_cut_to_500_characters() -> None:
    async def wordy(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        return Outcome("error", TOOL, error="e" * 5000)

    response = await run([{"name": "a"}], wordy)
    assert len(response["results"][0]["error"]) == 500


async def test_a_result_json_cannot_encode_becomes_an_error_item() -> None:
    async def odd(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        return Outcome("ok", TOOL, result={"when": object()} if call.name == "odd" else 1)

    response = await run([{"name": "odd"}, {"name": "fine"}], odd)
    first, second = response["results"]
    assert first["status"] == "error" and "not JSON-serializable" in first["error"]
    assert second["status"] == "ok" and response["failed_indexes"] == [0]


async def test_a_raising_reader_fails_only_its_entry() -> None:
    async def fragile(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        if call.name == "x":
            raise RuntimeError("reader broke")
        return Outcome("ok", TOOL, result=1)

    response = await run([{"name": "x"}, {"name": "y"}], fragile)
    assert [item["status"] for item in response["results"]] == ["error", "ok"]
    assert response["results"][0]["error"] == "RuntimeError: reader broke"


class Tracker:
    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.peak_by_server: dict[str, int] = {}
        self.by_server: dict[str, int] = {}

    async def reader(self, call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        tool = ToolRef(call.name, call.arguments.get("server", "srv"), {"readOnlyHint": True}, call.arguments.get("cap"))
        async with guards.server_slot(tool):
            self.running += 1
            server = tool.server or ""
            self.by_server[server] = self.by_server.get(server, 0) + 1
            self.peak = max(self.peak, self.running)
            self.peak_by_server[server] = max(self.peak_by_server.get(server, 0), self.by_server[server])
            # finish in reverse order of start, so call order cannot come from completion order
            await anyio.sleep(0.02 * (30 - call.index) / 30)
            self.running -= 1
            self.by_server[server] -= 1
        return Outcome("ok", tool, result=call.index)


@pytest.mark.parametrize("concurrency", [1, 4, 25])
async def test_bounded_concurrency_with_results_in_call_order(concurrency: int) -> None:
    tracker = Tracker()
    response = await run([{"name": "t", "id": f"c{i}"} for i in range(25)], tracker.reader, concurrency=concurrency)
    assert tracker.peak == concurrency
    assert [item["result"] for item in response["results"]] == list(range(25))
    assert [item["id"] for item in response["results"]] == [f"c{i}" for i in range(25)]


async def test_a_servers_own_cap_holds_under_the_batch_cap() -> None:
    tracker = Tracker()
    calls = [{"name": "t", "arguments": {"server": "slow", "cap": 2}} for _ in range(8)]
    calls += [{"name": "t", "arguments": {"server": "fast"}} for _ in range(8)]
    response = await run(calls, tracker.reader, concurrency=8)
    assert response["ok"] is True
    assert tracker.peak_by_server["slow"] == 2
    assert tracker.peak_by_server["fast"] > 2


async def test_the_call_timeout_makes_that_entry_an_error() -> None:
    cancelled = []

    async def hangs(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        with guards.dispatching() as scope:
            try:
                await anyio.sleep(0 if call.name == "quick" else 30)
            finally:
                cancelled.append(scope.cancel_called)
        if scope.cancelled_caught:
            return Outcome("error", TOOL, error="timed out")
        return Outcome("ok", TOOL, result="done")

    with anyio.fail_after(10):
        response = await run([{"name": "slow"}, {"name": "quick"}], hangs, call_timeout=0.05)
    assert [item["status"] for item in response["results"]] == ["error", "ok"]
    assert True in cancelled


async def test_the_batch_deadline_cancels_running_and_skips_unstarted_entries() -> None:
    dispatched: list[int] = []

    async def slow(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        with guards.dispatching():
            dispatched.append(call.index)
            await anyio.sleep(0 if call.index == 0 else 30)
        return Outcome("ok", TOOL, result=call.index)

    with anyio.fail_after(10):
        response = await run([{"name": "t"} for _ in range(6)], slow, concurrency=2, batch_timeout=0.2)
    statuses = [item["status"] for item in response["results"]]
    assert statuses[0] == "ok" and set(statuses[1:]) == {"error"}
    errors = [item["error"] for item in response["results"][1:]]
    assert any("cancelled while running" in error for error in errors)
    assert any("not dispatched" in error for error in errors)
    not_started = [item["index"] for item in response["results"] if "not dispatched" in item.get("error", "")]
    assert not set(not_started) & set(dispatched)
    assert response["counts"]["total"] == 6


async def test_observer_sees_every_item_and_increasing_progress() -> None:
    class Recorder(engine.QuietObserver):
        def __init__(self) -> None:
            self.items: list[dict[str, Any]] = []
            self.progress_values: list[tuple[int, int, str]] = []
            self.batches = 0

        async def item_completed(self, item: dict[str, Any], seconds: float) -> None:
            self.items.append(item)

        async def progress(self, done: int, total: int, message: str) -> None:
            self.progress_values.append((done, total, message))

        async def batch_completed(self, response: dict[str, Any], seconds: float) -> None:
            self.batches += 1

    recorder = Recorder()
    tracker = Tracker()
    await engine.run_batch([{"name": "t", "id": f"e{i}"} for i in range(7)] + [5], tracker.reader, settings(), recorder)
    assert sorted(item["index"] for item in recorder.items) == list(range(8))
    assert [done for done, _, _ in recorder.progress_values] == list(range(1, 9))
    assert {total for _, total, _ in recorder.progress_values} == {8}
    assert all("(" in message for _, _, message in recorder.progress_values)
    assert recorder.batches == 1
