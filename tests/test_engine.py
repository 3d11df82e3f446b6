"""The engine on plain data: a reader function stands in for the host's dispatch (``ReaderHost``)."""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib.util
import itertools
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from hosts import ItemsRaise, IterRaises, StrRaises

from centralmcp_batch import budget, engine, entries, errors, items, models
from centralmcp_batch.engine import Ready
from centralmcp_batch.entries import ValidCall
from centralmcp_batch.models import Outcome, RateBooking, ToolRef
from centralmcp_batch.settings import BatchSettings

# Python 3.10 has no Task.cancelling(): a CancelledError a backend raises itself counts as a real
# cancellation there, as docs/reference/batch.md says, so the batch does not answer.
TELLS_OWN_CANCELLATION = sys.version_info >= (3, 11)
needs_cancelling = pytest.mark.skipif(
    not TELLS_OWN_CANCELLATION, reason="Python 3.10 cannot tell an own CancelledError"
)

pytestmark = pytest.mark.anyio
# The engine keeps to anyio, so it runs on trio too (see must_propagate). trio is no dependency of
# the package, only of its test extra, so CI runs these on both; the rest of the suite runs on asyncio.
on_each_backend = pytest.mark.parametrize(
    "anyio_backend",
    ["asyncio", pytest.param("trio", marks=pytest.mark.skipif(not importlib.util.find_spec("trio"), reason="no trio"))],
)
TOOL = ToolRef("read", "srv", {"readOnlyHint": True})


def settings(**overrides: Any) -> BatchSettings:
    # Most tests here send the same read several times and watch each call: sharing is off unless a test asks.
    return BatchSettings(**{"concurrency": 4, "share_identical_reads": False, **overrides})


Reader = Callable[[ValidCall, int], Awaitable[Outcome]]


class ReaderHost:
    """The engine's ``Host`` over a reader: every name is a read tool (its server and cap from the call's
    ``server`` and ``cap`` arguments, when given), ``booking`` books the rate (None: nothing is booked),
    and dispatch is ``reader(call, max_bytes)``."""

    def __init__(self, reader: Reader, booking: Callable[[int, float], RateBooking | None] | None = None) -> None:
        self.reader, self.booking = reader, booking
        self.reserved: list[tuple[int, float]] = []  # (calls, within) of each booking asked for

    async def resolve(self, call: ValidCall) -> Ready | Outcome:
        server, cap = call.arguments.get("server", "srv"), call.arguments.get("cap")
        return Ready(
            call, ToolRef(call.name, server if isinstance(server, str) else "srv", {"readOnlyHint": True}, cap)
        )

    async def reserve(self, tools: Any, within: float) -> RateBooking | None:
        self.reserved.append((len(tools), within))
        return self.booking(len(tools), within) if self.booking else None

    async def draw_tokens(self, tool: ToolRef, booked_wait: float) -> float:
        return 0.0

    async def dispatch(self, ready: Ready, max_bytes: int) -> Outcome:
        return await self.reader(ready.call, max_bytes)


async def echo_reader(call: ValidCall, max_bytes: int) -> Outcome:
    return Outcome("ok", TOOL, result={"name": call.name, "max_bytes": max_bytes})


async def run(calls: Any, reader: Reader = echo_reader, **overrides: Any) -> dict[str, Any]:
    return await engine.run_batch(
        calls, ReaderHost(reader), settings(**overrides), self_names=frozenset({"invoke_read_tool_batch"})
    )


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
    assert explicit == {
        "ok": False,
        "error": "duplicate call id 'x': ids must be unique within a batch so results can be correlated",
    }
    defaulted = await run([{"name": "a", "id": "1"}, {"name": "b"}])  # the second entry's default id is "1"
    assert defaulted["ok"] is False and "duplicate call id '1'" in defaulted["error"]


def sleeping_reader(seconds: float) -> Reader:
    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        await anyio.sleep(seconds)
        return Outcome("ok", TOOL, result=call.index)

    return read


async def left_for_the_cycle_collector(batch: Callable[[], Awaitable[object]]) -> list[str]:
    """The names of the package's classes whose objects ``batch()`` leaves for the cycle collector.

    Everything a batch makes should be freed by reference counting as soon as it is over: memory
    must not wait for a collection. A first batch warms up what is made once per process.
    """
    await batch()
    gc.collect()
    gc.disable()
    try:
        await batch()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return sorted({type(thing).__name__ for thing in gc.garbage if type(thing).__module__.startswith("centralmcp")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@on_each_backend
async def test_a_batch_leaves_nothing_for_the_cycle_collector() -> None:
    # The batch and its items go as soon as the caller drops the answer, whether its calls waited or not.
    readers = {"none": lambda: sleeping_reader(0), "long": lambda: sleeping_reader(0.005)}
    for waits, reader in readers.items():
        left = await left_for_the_cycle_collector(functools.partial(run, [{"name": "a"}] * 10, reader(), concurrency=4))
        assert left == [], f"reference cycles through {left} (waits: {waits})"


def hanging_batch(concurrency: int, waiting: int) -> tuple[Callable[..., Awaitable[object]], anyio.Event]:
    """A batch of six entries that hang in their backend, and an event set once ``waiting`` of them wait."""
    reached = anyio.Event()
    started: list[int] = []

    async def hangs(call: ValidCall) -> str:
        started.append(call.index)
        if len(started) == waiting:
            reached.set()
        await anyio.sleep(30)
        return "never"

    batch = functools.partial(run, [{"name": "hang"}] * 6, dispatching_reader(hangs), concurrency=concurrency)
    return batch, reached


async def cancel_once_reached(reached: anyio.Event, scope: anyio.CancelScope) -> None:
    await reached.wait()
    await anyio.sleep(0.01)  # the workers wait
    scope.cancel()


@on_each_backend
@pytest.mark.parametrize(("concurrency", "waiting"), [(1, 1), (4, 4)], ids=["one-worker", "four-workers"])
@pytest.mark.parametrize("caller", ["own-scope", "task-group"])
async def test_a_cancelled_batch_leaves_nothing_for_the_cycle_collector(
    concurrency: int, waiting: int, caller: str
) -> None:
    # The caller cancels while entries wait: by a scope around the batch in its own task (as the MCP
    # SDKs do), or by cancelling the task group the batch runs in, whose task then ends with the
    # cancellation. A cancellation's traceback holds every frame it came through, and anyio's task
    # group keeps the exception that ends a task in a reference cycle.

    async def cancelled() -> None:
        batch, reached = hanging_batch(concurrency, waiting)
        with anyio.fail_after(10), anyio.CancelScope() as own:
            async with anyio.create_task_group() as tasks:
                if caller == "own-scope":
                    tasks.start_soon(cancel_once_reached, reached, own)
                    await batch()
                else:
                    tasks.start_soon(batch)
                    await cancel_once_reached(reached, tasks.cancel_scope)

    left = await left_for_the_cycle_collector(cancelled)
    assert left == [], f"reference cycles through {left}"


@on_each_backend
@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_batch_past_its_time_limit_leaves_nothing_for_the_cycle_collector(concurrency: int) -> None:
    # The limit cancels the entries still running; with several workers it ends their tasks too.
    batch, _ = hanging_batch(concurrency, waiting=1)
    with anyio.fail_after(10):
        left = await left_for_the_cycle_collector(functools.partial(batch, batch_timeout=0.1))
    assert left == [], f"reference cycles through {left}"


@on_each_backend
@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_call_past_its_time_limit_leaves_nothing_for_the_cycle_collector(concurrency: int) -> None:
    # The worker's own scope carries the call's limit and ends the cancellation there: no caller
    # above sees it. trio keeps a Cancelled in a reference cycle with its traceback, which held the
    # worker's frames, and so the run, its entries and guards.
    async def hangs(call: ValidCall) -> None:
        await anyio.sleep(30)

    batch = functools.partial(run, [{"name": "hang"}] * 2, dispatching_reader(hangs), concurrency=concurrency)
    with anyio.fail_after(10):
        left = await left_for_the_cycle_collector(functools.partial(batch, call_timeout=0.05))
    assert left == [], f"reference cycles through {left}"


async def test_nothing_is_read_when_the_batch_is_rejected() -> None:
    seen: list[str] = []

    async def spy(call: ValidCall, max_bytes: int) -> Outcome:
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
        (
            {"name": "a", "arguments": {"a": [[[[[[[[SECRET]]]]]]]]}},
            "arguments must be nested at most 8 levels deep",
            "a",
        ),
        ({"name": "a", "cursor": 5}, "cursor must be a string", "a"),
        (
            {"name": "a", "argumnts": {"x": SECRET}},
            "unknown key 'argumnts': a call has only name, arguments, id and cursor",
            "a",
        ),
        (
            {"name": "a", "k" * 60: SECRET},
            f"unknown key '{'k' * 36}...: a call has only name, arguments, id and cursor",
            "a",
        ),
        (
            {"name": "a", "\ud800": 1},
            "unknown key '\\ud800': a call has only name, arguments, id and cursor",
            "a",
        ),
    ],
)
async def test_invalid_entries_say_the_bound_and_echo_no_value(entry: Any, error: str, tool: Any) -> None:
    response = await run([entry])
    item = response["results"][0]
    assert item["status"] == "invalid_call" and item["error"] == error and item["tool"] == tool
    assert SECRET not in json.dumps(response)


def nested_once(depth: int) -> dict[str, Any]:
    """Arguments ``depth`` levels deep: ``{"a": [[...]]}``."""
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value]
    return {"a": value}


@pytest.mark.parametrize(
    ("arguments", "failing"),
    [
        # Each within the bounds; together over the bytes, or with brackets too many to count: every entry runs.
        ([{"blob": "b" * 15_000}, {"blob": "c" * 15_000}], {}),
        ([nested_once(8) for _ in range(3)], {}),
        ([nested_once(2) for _ in range(9)] + [{}], {}),
        # One over a bound among entries within them: only it fails, with its own bound.
        ([{"x": 1}, nested_once(9), {"y": 2}], {1: "arguments must be nested at most 8 levels deep"}),
        ([{"x": 1}, {"y": 2}, {"blob": "b" * 20_001}], {2: "arguments must be at most 20000 bytes as JSON"}),
        ([{"x": {SECRET}}, {"y": 2}], {0: "arguments must be JSON-serializable"}),
        ([{"x": "\ud800"}, None, {"y": "\u00e9"}], {0: "arguments must be JSON-serializable"}),
    ],
)
async def test_arguments_are_bounded_entry_by_entry_whatever_the_rest_of_the_batch_holds(
    arguments: list[Any], failing: dict[int, str]
) -> None:
    calls = [{"name": "a", "arguments": given} for given in arguments]
    calls[-1]["argumnts"] = {}  # an unknown key fails after the arguments' bounds, and is the last entry's problem
    response = await run(calls)
    errors = {item["index"]: item.get("error") for item in response["results"] if item["status"] == "invalid_call"}
    unknown_key = "unknown key 'argumnts': a call has only name, arguments, id and cursor"
    last = len(calls) - 1
    assert errors == {**failing, last: failing.get(last, unknown_key)}
    assert all(item["status"] == "ok" for item in response["results"] if item["index"] not in errors)


async def test_validation_order_first_failure_wins() -> None:
    response = await run([{"id": 3, "name": 4, "arguments": "x", "cursor": 1}])
    assert response["results"][0]["error"] == "id must be a non-empty string"
    response = await run([{"name": 4, "arguments": "x", "cursor": 1}])
    assert response["results"][0]["error"] == "name must be a non-empty string"


async def test_an_unknown_key_fails_only_its_entry_and_only_after_the_documented_checks() -> None:
    """A misspelled ``argumnts`` would have run the call with ``{}``: it is refused, and nothing is read for it."""
    seen: list[str] = []

    async def spy(call: ValidCall, max_bytes: int) -> Outcome:
        seen.append(call.id)
        return Outcome("ok", TOOL, result=1)

    calls = [{"name": "a", "id": "typo", "argumnts": {"x": 1}}, {"name": "a", "id": "fine", "arguments": {"x": 1}}]
    response = await run(calls, spy)
    assert [item["status"] for item in response["results"]] == ["invalid_call", "ok"] and seen == ["fine"]
    assert response["failed_ids"] == ["typo"]
    # The checks the contract lists keep their order: each comes before the unknown key.
    response = await run([{"name": "a", "cursor": 5, "extra": 1}, {"name": "a", "arguments": 1, "extra": 1}])
    assert [item["error"] for item in response["results"]] == ["cursor must be a string", "arguments must be an object"]


def test_the_call_keys_are_the_published_schemas() -> None:
    schema = models.input_schema()["properties"]["calls"]["items"]
    assert set(schema["properties"]) == entries.ENTRY_KEYS and schema["additionalProperties"] is False


async def test_eight_levels_are_allowed_nine_are_not() -> None:
    eight = {"a": [[[[[[["x"]]]]]]]}
    response = await run([{"name": "a", "arguments": eight}, {"name": "b", "arguments": {"a": eight}}])
    assert [item["status"] for item in response["results"]] == ["ok", "invalid_call"]


async def test_item_keys_counts_and_failed_lists() -> None:
    async def mixed(call: ValidCall, max_bytes: int) -> Outcome:
        if call.name == "bad":
            return Outcome("error", TOOL, error="boom")
        return Outcome("ok", TOOL, result=[call.id])

    response = await run([{"name": "good", "id": "g"}, {"name": "bad", "id": "b"}, 3, {"name": "good"}], mixed)
    assert list(response) == ["ok", "results", "counts", "failed_ids", "failed_indexes", "truncated", "rate"]
    assert list(response["results"][0]) == ["index", "id", "tool", "server", "status", "result"]
    assert list(response["results"][1]) == ["index", "id", "tool", "server", "status", "error"]
    assert response["ok"] is False
    assert response["counts"] == {"total": 4, "succeeded": 2, "failed": 2}
    assert response["failed_ids"] == ["b", "2"] and response["failed_indexes"] == [1, 2]
    assert response["results"][3]["id"] == "3" and response["truncated"] is False


async def test_the_share_reserves_the_envelope_and_the_items_with_a_floor() -> None:
    response = await run([{"name": "a"}] * 5, response_max_bytes=300_000)
    shares = {item["result"]["max_bytes"] for item in response["results"]}
    assert len(shares) == 1 and 300_000 // 5 - 200 < shares.pop() < 300_000 // 5
    response = await run([{"name": "a"}] * 25, response_max_bytes=2_000)
    assert {item["result"]["max_bytes"] for item in response["results"] if item.get("result")} <= {items.MIN_SHARE}
    # invalid entries take no share: their items are reserved whole, the rest goes to the valid ones
    mixed = await run([{"name": "a"}, {"name": 7}, {"name": "b"}], response_max_bytes=30_000)
    assert mixed["results"][0]["result"]["max_bytes"] > 30_000 // 3


def filling(server: str) -> Any:
    """A reader whose every result is exactly its share, as compact JSON."""

    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        result = {"blob": "x" * (max_bytes - len('{"blob":""}'))}
        assert len(json.dumps(result, separators=(",", ":"))) == max_bytes
        return Outcome("ok", ToolRef(call.name, server, {"readOnlyHint": True}), result=result)

    return read


def wire_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def item_of(call: ValidCall, outcome: Outcome) -> dict[str, Any]:
    return items.make_item(call.index, call.id, call.name, outcome.tool.server if outcome.tool else None, outcome)


LONGEST = ("i" * 100, "s" * items.SERVER_NAME_RESERVE)


@pytest.mark.parametrize("budget", [40_000, 100_000, 300_000, 1_000_000])
@pytest.mark.parametrize("n", [1, 2, 7, 25])
@pytest.mark.parametrize(("call_id", "server"), [(None, "monitoring"), LONGEST], ids=["short", "longest"])
async def test_n_results_each_filling_its_share_all_come_back_whole(
    n: int, budget: int, call_id: Any, server: str
) -> None:
    ids = [{"id": f"{index:02d}" + call_id[2:]} if call_id else {} for index in range(n)]
    calls = [{"name": f"tool_{index}" + "n" * 150, **ids[index]} for index in range(n)]
    response = await run(calls, filling(server), response_max_bytes=budget)
    assert response["truncated"] is False and response["ok"] is True
    assert all(item["result"] is not None for item in response["results"]) and len(response["results"]) == n
    unused = n * (items.SERVER_NAME_RESERVE - len(server) + 1)  # room a shorter server name leaves, and rounding
    unused += wire_size(engine.RATE_PLACEHOLDER) - wire_size(response["rate"])  # its numbers, at their widest
    assert budget - unused <= len(json.dumps(response, separators=(",", ":"))) <= budget


@pytest.mark.parametrize("n", [1, 3, 25])
async def test_escaped_and_non_ascii_ids_and_names_are_reserved_to_the_byte(n: int) -> None:
    # The share reserves each item's keys by counting their encoded bytes: quotes, backslashes and
    # control characters are escaped, non-ASCII text takes 2-4 bytes a character, invalid entries whole.
    odd = ['q"uo\\te', "tab\tnl\n\x01", "é€😀", "ユニコード", "\u2028\x7f"]
    calls: list[Any] = [{"name": f"{odd[i % 5]}{i}", "id": f"{odd[(i + 2) % 5]}#{i}"} for i in range(n)]
    if n > 1:
        calls[1] = {"name": 7, "id": "bad é"}  # an invalid entry, reserved whole
    response = await run(calls, filling("s" * items.SERVER_NAME_RESERVE), response_max_bytes=60_000)
    assert response["truncated"] is False
    size = len(json.dumps(response, separators=(",", ":"), ensure_ascii=False).encode())
    valid = n - (n > 1)
    rate_room = wire_size(engine.RATE_PLACEHOLDER) - wire_size(response["rate"])  # its numbers, at their widest
    assert 60_000 - valid - rate_room <= size <= 60_000  # only the rounding of the even split is left over


ODD_TEXT = ['q"uo\\te', "tab\tnl\n\x01", "é€😀", "\u2028\x7f", "plain"]
ODD_RESULTS: list[Any] = [None, 0, -1.5e-7, True, "é\n", [], {'k"': [1, {"b": None}]}, "x" * 3000]


@pytest.mark.parametrize("server", [None, "", "srv", *ODD_TEXT])
def test_an_ok_items_size_without_encoding_its_own_keys_is_its_whole_encodings(server: Any) -> None:
    calls = [{"name": f"{ODD_TEXT[i % 5]}{i}", "id": f"{ODD_TEXT[(i + 2) % 5]}#{i}"} for i in range(12)]
    parsed = [entries.parse_entry(index, call) for index, call in enumerate(calls)]
    keys_sizes = items.ok_keys_sizes(parsed)
    for call in parsed:
        assert isinstance(call, ValidCall)
        for result in ODD_RESULTS:
            item = item_of(call, Outcome("ok", ToolRef(call.name, server), result=result))
            assert items.ok_item_size(item, keys_sizes[call.index]) == items.item_size(item) == budget.size(item)


@pytest.mark.parametrize("server", [None, "", "srv", *ODD_TEXT])
def test_a_failed_items_size_from_its_strings_is_its_whole_encodings(server: Any) -> None:
    calls = [{"name": f"{ODD_TEXT[i % 5]}{i}", "id": f"{ODD_TEXT[(i + 2) % 5]}#{i}"} for i in range(12)]
    parsed = [entries.parse_entry(index, call) for index, call in enumerate(calls)]
    keys_sizes = items.ok_keys_sizes(parsed)
    statuses = ["error", "blocked", "unknown_tool", "invalid_cursor", 'od"d\u2028']
    for call in parsed:
        assert isinstance(call, ValidCall)
        for status, error in itertools.product(statuses, [*ODD_TEXT, "", None, "e" * 900]):
            item = item_of(call, Outcome(status, ToolRef(call.name, server), error=error))
            assert items.failed_item_size(item, keys_sizes[call.index]) == items.item_size(item) == budget.size(item)


def test_a_failed_item_with_broken_unicode_fails_as_its_whole_encoding_does() -> None:
    call = entries.parse_entry(0, {"name": "read"})
    assert isinstance(call, ValidCall)
    item = item_of(call, Outcome("error", TOOL, error="bad \ud800 text"))
    with pytest.raises(ValueError, match="surrogates not allowed"):  # pydantic's, as the SDKs' own writing fails
        items.item_size(item)
    with pytest.raises(ValueError, match="surrogates not allowed"):
        items.failed_item_size(item, items.ok_keys_sizes([call])[0])


@pytest.mark.parametrize("status", ["error", "blocked", "unknown_tool"])
async def test_a_failed_entry_with_broken_unicode_in_its_error_keeps_its_status_and_error(status: str) -> None:
    async def broken(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome(status, TOOL, error="bad \ud800\udfff text é" if call.name == "bad" else "fine")

    response = await run([{"name": "bad"}, {"name": "good"}], broken)
    first, second = response["results"]
    mended = "bad \ufffd\ufffd text é"
    assert first == {"index": 0, "id": "0", "tool": "bad", "server": TOOL.server, "status": status, "error": mended}
    assert second == {"index": 1, "id": "1", "tool": "good", "server": TOOL.server, "status": status, "error": "fine"}
    assert response["failed_ids"] == ["0", "1"]
    json.dumps(response, ensure_ascii=False).encode()  # the wire can carry all of it


@pytest.mark.parametrize("status", ["ok", "error"])
async def test_a_server_name_with_broken_unicode_is_mended_and_the_entry_kept(status: str) -> None:
    broken_server = ToolRef("read", "srv\udc80")

    async def from_broken_server(call: ValidCall, max_bytes: int) -> Outcome:
        if status == "ok":
            return Outcome("ok", broken_server, result={"n": call.index})
        return Outcome("error", broken_server, error="down")

    response = await run([{"name": "read"}, {"name": "read"}], from_broken_server)
    for index, item in enumerate(response["results"]):
        assert item["server"] == "srv\ufffd" and item["status"] == status
        assert (item["result"] == {"n": index}) if status == "ok" else (item["error"] == "down")
    json.dumps(response, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    ("result", "answered"),
    [
        # Not JSON, and str() raises too: nothing to answer but the error.
        (StrRaises(), {"status": "error", "error": "RuntimeError: the tool's result is not JSON-serializable"}),
        # Containers whose own methods raise: written as the server SDK would (pydantic reads them itself).
        (ItemsRaise(a=1), {"status": "ok", "result": {"a": 1}}),
        (IterRaises([1, 2]), {"status": "ok", "result": [1, 2]}),
        ({"deep": [IterRaises([3])]}, {"status": "ok", "result": {"deep": [[3]]}}),
    ],
    ids=["str-raises", "items-raise", "iter-raises", "nested"],
)
async def test_a_result_whose_own_methods_raise_fails_its_entry_not_the_batch(result: Any, answered: Any) -> None:
    # Encoding such a result raised the methods' RuntimeError out of the batch, and every entry was lost.
    async def odd(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("ok", TOOL, result=result if call.name == "odd" else {"n": call.index})

    response = await run([{"name": "odd"}, {"name": "plain"}], odd)
    first, second = response["results"]
    assert {key: first[key] for key in answered} == answered
    assert second["status"] == "ok" and second["result"] == {"n": 1}
    assert budget.size(response["results"]) > 0  # all of it plain JSON now


class GetRaises(dict[str, Any]):
    def get(self, *args: Any) -> Any:
        raise RuntimeError("no get")


async def test_an_entry_whose_own_methods_raise_is_invalid_alone() -> None:
    # An in-process caller's mapping: reading it raised out of the batch.
    response = await run([GetRaises(name="a"), {"name": "b"}])
    first, second = response["results"]
    assert first == {
        "index": 0,
        "id": "0",
        "tool": None,
        "server": None,
        "status": "invalid_call",
        "error": "call at index 0 could not be read: RuntimeError",
    }
    assert second["status"] == "ok"


async def test_arguments_whose_own_methods_raise_make_their_entry_invalid() -> None:
    response = await run([{"name": "a", "arguments": {"x": ItemsRaise(a=1)}}, {"name": "b"}])
    first, second = response["results"]
    assert (first["status"], first["error"]) == ("invalid_call", "arguments must be JSON-serializable")
    assert second["status"] == "ok"


def looped() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(
    "make",
    [
        looped,
        lambda: "\ud800",
        lambda: {"x": object()},
        lambda: functools.reduce(lambda inner, _: [inner], range(201), []),
    ],
    ids=["cycle", "lone-surrogate", "not-json", "too-deep"],
)
def test_an_ok_item_that_cannot_be_sized_fails_as_its_whole_encoding_does(make: Callable[[], Any]) -> None:
    call = entries.parse_entry(0, {"name": "read"})
    assert isinstance(call, ValidCall)
    item = item_of(call, Outcome("ok", TOOL, result=make()))
    with pytest.raises((TypeError, ValueError, RecursionError)) as whole:
        items.item_size(item)
    with pytest.raises(type(whole.value)):
        items.ok_item_size(item, items.ok_keys_sizes([call])[0])


async def test_full_shares_beside_invalid_and_failed_entries_still_fit() -> None:
    calls = [{"name": "ok_a"}, {"name": 5}, {"name": "fails", "id": "f"}, {"name": "ok_b", "arguments": []}]
    calls.append({"name": "ok_c"})
    reader = filling("srv")

    async def mixed(call: ValidCall, max_bytes: int) -> Outcome:
        if call.name == "fails":
            return Outcome("error", TOOL, error="e" * 400)
        return await reader(call, max_bytes)

    response = await run(calls, mixed, response_max_bytes=20_000)
    assert response["truncated"] is False
    assert [item["status"] for item in response["results"]] == ["ok", "invalid_call", "error", "invalid_call", "ok"]


async def test_the_batch_never_calls_itself() -> None:
    response = await run([{"name": "invoke_read_tool_batch", "arguments": {"calls": []}}])
    item = response["results"][0]
    assert item["status"] == "blocked" and "cannot be called from inside a batch" in item["error"]


async def test_errors_are_cut_to_500_characters() -> None:
    async def wordy(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("error", TOOL, error="e" * 5000)

    response = await run([{"name": "a"}], wordy)
    assert len(response["results"][0]["error"]) == 500


async def test_a_result_json_cannot_encode_becomes_an_error_item() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped

    async def odd(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("ok", TOOL, result={"loop": looped} if call.name == "odd" else 1)

    response = await run([{"name": "odd"}, {"name": "fine"}], odd)
    first, second = response["results"]
    assert first["status"] == "error" and "not JSON-serializable" in first["error"]
    assert second["status"] == "ok" and response["failed_indexes"] == [0]


async def test_a_result_that_is_not_plain_json_is_written_as_a_server_sdk_writes_a_single_read() -> None:
    import datetime

    from pydantic import BaseModel

    class Device(BaseModel):
        serial: str
        seen: datetime.datetime

    seen = datetime.datetime(2026, 12, 4, 12, 30, tzinfo=datetime.timezone.utc)
    answers = {
        "when": {"at": seen, "tags": frozenset({"x"})},
        "model": Device(serial="CN1", seen=seen),
        "odd": {"ratio": math.inf, "raw": b"bytes"},
    }

    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("ok", TOOL, result=answers[call.name])

    response = await run([{"name": name} for name in answers], read)
    assert response["ok"] and [item["result"] for item in response["results"]] == [
        {"at": "2026-12-04T12:30:00Z", "tags": ["x"]},
        {"serial": "CN1", "seen": "2026-12-04T12:30:00Z"},
        {"ratio": None, "raw": "bytes"},
    ]
    assert json.loads(json.dumps(response, allow_nan=False)) == response  # plain JSON throughout


async def test_a_raising_reader_fails_only_its_entry() -> None:
    async def fragile(call: ValidCall, max_bytes: int) -> Outcome:
        if call.name == "x":
            raise RuntimeError("reader broke")
        return Outcome("ok", TOOL, result=1)

    response = await run([{"name": "x"}, {"name": "y"}], fragile)
    assert [item["status"] for item in response["results"]] == ["error", "ok"]
    assert response["results"][0]["error"] == "RuntimeError: reader broke"


@on_each_backend
async def test_an_error_a_task_group_wraps_alone_is_told_as_itself() -> None:
    """A dispatch that runs its backend call in a task group lets out a group of one."""

    async def fail(text: str) -> None:
        raise ConnectionError(text)

    async def grouped(call: ValidCall, max_bytes: int) -> Outcome:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(fail, f"{call.name}: backend refused the connection")
            if call.name == "two":
                tasks.start_soon(fail, "and again")
        return Outcome("ok", TOOL, result=1)

    response = await run([{"name": "one"}, {"name": "two"}], grouped)
    one, two = (item["error"] for item in response["results"])
    assert one == "ConnectionError: one: backend refused the connection"
    assert two.endswith("(2 sub-exceptions)")  # a group of several says so, as it is


class Tracker:
    def __init__(self, longest: float = 0.02) -> None:
        self.longest = longest  # seconds the first entry's call takes; later ones take less
        self.running = 0
        self.peak = 0
        self.peak_by_server: dict[str, int] = {}
        self.by_server: dict[str, int] = {}

    async def reader(self, call: ValidCall, max_bytes: int) -> Outcome:
        server = call.arguments.get("server", "srv")  # the cap the host resolved the tool with holds around this
        self.running += 1
        self.by_server[server] = self.by_server.get(server, 0) + 1
        self.peak = max(self.peak, self.running)
        self.peak_by_server[server] = max(self.peak_by_server.get(server, 0), self.by_server[server])
        # finish in reverse order of start, so call order cannot come from completion order
        await anyio.sleep(self.longest * (30 - call.index) / 30)
        self.running -= 1
        self.by_server[server] -= 1
        return Outcome("ok", TOOL, result=call.index)


@pytest.mark.parametrize("concurrency", [1, 4, 25])
async def test_bounded_concurrency_with_results_in_call_order(concurrency: int) -> None:
    # All 25 at once only while the first is still running: its call is long enough that the other
    # workers start in time on a loaded machine too (at 20 ms, 24 of 25 were seen at a load average of 12).
    tracker = Tracker(longest=0.2 if concurrency == 25 else 0.02)
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

    async def hangs(call: ValidCall, max_bytes: int) -> Outcome:
        try:
            await anyio.sleep(0 if call.name == "quick" else 30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(call.name)
            raise
        return Outcome("ok", TOOL, result="done")

    with anyio.fail_after(10):
        response = await run([{"name": "slow"}, {"name": "quick"}], hangs, call_timeout=0.05)
    assert [item["status"] for item in response["results"]] == ["error", "ok"]
    assert response["results"][0]["error"] == engine.call_timed_out(0.05) and cancelled == ["slow"]


async def test_the_batch_deadline_cancels_running_and_skips_unstarted_entries() -> None:
    dispatched: list[int] = []

    async def slow(call: ValidCall, max_bytes: int) -> Outcome:
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
    await engine.run_batch(
        [{"name": "t", "id": f"e{i}"} for i in range(7)] + [5], ReaderHost(tracker.reader), settings(), recorder
    )
    assert sorted(item["index"] for item in recorder.items) == list(range(8))
    assert [done for done, _, _ in recorder.progress_values] == list(range(1, 9))
    assert {total for _, total, _ in recorder.progress_values} == {8}
    assert all("(" in message for _, _, message in recorder.progress_values)
    assert recorder.batches == 1


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_an_item_observer_is_told_each_entry_s_seconds_also_of_one_its_time_limit_ended(
    concurrency: int,
) -> None:
    class Timing(engine.QuietObserver):
        def __init__(self) -> None:
            self.seconds: dict[int, float] = {}

        def item_completed(self, item: dict[str, Any], seconds: float) -> None:
            self.seconds[item["index"]] = seconds

    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        await anyio.sleep(0.03 if call.index == 0 else 5)
        return Outcome("ok", TOOL, result=call.index)

    observer = Timing()
    response = await engine.run_batch(
        [{"name": "t"}] * 2, ReaderHost(read), settings(call_timeout=0.08, concurrency=concurrency), observer
    )
    assert [item["status"] for item in response["results"]] == ["ok", "error"]
    assert 0.03 <= observer.seconds[0] < 4 and 0.08 <= observer.seconds[1] < 4  # the entry's own, not the clock's


# -- backends that raise BaseException or cancel themselves ------------------------------


class Abort(BaseException):
    pass


async def self_cancelling() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


@pytest.mark.parametrize(
    ("raised", "error"),
    [
        (lambda: SystemExit(2), "SystemExit: 2"),
        (lambda: KeyboardInterrupt(), "KeyboardInterrupt"),
        (lambda: Abort("stop"), "Abort: stop"),
        pytest.param(None, errors.describe(asyncio.CancelledError()), marks=needs_cancelling),
    ],
    ids=["SystemExit", "KeyboardInterrupt", "custom", "own-CancelledError"],
)
async def test_a_reader_raising_a_base_exception_fails_only_its_entry(raised: Any, error: str) -> None:
    async def fragile(call: ValidCall, max_bytes: int) -> Outcome:
        if call.name == "x":
            if raised is None:
                await self_cancelling()
            raise raised()
        return Outcome("ok", TOOL, result=call.index)

    with anyio.fail_after(10):  # one worker: the entries after the failing one must still run on it
        response = await run([{"name": "y"}, {"name": "x"}, {"name": "y"}, {"name": "y"}], fragile, concurrency=1)
    assert [item["status"] for item in response["results"]] == ["ok", "error", "ok", "ok"]
    assert response["results"][1]["error"] == error
    assert "time limit of" not in json.dumps(response)


def test_an_own_cancellation_is_described_truthfully() -> None:
    own = "CancelledError: raised by the call itself; no time limit passed and the client did not cancel"
    assert errors.describe(asyncio.CancelledError()) == own
    assert errors.describe(SystemExit(2)) == "SystemExit: 2"
    assert errors.describe(KeyboardInterrupt()) == "KeyboardInterrupt"


async def test_must_propagate_tells_a_real_cancellation_from_a_raised_one() -> None:
    seen: dict[str, bool] = {}
    try:
        await self_cancelling()
    except asyncio.CancelledError as exc:
        seen["raised"] = errors.must_propagate(exc)
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except asyncio.CancelledError as exc:
            seen["scope"] = errors.must_propagate(exc)
            raise
    seen["closed"] = errors.must_propagate(GeneratorExit())
    seen["exit"] = errors.must_propagate(SystemExit(1))
    assert seen == {"raised": not TELLS_OWN_CANCELLATION, "scope": True, "closed": True, "exit": False}


async def test_a_plain_task_cancel_still_cancels_the_batch_and_its_reads() -> None:
    started, running, cancelled = asyncio.Event(), [], []

    async def hangs(call: ValidCall, max_bytes: int) -> Outcome:
        running.append(call.index)
        if len(running) == 2:  # the second worker starts once the first entry has waited a while
            started.set()
        try:
            await anyio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(call.index)
            raise
        return Outcome("ok", TOOL, result=1)

    task = asyncio.ensure_future(run([{"name": "a"}, {"name": "b"}], hangs, concurrency=2))
    await started.wait()
    task.cancel()  # asyncio's own cancel, no anyio scope: a real cancellation all the same
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == [0, 1]


@needs_cancelling
@pytest.mark.parametrize("then", ["answers", "fails"])
@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_plain_task_cancel_the_backend_swallows_still_cancels_the_batch(concurrency: int, then: str) -> None:
    # asyncio's own cancel, which no anyio scope delivers again at the next await: the backend
    # catches it and answers (or fails) anyway. The batch's task is still being cancelled, so the
    # batch ends with the cancellation instead of answering as if nothing had happened.
    reached = asyncio.Event()
    dispatched: list[int] = []

    async def swallows(call: ValidCall) -> str:
        dispatched.append(call.index)
        if call.index == 0:
            reached.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if then == "fails":
                    raise RuntimeError("interrupted") from None
                return "answered anyway"
        return "next"

    watcher = CancelWatcher(report_wait=0)
    batch = asyncio.ensure_future(
        engine.run_batch(
            [{"name": "a"}] * 3, ReaderHost(dispatching_reader(swallows)), settings(concurrency=concurrency), watcher
        )
    )
    await reached.wait()
    batch.cancel()
    with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
        await batch
    assert watcher.completed == 0 and len(watcher.cancelled) == 1
    if concurrency == 1:
        assert dispatched == [0]  # nothing more was dispatched once the batch knew


@needs_cancelling
async def test_a_single_read_whose_backend_swallows_a_plain_task_cancel_is_cancelled_too() -> None:
    # Outside a batch (the reference router's invoke_read_tool), a call gets a scope of its own and
    # the same driver: the task's cancellation goes on up there as well.
    reached = asyncio.Event()

    async def swallows() -> str:
        reached.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "answered anyway"
        return "never"

    async def swallowing_read(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("ok", TOOL, result=await swallows())

    async def single_read() -> Outcome:
        return await engine.read_one("a", {}, None, ReaderHost(swallowing_read), settings(call_timeout=20), 1024)

    read = asyncio.ensure_future(single_read())
    await reached.wait()
    read.cancel()
    with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
        await read


@needs_cancelling
async def test_a_backends_own_asyncio_timeout_is_not_the_batchs_cancellation() -> None:
    # asyncio.timeout cancels the task it runs in too, and takes its request back as it turns it into
    # a TimeoutError: the backend answers, and so does the batch.
    async def gives_up(call: ValidCall) -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(30)
        except TimeoutError:
            return "gave up"
        return "never"

    with anyio.fail_after(10):
        response = await run([{"name": "a"}] * 2, dispatching_reader(gives_up), concurrency=1)
    assert [item["result"] for item in response["results"]] == ["gave up", "gave up"]


# -- the call time limit, a cancel scope around each dispatch -------------------------------


def dispatching_reader(backend: Any) -> Reader:
    """A reader whose outcome is ``ok`` with what ``backend(call)`` answers."""

    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        return Outcome("ok", TOOL, result=await backend(call))

    return read


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_call_past_its_limit_is_cancelled_and_its_worker_runs_the_rest(concurrency: int) -> None:
    cancelled: list[int] = []

    async def backend(call: ValidCall) -> int:
        try:
            await anyio.sleep(30 if call.name == "hang" else 0.001)
        except anyio.get_cancelled_exc_class():
            cancelled.append(call.index)
            raise
        return call.index

    calls = [{"name": "hang"}, {"name": "quick"}, {"name": "hang"}, {"name": "quick"}, {"name": "quick"}]
    with anyio.fail_after(10):
        response = await run(calls, dispatching_reader(backend), concurrency=concurrency, call_timeout=0.05)
    statuses = [item["status"] for item in response["results"]]
    assert statuses == ["error", "ok", "error", "ok", "ok"]
    assert response["results"][0]["error"] == "TimeoutError: the backend call timed out after 0.05s"
    assert response["results"][0]["server"] == "srv"  # the worker answers it with the tool it was calling
    assert sorted(cancelled) == [0, 2]


async def test_an_answer_that_came_after_the_limit_is_timed_out_and_the_next_call_is_not() -> None:
    async def swallows(call: ValidCall) -> str:
        if call.name != "stubborn":
            await anyio.sleep(0.01)  # waits, so it runs under an armed deadline of its own
            return "fine"
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            return "too late"  # a backend that swallows its cancellation and answers anyway
        return "never"

    with anyio.fail_after(10):
        response = await run(
            [{"name": "stubborn"}, {"name": "next"}], dispatching_reader(swallows), concurrency=1, call_timeout=0.05
        )
    first, second = response["results"]
    assert first["status"] == "error" and "timed out after 0.05s" in first["error"]
    assert second["status"] == "ok" and second["result"] == "fine"


async def test_a_single_worker_stops_at_the_batch_limit_sooner_than_the_call_limit() -> None:
    async def backend(call: ValidCall) -> int:
        await anyio.sleep(30 if call.name == "hang" else 0)
        return call.index

    with anyio.fail_after(10):
        response = await run(
            [{"name": "quick"}, {"name": "hang"}, {"name": "quick"}],
            dispatching_reader(backend),
            concurrency=1,
            call_timeout=20,
            batch_timeout=0.1,
        )
    errors = [item.get("error") for item in response["results"]]
    assert errors[0] is None
    assert errors[1] == "TimeoutError: cancelled while running: the batch time limit of 0.1s passed"
    assert errors[2] == "TimeoutError: not dispatched: the batch time limit of 0.1s passed first"


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_an_answer_that_came_after_the_batch_limit_is_reported_at_that_limit(concurrency: int) -> None:
    async def swallows(call: ValidCall) -> str:
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            return "too late"  # swallowed: the batch limit, not the call's, cut it off
        return "never"

    with anyio.fail_after(10):
        response = await run(
            [{"name": "stubborn"}, {"name": "next"}],
            dispatching_reader(swallows),
            concurrency=concurrency,
            call_timeout=20,
            batch_timeout=0.1,
        )
    errors = [item.get("error") for item in response["results"]]
    swallowed = "TimeoutError: cancelled while running: the batch time limit of 0.1s passed"
    if concurrency == 1:
        assert errors == [swallowed, "TimeoutError: not dispatched: the batch time limit of 0.1s passed first"]
    else:  # both ran at once, and both answered late
        assert errors == [swallowed, swallowed]


class StalledProgress(engine.QuietObserver):
    """A client that never reads its progress notifications: each report waits for good."""

    async def progress(self, done: int, total: int, message: str) -> None:
        await anyio.sleep(30)


async def test_a_stalled_progress_report_does_not_hold_a_batch_past_its_limit() -> None:
    async def hangs(call: ValidCall) -> None:
        await anyio.sleep(30)

    started = time.monotonic()
    with anyio.fail_after(10):
        response = await engine.run_batch(
            [{"name": "hangs"}],
            ReaderHost(dispatching_reader(hangs)),
            settings(call_timeout=0.05, batch_timeout=0.3),
            StalledProgress(),
        )
    assert time.monotonic() - started < 5  # the batch limit (0.3 s) cut the report; it would have waited 30 s
    assert response["results"][0]["error"] == engine.call_timed_out(0.05)


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_stalled_progress_reports_of_the_batch_limit_are_cut_after_a_grace(
    concurrency: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three entries still running or waiting when the batch limit passes: the limit answers them
    # after it, and each of their reports would have waited 30 s on a client that stopped reading.
    monkeypatch.setattr(engine, "REPORT_GRACE", 0.2)

    async def hangs(call: ValidCall) -> None:
        await anyio.sleep(30)

    observer = StalledProgress()
    items: list[dict[str, Any]] = []
    observer.item_completed = lambda item, seconds: items.append(item)  # type: ignore[method-assign]
    started = time.monotonic()
    with anyio.fail_after(20):
        response = await engine.run_batch(
            [{"name": "hangs"}] * 3,
            ReaderHost(dispatching_reader(hangs)),
            settings(concurrency=concurrency, call_timeout=10, batch_timeout=0.3),
            observer,
        )
    assert time.monotonic() - started < 5  # limit 0.3 s and grace 0.2 s; it was 90 s, a report at a time
    assert [item["status"] for item in response["results"]] == ["error"] * 3
    assert all("the batch time limit of 0.3s passed" in item["error"] for item in response["results"])
    assert sorted(item["index"] for item in items) == [0, 1, 2]  # every item kept and observed, told or not


class CancelWatcher(engine.QuietObserver):
    """Records what the batch tells it of its end; its report of a cancellation waits ``report_wait``."""

    def __init__(self, report_wait: float) -> None:
        self.report_wait = report_wait
        self.completed = 0
        self.cancelled: list[float] = []  # the seconds told, once the report's own wait is over

    def batch_completed(self, response: dict[str, Any], seconds: float) -> None:
        self.completed += 1

    async def batch_cancelled(self, seconds: float) -> None:
        await anyio.sleep(self.report_wait)  # an exporter's flush: the cancellation must not cut it
        self.cancelled.append(seconds)


async def cancel_mid_batch(watcher: CancelWatcher, concurrency: int) -> float:
    """Run a batch whose second entry hangs, cancel it while it hangs; the seconds the cancel took."""
    reached = anyio.Event()

    async def backend(call: ValidCall) -> str:
        if call.name == "hang":
            reached.set()
            await anyio.sleep(30)
        return call.name

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                engine.run_batch,
                [{"name": "quick"}, {"name": "hang"}, {"name": "quick"}],
                ReaderHost(dispatching_reader(backend)),
                settings(concurrency=concurrency),
                watcher,
            )
            await reached.wait()
            await anyio.sleep(0.05)
            cancelled_at = time.monotonic()
            tasks.cancel_scope.cancel()
    return time.monotonic() - cancelled_at


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_a_cancelled_batch_tells_its_observer_once_and_the_report_may_await(concurrency: int) -> None:
    watcher = CancelWatcher(report_wait=0.05)
    await cancel_mid_batch(watcher, concurrency)
    assert watcher.completed == 0 and len(watcher.cancelled) == 1  # its awaited report finished, shielded
    assert watcher.cancelled[0] >= 0.05  # how long the batch ran before the cancel


async def test_a_cancelled_batchs_report_that_hangs_is_cut_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "REPORT_GRACE", 0.1)
    watcher = CancelWatcher(report_wait=30)
    took = await cancel_mid_batch(watcher, concurrency=1)
    assert took < 5 and watcher.cancelled == []  # cut at 0.1 s; the cancellation still went through


# -- identical reads share one call ---------------------------------------------------------


async def test_identical_reads_share_one_call_and_each_keeps_its_own_item() -> None:
    calls_made: list[int] = []

    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        calls_made.append(call.index)
        return Outcome("ok", TOOL, result={"site": call.arguments.get("site")})

    calls = [
        {"name": "a", "arguments": {"site": 1, "page": 2}, "id": "first"},
        {"name": "a", "arguments": {"site": 2}},
        {"name": "a", "arguments": {"page": 2, "site": 1}, "id": "again"},  # the same arguments, in another order
        {"name": "b", "arguments": {"site": 1, "page": 2}},  # another tool
        {"name": "a", "arguments": {"site": 1, "page": 2}, "cursor": "c1"},  # another cursor
        {"name": "a", "arguments": {"site": 2}},
    ]
    response = await run(calls, read, share_identical_reads=True)
    assert calls_made == [0, 1, 3, 4]  # one call for each distinct read, made by its first entry
    assert response["shared_calls"] == [[0, 2], [1, 5]]
    assert [item["id"] for item in response["results"]] == ["first", "1", "again", "3", "4", "5"]
    assert response["results"][2]["result"] == response["results"][0]["result"] == {"site": 1}
    assert response["rate"]["tokens"] == 4 and response["counts"]["succeeded"] == 6


async def test_shared_reads_fill_their_shares_and_the_answer_still_fits() -> None:
    response = await run([{"name": "same"}] * 25, filling("srv"), share_identical_reads=True, response_max_bytes=60_000)
    assert response["truncated"] is False and response["shared_calls"] == [list(range(25))]
    assert wire_size(response) <= 60_000 and all(item["result"] for item in response["results"])


async def test_reads_are_not_shared_when_the_setting_or_the_tool_says_no() -> None:
    host = ReaderHost(echo_reader)
    unshared = await engine.run_batch([{"name": "a"}] * 3, host, settings(share_identical_reads=False))
    assert "shared_calls" not in unshared and unshared["rate"]["tokens"] == 3

    class NotIdempotent(ReaderHost):
        async def resolve(self, call: ValidCall) -> Ready | Outcome:
            return Ready(call, ToolRef(call.name, "srv", {"readOnlyHint": True, "idempotentHint": False}))

    queue = await engine.run_batch(
        [{"name": "pop"}] * 3, NotIdempotent(echo_reader), settings(share_identical_reads=True)
    )
    assert "shared_calls" not in queue and queue["rate"]["tokens"] == 3


# -- the account's rate: one booking a batch ------------------------------------------------


class Bookings:
    """A limiter's bookings as the engine sees them: ``waits`` for every call (those past ``within`` are left
    out), and the positions given back."""

    def __init__(self, wait_of: Callable[[int], float], next_free: float = 9.0, starts_by: float = math.inf) -> None:
        self.wait_of, self.next_free, self.starts_by = wait_of, next_free, starts_by
        self.given_back: list[list[int]] = []
        self.booked = 0

    def __call__(self, count: int, within: float) -> RateBooking:
        waits = [self.wait_of(self.booked + i) for i in range(count)]
        waits = [wait for wait in waits if wait <= within]
        self.booked += len(waits)
        return RateBooking(waits, [wait + self.starts_by for wait in waits], self.next_free, self.give_back)

    def give_back(self, positions: list[int]) -> None:
        self.given_back.append(positions)


def timed_reader(started: list[tuple[int, float]], seconds: float = 0.0) -> Reader:
    async def read(call: ValidCall, max_bytes: int) -> Outcome:
        started.append((call.index, anyio.current_time()))
        await anyio.sleep(seconds)
        return Outcome("ok", TOOL, result=call.index)

    return read


async def test_each_call_starts_at_its_slot_from_one_booking() -> None:
    started: list[tuple[int, float]] = []
    bookings = Bookings(lambda position: 0.1 * position)
    host = ReaderHost(timed_reader(started), bookings)
    began = anyio.current_time()
    response = await engine.run_batch([{"name": f"t{i}"} for i in range(4)], host, settings(concurrency=4))
    assert host.reserved == [(4, pytest.approx(300, abs=1))]  # one booking, within the batch time limit
    offsets = [at - began for _, at in sorted(started)]
    assert [round(offset, 1) for offset in offsets] == [0.0, 0.1, 0.2, 0.3]
    assert response["rate"]["tokens"] == 4 and response["rate"]["waited_seconds"] == pytest.approx(0.3, abs=0.01)
    assert 8.0 < response["rate"]["next_free_seconds"] <= 9.0 and bookings.given_back == []


async def test_a_call_the_rate_cannot_start_before_the_batch_limit_is_answered_at_once() -> None:
    started: list[tuple[int, float]] = []
    bookings = Bookings(lambda position: 2.0 * position, next_free=4.0)
    host = ReaderHost(timed_reader(started), bookings)
    with anyio.fail_after(5):
        response = await engine.run_batch([{"name": f"t{i}"} for i in range(4)], host, settings(batch_timeout=3))
    assert [index for index, _ in started] == [0, 1]  # slots at 0 and 2 s; 4 and 6 s are past the 3 s limit
    late = response["results"][2]["error"]
    assert late == "not dispatched: the account's rate would let this call start in 4.0 s at the soonest, " + (
        "after the batch time limit of 3s"
    )
    assert response["results"][3]["error"] == late and response["rate"]["tokens"] == 2


async def test_a_cancelled_batch_gives_back_the_slots_it_did_not_reach() -> None:
    started: list[tuple[int, float]] = []
    bookings = Bookings(lambda position: 0.0 if position < 2 else 30.0)
    host = ReaderHost(timed_reader(started, seconds=30), bookings)
    with anyio.move_on_after(0.2):
        await engine.run_batch([{"name": f"t{i}"} for i in range(5)], host, settings(concurrency=4))
    assert [index for index, _ in started] == [0, 1]
    assert bookings.given_back == [[2, 3, 4]]  # the two started calls' tokens are spent; the rest go back


async def test_a_batch_past_its_time_limit_gives_back_the_slots_it_did_not_reach() -> None:
    bookings = Bookings(lambda position: 0.0 if position == 0 else 0.1)
    host = ReaderHost(timed_reader([], seconds=30), bookings)  # one worker, held by the first call
    response = await engine.run_batch(
        [{"name": f"t{i}"} for i in range(3)], host, settings(batch_timeout=0.2, concurrency=1)
    )
    assert [item["status"] for item in response["results"]] == ["error"] * 3
    assert bookings.given_back == [[1, 2]] and response["rate"]["tokens"] == 1


async def test_once_the_workers_fall_behind_the_booking_the_rest_is_given_back_and_booked_as_reached() -> None:
    # One worker, calls of 0.1 s, every slot at once but each good for 0.05 s only: the second call is
    # reached too late for its slot, so the slots not used go back, and each call left books its own.
    bookings = Bookings(lambda position: 0.0, starts_by=0.05)
    host = ReaderHost(timed_reader([], seconds=0.1), bookings)
    response = await engine.run_batch([{"name": f"t{i}"} for i in range(3)], host, settings(concurrency=1))
    assert response["ok"] is True and [count for count, _ in host.reserved] == [3, 1, 1]
    assert response["rate"]["tokens"] == 3 and bookings.given_back == [[1, 2]]


async def test_progress_says_when_calls_wait_for_the_account_s_rate() -> None:
    class Progress(engine.QuietObserver):
        def __init__(self) -> None:
            self.told: list[tuple[float, str]] = []

        async def progress(self, done: int, total: int, message: str) -> None:
            self.told.append((done, message))

    observer = Progress()
    host = ReaderHost(echo_reader, Bookings(lambda position: 0.15 * position))
    calls: list[Any] = [{"name": "a"}, {"name": "b"}, {"name": "c"}, 7]
    await engine.run_batch(calls, host, settings(), observer)
    assert observer.told[0] == (
        0,
        "waiting for the account's rate: 2 of 3 backend calls start later, the last in 0.3 s",
    )
    assert [done for done, _ in observer.told] == [0, 1, 2, 3, 4]  # told first, then each entry, increasing
    assert observer.told[1][1] == "3 (?): invalid_call"  # the entry answered before any call, told after the notice
    assert observer.told[-1][1] == "2 (c): ok, after 0.3 s waiting for the account's rate"


async def test_a_single_read_goes_through_the_same_stages_under_its_own_time_limit() -> None:
    read = functools.partial(engine.read_one, "a", {"x": "\ud800"}, None)
    refused = await read(ReaderHost(echo_reader), settings(), 1024)
    assert (refused.status, refused.error) == ("invalid_call", "arguments must be JSON-serializable")
    bookings = Bookings(lambda position: 5.0, next_free=5.0)
    host = ReaderHost(echo_reader, bookings)
    with anyio.fail_after(2):
        late = await engine.read_one("a", {}, None, host, settings(call_timeout=1), 1024)
    assert host.reserved == [(1, pytest.approx(1, abs=0.1))]  # nobody books past their own time limit
    assert late.error == (
        "not dispatched: the account's rate would let this call start in 5.0 s at the soonest, "
        "after the call time limit of 1s"
    )


async def test_a_slot_given_back_while_its_call_waits_for_it_is_booked_again_not_used() -> None:
    # Two workers. The first runs call 0 for 0.1 s, then reaches call 2 past its slot's deadline and gives
    # back the slots not used: call 2's and call 1's, which the second worker is still sleeping towards. When
    # it wakes, call 1 books a slot of its own: it must not start on the one given back.
    slots = {0: 0.0, 1: 0.15, 2: 0.05}
    bookings = Bookings(lambda position: slots.get(position, 0.0), starts_by=0.01)

    async def first_is_long(call: ValidCall, max_bytes: int) -> Outcome:
        await anyio.sleep(0.1 if call.index == 0 else 0)
        return Outcome("ok", TOOL, result=call.index)

    host = ReaderHost(first_is_long, bookings)
    response = await engine.run_batch([{"name": f"t{i}"} for i in range(3)], host, settings(concurrency=2))
    assert response["ok"] is True and response["rate"]["tokens"] == 3
    assert [count for count, _ in host.reserved] == [3, 1, 1] and bookings.given_back == [[1, 2]]
    # one token a call: three booked at first, two given back, two booked as their calls were reached
    assert bookings.booked - sum(len(positions) for positions in bookings.given_back) == 3
