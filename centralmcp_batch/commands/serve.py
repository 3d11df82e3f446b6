"""``centralmcp-batch serve``: run the reference router on stdio or streamable HTTP."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

from ..router.serve import HttpAccess, claim_stdio, serve
from ..router.urls import hide_urls_in_logs, hosts_only
from . import CommandFailed, load_router

log = logging.getLogger(__name__)


def run(config: Path | None, transport: str, host: str, port: int, access: HttpAccess, log_level: str) -> int:
    """Serve until the client or a signal ends it; ``config`` None means the demo catalog."""
    # Before any server is made: on stdio, stdout is the protocol, so every log goes to stderr.
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    hide_urls_in_logs()  # from the first line on: a backend's URL is told by its host only
    # Before the backends are imported (a module may print as it is imported): on stdio, stdout is the protocol's.
    protocol = claim_stdio() if transport == "stdio" else None
    try:
        router = load_router(config)
    except Exception as exc:
        log.debug("the router did not start", exc_info=True)  # the traceback, for --log-level debug only
        raise CommandFailed(f"cannot start the router: {type(exc).__name__}: {hosts_only(str(exc))}") from exc
    if transport == "http":
        check_listenable(host, port)
        log.info("serving %s on http://%s:%d/mcp", "the demo catalog" if config is None else config, host, port)
    serve(router, transport=transport, host=host, port=port, access=access, protocol=protocol)
    return 0  # the client left, or SIGTERM / SIGINT (Ctrl-C) / SIGHUP stopped the server once the backends had stopped


def check_listenable(host: str, port: int) -> None:
    """Fail at once, in one line, when ``host:port`` cannot be listened on (a port in use, an address not
    this machine's): uvicorn would log the error, then exit with a traceback after the backends started.
    Bound as uvicorn binds it, and closed again; a port taken in between still fails in uvicorn's way."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
