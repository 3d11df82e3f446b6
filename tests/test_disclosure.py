"""What a batch leaves beyond its answer holds no more of what the client sent than single reads do.

The CentralMCP stand-in router adopts the batch with its middleware chain (secret tokenizing on), and
the same calls, with a secret in arguments, cursors and a refused argument, go once as a batch and
once as single ``invoke_read_tool`` calls, over real in-memory MCP sessions. Every log record of every
logger at DEBUG, tracebacks included, and the rate stores (a SQLite file, a real Redis) are searched.
And ``serve``'s own log, at its default level, with an HTTP backend whose URL holds credentials.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_adapter_centralmcp import load_router
from test_cli import FAST_DEMO, free_port, wait_for_port

from centralmcp_batch import _compat
from centralmcp_batch.adapters import centralmcp
from centralmcp_batch.ratelimit import RateLimiter, SqliteStore, open_store
from centralmcp_batch.ratelimit.redis_store import CLOCK_PREFIX, KEY_PREFIX, PACE_PREFIX

pytestmark = pytest.mark.anyio

SECRET = "hunter2-S3cret"


def secret_calls() -> list[dict[str, Any]]:
    return [
        {"id": "plain", "name": "get_device", "arguments": {"serial": SECRET}},
        {"id": "raises", "name": "get_radio_stats", "arguments": {"serial": SECRET}},  # its error quotes it
        {"id": "refused", "name": "get_webhook_by_number", "arguments": {"number": SECRET}},
        {"id": "validator", "name": "get_site_by_code", "arguments": {"code": SECRET.lower()}},
        {"id": "cursor", "name": "list_devices", "arguments": {"site_id": "hq"}, "cursor": f"x{SECRET}"},
        {"id": "key", "name": "count_devices_by_tag", "arguments": {"tags": {SECRET: "x"}}},
        {"id": "write", "name": "ping_device", "arguments": {"serial": SECRET}},
    ]


def as_single(call: dict[str, Any]) -> dict[str, Any]:
    return {key: call[key] for key in ("name", "arguments", "cursor") if key in call}


class Records(logging.Handler):
    """Every record, as a formatter with tracebacks would write it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name} {record.levelname} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.lines.append(text)


def adopted(monkeypatch: pytest.MonkeyPatch, limiter: RateLimiter | None = None) -> ModuleType:
    monkeypatch.setenv("CENTRALMCP_TOKENIZE_SECRETS", "1")
    router = load_router(monkeypatch, "minimal")
    centralmcp.adopt(router, rate_limiter=limiter)
    router.install_router_middlewares()
    return router


async def run_both(router: ModuleType) -> None:
    """The secret calls as one batch and as single reads: the batch's answer is checked for what it echoes."""
    async with _compat.connect(router.mcp) as client:
        answer = await client.call_tool("invoke_read_tool_batch", {"calls": secret_calls()})
        statuses = [item["status"] for item in answer.structured["results"]]
        assert statuses == ["ok", "error", "error", "error", "invalid_cursor", "error", "blocked"], answer.text[:500]
        for call in secret_calls():
            await client.call_tool("invoke_read_tool", as_single(call))


@contextlib.contextmanager
def every_record(handler: logging.Handler) -> Iterator[None]:
    """``handler`` on the root logger, hearing every logger at DEBUG (levels others set are put back after)."""
    loggers = [logging.getLogger(), *(each for each in logging.root.manager.loggerDict.values())]
    levels = {logger: logger.level for logger in loggers if isinstance(logger, logging.Logger)}
    disabled = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    for logger in levels:
        logger.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        for logger, level in levels.items():
            logger.setLevel(level)
        logging.disable(disabled)


async def test_no_log_record_at_any_level_holds_what_an_entry_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    records = Records()
    with every_record(records):
        await run_both(adopted(monkeypatch))
    assert records.lines  # the SDK logs each request: the handler heard the run
    assert [line for line in records.lines if SECRET in line or SECRET.lower() in line] == []


async def run_both_drawing_from(store: Any, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_both`` on the adopted stand-in, its rate tokens drawn from ``store`` under ``key``."""
    limiter = RateLimiter(store, 1000.0, 50, key=key)
    try:
        await run_both(adopted(monkeypatch, limiter))
    finally:
        await limiter.close()


async def test_the_sqlite_rate_store_holds_only_its_own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "rate.sqlite3"
    key = f"acct-{uuid.uuid4().hex}"
    await run_both_drawing_from(SqliteStore(path), key, monkeypatch)
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        keys = {row[0] for table in tables for row in conn.execute(f"SELECT key FROM {table}")}  # noqa: S608
    conn.close()
    assert keys == {key}
    assert SECRET.encode() not in path.read_bytes()


async def test_the_redis_rate_store_holds_only_its_own_keys(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    import redis

    key = f"acct-{uuid.uuid4().hex}"
    await run_both_drawing_from(open_store(redis_url), key, monkeypatch)
    client = redis.Redis.from_url(redis_url)
    try:
        mine = sorted(name.decode() for name in client.scan_iter(match=f"*{key}*"))
        leaked = [name for name in client.scan_iter() if SECRET.encode() in name + dump(client, name)]
    finally:
        client.close()
    assert f"{KEY_PREFIX}{key}" in mine
    assert set(mine) <= {prefix + key for prefix in (KEY_PREFIX, CLOCK_PREFIX, PACE_PREFIX)}
    assert leaked == []


def dump(client: Any, name: bytes) -> bytes:
    value = client.dump(name)
    return value if value is not None else b""


def serve_http(port: int, *options: str, env: dict[str, str] | None = None, stderr: Any = None) -> Any:
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--transport", "http", "--port", str(port), *options]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr or subprocess.DEVNULL)


async def test_serve_logs_an_http_backends_url_by_its_host_only(tmp_path: Path) -> None:
    # The HTTP client logs every request's URL at INFO, serve's default level: a backend URL's password
    # and token were in the log once per backend call, a batch's entries and single reads alike.
    upstream_port, port = free_port(), free_port()
    upstream = serve_http(upstream_port, "--demo", "--log-level", "warning", env=FAST_DEMO)
    config = tmp_path / "router.toml"
    url = f"http://ops:pw-{SECRET}@127.0.0.1:{upstream_port}/mcp?token=tok-{SECRET}"
    config.write_text(f'[backends.upstream]\nurl = "{url}"\n')
    log = tmp_path / "serve.log"
    router = None
    with log.open("wb") as stderr:
        try:
            await wait_for_port(upstream_port, upstream)  # up before the router's first connect
            router = serve_http(port, "--config", str(config), stderr=stderr)
            await wait_for_port(port, router)
            async with _compat.connect(f"http://127.0.0.1:{port}/mcp") as client:
                read = {"name": "invoke_read_tool", "arguments": {"name": "list_sites"}}
                answer = await client.call_tool("invoke_read_tool_batch", {"calls": [read, {"id": "again", **read}]})
                assert [item["status"] for item in answer.structured["results"]] == ["ok", "ok"], answer.text[:300]
                assert not (await client.call_tool("invoke_read_tool", read)).is_error
        finally:
            for process in (router, upstream):
                if process is not None:
                    process.terminate()
                    process.wait(timeout=15)
    written = log.read_text()
    assert f"HTTP Request: POST http://127.0.0.1:{upstream_port} " in written  # the client's lines are there
    assert SECRET not in written
