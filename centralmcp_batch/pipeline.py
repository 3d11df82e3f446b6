"""One read call through the host hooks: resolve, gate, cursor, rate token, dispatch.

Shared by every batch entry and by the reference router's ``invoke_read_tool``, so a single
read and a batch entry meet exactly the same gate, limiter and bounding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from .engine import Guards, ValidCall, call_timed_out, describe, must_propagate
from .errors import InvalidCursor, text_of
from .host import HookCalls, await_me_maybe, is_awaitable, token_failed
from .models import CallContext, Outcome, ToolRef

log = logging.getLogger(__name__)

KEPT_STATUSES = ("blocked", "unknown_tool", "invalid_cursor")


def unknown_tool_message(name: str) -> str:
    return f"Unknown tool '{name}'. Use find_tool to discover."


async def read_one(
    hooks: HookCalls,
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
    the task they escape, so catching them any further out would be too late. Each hook's
    answer is awaited only when it is awaitable (see ``HookCalls``).
    """
    tool: ToolRef | None = None
    try:
        found = hooks.find_tool(name)
        if type(found) is not ToolRef:
            if found is not None:  # an unknown tool is told at once: None needs no await
                found = await await_me_maybe(found)
            if found is None:
                return Outcome("unknown_tool", error=unknown_tool_message(name))
            if not isinstance(found, ToolRef):
                return Outcome(
                    "error", error=f"TypeError: centralmcp_find_tool answered a {type(found).__name__}, not a ToolRef"
                )
        tool = found
        refusal = hooks.read_gate(tool)
        if refusal is not None and not isinstance(refusal, str):
            refusal = await refusal
        if refusal is not None:
            return Outcome("blocked", tool, error=refusal)
        resume = None
        if cursor is not None:
            try:
                resume = await await_me_maybe(hooks.resume_cursor(tool, arguments, cursor))
            except InvalidCursor as exc:
                return Outcome("invalid_cursor", tool, error=text_of(exc) or "invalid cursor")
        cap = guards.server_cap(tool)
        if cap is None:
            result, timed_out = await _call_backend(hooks, tool, arguments, resume, max_bytes, context, guards)
        else:
            async with cap:
                result, timed_out = await _call_backend(hooks, tool, arguments, resume, max_bytes, context, guards)
        if timed_out:
            return Outcome("error", tool, error=call_timed_out(guards.call_timeout))
        return classify(tool, result)
    except Exception as exc:
        return Outcome("error", tool, error=describe(exc))
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, a CancelledError nobody sent
        if must_propagate(exc):
            raise
        log.error("reading %r raised %s; only that call fails", name, type(exc).__name__, exc_info=exc)
        return Outcome("error", tool, error=describe(exc))


async def _call_backend(
    hooks: HookCalls,
    tool: ToolRef,
    arguments: Mapping[str, Any],
    resume: Any,
    max_bytes: int,
    context: CallContext,
    guards: Guards,
) -> tuple[Any, bool]:
    """One rate token, then the dispatch under the call time limit: ``(its answer, timed out)``."""
    waiting = time.perf_counter() if hooks.hears_tokens else 0.0  # read only for a token observer
    for wait in hooks.acquire_rate_token(tool):
        try:
            await wait
        except Exception:
            token_failed(tool)
    if hooks.hears_tokens:
        told = hooks.rate_token_waited(tool, time.perf_counter() - waiting)
        if told is not None:
            await told
    result = hooks.dispatch_read(tool, arguments, resume, max_bytes, context)
    try:
        result = await guards.dispatch(result, tool) if is_awaitable(result) else guards.answered(result)
    finally:
        timed_out = guards.dispatch_ended()
    return result, timed_out


def classify(tool: ToolRef, result: Any) -> Outcome:
    """A dispatch answer as an outcome: kept refusal statuses, error dicts, or ok."""
    if isinstance(result, dict):
        status = result.get("status")
        if status in KEPT_STATUSES:
            return Outcome(status, tool, error=text_of(result.get("error") or status))
        if "error" in result:
            return Outcome("error", tool, error=text_of(result["error"]))
    return Outcome("ok", tool, result)  # by position, as the entry's CallContext (see batch_reader)


def batch_reader(hooks: HookCalls, request: Any = None):  # type: ignore[no-untyped-def]
    """The engine's Reader over the host hooks (as this batch calls them), for one batch request."""

    def read(call: ValidCall, max_bytes: int, guards: Guards) -> Awaitable[Outcome]:
        # Made by position: a class called with keywords builds a dict of them for every instance, and
        # this is one instance an entry (2 k instructions of an entry's 250 k).
        context = CallContext(call.index, call.id, True, request)
        return read_one(
            hooks, call.name, call.arguments, call.cursor, max_bytes=max_bytes, context=context, guards=guards
        )

    return read
