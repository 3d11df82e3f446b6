"""``centralmcp-batch serve``: run the reference router on stdio or streamable HTTP."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from ..router.serve import HttpAccess, serve
from . import CommandFailed, load_router

log = logging.getLogger(__name__)


def run(config: Path | None, transport: str, host: str, port: int, access: HttpAccess, log_level: str) -> int:
    """Serve until the client or a signal ends it; ``config`` None means the demo catalog."""
    # Before any server is made: on stdio, stdout is the protocol, so every log goes to stderr.
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        router = load_router(config)
    except Exception as exc:
        log.debug("the router did not start", exc_info=True)  # the traceback, for --log-level debug only
        raise CommandFailed(f"cannot start the router: {type(exc).__name__}: {exc}") from exc
    if transport == "http":
        log.info("serving %s on http://%s:%d/mcp", "the demo catalog" if config is None else config, host, port)
    serve(router, transport=transport, host=host, port=port, access=access)
    return 0  # the client left, or SIGTERM / SIGINT (Ctrl-C) stopped the server once the backends had stopped
