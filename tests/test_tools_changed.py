"""A remote backend that says its tools changed (``notifications/tools/list_changed``) has its catalog entries
replaced before the next call to it is gated: over stdio and streamable HTTP, on both SDK lines.

The backend (``backends/shifting.py`` with ``SHIFTING_LIVE``) switches its tools to the state file's as a call
finds the file changed, and tells the router before it answers that call. The same process serves on: what
the router sees comes from the notification, never from a restart.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from centralmcp_batch import _compat
from centralmcp_batch.router import HttpBackend, Router, StdioBackend
from centralmcp_batch.router.catalog import BackendOptions
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent
SHIFTING = str(HERE / "backends" / "shifting.py")
NOT_READ_ONLY = (
    "Tool 'flip' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
)
UNKNOWN_VANISH = "Unknown tool 'vanish'. Use find_tool to discover."


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    path = tmp_path / "state"
    path.write_text("v1")
    return path


def backend_env(state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SHIFTING_STATE": str(state),
        "SHIFTING_LIVE": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }


def stdio_spec(state: Path) -> StdioBackend:
    return StdioBackend(sys.executable, (SHIFTING,), backend_env(state))


@pytest.fixture
def http_url(state: Path) -> Iterator[str]:
    """The live shifting backend as a stateful streamable HTTP server in its own process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    command = [sys.executable, SHIFTING, "--http", str(port)]
    process = subprocess.Popen(command, env=backend_env(state), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=15)


def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the HTTP backend did not start") from None
            time.sleep(0.05)


@asynccontextmanager
async def serving(router: Router) -> AsyncIterator[Router]:
    async with router.connected():
        yield router


async def batch(router: Router, *names: str) -> list[dict[str, Any]]:
    with anyio.fail_after(60):
        answer = await call(router.server, "invoke_read_tool_batch", {"calls": [{"name": name} for name in names]})
    results: list[dict[str, Any]] = answer.structured["results"]
    return results


def statuses(items: list[dict[str, Any]]) -> list[str]:
    return [item["status"] for item in items]


async def read(router: Router, name: str) -> dict[str, Any]:
    with anyio.fail_after(60):
        answer: dict[str, Any] = (await call(router.server, "invoke_read_tool", {"name": name})).structured
    return answer


async def capabilities(router: Router) -> dict[str, str]:
    answer = await call(router.server, "find_tool", {"query": "shifting", "top_k": 10})
    return {hit["name"]: hit["capability"] for hit in answer.structured["results"]}


async def switch_to_v2(router: Router, state: Path) -> int:
    """Write the new state, and make one call that finds it: the backend switches and tells the router."""
    before = await read(router, "whoami")
    state.write_text("v2")
    after = await read(router, "whoami")
    assert after == {"pid": before["pid"], "state": "v2"}  # the same process: no restart
    return int(after["pid"])


async def heard_the_change(router: Router) -> None:
    with anyio.fail_after(10):
        while (flip := router.catalog.find("flip")) is not None and flip.read_only:
            await anyio.sleep(0.01)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tool_turned_destructive_is_blocked_from_the_next_call_on(
    transport: str, state: Path, request: pytest.FixtureRequest
) -> None:
    spec: StdioBackend | HttpBackend
    spec = stdio_spec(state) if transport == "stdio" else HttpBackend(request.getfixturevalue("http_url"))
    async with serving(Router({"shifting": spec})) as router:
        assert statuses(await batch(router, "flip", "vanish", "fresh")) == ["ok", "ok", "unknown_tool"]
        pid = await switch_to_v2(router, state)
        if transport == "http":
            # The notification comes on a stream of its own (the session's GET stream, or a 2026-07-28
            # subscription's), which may deliver it after the answer of the call during which it was sent.
            await heard_the_change(router)
        # on stdio, where the notification comes before that answer: the very next batch, no wait
        assert statuses(await batch(router, "flip", "vanish", "fresh")) == ["blocked", "unknown_tool", "ok"]
        assert await read(router, "flip") == {"error": NOT_READ_ONLY, "tool": "flip", "status": "blocked"}
        assert await capabilities(router) == {"whoami": "read", "flip": "destructive", "fresh": "read"}
        assert (await read(router, "whoami"))["pid"] == pid


async def test_a_call_checked_before_the_change_is_checked_again_before_it_is_sent(state: Path) -> None:
    # The race inside a batch: an entry gated on the old list, whose call would go out after the backend
    # said the tool changed. Here the entry's ToolRef is taken before the change, as the gate saw it.
    async with serving(Router({"shifting": stdio_spec(state)})) as router:
        flip, vanish = router.catalog.find("flip"), router.catalog.find("vanish")
        assert flip is not None and flip.read_only and vanish is not None
        await switch_to_v2(router, state)
        assert await router.dispatch(flip, {}, None, None) == {"status": "blocked", "error": NOT_READ_ONLY}
        assert await router.dispatch(vanish, {}, None, None) == {"status": "unknown_tool", "error": UNKNOWN_VANISH}
        whoami = router.catalog.find("whoami")
        assert whoami is not None
        assert (await router.dispatch(whoami, {}, None, None))["state"] == "v2"  # an unchanged tool is called


async def test_a_batch_whose_first_entry_brings_the_change_blocks_the_entries_after_it(state: Path) -> None:
    # One call at a time to the backend, in call order: flip and vanish are looked up while whoami runs, and
    # whoami's call is the one that finds the new state. Either way they are refused, never sent.
    router = Router({"shifting": stdio_spec(state)}, options={"shifting": BackendOptions(concurrency=1)})
    async with serving(router):
        await read(router, "whoami")
        state.write_text("v2")
        items = await batch(router, "whoami", "flip", "vanish")
        assert statuses(items) == ["ok", "blocked", "unknown_tool"]
        assert items[0]["result"]["state"] == "v2"
        assert items[1]["error"] == NOT_READ_ONLY


async def test_a_tool_renamed_into_a_name_another_backend_serves_stays_with_that_backend(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = _compat.new_server("other")

    def fresh() -> dict[str, str]:
        return {"served_by": "other"}

    _compat.add_tool(
        other, fresh, name="fresh", description="the other backend's fresh", annotations={"readOnlyHint": True}
    )
    async with serving(Router({"shifting": stdio_spec(state), "other": other})) as router:
        with caplog.at_level(logging.ERROR, logger="centralmcp_batch.router.core"):
            await switch_to_v2(router, state)
            await switch_to_v2(router, state)  # told again with no change: not logged again
        assert router.conflicts == {"shifting": {"fresh": "other"}}
        items = await batch(router, "fresh", "vanish", "flip")
        assert statuses(items) == ["ok", "unknown_tool", "blocked"]
        assert (items[0]["server"], items[0]["result"]) == ("other", {"served_by": "other"})
        told = [record.getMessage() for record in caplog.records if "left out" in record.getMessage()]
        assert told == ["backend 'shifting' publishes tool names other backends serve, left out: fresh"]


async def test_a_backend_that_keeps_saying_its_tools_changed_holds_no_call_up_for_long(state: Path) -> None:
    # Each lookup waits for one list read after it began, not for the backend to fall silent: a backend that
    # never does would hold every call to it, and every lookup of a name no backend serves, for good.
    async with serving(Router({"shifting": stdio_spec(state)})) as router:
        storming = anyio.Event()
        stormed: list[dict[str, Any]] = []

        async def storm() -> None:
            storming.set()
            stormed.append(await read(router, "storm"))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(storm)
            await storming.wait()
            await anyio.sleep(0.5)  # the storm is under way
            assert (await read(router, "whoami"))["state"] == "v1"
            assert statuses(await batch(router, "flip", "nothing_serves_this")) == ["ok", "unknown_tool"]
            assert not stormed  # answered while the backend still said its tools changed, as fast as it could
        assert stormed[0]["told"] > 100


def test_a_name_a_backend_gives_up_goes_to_the_backend_refused_it() -> None:
    # The catalog side, on two remote backends that never connect: ``first`` serves ``fresh``, ``second`` is
    # refused it; once ``first`` says its tools changed and ``fresh`` is gone, ``second`` gets it from its own list.
    router = Router({"first": HttpBackend("http://127.0.0.1:9/mcp"), "second": HttpBackend("http://127.0.0.1:9/mcp")})
    read = {"readOnlyHint": True}
    first_tools = [_compat.ToolInfo("fresh", "", {}, read), _compat.ToolInfo("one", "", {}, read)]
    second_tools = [_compat.ToolInfo("fresh", "", {}, read), _compat.ToolInfo("two", "", {}, read)]
    router.remotes["first"].tools, router.remotes["second"].tools = first_tools, second_tools
    router._index_remote("first", first_tools)
    router._index_remote("second", second_tools)
    assert router.conflicts == {"second": {"fresh": "first"}}
    router._index_remote("first", first_tools[1:])
    assert router.conflicts == {}
    found = router.catalog.find("fresh")
    assert found is not None and found.server == "second"
