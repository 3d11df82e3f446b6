"""The bodies of the ``centralmcp-batch`` subcommands, one module each.

``cli.py`` parses and checks the arguments, then calls ``run`` of one of these with plain values.
A command returns its exit status, or raises ``CommandFailed`` with a message for the user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class CommandFailed(Exception):
    """A subcommand could not do its job; ``cli`` prints the message and exits 1."""


def load_router(config: Path | None) -> Any:
    """The reference router over ``config``, or the demo router when there is none."""
    if config is None:
        from ..router.demo import demo_router

        return demo_router()
    from ..router.config import load_router as from_config

    return from_config(config)
