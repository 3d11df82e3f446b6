"""Serving the router on stdio or streamable HTTP."""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio

from .. import _compat


def serve(router: Any, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run until stopped. On stdio, stdout carries only the protocol: logs go to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if transport == "stdio":
        anyio.run(_compat.run_stdio, router.server)
    elif transport == "http":
        anyio.run(serve_http, router, host, port)
    else:
        raise ValueError(f"transport must be 'stdio' or 'http', not {transport!r}")


async def serve_http(router: Any, host: str, port: int) -> None:
    import uvicorn

    # Stateless: no MCP session lives here, so replicas behind a load balancer serve any request.
    app = _compat.http_app(router.server, stateless=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    async with router.connected():  # one session per remote backend for all HTTP clients
        await uvicorn.Server(config).serve()
