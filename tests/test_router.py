"""The reference router: in process, and end to end over stdio and streamable HTTP subprocesses."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from backends.tickets import tickets_server

from centralmcp_batch import HostContractError, _compat
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.router import BackendOptions, HttpBackend, Router, StdioBackend, demo
from centralmcp_batch.router.bounding import Bounds, bound
from centralmcp_batch.router.limiter import TokenBucket
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent
TICKETS_SCRIPT = str(HERE / "backends" / "tickets.py")
NOT_READ_ONLY = (
    "Tool '{}' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
)


def subprocess_env(**extra: str) -> dict[str, str]:
    root = str(HERE.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]), **extra}


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> Router:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    return Router({"tickets": tickets_server()})


async def batch(server: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await call(server, "invoke_read_tool_batch", {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


async def test_the_router_publishes_its_tools_and_the_plugins(router: Router) -> None:
    async with _compat.connect(router.server) as client:
        names = {tool.name for tool in await client.list_tools()}
    assert names == {"find_tool", "invoke_read_tool", "invoke_read_tool_batch"}
    assert any(
        name == "batch"
        for name, _ in [(router.plugin_manager.get_name(p), p) for p in router.plugin_manager.get_plugins()]
    )


async def test_find_tool_classifies_like_centralmcp(router: Router) -> None:
    answer = await call(router.server, "find_tool", {"query": "ticket", "top_k": 20})
    hits = {hit["name"]: hit for hit in answer.structured["results"]}
    assert (
        hits["list_tickets"]["capability"] == "read"
        and hits["list_tickets"]["recommended_dispatcher"] == "invoke_read_tool"
    )
    assert (
        hits["close_ticket"]["capability"] == "write"
        and hits["close_ticket"]["recommended_dispatcher"] == "invoke_tool"
    )
    assert hits["purge_tickets"]["capability"] == "destructive"
    assert hits["unannotated_ticket_count"]["capability"] == "write"
    assert hits["get_ticket"]["params"] == ["ticket_id"] and hits["get_ticket"]["server"] == "tickets"
    only_reads = await call(router.server, "find_tool", {"query": "ticket", "capability": "read"})
    assert {hit["capability"] for hit in only_reads.structured["results"]} == {"read"}


def nan_server() -> Any:
    """An in-process backend whose reads return NaN and the infinities: as a float, in a dict, in a list."""
    server = _compat.new_server("odd-floats")
    read = {"readOnlyHint": True}

    def ratio() -> float:
        return math.nan

    def health() -> dict[str, Any]:
        return {"cpu": math.inf, "memory": -math.inf, "temperatures": [21.5, math.nan]}

    def samples() -> list[float]:
        return [1.0, math.nan, -math.inf]

    for fn in (ratio, health, samples):
        _compat.add_tool(server, fn, name=fn.__name__, description=fn.__name__, annotations=read)
    return server


async def test_nan_and_infinity_from_an_in_process_backend_are_null(monkeypatch: pytest.MonkeyPatch) -> None:
    # As the SDKs write them in any answer; a batch entry or a single read that returns one is ok, not an error.
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    router = Router({"odd-floats": nan_server()})
    expected = {
        "ratio": {"result": None},
        "health": {"cpu": None, "memory": None, "temperatures": [21.5, None]},
        "samples": {"result": [1.0, None, None]},
    }
    answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": name} for name in expected]})
    assert json.loads(answer.text, parse_constant=lambda constant: pytest.fail(constant)) == answer.structured
    for item, (name, result) in zip(answer.structured["results"], expected.items(), strict=True):
        assert item["status"] == "ok" and {key: item["result"][key] for key in result} == result, item
        alone = (await call(router.server, "invoke_read_tool", {"name": name})).structured
        assert {key: alone[key] for key in result} == result, alone


async def test_the_gate_refuses_everything_but_reads_with_centralmcps_message(router: Router) -> None:
    for name in ("close_ticket", "purge_tickets", "ping_ticketing", "unannotated_ticket_count"):
        answer = await call(router.server, "invoke_read_tool", {"name": name})
        assert answer.structured == {"error": NOT_READ_ONLY.format(name), "tool": name, "status": "blocked"}
    response = await batch(
        router.server, [{"name": "close_ticket"}, {"name": "get_ticket", "arguments": {"ticket_id": "T-0001"}}]
    )
    assert [item["status"] for item in response["results"]] == ["blocked", "ok"]
    assert response["results"][1]["result"]["title"] == "ticket 1"


async def test_untrusted_annotations_and_an_allow_list() -> None:
    options = {"tickets": BackendOptions(trust_annotations=False, read_allow=frozenset({"get_ticket", "close_ticket"}))}
    router = Router({"tickets": tickets_server()}, options=options)
    response = await batch(
        router.server,
        [
            {"name": "list_tickets"},
            {"name": "get_ticket", "arguments": {"ticket_id": "T-0002"}},
            {"name": "close_ticket", "arguments": {"ticket_id": "T-1"}},
        ],
    )
    assert [item["status"] for item in response["results"]] == ["blocked", "ok", "ok"]


def test_an_allow_list_beside_trusted_annotations_is_refused() -> None:
    """It would change nothing (the annotations decide): an operator must not believe those tools allowed."""
    with pytest.raises(HostContractError, match="read_allow applies only with trust_annotations = false"):
        BackendOptions(read_allow=frozenset({"close_ticket"}))
    assert BackendOptions(trust_annotations=False, read_allow=frozenset({"close_ticket"})).read_allow


def test_two_backends_with_one_tool_name_are_a_startup_error() -> None:
    with pytest.raises(HostContractError, match="duplicate backend tool name 'list_tickets': served by 'a' and 'b'"):
        Router({"a": tickets_server(), "b": tickets_server()})


async def test_a_clipped_read_resumes_inside_a_batch_with_its_cursor(router: Router) -> None:
    first = await call(router.server, "invoke_read_tool", {"name": "list_tickets"})
    page = first.structured
    assert (
        len(page["tickets"]) == 200 and page["_pagination"]["has_more"] is True and page["_response_bounds"]["clipped"]
    )
    response = await batch(
        router.server,
        [
            {"name": "list_tickets", "id": "next", "cursor": page["next_cursor"]},
            {"name": "list_tickets", "id": "other-args", "arguments": {"state": "open"}, "cursor": page["next_cursor"]},
            {
                "name": "get_ticket",
                "id": "other-tool",
                "arguments": {"ticket_id": "T-0001"},
                "cursor": page["next_cursor"],
            },
            {"name": "list_tickets", "id": "tampered", "cursor": page["next_cursor"][:-2] + "xx"},
            {"name": "list_tickets", "id": "long", "cursor": "c" * 600},
            {"name": "list_tickets", "id": "non-ascii", "cursor": "s\u00e9cret.\u0080"},
        ],
    )
    items = {item["id"]: item for item in response["results"]}
    assert items["next"]["status"] == "ok" and items["next"]["result"]["tickets"][0]["id"] == "T-0200"
    assert items["next"]["result"]["_pagination"]["offset"] == 200
    assert items["other-args"]["error"] == "cursor was issued for other arguments"
    assert items["other-tool"]["error"] == "cursor was issued for another tool"
    assert {items[key]["status"] for key in ("other-args", "other-tool", "tampered", "long", "non-ascii")} == {
        "invalid_cursor"
    }
    assert items["non-ascii"]["error"] == "cursor is malformed or its signature does not match"
    assert page["next_cursor"] not in str(response)


async def test_a_batch_entry_is_bounded_no_looser_than_the_same_single_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # A one-entry batch's share of the 300,000-byte batch budget is far above this single-read bound.
    monkeypatch.setenv("CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES", "4000")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    router = Router({"tickets": tickets_server()})
    single = (await call(router.server, "invoke_read_tool", {"name": "list_tickets"})).structured
    entry = (await batch(router.server, [{"name": "list_tickets"}]))["results"][0]
    assert entry["status"] == "ok" and single["_response_bounds"]["clipped"]
    assert len(entry["result"]["tickets"]) == len(single["tickets"]) < 200
    assert entry["result"]["_pagination"] == single["_pagination"]
    assert len(_compat_json(entry["result"])) <= 4000


async def test_cursors_expire_and_shared_keys_cross_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_CURSOR_KEY", "shared-secret")
    one, two = Router({"t": tickets_server()}), Router({"t": tickets_server()})
    cursor = (await call(one.server, "invoke_read_tool", {"name": "list_tickets"})).structured["next_cursor"]
    resumed = await call(two.server, "invoke_read_tool", {"name": "list_tickets", "cursor": cursor})
    assert resumed.structured["_pagination"]["offset"] == 200
    monkeypatch.setattr(time, "time", lambda: 10**12)
    expired = await call(two.server, "invoke_read_tool", {"name": "list_tickets", "cursor": cursor})
    assert expired.structured["status"] == "invalid_cursor" and "expired" in expired.structured["error"]


def test_bounding_by_bytes_and_the_preview() -> None:
    rows = [{"n": n, "pad": "x" * 100} for n in range(100)]
    clipped = bound({"rows": rows, "note": "k"}, Bounds(200, 3000), 0, lambda at: f"cursor@{at}")
    assert 0 < clipped["_pagination"]["returned"] < 100 and clipped["next_cursor"].startswith("cursor@")
    assert len(_compat_json(clipped)) <= 3000 and clipped["note"] == "k"
    bare = bound(["a"] * 10, Bounds(3, 10_000))
    assert bare["items"] == ["a"] * 3 and "next_cursor" not in bare
    preview = bound({"blob": "y" * 50_000}, Bounds(200, 2000))
    assert preview["_response_bounds"]["resumable"] is False and len(_compat_json(preview)) <= 2000


def _compat_json(value: Any) -> bytes:
    from centralmcp_batch.budget import encode

    return encode(value)


async def test_one_limiter_token_per_backend_call_and_none_for_refusals(router: Router) -> None:
    drawn = []

    class Spy:
        @hookimpl(wrapper=True)
        def centralmcp_acquire_rate_token(self, tool: Any):  # type: ignore[no-untyped-def]
            drawn.append(tool.name)
            return (yield)

    router.plugin_manager.register(Spy())
    await batch(
        router.server,
        [
            {"name": "process_id"},
            {"name": "close_ticket"},
            {"name": "nope"},
            {"name": "process_id", "cursor": "bad"},
            {"name": "get_ticket", "arguments": {"ticket_id": "T-0003"}},
        ],
    )
    await call(router.server, "invoke_read_tool", {"name": "process_id"})
    assert sorted(drawn) == ["get_ticket", "process_id", "process_id"]


async def test_the_token_bucket_holds_its_rate_in_arrival_order() -> None:
    bucket = TokenBucket(rate=50, burst=2)
    order: list[int] = []

    async def take(n: int) -> None:
        await bucket.acquire()
        order.append(n)

    started = time.monotonic()
    async with anyio.create_task_group() as tasks:
        for n in range(12):
            tasks.start_soon(take, n)
            await anyio.sleep(0)  # arrive in order
    elapsed = time.monotonic() - started
    assert order == list(range(12))
    assert elapsed >= (12 - 2) / 50 * 0.8  # 10 tokens beyond the burst at 50/s: about 0.2 s


# -- end to end over real transports ------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "router.toml"
    config.write_text(
        "[backends.local]\n"
        'module = "tests.backends.tickets:tickets_server"\n'
        "[backends.remote]\n"
        f"command = {sys.executable!r}\n"
        f"args = [{TICKETS_SCRIPT!r}]\n"
        'env = { TICKETS_PREFIX = "remote_" }\n'
        "[backends.broken]\n"
        'command = "/nonexistent/backend-binary"\n'
    )
    return config


MIXED = [
    {"name": "list_tickets", "id": "local"},
    {"name": "remote_get_ticket", "id": "remote", "arguments": {"ticket_id": "T-0007"}},
    {"name": "remote_close_ticket", "id": "write", "arguments": {"ticket_id": "T-0007"}},
    {"name": "remote_slow_ticket", "id": "slow", "arguments": {"seconds": 0.05}},
]


def check_mixed(response: dict[str, Any]) -> None:
    items = {item["id"]: item for item in response["results"]}
    assert items["local"]["status"] == "ok" and items["local"]["server"] == "local"
    assert items["remote"]["status"] == "ok" and items["remote"]["server"] == "remote"
    assert items["remote"]["result"]["id"] == "T-0007"
    assert items["write"]["status"] == "blocked"
    assert items["slow"]["result"]["slept"] == 0.05


async def test_end_to_end_over_stdio_with_a_remote_stdio_backend(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    params = _compat.StdioServerParameters(
        command=sys.executable,
        args=["-m", "centralmcp_batch", "serve", "--config", str(config)],
        env=subprocess_env(),
        cwd=str(HERE.parent),
    )
    with anyio.fail_after(60):
        async with _compat.connect(params) as client:
            check_mixed((await client.call_tool("invoke_read_tool_batch", {"calls": MIXED})).structured)
            found = (await client.call_tool("find_tool", {"query": "ticket", "server": "broken"})).structured
            assert found["count"] == 0  # the backend that would not start is out; the rest serve


async def test_end_to_end_over_streamable_http_and_reconnect(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "centralmcp_batch",
        "serve",
        "--config",
        str(config),
        "--transport",
        "http",
        "--port",
        str(port),
    ]
    process = subprocess.Popen(
        command, env=subprocess_env(), cwd=str(HERE.parent), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        await wait_for_port(port)
        with anyio.fail_after(60):
            async with _compat.connect(url) as client:
                check_mixed((await client.call_tool("invoke_read_tool_batch", {"calls": MIXED})).structured)
                pid = (await client.call_tool("invoke_read_tool", {"name": "remote_process_id"})).structured["pid"]
            os.kill(pid, 9)  # the remote backend dies between batches
            async with _compat.connect(url) as client:
                while True:  # its entries fail until the router has reconnected; the others always succeed
                    response = (
                        await client.call_tool(
                            "invoke_read_tool_batch",
                            {
                                "calls": [
                                    {"name": "remote_process_id"},
                                    {"name": "get_ticket", "arguments": {"ticket_id": "T-0001"}},
                                ]
                            },
                        )
                    ).structured
                    assert response["results"][1]["status"] == "ok"
                    if response["results"][0]["status"] == "ok":
                        break
                    await anyio.sleep(0.2)
                assert response["results"][0]["result"]["pid"] != pid
    finally:
        process.terminate()
        process.wait(timeout=15)


async def wait_for_port(port: int) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
                await stream.aclose()
                return
            except OSError:
                await anyio.sleep(0.1)


def test_backend_specs_are_plain_data() -> None:
    assert StdioBackend("python", ("-m", "x")).args == ("-m", "x")
    assert HttpBackend("http://127.0.0.1:1/mcp").url.endswith("/mcp")


SECRET_VALUE = "SECRET-" * 40  # longer than a name may be


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"name": SECRET_VALUE}, "name must be at most 200 characters"),
        ({"name": 7}, "name must be a non-empty string"),
        ({"name": "list_sites", "arguments": SECRET_VALUE}, "arguments must be an object"),
        ({"name": "list_sites", "arguments": ["x", SECRET_VALUE]}, "arguments must be an object"),
        ({"name": "list_sites", "arguments": {"a": "\ud800" + SECRET_VALUE}}, "arguments must be JSON-serializable"),
        ({"name": "list_sites", "cursor": 42}, "cursor must be a string"),
    ],
)
async def test_a_single_read_of_the_wrong_shape_is_refused_as_a_batch_entry_is_and_echoes_no_value(
    arguments: dict[str, Any], error: str
) -> None:
    # The SDK's own check of typed parameters answered with pydantic's text, which quotes the value.
    router = Router(demo.demo_backends())
    answer = await call(router.server, "invoke_read_tool", arguments)
    assert answer.structured is not None and answer.structured["status"] == "invalid_call", answer.text
    assert answer.structured["error"] == error and "SECRET" not in answer.text
