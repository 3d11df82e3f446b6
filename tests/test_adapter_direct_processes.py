"""Three real direct-mode router processes sharing one SQLite rate file: backend tools called by their
own names keep the account's rate across all three (issue 36, item 4).

Each router is the stand-in run as a script with the documented adoption, its start-up installing
its own per-process bucket (40 calls a second, burst 40) in its gate and middleware chain, as
CentralMCP's ``__main__`` does with its 8 a second. Without the account-wide limiter on those calls
the three ran at up to three times that, and no rate file was made; here the backends' own clocks
show at most the account's rate and burst in any second.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from test_adapter_centralmcp import TESTS, write_adopted_router

from centralmcp_batch import _compat
from centralmcp_batch.ratelimit import sqlite as sqlite_store

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROCESSES, CALLS = 3, 30  # calls per router, all at once
RATE, BURST = 30.0, 3  # the account's, for all routers together
OWN_RATE = 40.0  # each router's own per-process bucket: alone, three of them allow 120 a second


def shared_file(tmp_path: Path) -> Path:
    # Made before the routers start, as a user's cache file is after the first run (see test_shared_rate).
    path = tmp_path / "rate.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(sqlite_store.SCHEMA)
    return path


def most_in_one_second(stamps: list[float]) -> int:
    ordered = sorted(stamps)
    return max(sum(1 for later in ordered[i:] if later < start + 1.0) for i, start in enumerate(ordered))


async def test_direct_calls_of_three_routers_keep_the_accounts_rate_together(tmp_path: Path) -> None:
    script = write_adopted_router(
        tmp_path / "tool_router.py", f"install_router_middlewares(install_router_rate_gate({OWN_RATE}))"
    )
    path, key = shared_file(tmp_path), f"direct-{uuid.uuid4()}"
    env = {
        "PYTHONPATH": str(TESTS),
        "CENTRALMCP_ROUTER_MODE": "direct",
        "CENTRALMCP_ROUTER_RATE_STORE": f"sqlite:///{path}",
        "CENTRALMCP_ROUTER_RATE_KEY": key,
        "CENTRALMCP_ROUTER_RATE_PER_SECOND": str(RATE),
        "CENTRALMCP_ROUTER_RATE_BURST": str(BURST),
    }
    params = _compat.StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    stamps: list[float] = []

    async def calls_of(client: _compat.ClientHandle, router: int) -> None:
        async def one(serial: str) -> None:
            answer = await client.call_tool("get_device_clock", {"serial": serial})
            assert answer.structured["serial"] == serial, answer.text
            stamps.append(answer.structured["at"])

        async with anyio.create_task_group() as tasks:
            for i in range(CALLS):
                tasks.start_soon(one, f"r{router}-{i}")

    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(_compat.connect(params)) for _ in range(PROCESSES)]
        async with anyio.create_task_group() as tasks:
            for router, client in enumerate(clients):
                tasks.start_soon(calls_of, client, router)
    assert len(stamps) == PROCESSES * CALLS
    assert most_in_one_second(stamps) <= RATE + BURST + 1, f"{most_in_one_second(stamps)} calls in one second"
    # Paced, the calls after the burst take their slots one interval apart, whichever router made them.
    assert max(stamps) - min(stamps) >= (len(stamps) - BURST - 1) / RATE * 0.95
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM gcra_buckets WHERE key = ?", (key,)).fetchone() == (1,)


def test_the_windows_are_counted_as_the_limit_reads_them() -> None:
    assert most_in_one_second([0.0, 0.5, 0.99, 1.0, 1.2, 1.3]) == 5  # 0.5 to 1.3: a window is [t, t + 1)
    assert most_in_one_second([5.0]) == 1
