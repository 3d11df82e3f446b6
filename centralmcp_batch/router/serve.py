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
# A client leaves its scheme's default port out of Host and Origin headers (a browser always does).
DEFAULT_PORTS = {"http": "80", "https": "443"}


@dataclass(frozen=True)
class HttpAccess:
    """Which Host and Origin headers the HTTP transport accepts besides localhost's (DNS-rebinding protection)."""

    hosts: Sequence[str] = ()
    origins: Sequence[str] = ()

    def host_patterns(self) -> list[str]:
        """A name without a port matches it on any port; ``name:port`` matches that port only.

        A Host header without a port names port 80 or 443, whichever the client's scheme uses (a
        router behind a TLS proxy cannot tell which), so ``name:80`` and ``name:443`` match it too.
        """
        patterns: list[str] = []
        for host in self.hosts:
            name, port = split_port(host)
            if port is None:
                patterns += [host, f"{host}:*"]
            else:
                patterns += [name, host] if port in DEFAULT_PORTS.values() else [host]
        return patterns

    def origin_patterns(self) -> list[str]:
        """``scheme://host`` and ``scheme://host:<its default port>`` are one origin: each matches both.

        ``:*`` (any port) includes the default port, which the Origin header leaves out.
        """
        patterns: list[str] = []
        for origin in self.origins:
            scheme, _, rest = origin.partition("://")
            name, port = split_port(rest)
            default = DEFAULT_PORTS.get(scheme)
            if default is not None and port in (None, default):
                patterns += [f"{scheme}://{name}", f"{scheme}://{name}:{default}"]
            else:
                patterns += [f"{scheme}://{name}", origin] if port == "*" else [origin]
        return patterns


def split_port(host: str) -> tuple[str, str | None]:
    """``("name", "8000")`` from ``name:8000``; ``("[::1]", None)`` from ``[::1]``, whose colons are inside brackets."""
    head, bracket, tail = host.rpartition("]")
    name, colon, port = tail.rpartition(":")
    if not colon:
        return host, None
    return head + bracket + name, port


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
    hosts, origins = access.host_patterns(), access.origin_patterns()
    app = _compat.http_app(router.server, allowed_hosts=hosts, allowed_origins=origins, stateless=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    async with router.connected():  # one session per remote backend for all HTTP clients
        await uvicorn.Server(config).serve()
