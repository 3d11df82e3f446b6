"""A backend whose read tools fail the ways that used to take a router down with them.

In process (``fragile_server()``), or behind the reference router in a subprocess (a
``router.toml`` backend ``module = "backends.fragile:fragile_server"``). Each tool is ``async``
and, where it matters, also ``def``: the SDKs run the two kinds differently.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from typing import Any

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


class BackendBaseError(BaseException):
    """A library's own ``BaseException`` subclass, as some define for "abort"."""


def _parse_strictly(flags: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="site-report", exit_on_error=True)
    parser.add_argument("--site", required=True)
    return parser.parse_args(flags)  # a missing --site exits with status 2, as argparse does


def _raise(kind: str) -> None:
    if kind == "argparse":
        _parse_strictly([])
    if kind == "exit":
        raise SystemExit(3)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "custom":
        raise BackendBaseError("the backend aborted")
    raise ValueError(f"unknown kind {kind!r}")


class Blocker:
    """What the blocking ``def`` tool waits on: a test releases it, or it gives up after ``limit`` seconds."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()


def fragile_server(name: str = "fragile", blocker: Blocker | None = None) -> Any:
    """The server; ``blocker`` is what its ``block_sync`` waits on (each server its own by default)."""
    server = _compat.new_server(name)
    blocker = blocker or Blocker()

    async def raise_base(kind: str) -> dict[str, Any]:
        _raise(kind)
        return {}

    def raise_base_sync(kind: str) -> dict[str, Any]:
        _raise(kind)
        return {}

    async def cancel_itself() -> dict[str, Any]:
        # Awaits a future that something else cancelled: the CancelledError is the backend's own.
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(waiting.cancel)
        await waiting
        return {"unreachable": True}

    def sleep_sync(seconds: float) -> dict[str, Any]:
        time.sleep(seconds)
        return {"slept": seconds}

    def block_sync(limit: float = 10.0) -> dict[str, Any]:
        blocker.started.set()
        released = blocker.release.wait(limit)
        blocker.finished.set()
        return {"released": released}

    async def blocker_state() -> dict[str, bool]:
        return {"started": blocker.started.is_set(), "finished": blocker.finished.is_set()}

    async def quick(tag: str = "") -> dict[str, Any]:
        return {"tag": tag, "pid": os.getpid()}

    def quick_sync(tag: str = "") -> dict[str, Any]:
        return {"tag": tag, "thread": threading.current_thread().name}

    for fn in (raise_base, raise_base_sync, cancel_itself, sleep_sync, block_sync, blocker_state, quick, quick_sync):
        _compat.add_tool(server, fn, name=fn.__name__, description=fn.__name__.replace("_", " "), annotations=READ)
    return server
