"""Calls in anyio's worker threads that a cancelled caller abandons, at any anyio version allowed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib.metadata import version
from typing import Any, TypeVar

import anyio
import anyio.to_thread

_T = TypeVar("_T")

# anyio before 4.16 never puts a worker thread back on its idle list when a call abandoned on cancel
# was cancelled before the worker began it: the thread waits for work that never comes, holding that
# call's arguments, for as long as the event loop runs (anyio 4.7: 33 threads more after 8 rounds of
# 30 calls cancelled as they queued; tests/test_worker_threads.py). On those versions the call runs
# in a task of its own, which its caller's cancel does not reach, so anyio never sees it cancelled
# before it began.
_ANYIO_KEEPS_CANCELLED_WORKERS = tuple(int(part) for part in version("anyio").split(".")[:2]) < (4, 16)
_DETACHED_CALLS: set[asyncio.Task[Any]] = set()  # strong references, as the loop keeps only weak ones


async def run_sync_abandonable(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in anyio's worker thread; a cancelled caller stops waiting, and the call runs on
    to its end in its thread, its answer dropped (a stuck call must not hold its caller)."""
    loop = _running_asyncio_loop() if _ANYIO_KEEPS_CANCELLED_WORKERS else None
    if loop is None:  # a fixed anyio, or another event loop (trio): anyio's own way
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
    call = loop.create_task(_outcome(fn, args))
    _DETACHED_CALLS.add(call)
    call.add_done_callback(_DETACHED_CALLS.discard)
    answered, value = await asyncio.shield(call)
    if answered:
        return value  # type: ignore[no-any-return] # fn's answer
    raise value


async def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """``(True, answer)`` or ``(False, exception)``: a task of its own must not raise what ``fn`` raised,
    as asyncio lets a SystemExit or KeyboardInterrupt out of a task stop the event loop."""
    try:
        # Still abandonable, so the loop's own end cancels it: anyio's workers end with the loop then.
        return True, await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
        return False, exc


def _running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio)
        return None
