"""Nothing left running: ``serve`` stopped by a signal, or by its client's exit, stops its stdio backends and exits.

Real processes throughout: a ``centralmcp-batch serve`` subprocess over stdio backends
(``tests/backends/lingering.py``) that write their pids to a directory and, with ``LINGER_STAY``,
do not exit when the router closes their stdin, so only a router that stops them leaves none.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from centralmcp_batch.router.core import FIRST_CONNECT_SECONDS
from tests.redis_server import free_port

HERE = Path(__file__).parent
LINGERING = HERE / "backends" / "lingering.py"


def write_config(tmp_path: Path, count: int, **env: str) -> Path:
    table = ", ".join(f'{key} = "{value}"' for key, value in {"LINGER_DIR": str(tmp_path), **env}.items())
    config = tmp_path / "router.toml"
    config.write_text(
        "".join(
            f"[backends.b{i}]\ncommand = {sys.executable!r}\nargs = [{str(LINGERING)!r}, 'b{i}']\nenv = {{ {table} }}\n"
            for i in range(count)
        )
    )
    return config


def start(config: Path, *options: str) -> subprocess.Popen[bytes]:
    """stderr goes to a file: the backends share it, and a backend left running would hold a pipe open."""
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config), *options]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    # stdin stays open: the client is still there, so only the signal can end the router
    with (config.parent / "stderr").open("wb") as err:
        return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)


def backend_pids(directory: Path, count: int, process: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        files = list(directory.glob("*.pid"))
        if len(files) == count:
            return [int(pid) for file in files for pid in file.read_text().split()]
        assert process.poll() is None, (directory / "stderr").read_text()
        time.sleep(0.05)
    raise AssertionError("the backends did not start")


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:  # leave nothing behind for the next test either
        os.kill(pid, signal.SIGKILL)
    return left


def stop(process: subprocess.Popen[Any], signum: int, directory: Path, seconds: float = 20) -> tuple[int | None, str]:
    process.send_signal(signum)
    try:
        code: int | None = process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    if process.stdin is not None:
        process.stdin.close()
    return code, (directory / "stderr").read_text()


@pytest.fixture
def linux_proc() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads process states from /proc")


@pytest.mark.usefixtures("linux_proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_stdio_router_and_every_backend(tmp_path: Path, signum: int) -> None:
    config = write_config(tmp_path, 2, LINGER_STAY="1")
    process = start(config, "--log-level", "warning")
    pids = backend_pids(tmp_path, 2, process)
    code, err = stop(process, signum, tmp_path)
    left = wait_gone(pids, 10)
    # before: SIGTERM killed the router at once and left the backends running; SIGINT hung it
    assert code == 0, err
    assert left == [], err
    assert "Traceback" not in err


@pytest.mark.usefixtures("linux_proc")
@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM", "HTTP, SIGTERM"])
def test_a_stopping_router_lets_each_stdio_backend_exit_on_its_own(tmp_path: Path, how: str) -> None:
    config = write_config(tmp_path, 2)
    options = ["--transport", "http", "--port", str(free_port())] if how.startswith("HTTP") else []
    process = start(config, *options, "--log-level", "warning")
    pids = backend_pids(tmp_path, 2, process)
    if how == "stdin closed":
        process.stdin.close()  # type: ignore[union-attr]
        code, err = process.wait(timeout=20), (tmp_path / "stderr").read_text()
    else:
        code, err = stop(process, signal.SIGTERM, tmp_path)
    assert wait_gone(pids, 10) == [], err
    # before, on SDK 1.x: the router's sessions ended by a cancel, and the SDK then killed each
    # backend at once, before it could see its stdin close and finish its own way
    assert sorted(path.name for path in tmp_path.glob("*.bye")) == ["b0.bye", "b1.bye"], err
    assert code == 0, err


def uvicorns_lifespan_cancelled(err: str) -> bool:
    """Whether the only traceback is the one uvicorn 0.31 (the lowest allowed) now and then logs at
    shutdown, when its lifespan task is still waiting as the loop closes: none of the router's frames."""
    frames = re.findall(r'File "([^"]+)"', err)
    ours = [frame for frame in frames if re.search(r"/centralmcp_batch/(\w+/)?\w+\.py$", frame)]
    return err.count("Traceback") == 1 and "lifespan" in err and not ours and err.rstrip().endswith("CancelledError")


@pytest.mark.usefixtures("linux_proc")
def test_sigterm_stops_an_http_router_and_every_backend_and_frees_the_port(tmp_path: Path) -> None:
    config = write_config(tmp_path, 2, LINGER_STAY="1")
    port = free_port()
    process = start(config, "--transport", "http", "--port", str(port), "--log-level", "warning")
    pids = backend_pids(tmp_path, 2, process)
    code, err = stop(process, signal.SIGTERM, tmp_path)
    left = wait_gone(pids, 10)
    # before: uvicorn raised SIGTERM again after its shutdown, which killed the router before the backends
    assert code == 0, err
    assert left == [], err
    assert "Traceback" not in err or uvicorns_lifespan_cancelled(err), err
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.mark.usefixtures("linux_proc")
def test_ctrl_c_stops_the_demo_with_one_line_and_no_router_left(tmp_path: Path) -> None:
    env = {**os.environ, "CENTRALMCP_DEMO_LATENCY_MS": "400"}  # slow enough to be mid-run
    command = [sys.executable, "-m", "centralmcp_batch", "demo"]
    with (tmp_path / "stderr").open("wb") as err:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err)
    assert b"Starting the router" in process.stdout.readline()  # type: ignore[union-attr]
    time.sleep(1.5)  # the router subprocess is up, the session under way
    router = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    code, err_text = stop(process, signal.SIGINT, tmp_path)
    process.stdout.close()  # type: ignore[union-attr]
    # before: a KeyboardInterrupt traceback (SDK 2.x), or "the demo failed: BrokenResourceError" (SDK 1.x)
    # (mcp 1.28 itself may write a pydantic-settings warning first: only the demo's own lines count)
    own = [line for line in err_text.splitlines() if "Warning" not in line and not line.startswith("  warnings.warn")]
    assert (code, own) == (130, ["centralmcp-batch: demo interrupted"]), err_text
    assert wait_gone(router, 10) == []


@pytest.mark.usefixtures("linux_proc")
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_signal_while_a_backend_starts_stops_the_router_at_once(tmp_path: Path, transport: str) -> None:
    # the backend answers nothing for 120 s: the router's wait for its first attempt would run its full 30 s
    config = write_config(tmp_path, 1, LINGER_START_SECONDS="120")
    options = ["--port", str(free_port())] if transport == "http" else []
    process = start(config, "--transport", transport, *options, "--log-level", "warning")
    pids = backend_pids(tmp_path, 1, process)
    started = time.monotonic()
    code, err = stop(process, signal.SIGTERM, tmp_path, seconds=60)
    took = time.monotonic() - started
    left = wait_gone(pids, 10)
    # before: the router stopped only once the wait was over, 30 s after it began. Stopping the backend
    # takes about 12 s of that here (its session's close), and up to 15 s on a loaded machine: the bound
    # sits between the two.
    assert code == 0, err
    assert took < FIRST_CONNECT_SECONDS - 5, err
    assert left == [], err
    assert "did not start" not in err, err


# A deployment's tracing, set up before the router starts: a global provider whose batching
# processor holds every span (it would export after a minute), exporting to a file.
TRACED_SERVE = """
import json, os, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

class FileExporter(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_FILE"], "a") as out:
            out.writelines(json.dumps(span.name) + "\\n" for span in spans)
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(FileExporter(), schedule_delay_millis=60_000))
trace.set_tracer_provider(provider)

from centralmcp_batch.cli import main
raise SystemExit(main())
"""
INITIALIZE = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
ONE_BATCH = {"name": "invoke_read_tool_batch", "arguments": {"calls": [{"name": "list_sites"}]}}


def rpc_line(request_id: int | None, method: str, params: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    return message if request_id is None else {**message, "id": request_id}


def start_traced(tmp_path: Path, *options: str) -> subprocess.Popen[str]:
    script = tmp_path / "traced_serve.py"
    script.write_text(textwrap.dedent(TRACED_SERVE))
    env = {**os.environ, "SPANS_FILE": str(tmp_path / "spans"), "PYTHONPATH": str(HERE.parent)}
    command = [sys.executable, str(script), "serve", "--demo", *options]
    with (tmp_path / "stderr").open("wb") as err:
        return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)


def batch_over_stdio(process: subprocess.Popen[str]) -> dict[str, Any]:
    lines = [
        rpc_line(0, "initialize", INITIALIZE),
        rpc_line(None, "notifications/initialized", {}),
        rpc_line(1, "tools/call", ONE_BATCH),
    ]
    process.stdin.write("".join(json.dumps(line) + "\n" for line in lines))  # type: ignore[union-attr]
    process.stdin.flush()  # type: ignore[union-attr]
    for line in process.stdout:  # type: ignore[union-attr]
        answer: dict[str, Any] = json.loads(line)
        if answer.get("id") == 1:
            return answer
    raise AssertionError("no answer to the batch")


def post(url: str, message: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    reply = httpx.post(url, json=message, headers=headers, timeout=timeout)
    reply.raise_for_status()
    data = [line[len("data:") :] for line in reply.text.splitlines() if line.startswith("data:")]
    answer: dict[str, Any] = json.loads(data[-1]) if data else reply.json()
    return answer


def wait_served(url: str, process: subprocess.Popen[Any], directory: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            post(url, rpc_line(0, "initialize", INITIALIZE))
            return
        except httpx.TransportError:
            assert process.poll() is None, (directory / "stderr").read_text()
            time.sleep(0.1)
    raise AssertionError("the router did not start serving")


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_spans_the_tracer_provider_holds_are_exported_when_a_signal_stops_the_router(
    tmp_path: Path, transport: str
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    if transport == "stdio":
        process = start_traced(tmp_path)
        answer = batch_over_stdio(process)
    else:
        port = free_port()
        process = start_traced(tmp_path, "--transport", "http", "--port", str(port))
        url = f"http://127.0.0.1:{port}/mcp"
        wait_served(url, process, tmp_path)
        answer = post(url, rpc_line(1, "tools/call", ONE_BATCH))
    assert answer["result"]["structuredContent"]["ok"] is True, answer
    code, err = stop(process, signal.SIGTERM, tmp_path)
    process.stdout.close()  # type: ignore[union-attr]
    spans_file = tmp_path / "spans"
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()] if spans_file.exists() else []
    # before, on stdio: the exit skipped the provider's exit handler, and every span it held was lost
    assert code == 0, err
    assert {"invoke_read_tool_batch", "invoke_read_tool_batch entry"} <= set(spans), err


def slow_batch(*seconds: float) -> dict[str, Any]:
    """``b0_slow`` for each duration, in turn with ``b1_slow``: an ordered batch over both backends."""
    calls = [{"name": f"b{i % 2}_slow", "arguments": {"seconds": each}} for i, each in enumerate(seconds)]
    return {"name": "invoke_read_tool_batch", "arguments": {"calls": calls}}


def wait_for_call(directory: Path, name: str) -> None:
    deadline = time.monotonic() + 30
    while not (directory / f"{name}.calls").exists():
        assert time.monotonic() < deadline, "the backend was never called"
        time.sleep(0.02)


@contextlib.contextmanager
def http_router(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, list[int]]]:
    config = write_config(tmp_path, 2)
    port = free_port()
    process = start(config, "--transport", "http", "--port", str(port), "--log-level", "warning")
    pids = backend_pids(tmp_path, 2, process)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_served(url, process, tmp_path)
        yield process, url, pids
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        wait_gone(pids, 0)


@pytest.mark.usefixtures("linux_proc")
def test_the_first_signal_lets_an_http_batch_in_flight_finish_then_stops_every_backend(tmp_path: Path) -> None:
    with http_router(tmp_path) as (process, url, pids), ThreadPoolExecutor(1) as client:
        answer = client.submit(post, url, rpc_line(1, "tools/call", slow_batch(3, 1, 0)))
        wait_for_call(tmp_path, "b0")
        code, err = stop(process, signal.SIGTERM, tmp_path)
        results = answer.result(timeout=30)["result"]["structuredContent"]["results"]
        left = wait_gone(pids, 10)
    assert [(item["tool"], item["status"], item["result"]["slept"]) for item in results] == [
        ("b0_slow", "ok", 3),
        ("b1_slow", "ok", 1),
        ("b0_slow", "ok", 0),
    ], results
    assert code == 0, err
    assert left == [], err
    assert "Traceback" not in err or uvicorns_lifespan_cancelled(err), err


@pytest.mark.usefixtures("linux_proc")
def test_a_second_signal_stops_an_http_router_without_waiting_for_its_batch(tmp_path: Path) -> None:
    with http_router(tmp_path) as (process, url, pids), ThreadPoolExecutor(1) as client:
        answer = client.submit(post, url, rpc_line(1, "tools/call", slow_batch(60)))
        wait_for_call(tmp_path, "b0")
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the first signal is taken: the router waits for the batch
        assert process.poll() is None
        started = time.monotonic()
        code, err = stop(process, signal.SIGTERM, tmp_path)
        took = time.monotonic() - started
        left = wait_gone(pids, 10)
        with contextlib.suppress(httpx.HTTPError):  # cut off, or answered that the backend went away
            answer.result(timeout=30)
    assert code == 0, err
    assert took < 15, err  # not the batch's 60 s
    assert left == [], err


@pytest.mark.usefixtures("linux_proc")
@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_the_processes_a_backend_started_stop_with_it(tmp_path: Path, how: str) -> None:
    # each backend exits as its stdin closes, but leaves the helper it started running
    config = write_config(tmp_path, 2, LINGER_CHILD="1")
    process = start(config, "--log-level", "warning")
    pids = backend_pids(tmp_path, 2, process)
    if how == "SIGTERM":
        code, err = stop(process, signal.SIGTERM, tmp_path)
    else:
        process.stdin.close()  # type: ignore[union-attr]
        code, err = process.wait(timeout=20), (tmp_path / "stderr").read_text()
    left = wait_gone(pids, 10)
    # before: every helper outlived its backend, on both SDK lines, whichever way the router stopped
    assert code == 0, err
    assert left == [], err


@pytest.mark.anyio
@pytest.mark.usefixtures("linux_proc")
async def test_a_restarted_backend_leaves_no_process_of_its_last_run(tmp_path: Path) -> None:
    from centralmcp_batch.router.backends import StdioBackend
    from centralmcp_batch.router.core import Router

    env = {"LINGER_DIR": str(tmp_path), "LINGER_CHILD": "1"}
    router = Router({"b0": StdioBackend(sys.executable, [str(LINGERING), "b0"], env)})
    pid_file = tmp_path / "b0.pid"
    with anyio.fail_after(60):
        async with router.connected():
            backend, helper = map(int, pid_file.read_text().split())
            pid_file.unlink()
            os.kill(backend, signal.SIGKILL)  # the backend dies; its helper runs on
            answer = await router.read("b0_slow", {"seconds": 0})
            assert "went away" in answer["error"], answer
            while not pid_file.exists():  # the router starts the backend again
                await anyio.sleep(0.05)
            left = wait_gone([helper], 10)
            latest = [int(pid) for pid in pid_file.read_text().split()]
    wait_gone(latest, 10)
    # before: the helper of the backend's last run ran on, beside the new one's
    assert left == []


@pytest.mark.anyio
@pytest.mark.usefixtures("linux_proc")
async def test_what_is_left_in_the_routers_own_process_group_is_stopped_by_itself() -> None:
    from centralmcp_batch import process_groups

    stopper = process_groups.BackendProcesses()
    env = {**os.environ, **stopper.env(None)}
    # one helper in a group of its own, as the SDK starts a server; one left in this process's group
    apart = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    beside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        with anyio.fail_after(20):
            await stopper.stop()
        # each is signalled; signalling the router's own group would have stopped this test's process too
        assert apart.wait(timeout=10) == -signal.SIGTERM
        assert beside.wait(timeout=10) == -signal.SIGTERM
    finally:
        for helper in (apart, beside):
            helper.kill()
            helper.wait()


# An MCP client that starts the router, opens the session, and starts a helper that inherits the
# write end of the router's stdin (as a helper forked without close-on-exec does): once the client
# dies, the pipe stays open and the router's stdin never ends.
CLIENT = """
import json, subprocess, sys, time
router = subprocess.Popen(
    [sys.executable, "-m", "centralmcp_batch", "serve", "--config", sys.argv[1], "--log-level", "info"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
)
def send(message):
    router.stdin.write(message.encode() + b"\\n")
    router.stdin.flush()
send(sys.argv[2])  # initialize
json.loads(router.stdout.readline())  # its answer
send(sys.argv[3])  # initialized
helper = subprocess.Popen(["sleep", "300"], pass_fds=[router.stdin.fileno()])
print(json.dumps({"router": router.pid, "helper": helper.pid}), flush=True)
time.sleep(300)
"""
PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def adopting_orphans() -> Iterator[None]:
    """While inside, this process adopts the orphans among its descendants (Linux), so it can wait for them."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    assert prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def wait_exit(pid: int, seconds: float) -> int | None:
    """The exit status of a child (adopted or not), or None if it still runs after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    return None


def kill_and_reap(pids: list[int]) -> None:
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):  # not ours: its own parent reaps it
            os.waitpid(pid, 0)


@pytest.mark.usefixtures("linux_proc")
def test_a_stdio_router_stops_when_its_client_dies_though_its_stdin_stays_open(tmp_path: Path) -> None:
    config = write_config(tmp_path, 1)
    handshake = [rpc_line(0, "initialize", INITIALIZE), rpc_line(None, "notifications/initialized", {})]
    command = [sys.executable, "-c", CLIENT, str(config), *map(json.dumps, handshake)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    # the router is adopted here once its client dies, so its exit status can be read (as a
    # subreaper such as systemd --user adopts it: its new parent is not init)
    with adopting_orphans(), (tmp_path / "stderr").open("wb") as err:
        client = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err)
        started = json.loads(client.stdout.readline())  # type: ignore[union-attr]
        client.stdout.close()  # type: ignore[union-attr]
        backends = backend_pids(tmp_path, 1, client)
        client.kill()
        client.wait()
        try:
            code = wait_exit(started["router"], 20)
            left = wait_gone(backends, 10)
        finally:
            kill_and_reap([started["router"], started["helper"], *backends])
    err_text = (tmp_path / "stderr").read_text()
    # before: the router and its backend ran on for good, its stdin open and its client gone
    assert code == 0, err_text
    assert left == [], err_text
    assert (tmp_path / "b0.bye").exists(), err_text  # its session ended as a client ends one: stdin closed
    assert "has exited" in err_text, err_text
