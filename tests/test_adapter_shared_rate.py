"""CentralMCP's router with the account-wide limiter as its dispatch rate gate.

Single ``invoke_read_tool`` reads and batch entries draw from one bucket, kept in a real SQLite
file; a gate the router installs at start-up (after ``adopt``) still runs, after the shared one.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest
from test_adapter_centralmcp import Tokens, batch, load_router

from centralmcp_batch.adapters import centralmcp
from centralmcp_batch.ratelimit import RateLimiter, SqliteStore
from centralmcp_batch.testing import call

pytestmark = pytest.mark.anyio


def tokens_taken(path: Path, since: float, interval: float) -> float:
    # The TAT runs ahead of the clock one interval per token, as long as no token had to wait.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (tat,) = conn.execute("SELECT tat FROM gcra_buckets").fetchone()
    return (tat - since) / interval


async def test_single_reads_and_batch_entries_draw_from_one_shared_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    router = load_router(monkeypatch, "minimal")
    path, interval = tmp_path / "rate.sqlite3", 10.0  # slots ten seconds apart; the burst covers every call here
    centralmcp.adopt(router, rate_limiter=RateLimiter(SqliteStore(path), 1 / interval, 50))
    own = Tokens()
    router.set_dispatch_rate_gate(own)  # as the router's start-up does, after adopt
    started = time.time()
    for _ in range(2):
        await call(router.mcp, "invoke_read_tool", {"name": "get_device", "arguments": {"serial": "a"}})
    calls = [{"name": "get_device", "arguments": {"serial": f"s{i}"}} for i in range(4)] + [
        {"name": "reboot_device", "arguments": {"serial": "x"}}
    ]
    response = await batch(router, calls)
    assert [item["status"] for item in response["results"]] == ["ok"] * 4 + ["blocked"]
    assert round(tokens_taken(path, started, interval)) == 2 + 4  # refused entries draw nothing
    assert own.count == 6  # the router's own gate still ran once per backend call


async def test_adopting_twice_keeps_one_shared_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    router = load_router(monkeypatch, "minimal")
    path, interval = tmp_path / "rate.sqlite3", 10.0
    centralmcp.adopt(router, rate_limiter=RateLimiter(SqliteStore(path), 1 / interval, 50))
    centralmcp.adopt(router, replace=True)
    started = time.time()
    await call(router.mcp, "invoke_read_tool", {"name": "get_device", "arguments": {"serial": "a"}})
    assert round(tokens_taken(path, started, interval)) == 1
