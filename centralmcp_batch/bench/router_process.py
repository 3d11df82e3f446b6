"""The reference router as a subprocess (stdio or streamable HTTP), which the transport and load scenarios start.

``python -m centralmcp_batch.bench --serve-router stdio|http`` is that subprocess: the reference
router over one in-process backend whose ``wait`` tool sleeps as long as it is told.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .. import _compat, settings
from .backends import build_router
from .calls import BenchError
from .environ import quiet_logs
from .plan import LIFTED_LIMIT, TRANSPORT_CONCURRENCY


def router_env() -> dict[str, str]:
    return {**os.environ, **LIFTED_LIMIT, settings.CONCURRENCY: str(TRANSPORT_CONCURRENCY)}


def serve_command(transport: str, port: int = 0) -> list[str]:
    return [sys.executable, "-m", "centralmcp_batch.bench", "--serve-router", transport, "--port", str(port)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def http_router() -> AsyncIterator[str]:
    """The router as a streamable HTTP subprocess on a free local port; its URL while open."""
    port = free_port()
    async with http_server(serve_command("http", port), port, router_env()) as url:
        yield url


@asynccontextmanager
async def http_server(command: list[str], port: int, env: dict[str, str] | None = None) -> AsyncIterator[str]:
    """A streamable HTTP server that ``command`` starts on ``port``: its URL once it listens, stopped after.

    Its log goes to a file, shown only if something fails: SDK 1.x logs every client disconnect as an error.
    """
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            await wait_for_port(port, process)
            yield f"http://127.0.0.1:{port}/mcp"
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    with anyio.fail_after(seconds):
        while True:
            if process.poll() is not None:
                raise BenchError(f"the HTTP router exited with code {process.returncode} before listening")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


def stdio_params() -> Any:
    command = serve_command("stdio")
    return _compat.StdioServerParameters(command=command[0], args=command[1:], env=router_env())


def serve_router(transport: str, port: int) -> None:
    from ..router.serve import serve

    os.environ.update(LIFTED_LIMIT)  # the benchmark measures the batch, not the limiter
    quiet_logs()
    serve(build_router(), transport=transport, host="127.0.0.1", port=port)
