"""Environment edge values: out of range clamps to the nearest bound, only a non-number means the default."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from backends.tickets import tickets_server

from centralmcp_batch import _compat, settings
from centralmcp_batch.router import Router, core, demo
from centralmcp_batch.settings import BatchSettings
from centralmcp_batch.testing import call

ROOT = Path(__file__).resolve().parents[1]
# A key that is not UTF-8: os.environ holds the 0xff byte as the surrogate U+DCFF.
RAW_KEY = b"k\xffey-\xfe"
KEY_AS_ENVIRON = os.fsdecode(RAW_KEY)


@pytest.mark.parametrize(
    ("env", "raw", "field", "expected"),
    [
        (settings.RESPONSE_MAX_BYTES, "1000", "response_max_bytes", 1024),
        (settings.RESPONSE_MAX_BYTES, "-5", "response_max_bytes", 1024),
        (settings.RESPONSE_MAX_BYTES, "1e6", "response_max_bytes", 300_000),  # not a whole number: the default
        (settings.CONCURRENCY, "0", "concurrency", 1),
        (settings.CONCURRENCY, "99", "concurrency", 25),
        (settings.CONCURRENCY, "four", "concurrency", 4),
        (settings.CALL_TIMEOUT, "0.0005", "call_timeout", 0.001),
        (settings.CALL_TIMEOUT, "1e9", "call_timeout", 86_400),
        (settings.CALL_TIMEOUT, "inf", "call_timeout", 86_400),
        (settings.CALL_TIMEOUT, "-inf", "call_timeout", 0.001),
        (settings.CALL_TIMEOUT, "nan", "call_timeout", 60.0),
        (settings.CALL_TIMEOUT, "", "call_timeout", 60.0),
        (settings.BATCH_TIMEOUT, "0", "batch_timeout", 0.001),
        (settings.BATCH_TIMEOUT, " 2.5 ", "batch_timeout", 2.5),
        # Whole numbers of more than 4,300 digits, which int() refuses: they clamped nowhere, meaning the default
        (settings.CONCURRENCY, "9" * 5000, "concurrency", 25),
        (settings.CONCURRENCY, "-" + "9" * 5000, "concurrency", 1),
        (settings.RESPONSE_MAX_BYTES, "-" + "9_999" * 1500, "response_max_bytes", 1024),
        (settings.RESPONSE_MAX_BYTES, "9" * 5000, "response_max_bytes", 300_000),  # no bound above: the default
        (settings.CONCURRENCY, "9" * 5000 + ".0", "concurrency", 4),
    ],
)
def test_batch_settings_clamp_and_only_a_non_number_means_the_default(
    env: str, raw: str, field: str, expected: float
) -> None:
    assert getattr(BatchSettings.from_env({env: raw}), field) == pytest.approx(expected)


def test_a_clamped_value_is_logged_once_however_often_it_is_read(caplog: pytest.LogCaptureFixture) -> None:
    environ = {settings.CALL_TIMEOUT: "0.00042"}
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.settings"):
        for _ in range(5):
            BatchSettings.from_env(environ)
    records = [record.getMessage() for record in caplog.records if settings.CALL_TIMEOUT in record.getMessage()]
    assert records == [f"{settings.CALL_TIMEOUT}='0.00042' is out of range; using 0.001, the nearest bound"]


def test_a_value_too_long_to_tell_is_cut_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.settings"):
        BatchSettings.from_env({settings.CONCURRENCY: "7" * 5000})
    [told] = [record.getMessage() for record in caplog.records if settings.CONCURRENCY in record.getMessage()]
    cut = f"'{'7' * 40}'... (5000 characters)"
    assert told == f"{settings.CONCURRENCY}={cut} is out of range; using 25, the nearest bound"


def test_a_value_that_means_the_default_is_logged_once_and_an_empty_one_never(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "_REPORTED", set())  # what tests before this one read was told already
    typo = {settings.CONCURRENCY: "1O", settings.CALL_TIMEOUT: "nan", settings.BATCH_TIMEOUT: ""}
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.settings"):
        for _ in range(5):
            read = BatchSettings.from_env(typo)
    assert (read.concurrency, read.call_timeout, read.batch_timeout) == (4, 60.0, 300.0)
    assert [record.getMessage() for record in caplog.records if "CENTRALMCP_ROUTER_BATCH" in record.getMessage()] == [
        f"{settings.CONCURRENCY}='1O' is not a whole number; using the default, 4",
        f"{settings.CALL_TIMEOUT}='nan' is not a finite number; using the default, 60",
    ]


def test_the_routers_own_settings_clamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "0")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_BURST", "0")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RESPONSE_MAX_ITEMS", "5000")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES", "10")
    monkeypatch.setenv("CENTRALMCP_ROUTER_CURSOR_TTL_SECONDS", "5")
    router = Router({"t": tickets_server()})
    assert (router.limiter.rate, router.limiter.burst) == (pytest.approx(0.001), 1)  # the limiter the router built
    assert (router.max_items, router.max_bytes, router.cursors.ttl) == (200, 1024, 30)
    monkeypatch.setenv("CENTRALMCP_ROUTER_CURSOR_TTL_SECONDS", "forever")
    assert Router({"t": tickets_server()}).cursors.ttl == 900
    monkeypatch.setenv(demo.LATENCY_ENV, "-1")
    assert demo.latency_seconds() == 0.0


def test_a_non_utf8_cursor_key_is_used_as_its_bytes() -> None:
    assert core.cursor_key({core.CURSOR_KEY_ENV: KEY_AS_ENVIRON}) == RAW_KEY
    assert core.cursor_key({}) is None


@pytest.mark.anyio
async def test_replicas_sharing_a_non_utf8_key_accept_each_others_cursors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(core.CURSOR_KEY_ENV, KEY_AS_ENVIRON)
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
    one, two = Router({"t": tickets_server()}), Router({"t": tickets_server()})
    cursor = (await call(one.server, "invoke_read_tool", {"name": "list_tickets"})).structured["next_cursor"]
    resumed = await call(two.server, "invoke_read_tool", {"name": "list_tickets", "cursor": cursor})
    assert resumed.structured["_pagination"]["offset"] == 200


def _environment_with_raw_key() -> dict[bytes, bytes]:
    environ = {os.fsencode(key): os.fsencode(value) for key, value in os.environ.items()}
    environ[os.fsencode(core.CURSOR_KEY_ENV)] = RAW_KEY
    environ[os.fsencode(demo.LATENCY_ENV)] = b"0"
    return environ


def _shows_no_key_byte(output: bytes) -> bool:
    return (
        b"\xff" not in output
        and b"\xfe" not in output
        and b"xff" not in output
        and b"udcff" not in output
        and b"k\\" not in output
    )


def test_plugins_runs_with_a_non_utf8_key_and_never_prints_it() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "centralmcp_batch", "plugins"],
        check=False,
        capture_output=True,
        env=_environment_with_raw_key(),
        timeout=120,
        cwd=ROOT,
    )
    assert finished.returncode == 0, finished.stderr
    assert b"satisfied" in finished.stdout
    assert _shows_no_key_byte(finished.stdout + finished.stderr)


@pytest.mark.anyio
async def test_serve_runs_with_a_non_utf8_key() -> None:
    environ = {os.fsdecode(key): os.fsdecode(value) for key, value in _environment_with_raw_key().items()}
    params = _compat.StdioServerParameters(
        command=sys.executable,
        args=["-m", "centralmcp_batch", "serve", "--demo", "--log-level", "warning"],
        env=environ,
    )
    with anyio.fail_after(60):
        async with _compat.connect(params) as client:
            first = (await client.call_tool("invoke_read_tool", {"name": "list_clients"})).payload
            again = await client.call_tool("invoke_read_tool", {"name": "list_clients", "cursor": first["next_cursor"]})
    assert again.payload["_pagination"]["offset"] == first["_pagination"]["returned"]
