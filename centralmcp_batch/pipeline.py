"""The host's side of the batch's stages, through the host hooks.

resolve (catalog, read gate, cursor), reserve (one booking of the account's rate for the calls
about to be made), draw (the limiters that give one token per call) and dispatch. A batch entry
and the reference router's ``invoke_read_tool`` go through the same ``HostPipeline``, so a single
read and a batch entry meet exactly the same gate, limiter and bounding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from .engine import Ready
from .entries import ValidCall
from .errors import InvalidCursor, describe, must_propagate, text_of
from .host import HookCalls, await_me_maybe, token_failed
from .models import CallContext, Outcome, RateBooking, ToolRef

log = logging.getLogger(__name__)

KEPT_STATUSES = ("blocked", "unknown_tool", "invalid_cursor")


def unknown_tool_message(name: str) -> str:
    return f"Unknown tool '{name}'. Use find_tool to discover."


class HostPipeline:
    """The engine's ``Host`` over the host hooks, for one batch (``in_batch``) or one single read."""

    def __init__(self, hooks: HookCalls, request: Any = None, *, in_batch: bool = True) -> None:
        self.hooks, self.request, self.in_batch = hooks, request, in_batch

    async def resolve(self, call: ValidCall) -> Ready | Outcome:
        """Catalog, gate, cursor: the call ready to dispatch, or what refuses it. Never raises but a
        cancellation: whatever the hooks raise fails this entry alone, told with its tool's server."""
        tool: ToolRef | None = None
        try:
            found = await await_me_maybe(self.hooks.find_tool(call.name))
            if found is None:
                return Outcome("unknown_tool", error=unknown_tool_message(call.name))
            if not isinstance(found, ToolRef):
                error = f"TypeError: centralmcp_find_tool answered a {type(found).__name__}, not a ToolRef"
                return Outcome("error", error=error)
            tool = found
            refusal = await await_me_maybe(self.hooks.read_gate(tool))
            if refusal is not None:
                return Outcome("blocked", tool, error=refusal)
            resume = None
            if call.cursor is not None:
                try:
                    resume = await await_me_maybe(self.hooks.resume_cursor(tool, call.arguments, call.cursor))
                except InvalidCursor as exc:
                    return Outcome("invalid_cursor", tool, error=text_of(exc) or "invalid cursor")
            return Ready(call, tool, resume)
        except Exception as exc:
            return Outcome("error", tool, error=describe(exc))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, a CancelledError nobody sent
            if must_propagate(exc):
                raise
            log.error("resolving %r raised %s; only that entry fails", call.name, type(exc).__name__, exc_info=exc)
            return Outcome("error", tool, error=describe(exc))

    async def reserve(self, tools: Sequence[ToolRef], within: float) -> RateBooking | None:
        """One booking for these calls from every limiter that books at once; None when none does."""
        if not self.hooks.books_rates:
            return None
        bookings = await self.hooks.reserve_rate_tokens(tools, within)
        if not bookings:
            return RateBooking([0.0] * len(tools))  # every booking limiter failed: the calls go on unbooked
        return await _combined(bookings)

    async def draw_tokens(self, tool: ToolRef, booked_wait: float) -> float:
        """The tokens of the limiters that give one per call; the seconds that took. Then the observers hear
        of the whole wait, the booked slot's included."""
        waiting = time.perf_counter()
        for wait in self.hooks.acquire_rate_token(tool):
            try:
                await wait
            except Exception:
                token_failed(tool)
        waited = time.perf_counter() - waiting
        if self.hooks.hears_tokens:
            await await_me_maybe(self.hooks.rate_token_waited(tool, booked_wait + waited))
        return waited

    async def dispatch(self, ready: Ready, max_bytes: int) -> Outcome:
        call = ready.call
        context = (
            CallContext(call.index, call.id, True, self.request)
            if self.in_batch
            else CallContext(None, None, False, self.request)
        )
        result = self.hooks.dispatch_read(ready.tool, call.arguments, ready.resume, max_bytes, context)
        return classify(ready.tool, await await_me_maybe(result))


async def _combined(bookings: list[RateBooking]) -> RateBooking:
    """Several limiters' bookings as one: each call waits for its latest slot, and is admitted only where
    every limiter booked it (a limiter's slots for calls another left out are given back at once)."""
    if len(bookings) == 1:
        return bookings[0]
    admitted = min(len(booking.waits) for booking in bookings)
    for booking in bookings:
        if len(booking.waits) > admitted and booking.give_back is not None:
            await await_me_maybe(booking.give_back(list(range(admitted, len(booking.waits)))))
    waits = [max(booking.waits[i] for booking in bookings) for i in range(admitted)]
    starts_by = [
        min(booking.starts_by[i] if booking.starts_by is not None else float("inf") for booking in bookings)
        for i in range(admitted)
    ]
    frees = [booking.next_free for booking in bookings]
    next_free = None if None in frees else max(free for free in frees if free is not None)

    async def give_back(positions: Sequence[int]) -> None:
        for booking in bookings:
            if booking.give_back is not None:
                await await_me_maybe(booking.give_back(positions))

    return RateBooking(waits, starts_by, next_free, give_back)


def classify(tool: ToolRef, result: Any) -> Outcome:
    """A dispatch answer as an outcome: kept refusal statuses, error dicts, or ok."""
    if isinstance(result, dict):
        status = result.get("status")
        if status in KEPT_STATUSES:
            return Outcome(status, tool, error=text_of(result.get("error") or status))
        if "error" in result:
            return Outcome("error", tool, error=text_of(result["error"]))
    return Outcome("ok", tool, result)
