"""CentralMCP's router with the account-wide limiter as its dispatch rate gate.

Single ``invoke_read_tool`` reads and batch entries draw from one bucket, kept in a real SQLite
file; a gate the router installs at start-up (after ``adopt``) still runs, after the shared one.
In direct mode a backend tool called by its own name draws from it too, once, over real sessions
here and across real router processes in ``test_adapter_direct_processes``.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from pathlib import Path
from types import ModuleType

import pytest
from standins import monitoring_backend
from test_adapter_centralmcp import Tokens, batch, load_router

from centralmcp_batch import _compat
from centralmcp_batch.adapters import centralmcp, centralmcp_rate
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


# -- direct mode: backend tools called by their own names ---------------------------------------


@pytest.fixture
def direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """A direct-mode router as it serves: adopted over a SQLite bucket, then its start-up's own rate
    bucket (its gate, and in its middleware chain) installed after the adoption."""
    router = load_router(monkeypatch, "direct")
    path = tmp_path / "rate.sqlite3"
    centralmcp.adopt(router, rate_limiter=RateLimiter(SqliteStore(path), 1 / INTERVAL, 50))
    router.install_router_middlewares(router.install_router_rate_gate(1000.0))
    return router, path


INTERVAL = 10.0  # slots ten seconds apart: the bucket's TAT counts the tokens taken; the burst covers every call


async def test_in_direct_mode_a_backend_tool_called_by_its_own_name_draws_one_shared_token(
    direct: tuple[ModuleType, Path],
) -> None:
    router, path = direct
    started = time.time()
    async with _compat.connect(router.mcp) as client:
        for serial in ("a", "b", "c"):
            answer = await client.call_tool("get_device", {"serial": serial})
            assert answer.structured == {"serial": serial, "status": "up"}  # the backend's own tool answered
        assert round(tokens_taken(path, started, INTERVAL)) == 3
        await client.call_tool("list_sites", {})  # the router's wrapper: one backend call, drawn at its gate
        assert round(tokens_taken(path, started, INTERVAL)) == 4
        await client.call_tool("rename_site", {"site_id": "hq", "name": "x"})  # a write is a backend call too
        await client.call_tool("find_tool", {"query": "device"})  # the router's own, no backend call
        await client.call_tool("invoke_read_tool", {"name": "get_device", "arguments": {"serial": "d"}})
        calls = [{"name": "get_device", "arguments": {"serial": f"e{i}"}} for i in range(2)]
        await client.call_tool("invoke_read_tool_batch", {"calls": calls})
    assert round(tokens_taken(path, started, INTERVAL)) == 4 + 1 + 1 + 2
    assert [name for name, _ in monitoring_backend.calls].count("get_device") == 3 + 1 + 2


async def test_adopting_a_direct_mode_router_twice_still_draws_once_a_call(
    direct: tuple[ModuleType, Path],
) -> None:
    router, path = direct
    centralmcp.adopt(router)
    started = time.time()
    await call(router.mcp, "get_device", {"serial": "a"})
    assert round(tokens_taken(path, started, INTERVAL)) == 1


async def test_the_start_up_log_says_what_draws_from_the_account_wide_limiter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lines = {}
    for mode in ("direct", "minimal"):
        router = load_router(monkeypatch, mode)
        with caplog.at_level(logging.INFO, logger=centralmcp.__name__):
            caplog.clear()
            centralmcp.adopt(router, rate_limiter=RateLimiter(SqliteStore(tmp_path / "rate.sqlite3"), 8.0, 8))
        lines[mode] = [r.getMessage() for r in caplog.records if "account-wide rate" in r.getMessage()]
    published = len(centralmcp_rate.published_backend_tools(load_router(monkeypatch, "direct")))
    assert published == 16  # every backend tool but list_sites, whose name the router's wrapper keeps
    store = f"sqlite:///{tmp_path / 'rate.sqlite3'}"
    gate = (
        "invoke_read_tool, invoke_tool and the router's wrappers (its dispatch rate gate); "
        "batch entries (booked a batch at a time)"
    )
    assert lines["direct"] == [
        f"router {router_name(lines['direct'][0])!r}: account-wide rate 8/s, burst 8, key 'central' in {store}, "
        f"drawn by {gate}; the {published} backend tools published under their own names"
    ]
    assert lines["minimal"][0].endswith(f"drawn by {gate}")


def router_name(line: str) -> str:
    return line.split("'")[1]


async def test_a_router_without_a_rate_gate_still_draws_for_its_published_backend_tools_and_says_what_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    router = load_router(monkeypatch, "direct")
    monkeypatch.delattr(router, "set_dispatch_rate_gate")
    path = tmp_path / "rate.sqlite3"
    with caplog.at_level(logging.INFO, logger=centralmcp.__name__):
        centralmcp.adopt(router, rate_limiter=RateLimiter(SqliteStore(path), 1 / INTERVAL, 50))
    told = " ".join(r.getMessage() for r in caplog.records)
    assert "drawn by the 16 backend tools published under their own names" in told
    assert "invoke_read_tool, invoke_tool and its wrappers draw no account-wide token" in told
    started = time.time()
    await call(router.mcp, "get_device", {"serial": "a"})
    await call(router.mcp, "invoke_read_tool", {"name": "get_device", "arguments": {"serial": "b"}})
    assert round(tokens_taken(path, started, INTERVAL)) == 1  # the direct call; the single read stays outside
