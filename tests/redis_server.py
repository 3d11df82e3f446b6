"""A real ``redis-server`` for the tests, on a free loopback port, that a test can stop and start again.

Outside CI a machine without ``redis-server`` skips the Redis tests with a reason; with
``CI=true`` it fails them, so the Redis store can never go untested there.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        reason = "redis-server is not installed (Debian: apt-get install redis-server)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}: the Redis store must be tested in CI")
        pytest.skip(reason)
    try:
        import redis  # noqa: F401 - only checking that the extra is installed
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and the redis package is missing: install '.[test]'")
        pytest.skip("the redis package is not installed (pip install 'centralmcp-batch[redis]')")
    return found


class RedisServer:
    """One redis-server process without persistence; ``stop`` and ``start`` keep its port."""

    def __init__(self, workdir: Path, password: str | None = None) -> None:
        self.binary, self.workdir, self.port = redis_binary(), workdir, free_port()
        self.password = password  # required of every client (requirepass) when set
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        login = "" if self.password is None else f":{self.password}@"
        return f"redis://{login}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            *([] if self.password is None else ["--requirepass", self.password]),
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._answers_ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                answer = sock.recv(64)  # -NOAUTH once a password is required: up all the same
                return answer.startswith(b"+PONG") or answer.startswith(b"-NOAUTH")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis to share: CI's own (``CENTRALMCP_TEST_REDIS_URL``, started by ``.ci/run``), else one of ours."""
    shared = os.environ.get("CENTRALMCP_TEST_REDIS_URL", "").strip()
    if shared:
        redis_binary()  # the same skip-or-fail rule when the package is missing
        yield shared
        return
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
