"""The process's settings for a run: environment variables for a block, and quieter logs."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from .. import settings


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for a block and restore what was there."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def concurrency(value: int) -> AbstractContextManager[None]:
    return environment(**{settings.CONCURRENCY: str(value)})


def quiet_logs() -> None:
    """Warnings only: an INFO line per HTTP request (httpx, or httpx2 under SDK 2.x) would bury the tables."""
    for noisy in ("httpx", "httpx2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
