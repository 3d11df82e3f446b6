"""The MCP face of the batch: the ``invoke_read_tool_batch`` tool on the host's server."""

from __future__ import annotations

import logging
from typing import Any

from . import _compat, budget, engine, models, pipeline
from ._compat import Context
from .errors import ToolNameTaken
from .host import HookCalls, HostHooks
from .settings import BatchSettings

log = logging.getLogger(__name__)

TOOL_NAME = "invoke_read_tool_batch"
ANNOTATIONS = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}

DESCRIPTION = f"""Run up to {models.MAX_CALLS} read-only backend tool calls in one round trip.

Each entry of `calls` is {{"name", "arguments", "id", "cursor"}}: `name` is a backend tool
(use find_tool to discover), `arguments` its arguments (default {{}}), `id` correlates the
result (default: the entry's index as a string; ids must be unique), `cursor` resumes a
clipped read with its `next_cursor`.

Every entry goes through the same read-only gate, rate limiter and response bounding as
invoke_read_tool. Entries run with bounded concurrency and results come back in call order,
one per entry: index, id, tool, server, status (ok, invalid_call, unknown_tool, blocked,
invalid_cursor, error), then result or error. One entry failing never fails the others.
Write and destructive tools are blocked: use invoke_tool for those. Identical entries (same
name, arguments and cursor) share one backend call (shared_calls lists them); an entry the
account's rate cannot start before the batch's time limit is answered at once.

The response carries ok (true only if every entry succeeded), counts, failed_ids,
failed_indexes and rate (tokens drawn, seconds waited for the account's rate, seconds until
its next free token). It fits a byte budget: when over, ok results are dropped last first
(result_truncated), then error texts shortened, then only index, id and status are kept;
truncated says so. A malformed batch (not a list, empty, over {models.MAX_CALLS} entries,
duplicate ids) is answered {{"ok": false, "error"}} with nothing run."""


class _ToolObserver:
    """Engine events to the host's observer hooks and the client's progress notifications."""

    def __init__(self, hooks: HookCalls, ctx: Any | None) -> None:
        self.batch_started = hooks.batch_started
        self.item_completed = hooks.batch_item_completed
        self.batch_completed = hooks.batch_completed
        self.batch_cancelled = hooks.batch_cancelled
        # Nobody to tell: called in process, or a request with no progress token.
        self.ctx = ctx if ctx is not None and _compat.progress_may_be_heard(ctx) else None

    async def progress(self, done: int, total: int, message: str) -> None:
        if self.ctx is None:
            return
        try:
            await self.ctx.report_progress(done, total, message)
        except Exception:  # a client that went away must not fail the batch
            log.debug("progress notification failed", exc_info=True)


async def run(hooks: HostHooks, calls: Any, ctx: Any | None = None) -> dict[str, Any]:
    """One batch request against the host, as the tool answers it (structured)."""
    calls_hooks = hooks.calls().for_batch()  # the hooks as they stand as the batch starts, for every entry of it
    host = pipeline.HostPipeline(calls_hooks, request=ctx)
    observer = _ToolObserver(calls_hooks, ctx)
    return await engine.run_batch(calls, host, BatchSettings.from_env(), observer, frozenset({TOOL_NAME}))


def register(server: Any, hooks: HostHooks) -> None:
    """Add the tool to ``server``; a server that already has one is a startup error."""
    if _compat.has_tool(server, TOOL_NAME):
        raise ToolNameTaken(
            TOOL_NAME, f"the server already publishes {TOOL_NAME!r}; remove it before installing centralmcp-batch"
        )

    # A plain dict, not a finished CallToolResult: a host that wraps its tool manager with
    # middleware (CentralMCP) hands the raw return value to each middleware, and those act on
    # dicts only. The SDK's conversion then makes both the structured content and the text.
    async def invoke_read_tool_batch(ctx: Context, calls: Any = None) -> dict[str, Any]:
        return await run(hooks, calls, ctx)

    _compat.add_tool(
        server,
        invoke_read_tool_batch,
        name=TOOL_NAME,
        description=DESCRIPTION,
        annotations=ANNOTATIONS,
        input_schema=models.input_schema(),
        output_schema=models.output_schema(),
    )
    _compat.answer_dicts_with_compact_json(server, TOOL_NAME, _compact_json)


def _compact_json(response: dict[str, Any]) -> str:
    return budget.written(response)  # every item was sized (found plain) as it was answered
