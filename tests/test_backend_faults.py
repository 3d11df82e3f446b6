"""Backends that raise ``BaseException``, cancel themselves, or block in ``def`` code (issue 11, items 1-3).

The reference router serves ``backends/fragile.py`` in process over real in-memory MCP sessions,
and in a subprocess over streamable HTTP; the CentralMCP adapter runs over its stand-in router.
Nothing here is timed except with a wide margin: where it matters, the order of events decides
(an answer that arrives while a blocked ``def`` tool is provably still blocked).
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import anyio.to_thread
import pytest
from backends.fragile import Blocker, fragile_server
from standins import monitoring_backend

from centralmcp_batch import _compat, batch_tool
from centralmcp_batch.adapters import centralmcp
from centralmcp_batch.router import HttpBackend, Router
from centralmcp_batch.testing import call

# Python 3.10 has no Task.cancelling(): a CancelledError a backend raises itself counts as a real
# cancellation there, as docs/reference/batch.md says, so the batch does not answer.
TELLS_OWN_CANCELLATION = sys.version_info >= (3, 11)
needs_cancelling = pytest.mark.skipif(
    not TELLS_OWN_CANCELLATION, reason="Python 3.10 cannot tell an own CancelledError"
)

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent
BATCH = batch_tool.TOOL_NAME
BACKENDS_LOG = "centralmcp_batch.router.backends"
CALL_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS"
BATCH_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS"
SELF_CANCELLED = "CancelledError: raised by the call itself; no time limit passed and the client did not cancel"
# Each kind of BaseException the fragile backend raises, and the error its entry must carry.
BASE_EXCEPTIONS = {
    "argparse": "SystemExit: 2",
    "exit": "SystemExit: 3",
    "interrupt": "KeyboardInterrupt",
    "custom": "BackendBaseError: the backend aborted",
}


@pytest.fixture
def blocker() -> Iterator[Blocker]:
    fresh = Blocker()
    yield fresh
    fresh.release.set()  # a test that failed half-way must not leave its thread blocked


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch, blocker: Blocker) -> Router:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    return Router({"fragile": fragile_server(blocker=blocker)})


async def batch(server: Any, calls: list[dict[str, Any]]) -> dict[str, Any]:
    with anyio.fail_after(30):
        answer = await call(server, BATCH, {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


def statuses(response: dict[str, Any]) -> list[str]:
    return [item["status"] for item in response["results"]]


async def wait_for(event: Any, seconds: float = 10.0) -> None:
    """Wait for a ``threading.Event`` without blocking the event loop."""
    with anyio.fail_after(seconds):
        while not event.is_set():
            await anyio.sleep(0.01)


# -- item 1: a BaseException from a backend is that entry's error ---------------------


@pytest.mark.parametrize("tool", ["raise_base", "raise_base_sync"], ids=["async", "def"])
@pytest.mark.parametrize("kind", list(BASE_EXCEPTIONS))
async def test_a_base_exception_from_a_backend_fails_only_its_entry(router: Router, kind: str, tool: str) -> None:
    calls = [
        {"name": "quick", "arguments": {"tag": "before"}},
        {"name": tool, "arguments": {"kind": kind}, "id": "fails"},
        {"name": "quick", "arguments": {"tag": "after"}},
    ]
    async with _compat.connect(router.server) as client:
        with anyio.fail_after(30):
            first = await client.call_tool(BATCH, {"calls": calls})
            single = await client.call_tool("invoke_read_tool", {"name": tool, "arguments": {"kind": kind}})
            again = await client.call_tool(BATCH, {"calls": [{"name": "quick", "arguments": {"tag": "again"}}]})
    assert not first.is_error and statuses(first.structured) == ["ok", "error", "ok"]
    assert first.structured["results"][1]["error"] == BASE_EXCEPTIONS[kind]
    assert first.structured["failed_ids"] == ["fails"]
    assert single.structured == {"error": BASE_EXCEPTIONS[kind], "tool": tool, "status": "error"}
    assert again.structured["ok"] is True  # the session, and the router, serve on


# -- item 2: a backend's own CancelledError ---------------------------------------------


@needs_cancelling
async def test_a_backend_cancelling_itself_fails_only_its_entry_and_says_what_happened(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")  # the next entries run on the same worker after it
    calls = [
        {"name": "cancel_itself", "id": "self"},
        {"name": "quick", "id": "next"},
        {"name": "quick_sync", "id": "last"},
    ]
    response = await batch(router.server, calls)
    assert statuses(response) == ["error", "ok", "ok"]
    assert response["results"][0]["error"] == SELF_CANCELLED
    assert "time limit" not in response["results"][0]["error"].replace("no time limit passed", "")
    answer = await call(router.server, "invoke_read_tool", {"name": "cancel_itself"})
    assert answer.structured == {"error": SELF_CANCELLED, "tool": "cancel_itself", "status": "error"}


# -- item 3: sync tools under time limits and cancellation ------------------------------


async def test_a_blocking_def_tool_times_out_at_the_call_limit_and_its_late_result_is_dropped(
    router: Router, blocker: Blocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_TIMEOUT, "0.3")
    monkeypatch.setenv(BATCH_TIMEOUT, "1")
    started = time.perf_counter()
    response = await batch(router.server, [{"name": "block_sync", "arguments": {"limit": 2}}, {"name": "quick"}])
    elapsed = time.perf_counter() - started
    assert statuses(response) == ["error", "ok"]
    assert response["results"][0]["error"] == "TimeoutError: the backend call timed out after 0.3s"
    assert elapsed < 1.0, f"{elapsed:.2f}s: the batch waited for the thread (2s) or hit the batch limit (1s)"
    assert not blocker.finished.is_set()  # the answer came while the thread was still blocked
    await wait_for(blocker.finished)  # its late {"released": False} goes nowhere
    assert (await batch(router.server, [{"name": "quick"}]))["ok"] is True


async def test_a_blocking_def_tool_is_cut_off_at_the_batch_limit(
    router: Router, blocker: Blocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BATCH_TIMEOUT, "0.4")
    response = await batch(router.server, [{"name": "block_sync", "arguments": {"limit": 10}}])
    assert (
        response["results"][0]["error"] == "TimeoutError: cancelled while running: the batch time limit of 0.4s passed"
    )
    assert not blocker.finished.is_set()


async def test_the_router_serves_other_clients_while_a_def_tool_blocks(router: Router, blocker: Blocker) -> None:
    finished: list[str] = []

    async def blocked_batch(client: _compat.ClientHandle) -> None:
        answer = await client.call_tool(BATCH, {"calls": [{"name": "block_sync", "arguments": {"limit": 10}}]})
        finished.append(f"blocked:{answer.structured['results'][0]['status']}")

    with anyio.fail_after(30):
        async with (
            _compat.connect(router.server) as first,
            _compat.connect(router.server) as second,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(blocked_batch, first)
            await wait_for(blocker.started)
            single = await second.call_tool("invoke_read_tool", {"name": "quick", "arguments": {"tag": "other"}})
            other = await second.call_tool(BATCH, {"calls": [{"name": "quick_sync"}, {"name": "quick"}]})
            finished.append("other")
            assert not blocker.finished.is_set(), "the other client was answered only after the def tool returned"
            blocker.release.set()
    assert single.structured["tag"] == "other" and statuses(other.structured) == ["ok", "ok"]
    assert finished == ["other", "blocked:ok"]


async def test_cancelling_a_batch_returns_while_its_def_tool_is_still_blocked(router: Router, blocker: Blocker) -> None:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                batch_tool.run, router.hooks, [{"name": "block_sync", "arguments": {"limit": 10}}, {"name": "quick"}]
            )
            await wait_for(blocker.started)
            tasks.cancel_scope.cancel()
    assert not blocker.finished.is_set(), "cancellation waited for the worker thread"


async def test_a_client_cancelling_over_mcp_is_not_held_by_a_def_tool(router: Router, blocker: Blocker) -> None:
    with anyio.fail_after(30):
        async with _compat.connect(router.server) as client:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(
                    client.call_tool, BATCH, {"calls": [{"name": "block_sync", "arguments": {"limit": 10}}]}
                )
                await wait_for(blocker.started)
                tasks.cancel_scope.cancel()
            after = await client.call_tool(BATCH, {"calls": [{"name": "quick", "arguments": {"tag": "after"}}]})
    assert after.structured["results"][0]["result"]["tag"] == "after"
    assert not blocker.finished.is_set()


async def test_a_def_tool_still_gets_validation_errors_and_its_own_results(router: Router) -> None:
    response = await batch(
        router.server,
        [{"name": "sleep_sync", "arguments": {"seconds": "long"}}, {"name": "sleep_sync", "arguments": {"seconds": 0}}],
    )
    assert statuses(response) == ["error", "ok"]
    assert "sleep_sync" in response["results"][0]["error"] and "long" not in response["results"][0]["error"]
    assert response["results"][1]["result"] == {"slept": 0}


async def test_a_def_tools_answer_is_not_kept_once_the_batch_has_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """anyio's worker thread holds the future that carried a def tool's answer until the thread next
    gets the GIL; entries that never yield keep it, so the last answer (100 KB, say) lived on through
    the batch's encoding: a peak 100 KB higher over a session at a concurrency of 1."""
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")

    class Answer(dict[str, Any]):  # a dict that a weak reference can watch
        pass

    answers: list[weakref.ref[Answer]] = []

    def answer(n: int) -> dict[str, Any]:
        made = Answer(n=n, rows=[f"row {i}" for i in range(100)])
        answers.append(weakref.ref(made))
        return made

    server = _compat.new_server("answers")
    _compat.add_tool(server, answer, name="answer", description="answer", annotations={"readOnlyHint": True})
    router = Router({"answers": server})
    response = await batch_tool.run(router.hooks, [{"name": "answer", "arguments": {"n": n}} for n in range(3)])
    assert [item["result"]["n"] for item in response["results"]] == [0, 1, 2]
    # Checked before anything yields, so no worker thread has run since the last call.
    assert [answer() is None for answer in answers] == [True, True, True]


# -- the CentralMCP adapter: its dispatch goes through the same helper --------------------

_fresh = itertools.count()


@pytest.fixture
def adopted_standin(monkeypatch: pytest.MonkeyPatch, blocker: Blocker) -> Iterator[ModuleType]:
    """The CentralMCP stand-in router, adopted, with two fragile def tools on its monitoring backend."""
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", "minimal")
    spec = importlib.util.spec_from_file_location(
        f"standin_router_faults_{next(_fresh)}", HERE / "standins" / "centralmcp_router.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fragile = fragile_server(blocker=blocker)
    added = ["block_sync", "raise_base_sync"]
    for name in added:
        tool = fragile._tool_manager.get_tool(name)
        _compat.add_tool(
            monitoring_backend.mcp, tool.fn, name=name, description=name, annotations={"readOnlyHint": True}
        )
    centralmcp.adopt(module)
    yield module
    for name in added:
        _compat.remove_tool(monitoring_backend.mcp, name)


async def test_the_centralmcp_adapter_contains_base_exceptions_and_cuts_off_def_tools(
    adopted_standin: ModuleType, blocker: Blocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_TIMEOUT, "0.3")
    calls = [
        {"name": "block_sync", "arguments": {"limit": 10}},
        {"name": "raise_base_sync", "arguments": {"kind": "argparse"}},
        {"name": "get_device", "arguments": {"serial": "a"}},
    ]
    response = await batch(adopted_standin.mcp, calls)
    assert statuses(response) == ["error", "error", "ok"]
    assert response["results"][0]["error"] == "TimeoutError: the backend call timed out after 0.3s"
    assert response["results"][1]["error"] == "SystemExit: 2"
    assert not blocker.finished.is_set()


# -- served over streamable HTTP: the router process survives ---------------------------


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(30):
        while True:
            if process.poll() is not None:
                log = process.stderr.read().decode()  # type: ignore[union-attr]
                raise AssertionError(f"the router exited early: {log}")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
                await stream.aclose()
                return
            except OSError:
                await anyio.sleep(0.1)


async def test_over_http_a_fragile_backend_never_takes_the_router_down(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text('[backends.fragile]\nmodule = "tests.backends.fragile:fragile_server"\n')
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        "CENTRALMCP_ROUTER_RATE_PER_SECOND": "1000",
    }
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
        command, env=env, cwd=str(HERE.parent), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}/mcp"
    calls = [
        {"name": tool, "arguments": {"kind": kind}}
        for kind in BASE_EXCEPTIONS
        for tool in ("raise_base", "raise_base_sync")
    ]
    own_cancel = [{"name": "cancel_itself"}] if TELLS_OWN_CANCELLATION else []  # see TELLS_OWN_CANCELLATION
    calls += [*own_cancel, {"name": "quick", "arguments": {"tag": "in-batch"}}]
    try:
        await wait_for_port(port, process)
        with anyio.fail_after(60):
            async with _compat.connect(url) as client:
                response = (await client.call_tool(BATCH, {"calls": calls})).structured
                single = (
                    await client.call_tool(
                        "invoke_read_tool", {"name": "raise_base", "arguments": {"kind": "argparse"}}
                    )
                ).structured
            state = await _state_while_blocked(url)
            async with _compat.connect(url) as client:  # a new client, after all that
                after = (
                    await client.call_tool("invoke_read_tool", {"name": "quick", "arguments": {"tag": "after"}})
                ).structured
        expected = [BASE_EXCEPTIONS[kind] for kind in BASE_EXCEPTIONS for _ in range(2)]
        expected += [SELF_CANCELLED] * len(own_cancel)
        assert [item.get("error") for item in response["results"][:-1]] == expected
        assert response["results"][-1]["status"] == "ok"
        assert single["error"] == "SystemExit: 2"
        assert state == {"started": True, "finished": False}, (
            "another client was answered only after the def tool returned"
        )
        assert after["tag"] == "after" and process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=15)
        process.stderr.close()  # type: ignore[union-attr]


async def _state_while_blocked(url: str) -> dict[str, bool]:
    """One client's batch blocks in a def tool for 3 s; another client asks, until it has started, how it is."""

    async def blocked() -> None:
        async with _compat.connect(url) as client:
            await client.call_tool(BATCH, {"calls": [{"name": "block_sync", "arguments": {"limit": 3}}]})

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(blocked)
        async with _compat.connect(url) as client:
            while not (state := (await client.call_tool("invoke_read_tool", {"name": "blocker_state"})).structured)[
                "started"
            ]:
                await anyio.sleep(0.02)
    return state


async def test_an_http_backend_that_stops_answering_is_reopened_after_a_call_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The backend is a real `serve` process over streamable HTTP, stopped with SIGSTOP: its socket
    # still accepts, nothing answers, and each call is cut off by its 0.5 s limit.
    config = tmp_path / "router.toml"
    config.write_text('[backends.fragile]\nmodule = "tests.backends.fragile:fragile_server"\n')
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config)]
    command += ["--transport", "http", "--port", str(port)]
    process = subprocess.Popen(
        command, env=env, cwd=str(HERE.parent), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    monkeypatch.setenv(CALL_TIMEOUT, "0.5")
    router = Router({"upstream": HttpBackend(f"http://127.0.0.1:{port}/mcp")})
    read = [{"name": "invoke_read_tool", "arguments": {"name": "quick"}}]
    try:
        await wait_for_port(port, process)
        with caplog.at_level(logging.WARNING, logger=BACKENDS_LOG), anyio.fail_after(60):
            async with router.connected():
                first = router.remotes["upstream"].client
                assert statuses(await batch(router.server, read)) == ["ok"]
                process.send_signal(signal.SIGSTOP)
                timed_out = (await batch(router.server, read))["results"][0]["error"]
                assert timed_out == "TimeoutError: the backend call timed out after 0.5s"
                while not any("reopening its session" in record.getMessage() for record in caplog.records):
                    await anyio.sleep(0.1)
                process.send_signal(signal.SIGCONT)  # the new session's handshake is answered now
                while statuses(await batch(router.server, read)) != ["ok"]:
                    await anyio.sleep(0.1)
                assert router.remotes["upstream"].client is not first
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=15)
        process.stderr.close()  # type: ignore[union-attr]
