"""The fault matrix, end to end: each fault the batch must survive, one test each.

Hosts are installed with ``hosting.install`` (real entry-point discovery) and called over a
real in-memory MCP session; the remote-backend fault runs the reference router in process
with a real stdio subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from backends.tickets import tickets_server
from hostile_hosts import HostileHost

from centralmcp_batch import HostContractError, _compat, batch_tool, hosting
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.models import ToolRef
from centralmcp_batch.router import Router, StdioBackend
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio
TICKETS_SCRIPT = str(Path(__file__).resolve().parent / "backends" / "tickets.py")
BATCH = batch_tool.TOOL_NAME


def installed(host: object) -> Any:
    server = _compat.new_server("centralmcp-faults")
    hosting.install(server, host)
    return server


async def batch(server: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await call(server, BATCH, {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


def statuses(response: dict[str, Any]) -> list[str]:
    return [item["status"] for item in response["results"]]


async def wait_until(condition: Any, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.01)


async def test_a_backend_that_raises_fails_only_its_entry() -> None:
    host = HostileHost()
    response = await batch(installed(host), [{"name": "succeed"}, {"name": "explode"}, {"name": "succeed"}])
    assert statuses(response) == ["ok", "error", "ok"]
    assert response["results"][1]["error"] == "BackendExploded: the backend exploded"
    assert response["failed_indexes"] == [1] and response["ok"] is False


async def test_a_backend_that_hangs_past_the_call_timeout_is_really_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS", "0.2")
    host = HostileHost()
    with anyio.fail_after(10):  # the hang is an hour: only a real cancel answers in time
        response = await batch(installed(host), [{"name": "hang"}, {"name": "succeed"}])
    assert statuses(response) == ["error", "ok"]
    assert response["results"][0]["error"] == "TimeoutError: the backend call timed out after 0.2s"
    assert host.cancelled == 1 and host.running == 0


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_the_batch_deadline_passing_mid_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS", "0.5")
    host = HostileHost()
    with anyio.fail_after(10):
        response = await batch(
            installed(host), [{"name": "succeed"}, {"name": "hang"}, {"name": "succeed"}, {"name": "succeed"}]
        )
    assert statuses(response) == ["ok", "error", "error", "error"]
    errors = [item["error"] for item in response["results"][1:]]
    assert errors[0] == "TimeoutError: cancelled while running: the batch time limit of 0.5s passed"
    assert errors[1:] == ["TimeoutError: not dispatched: the batch time limit of 0.5s passed first"] * 2
    # every entry was resolved before any was dispatched: the ones cut off or never dispatched name their server too
    assert [item["server"] for item in response["results"]] == ["hostile"] * 4
    assert host.dispatched == ["succeed", "hang"] and host.cancelled == 1 and host.running == 0


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_the_client_cancelling_mid_batch_stops_everything_and_the_session_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "2")
    host = HostileHost()
    server = installed(host)
    async with _compat.connect(server) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, BATCH, {"calls": [{"name": "succeed"}] + [{"name": "hang"}] * 8})
            await wait_until(lambda: host.running == 2)
            tasks.cancel_scope.cancel()
        await wait_until(lambda: host.cancelled == 2 and host.running == 0)
        dispatched_at_cancel = list(host.dispatched)
        await anyio.sleep(0.3)  # room for any further dispatch to show itself
        assert host.dispatched == dispatched_at_cancel == ["succeed", "hang", "hang"]
        answer = await client.call_tool(BATCH, {"calls": [{"name": "succeed"}]})
    assert answer.structured["ok"] is True


class _RaisingHost(HostileHost):
    """The hostile host with one hook that raises, plainly or from a coroutine."""

    def __init__(self, failing: str, asynchronous: bool) -> None:
        super().__init__()
        self.failing, self.asynchronous = failing, asynchronous

    def _maybe_fail(self, hook: str, answer: Callable[[], Any]) -> Any:
        """``answer()`` unless ``hook`` is the failing one (then it is never called, so nothing is left unawaited)."""
        if hook != self.failing:
            return answer()
        if self.asynchronous:

            async def fail() -> Any:
                raise RuntimeError(f"{hook} broke")

            return fail()
        raise RuntimeError(f"{hook} broke")

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return self._maybe_fail("find_tool", lambda: super(_RaisingHost, self).centralmcp_find_tool(name))

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return self._maybe_fail("read_gate", lambda: super(_RaisingHost, self).centralmcp_read_gate(tool))

    @hookimpl
    def centralmcp_acquire_rate_token(self, tool: ToolRef) -> Any:
        return self._maybe_fail(
            "acquire_rate_token", lambda: super(_RaisingHost, self).centralmcp_acquire_rate_token(tool)
        )

    @hookimpl
    def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Any, resume: Any, max_bytes: int, context: Any) -> Any:
        return self._maybe_fail(
            "dispatch_read",
            lambda: super(_RaisingHost, self).centralmcp_dispatch_read(tool, arguments, resume, max_bytes, context),
        )


@pytest.mark.parametrize("asynchronous", [False, True], ids=["def", "async"])
@pytest.mark.parametrize(
    ("failing", "status", "error", "dispatched"),
    [
        ("read_gate", "blocked", "refused: the read gate failed (RuntimeError)", []),  # fail closed
        ("acquire_rate_token", "ok", None, ["succeed"]),  # the limiter failing must not stop reads
        ("find_tool", "error", "RuntimeError: find_tool broke", []),
        ("dispatch_read", "error", "RuntimeError: dispatch_read broke", []),
    ],
)
async def test_a_host_hook_that_raises(
    failing: str, status: str, error: str | None, dispatched: list[str], asynchronous: bool
) -> None:
    host = _RaisingHost(failing, asynchronous)
    response = await batch(installed(host), [{"name": "succeed"}])
    item = response["results"][0]
    assert item["status"] == status and item.get("error") == error
    assert host.dispatched == dispatched


class _HostWithoutGate:
    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        return ToolRef(name, "nogate", {"readOnlyHint": True})

    @hookimpl
    def centralmcp_dispatch_read(self, tool: ToolRef) -> Any:
        return {"never": "reached"}


def test_a_host_that_registers_no_gate_cannot_start() -> None:
    server = _compat.new_server("centralmcp-no-gate")
    with pytest.raises(HostContractError, match="centralmcp_read_gate"):
        hosting.install(server, _HostWithoutGate())
    assert not _compat.has_tool(server, BATCH)


# -- a remote stdio backend dies mid-batch --------------------------------------------


def stdio_router() -> Router:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(TICKETS_SCRIPT).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    return Router({"remote": StdioBackend(sys.executable, [TICKETS_SCRIPT], env), "local": tickets_server("local_")})


async def remote_pid(router: Router) -> int | None:
    response = await batch_tool.run(router.hooks, [{"name": "process_id"}])
    item = response["results"][0]
    return item["result"]["pid"] if item["status"] == "ok" else None


async def test_a_remote_stdio_backend_dying_mid_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS", "20")
    router = stdio_router()
    calls = [
        {"name": "slow_ticket", "arguments": {"seconds": 30}, "id": "remote-1"},
        {"name": "local_get_ticket", "arguments": {"ticket_id": "T-0003"}, "id": "local"},
        {"name": "slow_ticket", "arguments": {"seconds": 30}, "id": "remote-2"},
        {"name": "local_slow_ticket", "arguments": {"seconds": 1.5}, "id": "local-slow"},  # still running at the kill
    ]
    with anyio.fail_after(60):
        async with router.connected():
            pid = await remote_pid(router)
            assert pid is not None
            response: dict[str, Any] = {}

            async def run_batch() -> None:
                response.update(await batch_tool.run(router.hooks, calls))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run_batch)
                await anyio.sleep(0.8)  # both remote calls are in flight, sleeping for 30s
                os.kill(pid, signal.SIGKILL)
            items = {item["id"]: item for item in response["results"]}
            assert items["local"]["status"] == "ok" and items["local"]["result"]["id"] == "T-0003"
            assert items["local-slow"]["status"] == "ok"
            assert items["remote-1"]["status"] == items["remote-2"]["status"] == "error"
            assert (
                "TimeoutError" not in items["remote-1"]["error"]
            )  # failed when the process died, not at the time limit
            while (new_pid := await remote_pid(router)) is None:  # the router reconnects for the batches that follow
                await anyio.sleep(0.2)
            assert new_pid != pid


# -- a backend that rejects its arguments ---------------------------------------------


async def test_a_backend_argument_error_through_the_router_echoes_no_argument_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    secret = "zq7SECRET-value"
    router = Router({"tickets": tickets_server()})
    response = await batch(router.server, [{"name": "get_ticket", "arguments": {"ticket_idx": secret}}])
    item = response["results"][0]
    assert item["status"] == "error" and "get_ticket" in item["error"]
    assert secret not in json.dumps(response)


async def test_the_sample_host_refuses_a_forged_cursor_without_echoing_it(centralmcp_server: Any) -> None:
    forged = ["echo:page:zq7SECRET", "echo:page:\u00b2"]  # the second passes str.isdigit, not int()
    response = await batch(centralmcp_server, [{"name": "echo", "cursor": cursor} for cursor in forged])
    assert [item["status"] for item in response["results"]] == ["invalid_cursor", "invalid_cursor"]
    assert "zq7SECRET" not in json.dumps(response) and "\u00b2" not in json.dumps(response, ensure_ascii=False)


async def test_a_single_read_with_text_no_json_can_carry_never_reaches_a_shared_stdio_session() -> None:
    # SDK 1.x's HTTP parser lets a lone surrogate through to the tool. A single read handed it on to the
    # router's one session with a stdio backend, which broke: another client's call in flight failed and the
    # backend was restarted. A single read is now checked as a batch entry is, before any backend.
    router = stdio_router()
    async with router.connected():
        pid = await remote_pid(router)
        async with anyio.create_task_group() as tasks:
            other: list[dict[str, Any]] = []

            async def another_client() -> None:
                other.append(await router.read("list_tickets", {"state": "open"}))

            tasks.start_soon(another_client)
            refused = await router.read("list_tickets", {"state": "open\ud800"})
        assert refused["status"] == "invalid_call" and refused["error"] == "arguments must be JSON-serializable"
        assert "error" not in other[0], other
        assert await remote_pid(router) == pid  # the same backend process, its session never broken
