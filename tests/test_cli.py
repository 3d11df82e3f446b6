"""The ``centralmcp-batch`` command, run as real subprocesses where it talks MCP."""

from __future__ import annotations

import io
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from centralmcp_batch import _compat, cli, hosting, manifest
from centralmcp_batch.commands import plugin_report
from centralmcp_batch.commands.demo import client as demo_client
from centralmcp_batch.commands.demo import render, script
from centralmcp_batch.router import demo

FAST_DEMO = {**os.environ, demo.LATENCY_ENV: "20"}
VISIBLE_DEMO = {**os.environ, demo.LATENCY_ENV: "100"}


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "centralmcp_batch", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=FAST_DEMO if env is None else env)


# -- argument errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["serve", "--port", "70000"], "invalid port 70000"),
        (["serve", "--port", "http"], "invalid port 'http'"),
        (
            ["serve", "--demo", "--port", "8123"],
            "--host, --port, --allow-host and --allow-origin apply to --transport http",
        ),
        (["serve", "--demo", "--allow-host", "mcp.example.com"], "--allow-origin apply to --transport http only"),
        (["serve", "--demo", "--transport", "http", "--allow-host", "http://x"], "invalid host 'http://x'"),
        (["serve", "--demo", "--transport", "http", "--allow-origin", "app.example"], "invalid origin 'app.example'"),
        (["serve", "--demo", "--transport", "http", "--allow-origin", "https://*.a"], "invalid origin 'https://*.a'"),
        (["serve", "--demo", "--transport", "http", "--allow-origin", "https://a:x"], "invalid origin 'https://a:x'"),
        (["serve", "--demo", "--config", "router.toml"], "not allowed with argument --demo"),
        (["serve", "--transport", "websocket", "--demo"], "invalid choice: 'websocket'"),
        (["serve", "--config", "no/such/router.toml"], "router config 'no/such/router.toml' does not exist"),
        (["plugins", "--config", "no/such/router.toml"], "router config 'no/such/router.toml' does not exist"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_argument_errors_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "usage: centralmcp-batch" in err


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--allow-host", "mcp.example.com:abc", "the port must be a number from 1 to 65535"),
        ("--allow-host", "mcp.example.com:", "the port must be a number"),
        ("--allow-host", "mcp.example.com:70000", "the port must be a number"),
        ("--allow-host", "mcp.example.com:0", "the port must be a number"),
        pytest.param("--allow-host", "a:" + "9" * 5000, "the port must be a number", id="5000-digit-port"),
        ("--allow-host", ":8000", "the host name is missing"),
        ("--allow-host", "", "the host name is missing"),
        ("--allow-host", "https://mcp.example.com", "no scheme, path, query or user"),
        ("--allow-host", "mcp.example.com/mcp", "no scheme, path, query or user"),
        ("--allow-host", "mcp.example.com?x=1", "no scheme, path, query or user"),
        ("--allow-host", "user@mcp.example.com", "no scheme, path, query or user"),
        ("--allow-host", "::1", "an IPv6 address in brackets"),
        ("--allow-host", "[::1", "an IPv6 address in brackets"),
        ("--allow-host", "bücher.example", "letters, digits"),
        ("--allow-origin", "https://app.example.com/", "an origin has no path, query or fragment"),
        ("--allow-origin", "https://app.example.com/app", "an origin has no path, query or fragment"),
        ("--allow-origin", "https://app.example.com?x=1", "an origin has no path, query or fragment"),
        ("--allow-origin", "https://app.example.com#top", "an origin has no path, query or fragment"),
        ("--allow-origin", "https://app.example.com:70000", "the port must be a number from 1 to 65535 or *"),
        ("--allow-origin", "https://app.example.com:", "the port must be a number"),
        ("--allow-origin", "https://", "the host name is missing"),
        ("--allow-origin", "https://user@app.example.com", "letters, digits"),
        ("--allow-origin", "ftp://app.example.com", "the scheme must be http or https"),
    ],
)
def test_a_host_or_origin_that_could_never_match_is_refused_saying_why(
    capsys: pytest.CaptureFixture[str], option: str, value: str, why: str
) -> None:
    # Only parsed: a value let through would start a server.
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["serve", "--demo", "--transport", "http", option, value])
    assert exited.value.code == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"centralmcp-batch serve: error: argument {option}: invalid {option[8:]} {value!r}: ")
    assert why in line


def test_serve_without_config_names_the_default_and_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve"])
    assert exited.value.code == 2
    assert "'router.toml' does not exist (give --config PATH, or --demo" in capsys.readouterr().err


def test_python_dash_m_is_the_same_command() -> None:
    finished = run_cli("--version")
    assert finished.returncode == 0 and finished.stdout.startswith("centralmcp-batch ")


# -- plugins --------------------------------------------------------------------------


def test_plugins_names_the_batch_plugin_satisfied() -> None:
    finished = run_cli("plugins")
    assert finished.returncode == 0, finished.stderr
    first = finished.stdout.splitlines()[0]
    assert first.startswith("batch  (centralmcp-batch ") and first.endswith("satisfied")
    assert "tools:       invoke_read_tool_batch (read)" in finished.stdout
    assert "requires:    centralmcp_find_tool, centralmcp_read_gate, centralmcp_dispatch_read" in finished.stdout


def test_plugins_json_carries_the_manifest() -> None:
    finished = run_cli("plugins", "--json")
    assert finished.returncode == 0, finished.stderr
    reports = {report["name"]: report for report in json.loads(finished.stdout)}
    batch = reports["batch"]
    own = manifest.own()
    assert batch["satisfied"] is True and batch["missing"] == []
    assert batch["distribution"] == "centralmcp-batch"
    assert batch["manifest"]["requires"] == list(own.requires)
    assert batch["manifest"]["tools"] == [{"name": "invoke_read_tool_batch", "capability": "read"}]


def test_a_reader_that_leaves_early_ends_plugins_quietly() -> None:
    """``plugins --json | head -1``: no traceback on stderr, as from any shell tool whose reader left."""
    command = [sys.executable, "-m", "centralmcp_batch", "plugins", "--json"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=FAST_DEMO)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the command writes
    assert process.wait(timeout=120) == 1
    told = process.stderr.read().decode()  # at the lowest versions pydantic may warn here of its own accord
    assert "Traceback" not in told and "BrokenPipeError" not in told, told


def test_plugins_shows_the_otel_observer_under_its_own_manifest_entry() -> None:
    finished = run_cli("plugins")
    assert finished.returncode == 0, finished.stderr
    sections = {section.split()[0]: section for section in finished.stdout.split("\n\n")}
    otel = sections["otel"]
    assert "entry point: centralmcp_batch.otel" in otel and "invoke_read_tool_batch" not in otel
    assert "requires:    -" in otel and "implements:  centralmcp_batch_started" in otel
    assert "entry point: centralmcp_batch.plugin" in sections["batch"]
    assert "ships no plugin.toml" not in finished.stderr


def test_an_unsatisfied_plugin_is_reported_with_what_it_misses() -> None:
    report = hosting.PluginReport("batch", "centralmcp-batch", manifest.own(), ("centralmcp_read_gate",))
    text = plugin_report.report_text(report)
    assert text.splitlines()[0].endswith("NOT satisfied: missing centralmcp_read_gate")
    assert plugin_report.report_json(report)["satisfied"] is False


# -- demo -----------------------------------------------------------------------------


def test_demo_runs_end_to_end_and_exits_0() -> None:
    finished = run_cli("demo", env=VISIBLE_DEMO)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    out = finished.stdout
    assert "find_tool(query='device health', top_k=3):" in out and "get_device_health" in out
    for call in script.demo_calls():
        assert call.name in out
    rows = {line.split()[1]: line for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert "blocked" in rows["reboot"] and "unknown_tool" in rows["vlans"] and "next_cursor" in rows["clients"]
    assert "progress 9/9" in out
    assert "\033" not in out and "\r" not in out  # piped: plain lines, no terminal controls
    ratio = next(line for line in out.splitlines() if line.startswith("Ratio sequential / batch:"))
    # 7 reads of 100 ms, 4 at a time (about 0.2 s), against 7 round trips (about 0.7 s): a wide margin.
    assert float(ratio.split()[-1].rstrip("x")) > 1.5


def test_demo_fails_clearly_when_the_router_cannot_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = _compat.StdioServerParameters(command=sys.executable, args=["-c", "import sys; sys.exit(3)"])
    monkeypatch.setattr(demo_client, "router_command", lambda: broken)
    assert cli.main(["demo"]) == 1
    assert "centralmcp-batch: error: the demo failed" in capsys.readouterr().err


# -- serve ----------------------------------------------------------------------------


def test_demo_names_minimal_mode_when_it_hides_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, the demo said only that the router did not publish the batch tool, and nothing was logged.
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", "minimal")
    assert "CENTRALMCP_ROUTER_MODE=minimal is set" in demo_client._minimal_mode_hint()
    monkeypatch.setenv("CENTRALMCP_ROUTER_MODE", "default")
    assert demo_client._minimal_mode_hint() == ""


@pytest.mark.anyio
async def test_the_single_reads_wait_for_the_buckets_refill_after_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # The batch drew a token a read; at 0 ms a read the single reads waited on the refill, and the ratio
    # read 18x where the round trips made 1.7x.
    said: list[str] = []
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "20")
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_BURST", "4")
    started = time.perf_counter()
    await demo_client._let_the_bucket_refill(said.append)
    assert time.perf_counter() - started >= 0.2 and "waiting 0.2 s for the rate limiter's bucket" in said[-1]
    monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000000")
    said.clear()
    await demo_client._let_the_bucket_refill(said.append)
    assert said == []  # a bucket that refills at once is not waited for


def test_serve_over_http_on_a_port_in_use_fails_in_one_line() -> None:
    # Before: uvicorn's error after a line saying the router was serving, then a traceback of 40 lines.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = run_cli("serve", "--demo", "--transport", "http", "--port", str(port))
    assert finished.returncode == 1
    # the command's own lines: a dependency may warn on stderr as it is imported (pydantic-settings, lowest versions)
    told = [line for line in finished.stderr.splitlines() if line.startswith("centralmcp-batch")]
    assert len(told) == 1 and told[0].startswith(f"centralmcp-batch: error: cannot listen on 127.0.0.1:{port}: ")
    assert "Traceback" not in finished.stderr and "serving" not in finished.stderr, finished.stderr


def serve_demo_stdio() -> _compat.StdioServerParameters:
    return _compat.StdioServerParameters(
        command=sys.executable,
        args=["-m", "centralmcp_batch", "serve", "--demo", "--log-level", "warning"],
        env=FAST_DEMO,
    )


@pytest.mark.anyio
async def test_serve_demo_over_stdio_with_a_real_client() -> None:
    async with _compat.connect(serve_demo_stdio()) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert {"find_tool", "invoke_read_tool", "invoke_read_tool_batch"} <= names
        assert not names & {"list_sites", "reboot_device"}  # backends stay behind the router
        calls = [
            {"id": "sites", "name": "list_sites"},
            {"id": "wipe", "name": "delete_site", "arguments": {"site_id": "site-sjc"}},
        ]
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).payload
        assert [item["status"] for item in response["results"]] == ["ok", "blocked"]
        assert response["results"][0]["server"] == "inventory"
        assert len(response["results"][0]["result"]["sites"]) == len(demo.SITES)
        after = (await client.call_tool("invoke_read_tool", {"name": "list_sites"})).payload
        assert len(after["sites"]) == len(demo.SITES)  # the blocked delete changed nothing


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.anyio
async def test_serve_demo_over_http() -> None:
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
    ]
    process = subprocess.Popen(command, env=FAST_DEMO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        await wait_for_port(port, process)
        async with _compat.connect(f"http://127.0.0.1:{port}/mcp") as client:
            found = await client.call_tool("find_tool", {"query": "wireless clients", "top_k": 3})
            assert "list_clients" in json.dumps(found.payload)
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stderr.close()  # type: ignore[union-attr]


async def wait_for_port(port: int, process: subprocess.Popen[Any], seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the server exited early: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                await anyio.sleep(0.1)


def test_demo_checks_name_every_surprise() -> None:
    calls = script.demo_calls()
    results = [
        {"id": call.id, "status": call.expected, "result": {"clients": []} if call.id == "clients" else {}}
        for call in calls
    ]
    results[0]["status"] = "blocked"  # a read the gate should have let through
    problems = script.batch_problems({"results": results}, calls)
    assert problems == [
        "call 'sites' (list_sites) was 'blocked', expected 'ok'",
        "list_clients came back whole: the router did not clip it to a page with a next_cursor",
    ]


def test_result_summaries_are_short_and_say_what_came_back() -> None:
    clipped = {"status": "ok", "result": {"clients": [{}] * 200, "total": 432, "next_cursor": "abc"}}
    assert render.summary(clipped) == "200 of 432 clients + next_cursor"
    assert (
        render.summary({"status": "ok", "result": {"serial": "CN00A000", "cpu_percent": 35}})
        == 'serial="CN00A000" cpu_percent=35'
    )
    assert render.summary({"status": "error", "error": "x" * 100}, width=20) == "x" * 17 + "..."


def progress_calls(line: render.ProgressLine) -> None:
    async def notify() -> None:
        await line(1, 2, "a (list_sites): ok")
        await line(2, 2, None)

    anyio.run(notify)
    line.finish()


def test_the_progress_line_prints_plain_lines_when_not_on_a_terminal() -> None:
    said: list[str] = []
    stream = io.StringIO()
    progress_calls(render.ProgressLine(said.append, stream))
    assert said == ["  progress 1/2  a (list_sites): ok", "  progress 2/2"]
    assert stream.getvalue() == ""


def test_the_progress_line_redraws_itself_on_a_terminal() -> None:
    leader, follower = os.openpty()  # a real terminal device, so isatty() is the real answer
    said: list[str] = []
    with os.fdopen(follower, "w") as terminal:
        progress_calls(render.ProgressLine(said.append, terminal))
        terminal.flush()
        shown = _read_terminal(leader)  # before the far end closes, after which Linux answers EIO
    os.close(leader)
    assert said == []
    assert shown.replace("\r\n", "\n") == "\r\033[K  progress 1/2  a (list_sites): ok\r\033[K  progress 2/2\n"


def _read_terminal(leader: int) -> str:
    """All the terminal has to say: a pty may hand over what was written in more than one read."""
    chunks: list[bytes] = []
    while select.select([leader], [], [], 0.5)[0]:
        chunks.append(os.read(leader, 4096))
    return b"".join(chunks).decode()


def test_tables_align_every_column() -> None:
    text = render.table(["id", "status"], [["sites", "ok"], ["reboot", "blocked"]])
    assert text.splitlines() == ["  id      status", "  ------  -------", "  sites   ok", "  reboot  blocked"]


def test_bench_passes_its_own_options_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from centralmcp_batch import bench

    seen: list[list[str]] = []
    monkeypatch.setattr(bench, "main", lambda argv, prog: seen.append([prog, *argv]) or 0)
    assert cli.main(["bench", "--quick", "--json", "x.json"]) == 0
    assert seen == [["centralmcp-batch bench", "--quick", "--json", "x.json"]]


def test_bench_usage_names_the_command_it_was_given_as(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: centralmcp-batch bench ")
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "--scenarios", "nope"])
    assert exited.value.code == 2
    assert "usage: centralmcp-batch bench " in capsys.readouterr().err
