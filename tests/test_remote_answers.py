"""What a remote backend answers, beyond a plain JSON text, as ``invoke_read_tool`` and a batch entry see it.

The backend is ``backends/hostile.py``, a real stdio subprocess that speaks bare JSON-RPC, so it can
answer what no SDK server would: JSON-RPC errors to a call, answers the client refuses, images and
resources, a paged tool list, requests of its own to the client, a handshake it never answers.
Every case runs on both SDK lines (the router's client is the SDK's).
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

from centralmcp_batch import _compat, settings
from centralmcp_batch.router import Router, StdioBackend, backends, core
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio
TESTS = Path(__file__).resolve().parent
HOSTILE = str(TESTS / "backends" / "hostile.py")
REFUSED = "the router's MCP client refused the backend's answer"


@pytest.fixture(autouse=True)
def fast_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")


def hostile_router(**env: str) -> Router:
    return Router({"hostile": StdioBackend(sys.executable, (HOSTILE,), {**os.environ, **env})})


async def batch(router: Router, *names: str) -> list[dict[str, Any]]:
    with anyio.fail_after(30):
        answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": name} for name in names]})
    results: list[dict[str, Any]] = answer.structured["results"]
    return results


async def single(router: Router, name: str) -> dict[str, Any]:
    with anyio.fail_after(30):
        answer = await call(router.server, "invoke_read_tool", {"name": name})
    result: dict[str, Any] = answer.structured
    return result


async def pid(router: Router) -> int:
    return int((await single(router, "whoami"))["pid"])


# -- a call that fails alone leaves the session, and the other calls on it, alone --------


EXPECTED_ERRORS = {
    "rpc_error": "no such thing here",  # the backend's JSON-RPC error message, as a tool's error text
    "schema_mismatch": f"{REFUSED} (RuntimeError: Invalid structured content returned by tool schema_mismatch)",
    "schema_missing": (
        f"{REFUSED} (RuntimeError: Tool schema_missing has an output schema but did not return structured content)"
    ),
    "malformed": f"{REFUSED} (ValidationError)",
}


async def test_an_error_response_or_a_refused_answer_fails_only_its_own_entry() -> None:
    router = hostile_router()
    async with router.connected():
        before, client = await pid(router), router.remotes["hostile"].client
        names = [name for failing in EXPECTED_ERRORS for name in (failing, "plain")]
        results = await batch(router, *names)
        assert [item["status"] for item in results] == ["error", "ok"] * len(EXPECTED_ERRORS)
        assert [item["error"] for item in results[::2]] == list(EXPECTED_ERRORS.values())
        assert all(item["result"] == {"ok": 1} for item in results[1::2])
        for name, error in EXPECTED_ERRORS.items():  # a single read says the same
            assert await single(router, name) == {"error": error, "tool": name, "status": "error"}
        assert await pid(router) == before and router.remotes["hostile"].client is client  # never reconnected


# -- the probe after a failed call waits as long as the call may -------------------------


async def test_a_slow_probe_within_the_call_time_limit_keeps_the_session() -> None:
    # The probe is answered 6 s late, well within the default 60 s call time limit: the session is
    # sound and only slow, so the entry gets the backend's error and the session stays.
    router = hostile_router(HOSTILE_SLOW_PROBE="6")
    async with router.connected():
        before, client = await pid(router), router.remotes["hostile"].client
        results = await batch(router, "rpc_error")
        assert [(item["status"], item["error"]) for item in results] == [("error", "no such thing here")]
        assert router.remotes["hostile"].client is client and await pid(router) == before  # never reconnected


async def test_a_probe_gives_its_verdict_within_a_short_call_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # A session that answers a probe 60 s late does not answer within the 2 s a call may take: it is
    # reopened, and the entry says so, before its call time limit passes.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "2")
    router = hostile_router(HOSTILE_SLOW_PROBE="60")
    async with router.connected():
        before = await pid(router)
        results = await batch(router, "rpc_error")
        assert [(item["status"], item["error"]) for item in results] == [
            ("error", "backend 'hostile' went away: " + ("MCPError" if _compat.SDK_2 else "McpError"))
        ]
        with anyio.fail_after(30):  # reopened: a new backend process, which answers at once
            while "pid" not in (answer := await single(router, "whoami")):
                await anyio.sleep(0.1)
        assert answer["pid"] != before


async def test_a_probe_left_too_little_time_leaves_the_verdict_to_the_backends_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 0.5 s call time limit leaves its probe under MIN_PROBE_SECONDS: its silence could be a slow
    # session as well as a lost one, so the session, and the calls in flight on it, stay for now; the
    # backend's own check then waits its own time (4 s here), and reopens a session silent for 60 s.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "0.5")
    monkeypatch.setattr(backends, "MIN_CHECK_SECONDS", 4.0, raising=False)
    router = hostile_router(HOSTILE_SLOW_PROBE="60")
    async with router.connected():
        before, client = await pid(router), router.remotes["hostile"].client
        results = await batch(router, "rpc_error")
        # The verdict lands about 50 ms before the call's limit: on a loaded machine the limit may come
        # first. Either way the session, and the calls in flight on it, are kept.
        timed_out = "TimeoutError: the backend call timed out after 0.5s"
        assert [(item["status"], item["error"]) for item in results] in (
            [("error", "no such thing here")],
            [("error", timed_out)],
        )
        assert router.remotes["hostile"].client is client
        await reopened(router, before)


async def test_the_probe_waits_for_what_the_call_has_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.CALL_TIMEOUT, "1000")
    assert backends.probe_seconds() == backends.MAX_PROBE_SECONDS  # no deadline: the configured call limit
    monkeypatch.setenv(settings.CALL_TIMEOUT, "3")
    assert backends.probe_seconds() == pytest.approx(3 * backends.PROBE_SHARE)
    with anyio.move_on_after(10):  # the call's own deadline: 10 s left, less a tenth
        assert 8.0 < backends.probe_seconds() <= 9.0


# -- a session that stops answering without closing is checked, and reopened -----------

TIMED_OUT = "TimeoutError: the backend call timed out after 0.5s"


def gone(process_id: int) -> bool:
    try:
        os.kill(process_id, 0)
    except ProcessLookupError:
        return True
    return False


async def reopened(router: Router, before: int) -> int:
    """The pid of the backend process that answers ``whoami`` once the session is reopened."""
    with anyio.fail_after(30):  # the check waits a few seconds, then the reconnect's 0.5 s
        while (answer := await single(router, "whoami")).get("pid") in (None, before):
            await anyio.sleep(0.1)
    return int(answer["pid"])


async def test_a_backend_that_ends_every_session_as_it_opens_is_restarted_ever_more_slowly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # It answers the handshake, then exits: each end is noticed at once, and a restart every half
    # second for as long as the router runs (with a warning each time) would be what it got.
    seen = tmp_path / "seen"
    router = hostile_router(HOSTILE_SEEN=str(seen), HOSTILE_QUIT_AFTER_LIST="1")
    with caplog.at_level(logging.DEBUG, logger=backends.__name__):
        async with router.connected():
            await anyio.sleep(6)
            delay = router.remotes["hostile"].retry_delay()
    starts = seen.read_text().split().count("initialize")
    # the delays double from 0.5 s: starts at about 0, 0.5, 1.5 and 3.5 s (before: about ten)
    assert 2 <= starts <= 6, starts
    assert delay >= 2.0
    told = [record.levelno for record in caplog.records if "closed its session" in record.getMessage()]
    assert told[:1] == [logging.WARNING] and set(told[1:]) <= {logging.DEBUG}, told


@pytest.mark.parametrize("how", ["sigstop", "freeze"])
async def test_a_session_that_stops_answering_is_reopened_after_a_call_times_out(
    how: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A stopped process, or one stuck for good, closes nothing: every call on it is cut off by its
    # time limit, and none fails in a way the probe after a failed call would look into.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "0.5")
    router = hostile_router()
    with caplog.at_level(logging.WARNING, logger=backends.__name__):
        async with router.connected():
            first = await pid(router)
            try:
                if how == "sigstop":
                    os.kill(first, signal.SIGSTOP)
                results = await batch(router, "plain" if how == "sigstop" else "freeze")
                assert [(item["status"], item["error"]) for item in results] == [("error", TIMED_OUT)]
                second = await reopened(router, first)
                assert [item["status"] for item in await batch(router, "plain")] == ["ok"]
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(first, signal.SIGCONT)
            assert gone(first)  # the stopped process was ended when its session closed
    assert gone(second)
    told = [record.getMessage() for record in caplog.records if record.name == backends.__name__]
    assert any("did not answer a probe" in line and "reopening" in line for line in told), told


async def test_a_stuck_backend_whose_input_is_full_cannot_hold_a_batch_past_its_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A backend stuck for good stops reading its stdin: once the pipe is full (64 KB on Linux), every
    # message to it waits, the notice that a cut-off call was abandoned too. That notice is sent shielded
    # (the call's own cancellation must not stop it). On SDK 1.x, where the router sends it, it had no
    # limit of its own and held its entry, the batch and the router's stop for as long as the backend
    # stayed stuck; it now gives up after 1 s. SDK 2.x sends its own and gives up after 5 s.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "1")
    monkeypatch.setenv(settings.BATCH_TIMEOUT, "3")
    monkeypatch.setenv(settings.CONCURRENCY, "8")
    router = hostile_router()
    pad = "x" * 19_000  # the tool takes any object: eight calls of this fill the pipe
    calls = [{"name": "freeze", "arguments": {"pad": pad}} for _ in range(8)]
    async with router.connected():
        first = await pid(router)
        started = time.perf_counter()
        with anyio.fail_after(30):
            answer = await call(router.server, "invoke_read_tool_batch", {"calls": calls})
        elapsed = time.perf_counter() - started
        assert [item["status"] for item in answer.structured["results"]] == ["error"] * 8
        assert elapsed < 15, f"{elapsed:.1f}s: the batch time limit is 3 s"
    assert gone(first)


async def test_calls_cut_off_together_start_one_probe_and_a_late_answer_keeps_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four calls never answered, cut off together: one probe, answered a second late (within the
    # check's 2 s), so the session stays. The next calls cut off start the next probe.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "0.5")
    monkeypatch.setenv(settings.CONCURRENCY, "4")
    seen = tmp_path / "seen"
    router = hostile_router(HOSTILE_SEEN=str(seen), HOSTILE_SLOW_PROBE="1")

    def probes() -> int:
        return sum(line in backends_probes() for line in seen.read_text().split())

    async with router.connected():
        before, client = await pid(router), router.remotes["hostile"].client
        for _ in range(2):
            sent = probes()
            results = await batch(router, *["silent"] * 4)
            assert [(item["status"], item["error"]) for item in results] == [("error", TIMED_OUT)] * 4
            with anyio.fail_after(20):
                while probes() == sent:
                    await anyio.sleep(0.05)
            await anyio.sleep(2)  # a probe per call would have been seen by now, each a second apart at most
            assert probes() == sent + 1
        assert router.remotes["hostile"].client is client and await pid(router) == before


def backends_probes() -> tuple[str, ...]:
    return ("tools/list",) if _compat.SDK_2 else ("ping",)  # what ClientHandle.probe sends


async def test_a_slow_backend_answering_its_probe_keeps_its_session_and_the_calls_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An SDK server answers a probe while its tools take their time: calls cut off by a 0.5 s limit
    # leave the session, and a 4 s call in flight on it (no time limit: a host calling it itself), alone.
    monkeypatch.setenv(settings.CALL_TIMEOUT, "0.5")
    env = {**os.environ, "LINGER_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    router = Router({"idle": StdioBackend(sys.executable, (str(TESTS / "backends" / "lingering.py"), "idle"), env)})
    remote = router.remotes["idle"]
    in_flight: list[Any] = []

    async def long_call() -> None:
        in_flight.append(await remote.call("idle_slow", {"seconds": 4}))

    with caplog.at_level(logging.DEBUG, logger=backends.__name__), anyio.fail_after(30):
        async with router.connected():
            client = remote.client
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(long_call)
                slow = [{"name": "idle_slow", "arguments": {"seconds": 30}}] * 3
                answer = await call(router.server, "invoke_read_tool_batch", {"calls": slow})
                assert [item["status"] for item in answer.structured["results"]] == ["error"] * 3
                while not any("answered a probe" in record.getMessage() for record in caplog.records):
                    await anyio.sleep(0.05)
            assert not in_flight[0].is_error and in_flight[0].payload["slept"] == 4
            assert remote.client is client
    assert not any("reopening" in record.getMessage() for record in caplog.records)


# -- the whole tool list, over every page ---------------------------------------------


async def test_every_page_of_a_paged_tool_list_reaches_the_catalog() -> None:
    router = hostile_router(HOSTILE_PAGES="4", HOSTILE_EXTRA="30")
    async with router.connected():
        assert "extra_29" in router.catalog.entries and "plain" in router.catalog.entries
        results = await batch(router, "extra_29", "extra_0", "plain")
        assert [item["status"] for item in results] == ["ok", "ok", "ok"]
        found = await call(router.server, "find_tool", {"query": "extra_29"})
        assert [hit["name"] for hit in found.structured["results"]][:1] == ["extra_29"]


# -- a handshake that is never answered is given up on, and tried again ------------------


async def test_a_backend_that_never_answers_its_handshake_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "HANDSHAKE_SECONDS", 1.0, raising=False)
    monkeypatch.setattr(core, "FIRST_CONNECT_SECONDS", 10.0)
    mute = tmp_path / "mute"
    mute.write_text("")
    router = hostile_router(HOSTILE_MUTE=str(mute))
    with anyio.fail_after(30):
        async with router.connected():
            assert router.backend_errors == {"hostile": "TimeoutError: no answer to the MCP handshake within 1s"}
            mute.unlink()  # the next start answers
            while "plain" not in router.catalog.entries:
                await anyio.sleep(0.1)
            assert [item["status"] for item in await batch(router, "plain")] == ["ok"]


# -- answers that are not one JSON text -----------------------------------------------

PNG = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
CONTENT = {
    "image_only": [PNG],
    "audio_only": [{"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}],
    "embedded": [{"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}}],
    "link": [{"type": "resource_link", "uri": "file:///b.txt", "name": "b"}],
    "text_and_image": [{"type": "text", "text": '{"n": 1}'}, PNG],
}


async def test_images_audio_and_resources_come_back_as_their_content_blocks() -> None:
    router = hostile_router()
    async with router.connected():
        results = await batch(router, *CONTENT)
        for item, (name, blocks) in zip(results, CONTENT.items(), strict=True):
            assert item["status"] == "ok", item
            assert item["result"]["content"] == blocks
            alone = await single(router, name)
            assert alone["content"] == blocks  # a single read and a batch entry agree


async def test_other_answers_that_are_not_one_json_text() -> None:
    router = hostile_router()
    async with router.connected():
        results = {item["tool"]: item for item in await batch(router, *EXPECTED_OTHERS)}
        for name, expected in EXPECTED_OTHERS.items():
            item = results[name]
            assert {key: item[key] for key in expected} == expected, item
            alone = await single(router, name)
            if item["status"] == "ok":
                assert alone == item["result"]
            else:
                assert alone == {"error": item["error"], "tool": name, "status": item["status"]}


async def test_an_in_process_backend_answering_an_image_says_so_too() -> None:
    types = importlib.import_module("mcp_types" if _compat.SDK_2 else "mcp.types")
    server = _compat.new_server("pictures")

    def snapshot():  # type: ignore[no-untyped-def]
        return types.ImageContent(type="image", data=PNG["data"], mimeType="image/png")

    snapshot.__annotations__["return"] = types.ImageContent
    read = _compat.ToolAnnotations(readOnlyHint=True)
    server.add_tool(snapshot, name="snapshot", annotations=read, structured_output=False)  # content blocks only
    router = Router({"pictures": server})
    item = (await batch(router, "snapshot"))[0]
    assert item["status"] == "ok" and item["result"]["content"] == [PNG]
    assert (await single(router, "snapshot"))["content"] == [PNG]


EXPECTED_OTHERS: dict[str, dict[str, Any]] = {
    "empty": {"status": "ok", "result": {"result": ""}},
    "two_texts": {"status": "ok", "result": {"result": '{"a": 1}\n{"b": 2}'}},
    "not_json": {"status": "ok", "result": {"result": "plain words, not JSON"}},
    "disagree": {"status": "ok", "result": {"a": 1}},  # structured content wins over its text
    "error_text": {"status": "error", "error": "the device said no"},
    "error_structured": {"status": "error", "error": "the tool reported an error"},
    # a JSON text holding a lone surrogate: no JSON response can carry it, so the entry fails
    "surrogate": {"status": "error"},
}


# -- NaN and the infinities, which no JSON has -------------------------------------------


def strict_json(text: str) -> Any:
    """``text`` parsed as JSON proper: NaN, Infinity and -Infinity are refused."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} in the answer's text")

    return json.loads(text, parse_constant=refuse)


async def test_nan_and_infinity_from_a_backend_are_null_in_batch_entries_and_single_reads() -> None:
    # The backend writes them as Python's json does (NaN, Infinity): in its structured content, in its text,
    # and as the whole text. A read that returns NaN is a read: the entry is ok, and JSON says null.
    router = hostile_router()
    expected = {
        "nan_structured": {"ratio": None, "rows": [None, 1]},
        "nan_text": {"ratio": None, "low": None, "rows": [None, 2]},
        "nan_alone": {"result": None},
    }
    async with router.connected():
        with anyio.fail_after(30):
            answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": n} for n in expected]})
        assert strict_json(answer.text) == answer.structured
        for item, (name, result) in zip(answer.structured["results"], expected.items(), strict=True):
            assert item["status"] == "ok", item
            assert {key: item["result"][key] for key in result} == result
            with anyio.fail_after(30):
                alone = await call(router.server, "invoke_read_tool", {"name": name})
            assert {key: alone.structured[key] for key in result} == result
            strict_json(alone.text)


# -- a backend that asks or tells the client things during a call ------------------------


async def test_requests_and_notifications_from_a_backend_mid_call_neither_hang_nor_break_it() -> None:
    router = hostile_router()
    async with router.connected():
        with anyio.fail_after(20):
            results = await batch(router, "sampling", "elicit", "roots", "chatty", "plain")
        assert [item["status"] for item in results] == ["ok"] * 5
        # the router's client declines sampling, elicitation and roots: the backend hears an error
        assert [item["result"] for item in results[:3]] == [{"client_answered": "error"}] * 3
        assert results[3]["result"] == {"told": True}


# -- hostile tool names ---------------------------------------------------------------


async def test_hostile_tool_names() -> None:
    router = hostile_router()
    long_name = "x" * 10_000
    async with router.connected():
        results = await batch(router, "invoke_read_tool_batch", "find_tool", "odd name/with:chars é", long_name)
        assert [item["status"] for item in results] == ["blocked", "ok", "ok", "invalid_call"]
        assert results[0]["server"] is None  # the batch never calls itself, nor a backend tool of its name
        assert results[1]["result"] == {"who": "backend find_tool"}  # a catalog name, not the router's tool
        assert long_name not in json.dumps(results)
        # a single read names the backend tool (only a batch refuses its own name), and goes through the same
        # entry checks as a batch entry: a name over 200 characters is refused, and not echoed
        assert await single(router, "invoke_read_tool_batch") == {"who": "backend"}
        refused = await single(router, long_name)
        assert refused["status"] == "invalid_call" and refused["error"] == "name must be at most 200 characters"
        assert long_name not in json.dumps(refused)


# -- why a backend cannot be reached, as the log and the entries tell it --------------------

URL_TOKEN = "tok-9f2c1e"


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_DELETE = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def unauthorized_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://ops:pw-{URL_TOKEN}@127.0.0.1:{server.server_port}/mcp?token={URL_TOKEN}"  # a password and a token
    server.shutdown()
    server.server_close()


async def test_an_http_backend_that_refuses_is_told_by_what_it_said_and_never_by_its_url(
    unauthorized_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = backends.RemoteBackend("guarded", backends.HttpBackend(unauthorized_url))
    with caplog.at_level(logging.WARNING, logger=backends.__name__), anyio.move_on_after(1.5):
        await backend.run()
    told = [record.getMessage() for record in caplog.records if record.name == backends.__name__]
    assert backend.error is not None and told
    # what the server said, not the task group the SDK's client failed in (SDK 1.x: httpx's status error)
    assert "TaskGroup" not in backend.error
    assert "401" in backend.error or backend.error == "MCPError: Server returned an error response"
    assert all(URL_TOKEN not in text for text in [backend.error, *told])


def test_a_failure_is_told_by_its_one_cause_with_a_urls_host_only() -> None:
    cause = RuntimeError(f"Client error '401' for url 'https://u:{URL_TOKEN}@api.example.net/mcp?t={URL_TOKEN}'\nSee")
    wrapped = BaseExceptionGroup("outer", [ExceptionGroup("inner", [cause])])
    assert backends.describe_failure(wrapped) == "RuntimeError: Client error '401' for url 'https://api.example.net'"
    assert backends.describe_failure(TimeoutError()) == "TimeoutError"
    two = ExceptionGroup("two", [ValueError("a"), KeyError("b")])  # no one cause to tell: the group itself
    assert backends.describe_failure(two) == "ExceptionGroup: two (2 sub-exceptions)"
