"""After a remote stdio backend restarts, the gate decides on its current tool list; a late backend joins."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from backends.tickets import tickets_server

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

from centralmcp_batch import HostContractError
from centralmcp_batch.router import Router, StdioBackend
from centralmcp_batch.router.backends import RemoteBackend
from centralmcp_batch.testing import call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
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
