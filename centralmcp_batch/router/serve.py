"""Serving the router on stdio or streamable HTTP."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from .. import _compat

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class HttpAccess:
    """Which Host and Origin headers the HTTP transport accepts besides localhost's (DNS-rebinding protection)."""

    hosts: Sequence[str] = ()
    origins: Sequence[str] = ()

    def host_patterns(self) -> list[str]:
        """A name without a port matches it on any port; ``name:port`` matches that port only."""
        patterns: list[str] = []
        for host in self.hosts:
            patterns += [host] if _has_port(host) else [host, f"{host}:*"]
        return patterns


def _has_port(host: str) -> bool:
    # "[::1]" has colons but no port; "[::1]:8000" and "name:8000" have one.
    return host.rsplit("]", 1)[-1].count(":") == 1 if host.startswith("[") else ":" in host


def serve(
    router: Any, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8000, access: HttpAccess = HttpAccess()
) -> None:
    """Run until stopped. On stdio, stdout carries only the protocol: logs go to stderr."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if transport == "stdio":
        anyio.run(_compat.run_stdio, router.server)
    elif transport == "http":
        anyio.run(serve_http, router, host, port, access)
    else:
        raise ValueError(f"transport must be 'stdio' or 'http', not {transport!r}")


async def serve_http(router: Any, host: str, port: int, access: HttpAccess = HttpAccess()) -> None:
    import uvicorn

    if host not in LOOPBACK and not access.hosts:
        log.warning(
            "bound to %s, but only localhost Host headers are accepted: name the others with --allow-host", host
        )
    # Stateless: no MCP session lives here, so replicas behind a load balancer serve any request.
    hosts, origins = access.host_patterns(), list(access.origins)
    app = _compat.http_app(router.server, allowed_hosts=hosts, allowed_origins=origins, stateless=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    async with router.connected():  # one session per remote backend for all HTTP clients
        await uvicorn.Server(config).serve()
