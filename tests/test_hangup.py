"""SIGHUP (a closed terminal or ssh session) stops ``serve`` as SIGTERM does: every backend, and every process a
backend started, is stopped before the router exits.

Real processes, as in ``test_lifecycle.py``: a ``serve`` subprocess over stdio backends (``backends/lingering.py``)
that each start a helper process (a ``sleep``) and do not exit when their stdin closes. Before, SIGHUP's default
killed the router at once: the backends and their helpers were left running, re-parented to init.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.redis_server import free_port
from tests.test_lifecycle import backend_pids, stop, uvicorns_lifespan_cancelled, wait_gone, write_config

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sighup_stops_the_router_every_backend_and_what_they_started(tmp_path: Path, transport: str) -> None:
    config = write_config(tmp_path, 2, LINGER_CHILD="1", LINGER_STAY="1")
    options = ["--transport", "http", "--port", str(free_port())] if transport == "http" else []
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config), *options]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    with (tmp_path / "stderr").open("wb") as err:
        process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
    pids = backend_pids(tmp_path, 2, process)
    assert len(pids) == 4  # two backends, each with its helper
    code, told = stop(process, signal.SIGHUP, tmp_path)
    left = wait_gone(pids, 10)
    assert code == 0, told
    assert left == [], told
    assert "stopping on SIGHUP" in told, told
    assert "Traceback" not in told or uvicorns_lifespan_cancelled(told), told  # uvicorn 0.31's own, as on SIGTERM


# Runs ``serve`` as the leader of a new session whose controlling terminal is the pty on its stderr, as a shell
# in a terminal window runs it: closing the pty's other end is the terminal closing.
IN_A_TERMINAL = textwrap.dedent(
    """
    import fcntl, os, sys, termios
    os.setsid()
    fcntl.ioctl(2, termios.TIOCSCTTY, 0)
    os.execv(sys.executable, [sys.executable, "-m", "centralmcp_batch", *sys.argv[1:]])
    """
)


def test_a_closed_terminal_stops_the_router_and_everything_its_backends_started(tmp_path: Path) -> None:
    # The kernel sends SIGHUP itself, and from then on every write to the terminal (the router's log) fails.
    config = write_config(tmp_path, 2, LINGER_CHILD="1", LINGER_STAY="1")
    terminal, its_device = pty.openpty()
    command = [sys.executable, "-c", IN_A_TERMINAL, "serve", "--config", str(config), "--log-level", "info"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    try:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=its_device
        )
    finally:
        os.close(its_device)
    try:
        pids = backend_pids(tmp_path, 2, process)
    finally:
        os.close(terminal)  # the terminal closes
    try:
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        assert process.stdin is not None
        process.stdin.close()
        left = wait_gone(pids, 10)
    assert code == 0
    assert left == []
