"""A backend URL's password, token and path never reach a log line or an error whole: only its scheme and host do.

URLs are parsed, not matched: a password may hold ``'``, ``"``, ``@``, spaces or percent-escapes. The real
cases run ``serve`` as a subprocess, at ``--log-level debug`` (the SDK's and its HTTP client's own loggers
included), over a real streamable HTTP backend that answers every call with HTTP 500, driven by a real MCP
client, on both SDK lines.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from centralmcp_batch import _compat
from centralmcp_batch.router import urls
from centralmcp_batch.router.backends import describe_failure
from centralmcp_batch.router.config import ConfigError, load_router

HERE = Path(__file__).resolve().parent
SESSIONS = str(HERE / "backends" / "sessions.py")
MARK = "Zq7xK9"  # in every secret below, long enough to be masked by itself; no other text of the suite holds it


@pytest.fixture(autouse=True)
def known_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test registers its own URLs: none leaks into another test's texts."""
    monkeypatch.setattr(urls, "_forms", {})
    monkeypatch.setattr(urls, "_secrets", set())


# -- the scrub itself -----------------------------------------------------------------

PASSWORDS = [
    f"pa'ss-{MARK}pw",  # the quote a pattern stopped at
    f'pa"ss-{MARK}pw',
    f"p@ss@{MARK}pw",  # clients split the user part at the last @
    f"p%40ss%23{MARK}pw",  # percent-escapes: decoded, this is p@ss#...
    f"p ss {MARK}pw",  # spaces (the HTTP clients send them escaped)
    f"pa'ss\"{MARK} p@w%27",
]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("host", ["127.0.0.1:8443", "[::1]:8443", "mcp.example.net"])
def test_a_registered_url_is_cut_to_its_host_in_every_form_it_is_printed(password: str, host: str) -> None:
    url = f"https://ops:{password}@{host}/mcp/{MARK}-path-segment-long?token={MARK}tok&x=1#{MARK}frag"
    urls.register(url)
    texts = [
        url,
        f"Server error '500' for url '{url}'\nFor more information",
        f'POST {url} "HTTP/1.1 500"',
        f"endpoint: {json.dumps(url)}, again {url!r}",
        f"the password alone: {password}; the token alone: {MARK}tok",
    ]
    for text in texts:
        told = urls.hosts_only(text)
        assert MARK not in told, (text, told)
    assert urls.hosts_only(f"url '{url}' failed") == f"url 'https://{host}' failed"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("for url 'https://u:p'w@api.example.net/x?t=1'", "for url 'https://api.example.net'"),
        ('GET "http://u:p@[::1]:80/a?b#c" ok', 'GET "http://[::1]:80" ok'),
        ("a http://h/x and (redis://:pw@db:6379/0) b", "a http://h and (redis://db:6379) b"),
        ("no url here: a://", "no url here: a://"),
        ("://nothing before", "://nothing before"),
        ("bad port http://u:p#w@h:xx/y", "bad port http://"),
    ],
)
def test_an_unregistered_url_is_parsed_and_cut_to_its_scheme_and_host(text: str, expected: str) -> None:
    assert urls.hosts_only(text) == expected


# Characters a password or token may hold, unescaped: all printable ASCII but the ones that end a URL's
# host part (/ ? #) and white space, which end a URL in free text.
UNREGISTERED_CHARS = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/?#")


@settings(max_examples=300, deadline=None)
@given(password=st.text(UNREGISTERED_CHARS, min_size=1, max_size=20), token=st.text(UNREGISTERED_CHARS, max_size=20))
def test_no_piece_of_an_unregistered_urls_password_or_token_survives(password: str, token: str) -> None:
    url = f"https://ops:{password}{MARK}@api.example.net:8443/mcp?token={token}{MARK}"
    for quote in ("'", '"', ""):
        told = urls.hosts_only(f"failed for url {quote}{url}{quote}: 500")
        assert MARK not in told and told.startswith("failed for url ")
        if not set("[]") & set(password + token):  # brackets outside a host: no host can be read
            assert "https://api.example.net:8443" in told


@settings(max_examples=200, deadline=None)
@given(password=st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), min_size=1, max_size=20))
def test_no_piece_of_a_registered_urls_password_survives_whatever_it_holds(password: str) -> None:
    secret = f"{password}{MARK}"
    url = f"https://ops:{secret}@api.example.net/mcp?token={MARK}{password}"
    urls.register(url)
    for text in (url, f"'{url}'", json.dumps(url), repr(url), f"pw={secret}"):
        assert MARK not in urls.hosts_only(text)


def test_a_failure_is_told_by_its_host_only_even_with_a_quote_in_its_password() -> None:
    cause = RuntimeError(f"Client error '401' for url 'https://u:pa'ss{MARK}@api.example.net/mcp?t={MARK}'\nSee")
    assert describe_failure(cause) == "RuntimeError: Client error '401' for url 'https://api.example.net'"


def test_the_log_filter_scrubs_messages_arguments_and_tracebacks() -> None:
    url = f"http://ops:pa'ss{MARK}@127.0.0.1:9/mcp?token={MARK}"
    urls.register(url)
    record = logging.LogRecord("mcp.client.streamable_http", logging.DEBUG, __file__, 1, "endpoint: %s", (url,), None)
    try:
        raise ConnectionError(f"for url '{url}'")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    assert urls.UrlHostsOnly().filter(record)
    printed = logging.Formatter().format(record)
    assert MARK not in printed and "endpoint: http://127.0.0.1:9" in printed and "ConnectionError" in printed


def test_a_url_whose_host_part_a_password_breaks_is_refused_at_start_up_without_its_value(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    for url in [f"http://ops:pa#ss{MARK}@127.0.0.1:9/mcp", f"http://ops:pa?{MARK}@h/mcp", f"ftp://{MARK}@h/", 3]:
        config.write_text(f"[backends.up]\nurl = {json.dumps(url)}\n")
        with pytest.raises(ConfigError) as refused:
            load_router(config)
        assert "key 'url'" in str(refused.value) and MARK not in str(refused.value)


# -- a real router, its log and its answers -----------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def failing_backend() -> Iterator[tuple[str, int]]:
    """A real streamable HTTP backend (``backends/sessions.py``) on IPv4 that answers every call with HTTP 500."""
    port = free_port()
    env = {**os.environ, "SESSIONS_FAIL_CALLS": "1", "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    process = subprocess.Popen(
        [sys.executable, SESSIONS, str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the backend did not start"
                time.sleep(0.05)
        yield "127.0.0.1", port
    finally:
        process.kill()
        process.wait(timeout=15)


def serve_logging_to(config: Path, log: Path) -> _compat.StdioServerParameters:
    """``serve --config`` at ``--log-level debug``, its stderr in ``log`` (the client reads only its stdout)."""
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config), "--log-level", "debug"]
    env = {**os.environ, "CENTRALMCP_ROUTER_RATE_PER_SECOND": "1000"}
    return _compat.StdioServerParameters(command="sh", args=["-c", f'exec "$@" 2>>"{log}"', "sh", *command], env=env)


USER_PARTS = [
    f"ops:pa'ss-{MARK}",
    f'ops:pa"s s-{MARK}',
    f"ops:p@ss@{MARK}",
    f"ops:p%40ss%27-{MARK}",
    f"{MARK}-token-as-user",
]


@pytest.mark.anyio
@pytest.mark.parametrize("user", USER_PARTS)
async def test_a_router_tells_an_http_backends_errors_by_its_host_only(
    user: str, failing_backend: tuple[str, int], tmp_path: Path
) -> None:
    host, port = failing_backend
    url = f"http://{user}@{host}:{port}/mcp?token={MARK}tok#{MARK}"
    config, log = tmp_path / "router.toml", tmp_path / "stderr"
    config.write_text(f"[backends.up]\nurl = {json.dumps(url)}\n")
    answers: list[Any] = []
    with anyio.fail_after(60):
        async with _compat.connect(serve_logging_to(config, log)) as client:
            calls = [{"name": "whoami", "id": str(index)} for index in range(3)]
            answers.append((await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured)
            answers.append((await client.call_tool("invoke_read_tool", {"name": "whoami"})).structured)
            answers.append((await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured)
    told = log.read_text()
    assert [item["status"] for item in answers[0]["results"]] == ["error"] * 3, answers[0]
    assert MARK not in json.dumps(answers), answers
    assert MARK not in told, [line for line in told.splitlines() if MARK in line]
    # the log still names the backend's host: the scrub cut the URL, it did not drop the lines
    assert f"http://{host}:{port}" in told
