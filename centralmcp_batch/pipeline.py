"""One read call through the host hooks: resolve, gate, cursor, rate token, dispatch.

Shared by every batch entry and by the reference router's ``invoke_read_tool``, so a single
read and a batch entry meet exactly the same gate, limiter and bounding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from .engine import Guards, ValidCall, describe, must_propagate
from .errors import InvalidCursor
from .host import HostHooks
from .models import CallContext, Outcome, ToolRef

log = logging.getLogger(__name__)

KEPT_STATUSES = ("blocked", "unknown_tool", "invalid_cursor")


def unknown_tool_message(name: str) -> str:
    return f"Unknown tool '{name}'. Use find_tool to discover."


async def read_one(
    hooks: HostHooks,
    name: str,
    arguments: Mapping[str, Any],
    cursor: str | None,
    *,
    max_bytes: int,
    context: CallContext,
    guards: Guards,
) -> Outcome:
    """The outcome of one read; never raises except when this task is cancelled.

    Whatever else the hooks or the backend raise is contained here, in the task that called
    them: asyncio re-raises ``SystemExit`` and ``KeyboardInterrupt`` out of the event loop from
    the task they escape, so catching them any further out would be too late.
    """
    tool: ToolRef | None = None
    try:
        tool = await hooks.find_tool(name)
        if tool is None:
            return Outcome("unknown_tool", error=unknown_tool_message(name))
        if not isinstance(tool, ToolRef):
            return Outcome(
                "error", error=f"TypeError: centralmcp_find_tool answered a {type(tool).__name__}, not a ToolRef"
            )
        refusal = await hooks.read_gate(tool)
        if refusal is not None:
            return Outcome("blocked", tool, error=refusal)
        try:
            resume = None if cursor is None else await hooks.resume_cursor(tool, arguments, cursor)
        except InvalidCursor as exc:
            return Outcome("invalid_cursor", tool, error=str(exc) or "invalid cursor")
        return await _call_backend(hooks, tool, arguments, resume, max_bytes, context, guards)
    except Exception as exc:
        return Outcome("error", tool, error=describe(exc))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, a CancelledError nobody sent
        if must_propagate(exc):
            raise
        log.error("reading %r raised %s; only that call fails", name, type(exc).__name__, exc_info=exc)
        return Outcome("error", tool, error=describe(exc))


async def _call_backend(
    hooks: HostHooks,
    tool: ToolRef,
    arguments: Mapping[str, Any],
    resume: Any,
    max_bytes: int,
    context: CallContext,
    guards: Guards,
) -> Outcome:
    async with guards.server_slot(tool):
        waiting = time.perf_counter()
        await hooks.acquire_rate_token(tool)
        await hooks.rate_token_waited(tool, time.perf_counter() - waiting)
        result, timed_out = await guards.dispatch(hooks.dispatch_read(tool, arguments, resume, max_bytes, context))
    if timed_out:
        return Outcome("error", tool, error=f"TimeoutError: the backend call timed out after {guards.call_timeout:g}s")
    return classify(tool, result)


def classify(tool: ToolRef, result: Any) -> Outcome:
    """A dispatch answer as an outcome: kept refusal statuses, error dicts, or ok."""
    if isinstance(result, dict):
        status = result.get("status")
        if status in KEPT_STATUSES:
            return Outcome(status, tool, error=str(result.get("error") or status))
        if "error" in result:
            return Outcome("error", tool, error=str(result["error"]))
    return Outcome("ok", tool, result=result)


def batch_reader(hooks: HostHooks, request: Any = None):  # type: ignore[no-untyped-def]
    """The engine's Reader over the host hooks, for one batch request."""

    async def read(call: ValidCall, max_bytes: int, guards: Guards) -> Outcome:
        context = CallContext(index=call.index, call_id=call.id, in_batch=True, request=request)
        return await read_one(
            hooks, call.name, call.arguments, call.cursor, max_bytes=max_bytes, context=context, guards=guards
        )

    return read
