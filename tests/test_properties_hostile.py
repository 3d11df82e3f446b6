"""Randomized batches against a hostile host, judged entry by entry by an independent oracle.

Default run: 60 engine-level examples and 15 through a real in-memory MCP session. The thorough
run sets ``CENTRALMCP_BATCH_PROPERTY_EXAMPLES`` (engine-level examples; the MCP leg runs a fifth
of them, at least 15)::

    CENTRALMCP_BATCH_PROPERTY_EXAMPLES=500 \\
        python -m pytest -q tests/test_properties_hostile.py --hypothesis-show-statistics

Every strategy knows whether the part it drew is valid, so the expected status, id and
failure lists of each batch are computed without the engine and compared exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import jsonschema
import pytest
from backends.tickets import tickets_server
from hostile_hosts import REFUSED_BEHAVIOURS, ROUTER_TOOL_NAMES, VALID_CURSOR, HostileHost, read_behaviours
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from centralmcp_batch import _compat, batch_tool, budget, hosting, models
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.host import HostHooks
from centralmcp_batch.router import BackendOptions, Router

EXAMPLES = int(os.environ.get("CENTRALMCP_BATCH_PROPERTY_EXAMPLES", "60"))
MCP_EXAMPLES = max(15, EXAMPLES // 5)
MARK = "zq7SECRET"  # put into every argument value and cursor: it must never come back
ABSENT = object()  # a key left out of the entry
READ_OUTCOMES = {
    "succeed": "ok",
    "explode": "error",
    "hang": "error",
    "error_dict": "error",
    "kept_blocked": "blocked",
    "huge": "ok",
    "not_plain_json": "ok",
    "not_json": "error",
}
ITEM_HEAD = ["index", "id", "tool", "server", "status"]
CALL_TIMEOUT = "0.02"

# No example database: the runs leave nothing in the checkout; a failure prints its reproduction blob.
PROPERTY_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


@dataclass(frozen=True)
class Drawn:
    """One entry as sent, with what the oracle knows about it."""

    raw: Any
    valid: bool  # passes per-entry validation
    name: str | None
    cursor: Any


# -- strategies -----------------------------------------------------------------------

marked_text = st.text(max_size=12).map(lambda tail: MARK + tail)
json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), marked_text
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


def encoded_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(child) for child in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(child) for child in value), default=0)
    return 0


def nested(levels: int) -> dict[str, Any]:
    value: Any = MARK + "deep"
    for _ in range(levels):
        value = {"k": value}
    return value


def _judged(arguments: dict[str, Any]) -> tuple[Any, bool]:
    return arguments, encoded_size(arguments) <= models.MAX_ARGUMENT_BYTES and depth(
        arguments
    ) <= models.MAX_ARGUMENT_DEPTH


ARGUMENT_KINDS = ["absent", "none", "json", "json", "huge", "deep", "unencodable", "wrong_type"]


@st.composite
def arguments(draw: st.DrawFn, wire: bool) -> tuple[Any, bool]:
    """(value, valid); ``wire`` leaves out what JSON cannot carry to a server."""
    kind = draw(st.sampled_from([kind for kind in ARGUMENT_KINDS if not (wire and kind == "unencodable")]))
    if kind == "absent":
        return ABSENT, True
    if kind == "none":
        return None, True
    if kind == "json":
        return _judged(draw(st.dictionaries(st.text(max_size=6), json_value, max_size=4)))
    if kind == "huge":
        return _judged({"blob": MARK + "a" * draw(st.integers(19_900, 20_100))})
    if kind == "deep":
        return _judged(nested(draw(st.integers(6, 12))))
    if kind == "unencodable":
        bad = draw(st.sampled_from([float("nan"), float("inf"), {1, 2}, b"bytes", object()]))
        return {"q": MARK, "bad": bad}, False
    return draw(st.one_of(st.lists(marked_text, max_size=2), marked_text, st.integers())), False


cursors = st.one_of(
    st.just(ABSENT),
    st.none(),
    st.just(VALID_CURSOR),
    st.just(""),
    marked_text,
    st.just(MARK * 500),
    st.integers(),
    st.lists(marked_text, max_size=2),
    st.dictionaries(st.just("c"), marked_text, max_size=1),
)
KNOWN_NAMES = [*read_behaviours(), *REFUSED_BEHAVIOURS, *ROUTER_TOOL_NAMES, "no_such_tool"]
names = st.one_of(
    st.sampled_from(KNOWN_NAMES),
    st.sampled_from(KNOWN_NAMES),
    st.text(max_size=8),
    st.just(ABSENT),
    st.none(),
    st.integers(),
    st.just("n" * 201),
    st.lists(st.text(max_size=3), max_size=2),
)


def _name_valid(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= models.MAX_NAME_CHARS


@st.composite
def entries(draw: st.DrawFn, wire: bool) -> Drawn:
    if draw(st.integers(0, 19)) == 0:
        return Drawn(
            draw(st.one_of(st.integers(), marked_text, st.lists(st.integers(), max_size=2), st.none())),
            False,
            None,
            None,
        )
    name, cursor = draw(names), draw(cursors)
    args, args_valid = draw(arguments(wire))
    raw = {
        key: value for key, value in (("name", name), ("arguments", args), ("cursor", cursor)) if value is not ABSENT
    }
    cursor_valid = cursor is ABSENT or cursor is None or isinstance(cursor, str)
    valid = _name_valid(name) and args_valid and cursor_valid
    return Drawn(raw, valid, name if isinstance(name, str) else None, None if cursor is ABSENT else cursor)


ID_KINDS = ["absent", "absent", "none", "unique", "unique", "random", "empty", "max", "too_long", "int", "list"]


def give_id(entry: Drawn, position: int, kind: str, text: str) -> Drawn:
    """The id is assigned per position so that most batches have unique ids."""
    if not isinstance(entry.raw, dict) or kind == "absent":
        return entry
    value: Any = {
        "none": None,
        "unique": f"{text}#{position}",
        "random": text,
        "empty": "",
        "max": f"{position:03d}" + "i" * 97,
        "too_long": "i" * 101,
        "int": position,
        "list": [position],
    }[kind]
    valid = entry.valid and (value is None or (isinstance(value, str) and 0 < len(value) <= models.MAX_ID_CHARS))
    return Drawn({**entry.raw, "id": value}, valid, entry.name, entry.cursor)


@st.composite
def batches(draw: st.DrawFn, wire: bool = False) -> Any:
    """Mostly 1..25 entries; sometimes a batch the whole-batch checks reject."""
    shape = draw(st.integers(0, 29))
    if shape == 0:
        return draw(
            st.one_of(
                st.none(), marked_text, st.integers(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
            )
        )
    if shape == 1:
        return []
    if shape == 2:
        return [Drawn({"name": "succeed"}, True, "succeed", None)] * draw(st.integers(26, 30))
    drawn = draw(st.lists(entries(wire), min_size=1, max_size=models.MAX_CALLS))
    kinds = draw(st.lists(st.sampled_from(ID_KINDS), min_size=len(drawn), max_size=len(drawn)))
    texts = draw(st.lists(st.text(min_size=1, max_size=6), min_size=len(drawn), max_size=len(drawn)))
    return [
        give_id(entry, i, kind, text) for i, (entry, kind, text) in enumerate(zip(drawn, kinds, texts, strict=True))
    ]


budgets = st.one_of(st.integers(1_024, 4_096), st.integers(1_024, 400_000))


# -- the oracle -----------------------------------------------------------------------


def expected_status(entry: Drawn) -> str:
    if not entry.valid:
        return "invalid_call"
    if entry.name == batch_tool.TOOL_NAME or entry.name in REFUSED_BEHAVIOURS:
        return "blocked"
    if entry.name not in READ_OUTCOMES:
        return "unknown_tool"
    if entry.cursor is not None and entry.cursor != VALID_CURSOR:
        return "invalid_cursor"
    return READ_OUTCOMES[entry.name]


def reaches_backend(entry: Drawn) -> bool:
    return entry.valid and entry.name in READ_OUTCOMES and entry.cursor in (None, VALID_CURSOR)


def expected_id(index: int, entry: Drawn) -> str | None:
    if not isinstance(entry.raw, dict):
        return str(index)
    value = entry.raw.get("id")
    if value is None:
        return str(index)
    return value if isinstance(value, str) and 0 < len(value) <= models.MAX_ID_CHARS else None


def expected_rejection(calls: Any) -> str | None:
    if not isinstance(calls, list):
        return "calls must be a list"
    if not calls:
        return "calls must contain at least one entry"
    if len(calls) > models.MAX_CALLS:
        return "exceeding the 25-entry bound"
    ids = [expected_id(i, entry) for i, entry in enumerate(calls)]
    known = [call_id for call_id in ids if call_id is not None]
    return "duplicate call id" if len(known) != len(set(known)) else None


# -- the invariants -------------------------------------------------------------------


def shape(response: dict[str, Any]) -> str:
    """For ``--hypothesis-show-statistics``: how far the response was shrunk."""
    if "results" not in response:
        return "rejected"
    if response.get("omitted"):
        return "skeleton with omitted items"
    return "skeleton" if response.get("skeleton") else "truncated" if response["truncated"] else "whole"


def check_response(calls: Any, response: dict[str, Any], host: HostileHost, limit: int) -> None:
    encoded = budget.encode(response).decode()
    assert MARK not in encoded, "a value of the arguments or a cursor was echoed"
    assert len(encoded.encode()) <= limit
    assert host.running == 0, "a backend call is still running after the batch answered"
    event(shape(response))
    rejection = expected_rejection(calls)
    if rejection is not None:
        assert response["ok"] is False and set(response) == {"ok", "error"} and rejection in response["error"]
        assert host.dispatched == []
        return
    check_items(calls, response)
    check_summary(calls, response)
    check_dispatch(calls, response, host)


def check_items(calls: list[Drawn], response: dict[str, Any]) -> None:
    items = response["results"]
    indexes = [item["index"] for item in items]
    assert indexes == sorted(set(indexes)), "results out of call order"
    assert len(items) + response.get("omitted", 0) == len(calls)
    if response.get("omitted"):
        assert response["skeleton"] is True
    for item in items:
        entry = calls[item["index"]]
        assert item["status"] == expected_status(entry), (entry.raw, item)
        assert item["id"] == expected_id(item["index"], entry)
        if response.get("skeleton"):
            assert list(item) == ["index", "id", "status"]
            continue
        assert list(item)[:5] == ITEM_HEAD
        assert list(item)[5] == ("result" if item["status"] == "ok" else "error")
        assert item["status"] == "ok" or (isinstance(item["error"], str) and 0 < len(item["error"]) <= 500)


def check_summary(calls: list[Drawn], response: dict[str, Any]) -> None:
    failed = [i for i, entry in enumerate(calls) if expected_status(entry) != "ok"]
    assert response["counts"] == {"total": len(calls), "succeeded": len(calls) - len(failed), "failed": len(failed)}
    assert response["failed_indexes"] == failed
    failed_ids = [expected_id(i, calls[i]) for i in failed]
    if response.get("failed_ids_truncated"):
        assert response["failed_ids"] == failed_ids[: len(response["failed_ids"])]
    else:
        assert response["failed_ids"] == failed_ids
    assert response["ok"] is (not failed)
    shrunk = any(key in item for item in response["results"] for key in ("result_truncated", "error_truncated"))
    assert response["truncated"] is (shrunk or bool(response.get("skeleton")))


def check_dispatch(calls: list[Drawn], response: dict[str, Any], host: HostileHost) -> None:
    assert set(host.dispatched) <= set(READ_OUTCOMES), (
        "a write, destructive, unannotated or unknown tool was dispatched"
    )
    groups = sharing_groups(calls)
    assert response.get("shared_calls", []) == [group for group in groups if len(group) > 1]
    called = [calls[group[0]] for group in groups]  # identical reads share one backend call
    assert sorted(host.dispatched) == sorted(entry.name for entry in called)
    assert host.cancelled == sum(1 for entry in called if entry.name == "hang")


def sharing_groups(calls: list[Drawn]) -> list[list[int]]:
    """The entries that reach the backend, grouped by what makes reads identical: the tool, the arguments as
    canonical JSON and the cursor; in call order, by each group's first entry."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, entry in enumerate(calls):
        if reaches_backend(entry):
            arguments = json.dumps(entry.raw.get("arguments") or {}, sort_keys=True, separators=(",", ":"))
            groups.setdefault((entry.name, arguments, entry.cursor), []).append(index)
    return list(groups.values())


# -- running --------------------------------------------------------------------------


@contextmanager
def batch_env(limit: int, concurrency: int) -> Iterator[None]:
    """Settings are read per call from the environment; set them for one example and restore."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES", str(limit))
        patch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", str(concurrency))
        patch.setenv("CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS", CALL_TIMEOUT)
        yield


def raw_calls(calls: Any) -> Any:
    return [entry.raw for entry in calls] if isinstance(calls, list) else calls


# One entry of each read behaviour, in every run: random draws over MCP are few, and a behaviour
# whose expected status went stale (a NaN answer, now ok) was drawn in only some runs.
EVERY_READ = [Drawn({"name": name}, True, name, None) for name in READ_OUTCOMES]
# Identical reads share one call; the same tool with other arguments does not.
TWICE = [
    Drawn({"name": name, "arguments": arguments}, True, name, None)
    for name in ("succeed", "hang")
    for arguments in ({}, {}, {"n": MARK})
]


@settings(PROPERTY_SETTINGS, max_examples=EXAMPLES)
@given(calls=batches(), limit=budgets, concurrency=st.integers(4, 25))
@example(calls=EVERY_READ, limit=300_000, concurrency=4)
@example(calls=TWICE, limit=300_000, concurrency=4)
def test_engine_invariants_for_random_batches(calls: Any, limit: int, concurrency: int) -> None:
    host = HostileHost()
    hooks = HostHooks(hosting.plugin_manager(host))
    with batch_env(limit, concurrency):
        response = anyio.run(batch_tool.run, hooks, raw_calls(calls))
    check_response(calls, response, host, limit)


async def _over_mcp(server: Any, calls: Any) -> tuple[_compat.Answer, dict[str, Any] | None]:
    async with _compat.connect(server) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
        answer = await client.call_tool(batch_tool.TOOL_NAME, {"calls": calls})
    return answer, tools[batch_tool.TOOL_NAME].output_schema


@settings(PROPERTY_SETTINGS, max_examples=MCP_EXAMPLES)
@given(calls=batches(wire=True), limit=budgets, concurrency=st.integers(4, 25))
@example(calls=EVERY_READ, limit=300_000, concurrency=4)
def test_mcp_session_invariants_and_output_schema(calls: Any, limit: int, concurrency: int) -> None:
    host = HostileHost()
    server = _compat.new_server("centralmcp-properties")
    hosting.install(server, host)
    with batch_env(limit, concurrency):
        answer, schema = anyio.run(_over_mcp, server, raw_calls(calls))
    assert not answer.is_error, answer.text
    assert schema is not None
    jsonschema.validate(answer.structured, schema)
    assert json.loads(answer.text) == answer.structured and MARK not in answer.text
    check_response(calls, answer.structured, host, limit)


# -- the reference router with an untrusted backend -----------------------------------


class _DispatchSpy:
    """Registered beside the router's hooks: records every tool that reaches dispatch."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []

    @hookimpl(wrapper=True)
    def centralmcp_dispatch_read(self, tool: Any):  # type: ignore[no-untyped-def]
        self.dispatched.append(tool.name)
        return (yield)


UNTRUSTED_READS = frozenset({"list_tickets", "process_id", "ping_ticketing"})  # ping: a diagnostic the operator allowed
TICKET_TOOLS = [
    "list_tickets",
    "get_ticket",
    "slow_ticket",
    "process_id",
    "close_ticket",
    "purge_tickets",
    "ping_ticketing",
    "unannotated_ticket_count",
]


def untrusted_router() -> tuple[Router, _DispatchSpy]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "100000")  # read once, when the router is built
        router = Router(
            {"tickets": tickets_server()},
            options={"tickets": BackendOptions(trust_annotations=False, read_allow=UNTRUSTED_READS)},
        )
    spy = _DispatchSpy()
    router.plugin_manager.register(spy)
    return router, spy


router_entries = st.fixed_dictionaries(
    {"name": st.sampled_from([*TICKET_TOOLS, *ROUTER_TOOL_NAMES])},
    optional={"cursor": st.one_of(st.none(), marked_text, st.just(""))},
)


@settings(PROPERTY_SETTINGS, max_examples=MCP_EXAMPLES)
@given(calls=st.lists(router_entries, min_size=1, max_size=models.MAX_CALLS))
def test_an_untrusted_backend_only_reads_its_allow_list(calls: list[dict[str, Any]]) -> None:
    router, spy = untrusted_router()
    response = anyio.run(batch_tool.run, router.hooks, calls)
    assert MARK not in budget.encode(response).decode()
    assert set(spy.dispatched) <= UNTRUSTED_READS
    for entry, item in zip(calls, response["results"], strict=True):
        allowed = entry["name"] in UNTRUSTED_READS
        if not allowed:
            assert item["status"] in ("blocked", "unknown_tool")
        elif entry.get("cursor") is not None:
            assert item["status"] == "invalid_cursor"
        else:
            assert item["status"] == "ok"
    # identical reads share one call: one dispatch for each distinct read the allow-list lets through
    assert sorted(spy.dispatched) == sorted(
        {e["name"] for e in calls if e["name"] in UNTRUSTED_READS and e.get("cursor") is None}
    )
