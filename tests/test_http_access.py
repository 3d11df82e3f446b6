"""serve --transport http: which Host and Origin headers it accepts, over a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_cli import free_port, wait_for_port

from centralmcp_batch import cli
from centralmcp_batch.router import demo
from centralmcp_batch.router.serve import HttpAccess

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


def start_server(*options: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "centralmcp_batch",
        "serve",
        "--demo",
        "--transport",
        "http",
        "--port",
        str(port),
        "--log-level",
        "warning",
        *options,
    ]
    environ = {**os.environ, demo.LATENCY_ENV: "0", **(env or {})}
    return subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), port


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        process.stderr.close()  # type: ignore[union-attr]


def status(port: int, host: str, origin: str | None = None) -> int:
    """The HTTP status of an initialize request sent to 127.0.0.1 with these Host and Origin headers."""
    headers = {"Host": host, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin
    with httpx.Client(timeout=10) as client:
        return client.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=headers).status_code


async def serving(stop: list[subprocess.Popen[bytes]], *options: str, env: dict[str, str] | None = None) -> int:
    process, port = start_server(*options, env=env)
    stop.append(process)
    await wait_for_port(port, process)
    return port


@pytest.mark.anyio
async def test_by_default_only_localhost_hosts_and_origins_pass(stop: list[subprocess.Popen[bytes]]) -> None:
    port = await serving(stop)
    assert status(port, f"127.0.0.1:{port}") == 200
    assert status(port, f"localhost:{port}", origin=f"http://localhost:{port}") == 200
    assert status(port, f"mcp.example.test:{port}") == 421
    assert status(port, f"127.0.0.1:{port}", origin="https://evil.example.test") == 403


@pytest.mark.anyio
async def test_allowed_hosts_and_origins_from_flags(stop: list[subprocess.Popen[bytes]]) -> None:
    port = await serving(
        stop,
        "--allow-host",
        "mcp.example.test",
        "--allow-host",
        "pinned.example.test:9",
        "--allow-origin",
        "https://app.example.test",
    )
    assert status(port, f"mcp.example.test:{port}", origin="https://app.example.test") == 200
    assert status(port, "mcp.example.test") == 200  # no port in the Host header: the default port of a proxy
    assert status(port, "pinned.example.test:9") == 200
    assert status(port, f"pinned.example.test:{port}") == 421  # a port given is that port only
    assert status(port, f"evil.example.test:{port}") == 421
    assert status(port, f"mcp.example.test:{port}", origin="https://evil.example.test") == 403
    assert status(port, f"127.0.0.1:{port}") == 200  # localhost keeps working


@pytest.mark.anyio
async def test_a_default_port_is_the_same_as_no_port(stop: list[subprocess.Popen[bytes]]) -> None:
    port = await serving(
        stop,
        *("--allow-origin", "https://app.example.test:443", "--allow-origin", "http://plain.example.test"),
        *("--allow-origin", "https://any.example.test:*"),
        *("--allow-host", "tls.example.test:443", "--allow-host", "web.example.test:80"),
    )
    here = f"127.0.0.1:{port}"
    # A browser never writes its scheme's default port in an Origin header; another client may.
    assert status(port, here, origin="https://app.example.test") == 200
    assert status(port, here, origin="https://app.example.test:443") == 200
    assert status(port, here, origin="http://plain.example.test:80") == 200
    assert status(port, here, origin="https://any.example.test") == 200  # any port includes the default one
    assert status(port, here, origin="https://any.example.test:8443") == 200
    assert status(port, here, origin="http://app.example.test") == 403  # another scheme is another origin
    assert status(port, here, origin="https://app.example.test:8443") == 403
    assert status(port, here, origin="https://plain.example.test") == 403
    # A Host header without a port names the scheme's default port: 80 or 443, whichever the client used.
    assert status(port, "tls.example.test") == 200
    assert status(port, "tls.example.test:443") == 200
    assert status(port, "web.example.test") == 200
    assert status(port, "tls.example.test:8443") == 421
    assert status(port, "web.example.test:443") == 421  # a port given is that port only


@pytest.mark.anyio
async def test_allowed_hosts_and_origins_from_the_environment(stop: list[subprocess.Popen[bytes]]) -> None:
    env = {
        cli.ALLOWED_HOSTS_ENV: "a.example.test, b.example.test, tls.example.test:443",
        cli.ALLOWED_ORIGINS_ENV: "https://app.example.test, https://pinned.example.test:443",
    }
    port = await serving(stop, env=env)
    assert status(port, f"b.example.test:{port}", origin="https://app.example.test") == 200
    assert status(port, f"c.example.test:{port}") == 421
    assert status(port, "tls.example.test", origin="https://pinned.example.test") == 200  # as the flags


@pytest.mark.anyio
async def test_host_names_and_schemes_match_in_any_case(stop: list[subprocess.Popen[bytes]]) -> None:
    # Host names and schemes are case-insensitive (RFC 3986): a client may send, and an operator
    # may write, any case. The check still compares everything else exactly.
    port = await serving(
        stop,
        *("--allow-host", "MCP.Example.test", "--allow-host", "[::ABCD]:9"),
        *("--allow-origin", "HTTPS://App.Example.test", "--allow-origin", "https://Pinned.example.test:8443"),
    )
    here = f"127.0.0.1:{port}"
    assert status(port, f"LOCALHOST:{port}", origin=f"HTTP://LocalHost:{port}") == 200
    assert status(port, f"mcp.example.TEST:{port}", origin="https://app.example.test") == 200
    assert status(port, "mcp.example.test", origin="https://APP.EXAMPLE.TEST:443") == 200
    assert status(port, "[::abcd]:9") == 200
    assert status(port, here, origin="https://pinned.EXAMPLE.test:8443") == 200
    assert status(port, f"EVIL.example.test:{port}") == 421
    assert status(port, "[::ABCD]:10") == 421
    assert status(port, here, origin="HTTP://App.Example.test") == 403  # another scheme is another origin
    assert status(port, here, origin="https://pinned.example.test") == 403


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (cli.ALLOWED_ORIGINS_ENV, "app.example.test", "invalid origin 'app.example.test'"),
        (cli.ALLOWED_ORIGINS_ENV, "https://a.example.test, https://b.example.test/", "no path, query or fragment"),
        (cli.ALLOWED_HOSTS_ENV, "a.example.test,b.example.test:abc", "invalid host 'b.example.test:abc': the port"),
        (cli.ALLOWED_HOSTS_ENV, "a.example.test;b.example.test", "letters, digits"),
    ],
)
def test_a_bad_environment_entry_is_an_argument_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    monkeypatch.chdir(Path(__file__).parent)  # no router.toml: an entry let through ends in that error, not a server
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--transport", "http"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"centralmcp-batch serve: error: {variable}: ") and message in err[-1]


def test_accepted_ports_are_written_as_clients_send_them() -> None:
    # The SDK compares the header as a string: `:0443` would never match the `:443` a client sends.
    assert cli._allowed_host("mcp.example.test:0443") == "mcp.example.test:443"
    assert cli._allowed_host("[::1]:8000") == "[::1]:8000"
    assert cli._allowed_origin("https://app.example.test:08443") == "https://app.example.test:8443"
    assert cli._allowed_origin("https://app.example.test:*") == "https://app.example.test:*"


def test_a_stdio_router_never_reads_the_http_variables(tmp_path: Path) -> None:
    # A client app's config may carry them for an HTTP router elsewhere; the stdio router starts anyway.
    env = {**os.environ, cli.ALLOWED_HOSTS_ENV: "not a host", cli.ALLOWED_ORIGINS_ENV: "app.example.test"}
    env["CENTRALMCP_ROUTER_RATE_STORE"] = "memory"
    served = subprocess.run(
        [sys.executable, "-m", "centralmcp_batch", "serve", "--demo"],
        stdin=subprocess.DEVNULL,  # no client: the stdio session ends at once
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    assert "invalid" not in served.stderr


def test_a_name_without_a_port_matches_any_port() -> None:
    access = HttpAccess(("mcp.example.test", "pinned.example.test:9", "[::2]", "[::3]:7"))
    assert access.host_patterns() == [
        "mcp.example.test",
        "mcp.example.test:*",
        "pinned.example.test:9",
        "[::2]",
        "[::2]:*",
        "[::3]:7",
    ]


def test_a_default_port_and_no_port_make_the_same_patterns() -> None:
    hosts = HttpAccess(("tls.example.test:443", "web.example.test:80", "[::3]:443", "other.example.test:443:8"))
    assert hosts.host_patterns() == [
        "tls.example.test",
        "tls.example.test:443",
        "web.example.test",
        "web.example.test:80",
        "[::3]",
        "[::3]:443",
        "other.example.test:443:8",  # not a default port: that one only
    ]

    def origins(*given: str) -> list[str]:
        return HttpAccess(origins=given).origin_patterns()

    assert origins("https://a.test") == origins("https://a.test:443") == ["https://a.test", "https://a.test:443"]
    assert origins("http://b.test:80") == ["http://b.test", "http://b.test:80"]
    assert origins("http://c.test:443", "https://c.test:8443") == ["http://c.test:443", "https://c.test:8443"]
    assert origins("https://d.test:*") == ["https://d.test", "https://d.test:*"]
    assert origins("HTTPS://E.test") == ["https://E.test", "https://E.test:443"]  # a scheme in any case
