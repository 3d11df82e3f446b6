"""After a remote backend restarts: the gate decides on its current tool list, a late backend joins, and an
HTTP backend that lost the router's session has the calls it refused sent again on a new one."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from backends.tickets import tickets_server

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

from centralmcp_batch import HostContractError, _compat, settings
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.models import ToolRef
from centralmcp_batch.router import HttpBackend, Router, StdioBackend, backends
from centralmcp_batch.router.backends import RemoteBackend
from centralmcp_batch.testing import call

# Its batches send the same call several times to load a backend's session: each one its own call.
pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("each_entry_its_own_call")]
HERE = Path(__file__).resolve().parent
SHIFTING = str(HERE / "backends" / "shifting.py")
BACKENDS_LOG = "centralmcp_batch.router.backends"
NOT_READ_ONLY = (
    "Tool 'flip' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    return tmp_path / "state"


def shifting_spec(state: Path) -> StdioBackend:
    env = {
        **os.environ,
        "SHIFTING_STATE": str(state),
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    return StdioBackend(sys.executable, (SHIFTING,), env)


def shifting_router(state: Path) -> Router:
    return Router({"shifting": shifting_spec(state)})


async def statuses(router: Router, *names: str) -> list[str]:
    answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": name} for name in names]})
    return [item["status"] for item in answer.structured["results"]]


async def found(router: Router) -> dict[str, str]:
    answer = await call(router.server, "find_tool", {"query": "shifting", "top_k": 10})
    return {hit["name"]: hit["capability"] for hit in answer.structured["results"]}


async def until(predicate: Any, seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not await predicate():
            await anyio.sleep(0.1)


async def test_after_a_restart_the_gate_and_find_tool_see_the_current_tools(state: Path) -> None:
    state.write_text("v1")
    router = shifting_router(state)
    async with router.connected():
        assert await statuses(router, "flip", "vanish", "fresh") == ["ok", "ok", "unknown_tool"]
        first_pid = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured["pid"]
        state.write_text("v2")
        os.kill(first_pid, 9)

        async def restarted() -> bool:
            answer = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured
            return answer.get("pid") not in (None, first_pid)

        await until(restarted)
        assert await statuses(router, "flip", "vanish", "fresh") == ["blocked", "unknown_tool", "ok"]
        single = (await call(router.server, "invoke_read_tool", {"name": "flip"})).structured
        assert single == {"error": NOT_READ_ONLY, "tool": "flip", "status": "blocked"}
        assert await found(router) == {"whoami": "read", "flip": "destructive", "fresh": "read"}


async def test_a_backend_killed_while_idle_is_reopened_before_the_next_call(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state.write_text("v1")
    router = shifting_router(state)
    async with router.connected():
        first_pid = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured["pid"]
        first = router.remotes["shifting"].client
        with caplog.at_level(logging.WARNING, logger=BACKENDS_LOG):
            os.kill(first_pid, signal.SIGKILL)
            # no call in between: before, the dead session was kept until a call failed on it ("went away")
            with anyio.fail_after(30):
                while router.remotes["shifting"].client in (first, None):
                    await anyio.sleep(0.1)
        assert any("closed its session; reopening it" in record.getMessage() for record in caplog.records)
        answer = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured
        assert answer["pid"] not in (None, first_pid), answer


def held_resources() -> tuple[int, int, int]:
    """This process's open file descriptors, child processes and asyncio tasks (Linux: from /proc)."""
    children = 0
    for thread in os.listdir("/proc/self/task"):
        children += len(Path(f"/proc/self/task/{thread}/children").read_text().split())
    return len(os.listdir("/proc/self/fd")), children, len(asyncio.all_tasks())


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts child processes and descriptors in /proc")
async def test_a_backend_killed_again_and_again_leaves_no_process_pipe_or_task_behind(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each reopen spawns a process with three pipes and a session with its tasks; one of them kept per
    # reopen would pile up for as long as a crashing backend keeps being restarted.
    monkeypatch.setattr(backends, "STABLE_SECONDS", 0.0)  # no growing delay between the reopens here
    state.write_text("v1")
    router = shifting_router(state)
    async with router.connected():
        backend = router.remotes["shifting"]
        await call(router.server, "invoke_read_tool", {"name": "whoami"})  # the rate store's own connection opens
        await anyio.sleep(0.5)
        first = held_resources()
        counts = []
        for _ in range(KILLS):
            old = backend.client
            pid = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured["pid"]
            os.kill(pid, signal.SIGKILL)
            with anyio.fail_after(30):
                while backend.client in (old, None):
                    await anyio.sleep(0.02)
            counts.append(await settled(held_resources, first))
        assert counts == [first] * KILLS, (first, counts)  # (fds, children, tasks) after each reopen
        assert first[1] == 1  # the one live backend process, and no other


KILLS = 5


async def settled(measure: Callable[[], Any], expected: Any, seconds: float = 5.0) -> Any:
    """``measure()`` once it reads ``expected`` (the old process reaped, its tasks ended), or after ``seconds``."""
    with anyio.move_on_after(seconds):
        while measure() != expected:
            await anyio.sleep(0.05)
    return measure()


async def test_a_backend_down_at_start_up_joins_when_it_comes_up(state: Path) -> None:
    state.write_text("down")
    router = shifting_router(state)
    async with router.connected():
        assert "shifting" in router.backend_errors
        assert await found(router) == {}
        assert await statuses(router, "whoami") == ["unknown_tool"]
        state.write_text("v1")

        async def joined() -> bool:
            return "whoami" in await found(router)

        await until(joined)
        assert await statuses(router, "whoami", "flip", "vanish") == ["ok", "ok", "ok"]


async def test_a_late_backend_with_a_name_another_backend_serves_leaves_it_out(state: Path, tmp_path: Path) -> None:
    state.write_text("v1")
    late_state = tmp_path / "late-state"
    late_state.write_text("down")
    router = Router({"first": shifting_spec(state), "late": shifting_spec(late_state)})
    async with router.connected():  # the late one was down, so start-up had nothing to refuse
        late_state.write_text("v1")
        with anyio.fail_after(30):
            while "late" not in router.conflicts:
                await anyio.sleep(0.1)
        assert router.catalog.find("flip").server == "first"  # type: ignore[union-attr]
        assert router.conflicts["late"] == {"flip": "first", "vanish": "first", "whoami": "first"}
        assert await statuses(router, "whoami") == ["ok"]


async def test_a_duplicate_name_at_start_up_is_still_an_error() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    router = Router(
        {
            "local": tickets_server(),
            "remote": StdioBackend(sys.executable, (str(HERE / "backends" / "tickets.py"),), env),
        }
    )
    with pytest.raises(Exception) as raised:
        async with router.connected():
            pass
    errors = raised.value.exceptions if isinstance(raised.value, BaseExceptionGroup) else [raised.value]
    assert any(
        isinstance(error, HostContractError) and "served by 'local' and 'remote'" in str(error) for error in errors
    )


def test_a_backend_that_stays_down_is_tried_less_and_less_often() -> None:
    backend = RemoteBackend("gone", StdioBackend("unused"))
    delays = []
    for failures in range(9):
        backend.failures = failures
        delays.append(backend.retry_delay())
    assert delays == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


async def test_a_backend_that_will_not_start_is_told_once_and_retried_with_a_growing_delay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(tmp_path / "no-such-backend")  # the spawn itself fails, at once, on every try
    backend = RemoteBackend("gone", StdioBackend(missing))
    with caplog.at_level(logging.DEBUG, logger=BACKENDS_LOG):
        with anyio.move_on_after(3.2):  # tries at 0, 0.5, 1.5 and 3.5 s: three; a fixed 0.5 s made seven
            await backend.run()
    tries = [record for record in caplog.records if "is unavailable" in record.getMessage()]
    assert 2 <= len(tries) <= 4 and backend.client is None and backend.failures == len(tries)
    assert [record.levelno for record in tries] == [logging.WARNING] + [logging.DEBUG] * (len(tries) - 1)


# -- a stateful HTTP backend restarted while the router is idle ----------------------------
#
# backends/sessions.py keeps its sessions in memory, as SDK 1.x servers and most others do, so a new
# process answers the router's old session with HTTP 404, and speaks only the protocol versions that
# open a session (an SDK 2.x router then keeps one with it, as with them).

SESSIONS = str(HERE / "backends" / "sessions.py")


class HttpSessions:
    """The backend's process on one port, restarted at will, and what it saw: methods, and tool runs."""

    def __init__(self, tmp_path: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.seen, self.runs = tmp_path / "seen", tmp_path / "runs"
        self.seen.write_text("")
        self.runs.write_text("")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self, **env: str) -> None:
        environment = {
            **os.environ,
            **env,
            "SESSIONS_SEEN": str(self.seen),
            "SESSIONS_CALLS": str(self.runs),
            "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
        }
        command = [sys.executable, SESSIONS, str(self.port)]
        self.process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with anyio.fail_after(30):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", self.port)).aclose()
                    return
                except OSError:
                    await anyio.sleep(0.05)

    async def restart(self, **env: str) -> None:
        self.stop()
        self.seen.write_text("")
        await self.start(**env)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def methods(self) -> list[str]:
        return self.seen.read_text().split()

    def tool_runs(self) -> list[str]:
        return self.runs.read_text().split()


@pytest.fixture
def http_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpSessions]:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    # Before the fix, SDK 1.x held such a batch up to its call time limit (60 s by default).
    monkeypatch.setenv(settings.CALL_TIMEOUT, "10")
    backend = HttpSessions(tmp_path)
    yield backend
    backend.stop()


class RateTokens:
    """Counts the rate tokens drawn, by tool: one per call, whatever happens to it after."""

    def __init__(self) -> None:
        self.drawn: list[str] = []

    @hookimpl
    def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        self.drawn.append(tool.name)


async def whoami_batch(router: Router, *tags: str) -> list[dict[str, Any]]:
    calls = [{"name": "whoami", "arguments": {"tag": tag}} for tag in tags]
    with anyio.fail_after(60):
        answer = await call(router.server, "invoke_read_tool_batch", {"calls": calls})
    results: list[dict[str, Any]] = answer.structured["results"]
    return results


async def test_an_http_backend_restarted_while_idle_answers_the_next_calls_whole(
    http_sessions: HttpSessions, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: each call the new process refused (HTTP 404, the session is unknown to it) was an error
    # entry, "backend 'up' went away: McpError", and on SDK 1.x the batch took up to its call time limit.
    await http_sessions.start()
    router = Router({"up": HttpBackend(http_sessions.url)})
    tokens = RateTokens()
    router.plugin_manager.register(tokens)
    async with router.connected():
        first = await whoami_batch(router, "a0", "a1", "a2")
        await http_sessions.restart()
        with caplog.at_level(logging.WARNING, logger=BACKENDS_LOG):
            after = await whoami_batch(router, "b0", "b1", "b2")
            single = await call(router.server, "invoke_read_tool", {"name": "whoami", "arguments": {"tag": "s"}})
    assert [item["status"] for item in first + after] == ["ok"] * 6, after
    assert {item["result"]["pid"] for item in after} == {http_sessions.pid} == {single.structured["pid"]}
    assert sorted(http_sessions.tool_runs()) == ["a0", "a1", "a2", "b0", "b1", "b2", "s"]  # each ran once
    assert http_sessions.methods().count("initialize") == 1  # the calls refused together shared one reopen
    assert tokens.drawn == ["whoami"] * 7  # a call sent again drew no second token
    told = [record.getMessage() for record in caplog.records]
    assert sum("no longer knows the router's session" in line for line in told) == 1, told
    assert not any("went away" in line or "unavailable" in line for line in told), told


async def test_a_backend_that_keeps_refusing_the_session_gets_each_call_once_more_not_in_a_loop(
    http_sessions: HttpSessions, caplog: pytest.LogCaptureFixture
) -> None:
    # Before the resend was settled, a call's first refusal on the new session closed it while another
    # call's last try probed it, and that entry said "went away" (mcp 1.28.0, anyio 4.7.0). Now a
    # session's refusal closes that session alone, and a refusal on the new one is an error.
    await http_sessions.start()
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        await http_sessions.restart(SESSIONS_REFUSE_CALLS="1")  # it refuses every call on every session
        started = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger=BACKENDS_LOG):
            results = await whoami_batch(router, *(f"b{index}" for index in range(6)))
        elapsed = time.perf_counter() - started
    refused = "the backend refused the call on a new session too: it does not know the router's MCP session (HTTP 404)"
    assert [(item["status"], item["error"]) for item in results] == [("error", refused)] * 6
    methods = http_sessions.methods()
    assert 6 <= methods.count("tools/call") <= 12  # each call once, and once more unless its new session was refused
    assert methods.count("initialize") <= 3 and http_sessions.tool_runs() == []
    told = [record.getMessage() for record in caplog.records]
    assert not any("went away" in line for line in told), told
    assert elapsed < 8, f"{elapsed:.1f}s: the calls waited for their time limit"


async def test_calls_refused_with_a_concurrency_of_one_each_reopen_once_and_answer_refused(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One call at a time: each call's first try lands on the session the one before it had opened, so
    # each refusal closes a session no other call is using, and each call is sent exactly twice.
    monkeypatch.setenv(settings.CONCURRENCY, "1")
    await http_sessions.start()
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        await http_sessions.restart(SESSIONS_REFUSE_CALLS="1")
        results = await whoami_batch(router, "b0", "b1", "b2")
    assert [item["status"] for item in results] == ["error"] * 3
    assert all("refused the call on a new session too" in item["error"] for item in results), results
    assert http_sessions.methods().count("tools/call") == 6 and http_sessions.tool_runs() == []


async def test_the_call_time_limit_bounds_the_first_try_the_reopen_and_the_resend(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.CALL_TIMEOUT, "2")
    await http_sessions.start()
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        await http_sessions.restart(SESSIONS_SLOW_INITIALIZE="30")  # it will not answer the reopen in time
        started = time.perf_counter()
        results = await whoami_batch(router, "b0", "b1")
        elapsed = time.perf_counter() - started
    timed_out = "TimeoutError: the backend call timed out after 2s"
    assert [(item["status"], item["error"]) for item in results] == [("error", timed_out)] * 2
    assert "initialize" in http_sessions.methods() and http_sessions.tool_runs() == []
    assert elapsed < 15, f"{elapsed:.1f}s: the reopen was not bounded by the call time limit"


@pytest.mark.skipif(_compat.SDK_2, reason="SDK 1.x's own error for an HTTP 404")
def test_on_sdk_1_a_404_proves_the_call_never_ran_only_for_a_tool_the_session_listed() -> None:
    from mcp.shared.exceptions import McpError
    from mcp.types import ErrorData

    refused = McpError(ErrorData(code=32600, message="Session terminated"))
    # 1.x lists the tools after a call when its session has not listed this one, to check the result:
    # a 404 to that list comes after the tool ran.
    assert _compat.client._CallRecord(listed=True).proves_session_unknown(refused)
    assert not _compat.client._CallRecord(listed=False).proves_session_unknown(refused)
    other = McpError(ErrorData(code=-32600, message="Session terminated"))  # a server's own words
    assert not _compat.client._CallRecord(listed=True).proves_session_unknown(other)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts descriptors in /proc")
async def test_calls_cut_off_on_an_http_backend_that_never_answers_leave_no_connection_or_task_behind(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A streamable HTTP server answers each call on a response stream of its own. Before, a call cut off
    # by its time limit left that stream open for the answer, and a backend that never answers kept one
    # connection and one task in the router per call cut off, for the HTTP client's 300 s read limit:
    # four more of each every round here (mcp 1.28.0 to 2.3.0), until the connection pool (100) ran out.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "1")
    await http_sessions.start(SESSIONS_DEAF_TO_CANCELS="1")
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        first, counts = await held_after_rounds_of_calls_cut_off(router, warmed_up=lambda: anyio.sleep(3.0))
        assert counts == [first] * 3, (first, counts)  # (fds, children, tasks) after each round
        assert [item["status"] for item in await whoami_batch(router, "after")] == ["ok"]
    assert http_sessions.tool_runs().count("hang") == 16


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts descriptors in /proc")
async def test_calls_cut_off_on_an_http_backend_with_an_event_store_are_not_resumed(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A server that keeps an event store gives its answers' events ids, and the SDK's client, finding the
    # answer's stream closed with no answer, asks for the rest 1 s later (Last-Event-ID) on a stream the
    # server holds open until the answer. Before, that held one connection and one task per call cut off,
    # as the test above did before its fix: four more of each a round (mcp 1.28.0 to 2.3.0).
    monkeypatch.setenv(settings.CALL_TIMEOUT, "1")

    async def warmed_up() -> None:  # the SDK tries twice to resume each call, 1 s apart, then lets it go
        await refused_at_least(caplog, 4 * 2)
        await anyio.sleep(0.3)

    await rounds_on_an_event_store_backend_hold_nothing(http_sessions, caplog, warmed_up, "hang", 1)
    # Each call's resumption refused (the SDK tries twice, 1 s apart, from mcp 1.28.0 to 2.3.0), and the
    # backend never asked: no try got through. (A whole number of tries for each of the 16 calls was asked
    # here too, but the router may close before the last round's second tries: 30 were seen under load.)
    refused = resumptions_refused(caplog)
    assert refused >= 16, refused
    assert http_sessions.methods().count("resume") == 0  # the backend was never asked
    assert http_sessions.tool_runs().count("hang") == 16


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts descriptors in /proc")
async def test_calls_cut_off_on_a_stream_resumed_before_leave_no_connection_or_task_behind(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # hang_resumed closes its answer's stream at once: the client resumes it 1 s later, and the router
    # gives up at 2 s, with the resumed stream open. Before, that stream stayed open until the answer
    # (mcp 2.3.0: +3.8 fds and tasks a round), though a resumption asked for after the call was abandoned
    # was refused.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "2")

    async def warmed_up() -> None:  # once closed, each call's stream is asked for again, and refused
        await refused_at_least(caplog, 4)
        await anyio.sleep(1.5)  # a second try, 1 s after the first

    # A stream the backend closed may also end in SDK 2.x's own words, when it could not resume it in time.
    await rounds_on_an_event_store_backend_hold_nothing(
        http_sessions, caplog, warmed_up, "hang_resumed", 2, also_ends=(SDK_GAVE_UP_RESUMING,)
    )
    # Each call's stream resumed before it was cut off, but for one the SDK could not resume (see SDK_GAVE_UP_RESUMING)
    assert 12 <= http_sessions.methods().count("resume") <= 16
    assert http_sessions.tool_runs().count("hang_resumed") == 16


SDK_HTTP_CLIENT_LOG = "mcp.client.streamable_http"


async def rounds_on_an_event_store_backend_hold_nothing(
    http_sessions: HttpSessions,
    caplog: pytest.LogCaptureFixture,
    warmed_up: Callable[[], Awaitable[None]],
    tool: str,
    seconds: int,
    also_ends: tuple[str, ...] = (),
) -> None:
    """Rounds of calls to ``tool`` cut off at ``seconds`` on a backend that keeps an event store and ignores
    cancels leave the router holding what it held after the first; the backend answers a call after them.
    ``also_ends``: errors a call may end with besides the router's time-out."""
    await http_sessions.start(SESSIONS_DEAF_TO_CANCELS="1", SESSIONS_EVENT_STORE="1")
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        with caplog.at_level(logging.DEBUG, logger=SDK_HTTP_CLIENT_LOG):
            first, counts = await held_after_rounds_of_calls_cut_off(router, warmed_up, tool, seconds, also_ends)
        assert counts == [first] * 3, (first, counts)  # (fds, children, tasks) after each round
        assert [item["status"] for item in await whoami_batch(router, "after")] == ["ok"]


def resumptions_refused(caplog: pytest.LogCaptureFixture) -> int:
    """How many requests to resume an answer the router refused (the SDK logs each failed one, with why)."""
    return sum("the rest of its answer is not asked for" in record.getMessage() for record in caplog.records)


async def refused_at_least(caplog: pytest.LogCaptureFixture, count: int) -> None:
    with anyio.move_on_after(10):  # without the fix none is: the test then goes on, to fail on its counts
        while resumptions_refused(caplog) < count:
            await anyio.sleep(0.05)


async def test_a_call_whose_answer_stream_closes_on_a_backend_with_an_event_store_is_resumed_and_answered(
    http_sessions: HttpSessions,
) -> None:
    # What the router refuses to resume is only a call it gave up on: one it still waits for gets its answer.
    await http_sessions.start(SESSIONS_EVENT_STORE="1")
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        with anyio.fail_after(30):
            answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": "relay"}] * 2})
    assert [(item["status"], item.get("result")) for item in answer.structured["results"]] == [
        ("ok", {"relayed": True})
    ] * 2, answer.structured
    assert http_sessions.methods().count("resume") == 2 and http_sessions.tool_runs() == ["relay"] * 2


# SDK 2.x's own end of a call whose stream it could not resume in time (seen once under load, resuming a
# stream the backend closed): the call ends all the same, which is all the resumed-stream test's rounds need.
SDK_GAVE_UP_RESUMING = "SSE stream ended without a response"


async def held_after_rounds_of_calls_cut_off(
    router: Router,
    warmed_up: Callable[[], Awaitable[None]],
    tool: str = "hang",
    seconds: int = 1,
    also_ends: tuple[str, ...] = (),
) -> tuple[Any, list[Any]]:
    """What the process holds (``held_resources``) once a warm-up round has ended (``warmed_up``), then after
    each of three rounds of four calls of ``tool`` that the router cuts off (the call time limit: ``seconds``;
    a call may also end with one of ``also_ends``)."""
    hangs = [{"name": tool, "id": f"h{index}"} for index in range(4)]
    await call(router.server, "invoke_read_tool_batch", {"calls": hangs})  # warms the pool and the probe
    await warmed_up()  # the warm-up's cut-off calls end
    first = held_resources()
    counts = []
    ends = {f"TimeoutError: the backend call timed out after {seconds}s", *also_ends}
    for _ in range(3):
        answer = await call(router.server, "invoke_read_tool_batch", {"calls": hangs})
        results = answer.structured["results"]
        assert all(item["status"] == "error" and item["error"] in ends for item in results), results
        counts.append(await settled(held_resources, first))
    return first, counts


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_router_connected_again_after_it_left_serves_its_remote_backend_at_once(
    transport: str, state: Path, http_sessions: HttpSessions
) -> None:
    # SDK 1.x enters the server's lifespan, and so ``connected()``, once per session (per request when
    # stateless). Before, a second ``connected()`` after the first had ended found the first one's state:
    # over HTTP its calls went to the closed session ("went away: SessionClosed") until a new one opened,
    # and a stdio backend, told to close as the router left, was never opened again ("not connected").
    if transport == "http":
        await http_sessions.start()
        spec: StdioBackend | HttpBackend = HttpBackend(http_sessions.url)
    else:
        state.write_text("v1")
        spec = shifting_spec(state)
    router = Router({"up": spec})
    pids = []
    for _ in range(2):
        async with router.connected():
            answer = (await call(router.server, "invoke_read_tool", {"name": "whoami"})).structured
            assert "pid" in answer, answer
            pids.append(answer["pid"])
    assert len(set(pids)) == (1 if transport == "http" else 2)  # a stdio backend is started anew


# -- a session the router closes, and verdicts on a session it has replaced --------------------


async def test_a_call_waiting_on_a_session_the_router_closes_fails_at_once(http_sessions: HttpSessions) -> None:
    # Before, on SDK 1.x, a call waiting on a session as the router closed it waited out its whole time
    # limit (here it has none: it waited for ever); a probe did the same.
    await http_sessions.start()
    backend = RemoteBackend("up", HttpBackend(http_sessions.url))
    outcome: list[BaseException] = []

    async def slow_call() -> None:
        try:
            await backend.call("pause", {"seconds": 60})
        except Exception as exc:
            outcome.append(exc)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(backend.run)
            await backend.first_attempt.wait()
            assert backend.client is not None, backend.error
            tasks.start_soon(slow_call)
            while "pause" not in http_sessions.tool_runs():  # the call is under way on the backend
                await anyio.sleep(0.02)
            started = time.perf_counter()
            backend.close()
            await backend.stopped.wait()
            while not outcome:
                await anyio.sleep(0.02)
            waited = time.perf_counter() - started
    assert isinstance(outcome[0], ConnectionError) and "went away" in str(outcome[0]), outcome
    assert waited < 10, f"{waited:.1f}s: the call waited on the closed session"


async def test_a_call_on_an_http_backend_killed_as_it_runs_fails_at_once_and_the_backend_serves_again(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, on SDK 1.x, the call waited out its whole time limit (30 s here; 60 by default): the answer's
    # stream broke with the process, and the SDK's client let the call go without a word. 2.x failed it at once.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "30")
    await http_sessions.start()
    router = Router({"up": HttpBackend(http_sessions.url)})

    async def kill_once_running() -> None:
        while "pause" not in http_sessions.tool_runs():
            await anyio.sleep(0.02)
        http_sessions.stop()

    async with router.connected():
        started = time.perf_counter()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(kill_once_running)
            [item] = await paused_batch(router)
        waited = time.perf_counter() - started
        assert item["status"] == "error" and item["error"].startswith("backend 'up' went away"), item
        assert waited < 15, f"{waited:.1f}s: the call waited for an answer that could not come"
        await http_sessions.start()  # the same port: the router opens a session with the new process
        with anyio.fail_after(60):
            while [item["status"] for item in await whoami_batch(router, "after")] != ["ok"]:
                await anyio.sleep(0.2)


async def test_a_call_whose_answer_stream_cannot_be_resumed_fails_at_once_and_the_session_serves_on(
    http_sessions: HttpSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The backend closes the answer's stream and refuses each request to resume it (HTTP 404), as an instance
    # behind a load balancer that does not hold the session would. Both SDK lines try twice, 1 s apart; before,
    # on SDK 1.x, the call then waited out its whole time limit.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "30")
    await http_sessions.start(SESSIONS_EVENT_STORE="1", SESSIONS_REFUSE_RESUMES="1")
    router = Router({"up": HttpBackend(http_sessions.url)})
    async with router.connected():
        started = time.perf_counter()
        with anyio.fail_after(60):
            answer = await call(
                router.server,
                "invoke_read_tool_batch",
                {"calls": [{"name": "hang_resumed"}, {"name": "whoami", "arguments": {"tag": "beside"}}]},
            )
        waited = time.perf_counter() - started
        lost, beside = answer.structured["results"]
        after = await whoami_batch(router, "after")
    assert lost["status"] == "error" and "stream ended" in lost["error"], lost  # SDK 2.x's words, or the router's
    assert waited < 15, f"{waited:.1f}s: the call waited for an answer that could not come"
    assert [beside["status"], *(item["status"] for item in after)] == ["ok", "ok"], (beside, after)
    assert http_sessions.methods().count("resume") >= 1 and http_sessions.methods().count("initialize") == 1


async def paused_batch(router: Router) -> list[dict[str, Any]]:
    with anyio.fail_after(60):
        answer = await call(
            router.server, "invoke_read_tool_batch", {"calls": [{"name": "pause", "arguments": {"seconds": 60}}]}
        )
    results: list[dict[str, Any]] = answer.structured["results"]
    return results


async def test_a_late_verdict_on_a_replaced_session_leaves_the_new_session_open(http_sessions: HttpSessions) -> None:
    # A call that failed on a session after the router had replaced it probes that old session, which
    # answers nothing: before, that verdict broke whichever session was open by then.
    await http_sessions.start()
    backend = RemoteBackend("up", HttpBackend(http_sessions.url))
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(backend.run)
            await backend.first_attempt.wait()
            old = backend.client
            assert old is not None, backend.error
            await http_sessions.restart()
            answer = await _answered_on_a_new_session(backend)
            new = backend.client
            assert answer.structured == {"pid": http_sessions.pid, "tag": "after"} and new is not old
            with pytest.raises(ConnectionError, match="went away"):
                await backend._call(old, "whoami", {"tag": "late"})  # how a call begun on the old session ends
            await anyio.sleep(0.3)  # a reopen would be under way by now
            assert backend.client is new and not backend._broken.is_set()
            assert (await backend.call("whoami", {"tag": "still"})).structured["tag"] == "still"
            backend.close()
    assert http_sessions.methods().count("initialize") == 1  # the new process saw one session: no second reopen
    assert http_sessions.tool_runs() == ["after", "still"]


async def _answered_on_a_new_session(backend: RemoteBackend) -> _compat.Answer:
    """The answer of a call on the session that replaced the backend's lost one.

    Refused, reopened and sent again, mostly; but mcp 2.0.0 may end the session itself as the old
    process dies (its event stream's ReadError), and a call sent while it ends went away.
    """
    while True:
        try:
            return await backend.call("whoami", {"tag": "after"})
        except ConnectionError:
            await anyio.sleep(0.1)
