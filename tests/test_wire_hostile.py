"""Hostile JSON-RPC at the wire: raw lines and POSTs to a real ``serve --demo`` process, on both SDK lines.

What the SDK's parser refuses is the SDK's answer (or, on stdio, its silence); the router must
survive it, keep serving, and answer what gets through by the batch contract.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import pytest
from test_cli import free_port, wait_for_port

from centralmcp_batch.router import demo

ENV = {**os.environ, demo.LATENCY_ENV: "0", "CENTRALMCP_ROUTER_RATE_STORE": "memory"}
ENV["CENTRALMCP_ROUTER_RATE_PER_SECOND"] = "1000"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
BATCH, SINGLE = "invoke_read_tool_batch", "invoke_read_tool"


def request(request_id: int, tool: str, arguments_json: str) -> str:
    """A tools/call written by hand, so it can hold what no JSON library writes."""
    params = f'{{"name":"{tool}","arguments":{arguments_json}}}'
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{params}}}'


def site_id_of(value_json: str) -> str:
    """Batch arguments whose one entry's ``site_id`` is ``value_json``, written as given."""
    return '{"calls":[{"name":"get_site","arguments":{"site_id":' + value_json + "}}]}"


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@contextmanager
def demo_over_http() -> Iterator[int]:
    """A real ``serve --demo`` process over streamable HTTP; its port."""
    port = free_port()
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--demo", "--transport", "http", "--port", str(port)]
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        anyio.run(wait_for_port, port, process)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    with demo_over_http() as port:
        yield port


def post(port: int, body: str) -> dict[str, Any]:
    """The JSON-RPC answer to one raw POST, whether sent as JSON or as a server-sent event."""
    response = httpx.post(f"http://127.0.0.1:{port}/mcp", content=body.encode(), headers=HEADERS, timeout=10)
    events = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    answer: dict[str, Any] = json.loads(events[-1] if events else response.text)
    return answer


def test_a_lone_surrogate_in_a_single_reads_name_is_answered_by_the_router(http_port: int) -> None:
    # SDK 1.x parses an HTTP body with json.loads, which lets a lone surrogate through; its answer
    # could not be written ("Error serializing to JSON"). SDK 2.x refuses the body as a parse error.
    for body in (request(1, SINGLE, '{"name":"get_\\ud800site"}'), request(2, SINGLE, '{"name":"\\udfff"}')):
        answer = post(http_port, body)
        if "error" in answer:
            assert answer["error"]["code"] == -32700
            continue
        assert not answer["result"].get("isError"), answer
        structured = answer["result"]["structuredContent"]
        assert structured["status"] == "unknown_tool"
        assert "not valid Unicode" in structured["error"]


def test_what_the_parser_lets_through_is_answered_by_the_contract(http_port: int) -> None:
    cases = {
        '{"calls":[{"name":"get_\\ud800site","id":"a"}]}': "invalid_call",
        site_id_of(nested(150)): "invalid_call",
        '{"calls":[{"name":"list_sites","arguments":[1]}]}': "invalid_call",
        '{"calls":[{"name":"list_sites\\n\\u0000"}]}': "unknown_tool",
    }
    for arguments, status in cases.items():
        answer = post(http_port, request(3, BATCH, arguments))
        if "error" in answer:  # SDK 2.x refuses the lone surrogate before the tool
            assert answer["error"]["code"] == -32700
            continue
        assert [item["status"] for item in answer["result"]["structuredContent"]["results"]] == [status]
    rejected = post(http_port, request(4, BATCH, json.dumps({"calls": [{"name": "list_sites"}] * 10_000})))
    assert "25-entry bound" in rejected["result"]["structuredContent"]["error"]


def test_refused_requests_leave_the_router_serving(http_port: int) -> None:
    for arguments in (f'{{"calls":{nested(100_000)}}}', site_id_of("1" + "0" * 5000)):
        answer = post(http_port, request(5, BATCH, arguments))
        assert answer["error"]["code"] in (-32700, -32603)  # the SDK's parse error (2.x) or its failed POST (1.x)
    valid = post(http_port, request(6, BATCH, '{"calls":[{"name":"list_sites"}]}'))
    assert valid["result"]["structuredContent"]["ok"] is True


def test_stdio_survives_unparseable_lines_and_writes_only_json_rpc() -> None:
    lines = [
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26",'
        '"capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}',
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        request(1, BATCH, f'{{"calls":{nested(100_000)}}}'),
        request(2, BATCH, site_id_of("1" + "0" * 5000)),
        request(3, BATCH, '{"calls":[{"name":"get_\\ud800site"}]}'),
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12345}}',
        request(4, BATCH, '{"calls":[{"name":"list_sites"}]}'),
    ]
    answers = stdio_answers(lines, until_id=4)
    assert answers[-1]["result"]["structuredContent"]["ok"] is True
    assert all(answer.get("jsonrpc") == "2.0" for answer in answers)


def stdio_answers(lines: list[str], until_id: int) -> list[dict[str, Any]]:
    """Every stdout line, each parsed as JSON, up to the answer to ``until_id`` (stdin stays open till then)."""
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--demo"]
    process = subprocess.Popen(
        command, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    watchdog = threading.Timer(30, process.kill)  # a router that never answers fails the test, not the run
    watchdog.start()
    try:
        process.stdin.write("\n".join(lines) + "\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        answers: list[dict[str, Any]] = []
        for line in process.stdout:  # type: ignore[union-attr]
            answers.append(json.loads(line))  # anything but JSON-RPC on stdout fails here
            if answers[-1].get("id") == until_id:
                return answers
        raise AssertionError(f"no answer to request {until_id}: {answers}")
    finally:
        watchdog.cancel()
        process.kill()
        process.wait(timeout=10)


def test_a_lone_surrogate_in_a_single_reads_arguments_is_refused_before_any_backend(http_port: int) -> None:
    answer = post(http_port, request(7, SINGLE, '{"name":"list_sites","arguments":{"site":"a\\ud800"}}'))
    if "error" in answer:  # SDK 2.x refuses the body as a parse error
        assert answer["error"]["code"] == -32700
    else:  # SDK 1.x lets it through to the tool: refused as a batch entry is
        structured = answer["result"]["structuredContent"]
        assert structured["status"] == "invalid_call" and structured["error"] == "arguments must be JSON-serializable"
    valid = post(http_port, request(8, SINGLE, '{"name":"list_sites"}'))
    assert "error" not in valid and not valid["result"].get("isError"), valid
