"""The response budget holds for the answer as it is written, on both SDK lines.

Both SDK lines write a tool's answer with pydantic, which writes some floats longer than Python's
``json`` (``1e-05`` as ``0.00001``): with a 100,000-byte budget the structured content once came to
132,032 bytes. The budget is now measured with the same encoder. Checked on what a client receives
over a real session (in memory, many drawn batches), and on the bytes a real ``serve`` process writes
to stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pydantic_core
import pytest
from backends.values import values_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from centralmcp_batch import _compat, budget
from centralmcp_batch.router import Router

HERE = Path(__file__).resolve().parent
BUDGET_ENV = "CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES"
# Floats whose two encodings differ (pydantic writes the first longer, the others shorter), and others.
ODD_FLOATS = [1e-05, 1.2345678901234567e-05, 3e-06, 1e-07, 2.5e-08, 9.87e-09, 1e16, 1e-10, 0.1, -0.0]
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)  # escapes, controls, é, emoji
leaves = st.one_of(
    st.sampled_from(ODD_FLOATS), st.floats(allow_nan=False, allow_infinity=False), st.integers(), TEXT, st.booleans()
)
rows = st.lists(st.one_of(leaves, st.dictionaries(TEXT, leaves, max_size=3), st.lists(leaves, max_size=3)), max_size=8)
entries = st.lists(
    st.tuples(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12), rows, st.integers(1, 400)),
    min_size=1,
    max_size=12,
    unique_by=lambda entry: entry[0],
)


def within(answer: _compat.Answer, limit: int) -> int:
    """The structured content's size as the SDKs write it, checked against ``limit`` with the text content."""
    written = pydantic_core.to_json(answer.structured)  # what model_dump_json writes of it in the message
    assert len(written) <= limit, (len(written), limit)
    same = answer.text == written.decode()
    assert same, "the text content is not the structured content's bytes as written"
    return len(written)


@settings(
    max_examples=int(os.environ.get("CENTRALMCP_BATCH_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=entries, limit=st.integers(1_024, 60_000))
def test_the_answer_received_over_a_session_is_within_the_budget(
    drawn: list[tuple[str, list[Any], int]], limit: int
) -> None:
    calls = [{"id": id_, "name": "values", "arguments": {"rows": rows_, "times": times}} for id_, rows_, times in drawn]
    os.environ[BUDGET_ENV] = str(limit)
    try:
        answer = anyio.run(batch, Router({"values": values_server()}), calls)
    finally:
        del os.environ[BUDGET_ENV]
    assert not answer.is_error, answer.text
    within(answer, limit)


async def batch(router: Router, calls: list[dict[str, Any]]) -> _compat.Answer:
    async with _compat.connect(router.server) as client:
        return await client.call_tool("invoke_read_tool_batch", {"calls": calls})


def test_the_issues_floats_fill_the_budget_and_no_more(monkeypatch: pytest.MonkeyPatch) -> None:
    # The issue's case: results of 1e-05 floats, which json writes in 5 bytes and pydantic in 7.
    monkeypatch.setenv(BUDGET_ENV, "100000")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    calls = [{"name": "values", "arguments": {"rows": [[1e-05] * 100], "times": 200}} for _ in range(10)]
    answer = anyio.run(batch, Router({"values": values_server()}), calls)
    size = within(answer, 100_000)
    assert size > 90_000 and answer.structured["truncated"] is False  # filled, not shrunk away
    assert len(json.dumps(answer.structured, separators=(",", ":")).encode()) < size  # json's measure is short


def stdio_answer(env: dict[str, str], arguments: dict[str, Any], config: Path) -> str:
    """The line a ``serve`` process over stdio writes in answer to one batch, as written."""
    config.write_text('[backends.values]\nmodule = "tests.backends.values:values_server"\n')
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config)]
    process = subprocess.Popen(
        command,
        env=env,
        cwd=str(HERE.parent),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    )
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    try:
        hello = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}}
        lines = [
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "invoke_read_tool_batch", "arguments": arguments},
            },
        ]
        process.stdin.write("".join(json.dumps(line) + "\n" for line in lines))  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        for line in process.stdout:  # type: ignore[union-attr]
            if json.loads(line).get("id") == 1:
                return line
        raise AssertionError("no answer")
    finally:
        watchdog.cancel()
        process.kill()
        process.wait(timeout=10)


@pytest.mark.parametrize("limit", [5_000, 100_000])
def test_the_bytes_a_serve_process_writes_are_within_the_budget(limit: int, tmp_path: Path) -> None:
    env = {
        **os.environ,
        BUDGET_ENV: str(limit),
        "CENTRALMCP_ROUTER_RATE_PER_SECOND": "1000",
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    tricky = [1e-05, 3e-06, 'é\u2028"\\\n\x00\x7f 😀', {"k\t": -0.0}, 1e16]
    calls = [{"id": f'ü{n}"', "name": "values", "arguments": {"rows": tricky, "times": 60 * (n + 1)}} for n in range(8)]
    line = stdio_answer(env, {"calls": calls}, tmp_path / "router.toml")
    start = line.index('"structuredContent":') + len('"structuredContent":')
    structured, end = json.JSONDecoder().raw_decode(line, start)
    written = line[start:end].encode()  # the structured content's bytes, as the transport wrote them
    assert len(written) <= limit, (len(written), limit)
    text = json.loads(line)["result"]["content"][0]["text"]
    same = text.encode() == written
    assert same, "the text content is not the structured content's bytes as written"
    assert structured["counts"]["total"] == 8 and budget.size(structured) == len(written)
