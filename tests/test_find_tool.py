"""find_tool's bounds: what one call may ask, the clear error past each bound, and a search whose cost they bound.

Over a real MCP session on both SDK lines, and against a real ``serve`` process over streamable HTTP,
where one call with a 1.1 MB query (200,000 words) used to hold the event loop, and so every other
client, for seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from backends.tickets import tickets_server
from hypothesis import given, settings
from hypothesis import strategies as st
from test_wire_hostile import demo_over_http, post, request

from centralmcp_batch import _compat
from centralmcp_batch.router import Router
from centralmcp_batch.router import catalog as catalog_module
from centralmcp_batch.router.catalog import MAX_QUERY_CHARS, MAX_QUERY_WORDS, MAX_TOP_K, MAX_WORD_CHARS

MARK = "qx9MARK"
HUGE_QUERY = " ".join(f"w{i}" for i in range(200_000))  # 1.1 MB, the issue's


async def find(router: Router, arguments: dict[str, Any]) -> _compat.Answer:
    async with _compat.connect(router.server) as client:
        return await client.call_tool("find_tool", arguments)


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"query": MARK * 200}, f"query must be at most {MAX_QUERY_CHARS:,} characters"),
    ({"query": HUGE_QUERY}, f"query must be at most {MAX_QUERY_CHARS:,} characters"),
    (
        {"query": " ".join(f"{MARK}{i}" for i in range(MAX_QUERY_WORDS + 1))},
        f"at most {MAX_QUERY_WORDS} distinct words",
    ),
    ({"query": f"{MARK}\ud800"}, "query must be valid Unicode text"),
    ({"query": ["ticket"]}, "query must be a string"),
    ({}, "query must be a string"),
    ({"query": "ticket", "top_k": 0}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "top_k": MAX_TOP_K + 1}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "top_k": 10**400}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "top_k": True}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "top_k": 2.5}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "top_k": MARK}, f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    ({"query": "ticket", "server": MARK * 100}, "server must be a server name of at most 200 characters, or null"),
    ({"query": "ticket", "server": {MARK: 1}}, "server must be a server name of at most 200 characters, or null"),
    ({"query": "ticket", "capability": MARK}, "capability must be one of read, diagnostic, write, destructive"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("arguments", "error"), REFUSED)
async def test_each_bound_is_refused_with_an_error_that_states_it_and_never_the_value(
    arguments: dict[str, Any], error: str
) -> None:
    answer = await find(Router({"tickets": tickets_server()}), arguments)
    assert answer.is_error and error in answer.text, answer.text
    assert MARK not in answer.text and "w199999" not in answer.text


@pytest.mark.anyio
async def test_within_the_bounds_it_finds_as_before() -> None:
    router = Router({"tickets": tickets_server()})
    plain = (await find(router, {"query": "ticket", "top_k": MAX_TOP_K})).structured["results"]
    assert len(plain) > 3
    longest = " ".join(["ticket"] * 200)[:MAX_QUERY_CHARS]  # many words, one distinct
    assert (await find(router, {"query": longest, "top_k": MAX_TOP_K})).structured["results"] == plain
    assert (await find(router, {"query": "ticket", "top_k": 3.0})).structured["results"] == plain[:3]
    reads = await find(router, {"query": "ticket", "capability": "read", "server": "tickets"})
    assert {hit["capability"] for hit in reads.structured["results"]} == {"read"}


@pytest.mark.anyio
async def test_the_published_schema_states_the_bounds() -> None:
    async with _compat.connect(Router({"tickets": tickets_server()}).server) as client:
        tool = next(tool for tool in await client.list_tools() if tool.name == "find_tool")
    properties = tool.input_schema["properties"]
    assert properties["query"]["maxLength"] == MAX_QUERY_CHARS and tool.input_schema["required"] == ["query"]
    assert (properties["top_k"]["minimum"], properties["top_k"]["maximum"]) == (1, MAX_TOP_K)


alnum = st.text(alphabet="abcxyz019", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None, database=None)
@given(runs=st.lists(alnum, max_size=30), breaks=st.lists(st.sampled_from(" _-./é:"), min_size=30, max_size=30))
def test_the_searched_text_finds_a_word_exactly_where_the_text_does(runs: list[str], breaks: list[str]) -> None:
    # A query word is letters and digits only: it is found in a text exactly where it is found in the text's
    # distinct runs of letters and digits (here none longer than MAX_WORD_CHARS), which is what the search reads.
    text = "".join(run + brk for run, brk in zip(runs, breaks, strict=False)).upper()
    searched = catalog_module.searched(text)
    for run in runs:
        for word in {run, run[1:], run[:-1], run + "a"} - {""}:
            assert (word in searched) == (word in text.lower()), (word, text)


def test_one_searched_word_is_cut_to_the_longest_query_word() -> None:
    assert catalog_module.searched("A" * 1_000 + " b b b") == "a" * MAX_WORD_CHARS + " b"
    assert catalog_module.query_words("x" * (MAX_WORD_CHARS + 1) + " ticket ticket") == {"ticket": 2}


@pytest.fixture
def http_router() -> Iterator[int]:
    with demo_over_http() as port:
        yield port


def test_a_huge_query_is_refused_at_once_and_other_clients_are_served_meanwhile(http_router: int) -> None:
    huge = request(1, "find_tool", json.dumps({"query": HUGE_QUERY}))
    refusals: list[dict[str, Any]] = []

    def hostile() -> None:
        for _ in range(3):
            refusals.append(post(http_router, huge))

    floods = [threading.Thread(target=hostile) for _ in range(2)]
    for flood in floods:
        flood.start()
    waits = []
    try:
        while any(flood.is_alive() for flood in floods) or len(waits) < 5:
            started = time.perf_counter()
            answer = post(http_router, request(2, "find_tool", '{"query":"device health"}'))
            waits.append(time.perf_counter() - started)
            assert answer["result"]["structuredContent"]["count"] > 0
    finally:
        for flood in floods:
            flood.join(timeout=60)
    assert len(refusals) == 6
    for refusal in refusals:
        assert refusal["result"]["isError"] is True
        assert f"query must be at most {MAX_QUERY_CHARS:,} characters" in refusal["result"]["content"][0]["text"]
    # Each used to take seconds while a huge query was searched; a wide margin for a loaded machine.
    assert max(waits) < 3.0, waits
