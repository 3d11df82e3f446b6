"""The hook contract between a router (the host) and its ``centralmcp`` plugins.

Hooks are called with keyword arguments. An implementation may be ``def`` or ``async def``:
the caller awaits an awaitable result. Under ``firstresult`` an ``async def`` always answers,
since its coroutine is not None; a sync implementation may return None to pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import pluggy

from .models import CallContext, ToolRef

PROJECT = "centralmcp"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

MaybeAwaitable = Any | Awaitable[Any]

# -- implemented by the host, called by the plugin ------------------------------------


@hookspec(firstresult=True)
def centralmcp_find_tool(name: str) -> ToolRef | None:
    """The catalog: the backend tool called ``name``, or None when it is unknown.

    :param name: a backend tool name as the client sent it.
    """


@hookspec
def centralmcp_read_gate(tool: ToolRef) -> str | None:
    """Allow or refuse a read: None allows, a string refuses with that message.

    Every implementation is asked and any refusal wins. An implementation that raises
    refuses (the gate fails closed), and so does a host with no implementation at all.

    :param tool: the catalog's reference for the tool about to be read.
    """


@hookspec(firstresult=True)
def centralmcp_resume_cursor(tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
    """Verify a continuation cursor against this tool and these arguments.

    Raise ``centralmcp_batch.InvalidCursor`` to refuse; what is returned is handed to
    dispatch as ``resume``. With no implementation every cursor is refused.

    :param tool: the tool the cursor is presented for.
    :param arguments: the call's arguments, which the cursor must have been issued for.
    :param cursor: the opaque cursor string from the client.
    """


@hookspec
def centralmcp_reserve_rate_tokens(tools: Sequence[ToolRef], within: float) -> MaybeAwaitable:
    """Book one rate token for each backend call about to be made, in call order, in one round trip.

    For a limiter that can book several tokens at once (the plugin's own does, on each of its
    stores). A batch calls it once, after every local rejection, with the tool of each backend call
    it is about to make (identical reads share one call); a single read of the reference router
    calls it with one. The caller then starts each call at its slot. Answer a
    ``centralmcp_batch.RateBooking`` (or an awaitable of one), or None to book nothing.

    A plugin that implements this hook is not asked for ``centralmcp_acquire_rate_token`` by the
    batch: each of its tokens is booked here once. A call whose slot would come later than
    ``within`` must not be booked: the booking stops before it, so its ``waits`` are a prefix of
    ``tools``, and the caller answers the calls left out at once, spending no token on them. The
    caller gives back, through ``RateBooking.give_back``, the slots of booked calls that never
    started (the client cancelled, or a time limit passed first). One that raises is logged and
    its calls go on unbooked.

    :param tools: the tool of each backend call, in call order.
    :param within: seconds the caller can wait for a slot (its time limit, less what has passed).
    """


@hookspec
def centralmcp_acquire_rate_token(tool: ToolRef) -> MaybeAwaitable:
    """Wait for the host's rate limiter: awaited exactly once per backend call.

    Called after every local rejection, just before dispatch. One that raises is logged
    and the call proceeds; every other limiter still gives its token. A plugin that
    implements ``centralmcp_reserve_rate_tokens`` is not called here by the batch.

    :param tool: the tool about to be called.
    """


@hookspec(firstresult=True)
def centralmcp_dispatch_read(
    tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
) -> Any:
    """Call the backend and bound its response to ``max_bytes``.

    Return the bounded result, or a dict with an ``error`` key (and optionally a ``status``
    of ``blocked``, ``unknown_tool`` or ``invalid_cursor``, which is kept).

    :param tool: the tool to call.
    :param arguments: its arguments (an object).
    :param resume: what ``centralmcp_resume_cursor`` returned, or None without a cursor.
    :param max_bytes: the most bytes this one result may take.
    :param context: which call this is (index and id inside a batch).
    """


# -- implemented by the plugin, called by the host ------------------------------------


@hookspec
def centralmcp_register_tools(server: Any, pluginmanager: pluggy.PluginManager) -> None:
    """Register this plugin's MCP tools on the host's server.

    :param server: the host's ``FastMCP`` (SDK 1.x) or ``MCPServer`` (SDK 2.x).
    :param pluginmanager: the host's plugin manager, through which the plugin calls the host hooks.
    """


# -- implemented by anyone (observers), called by the plugin --------------------------


@hookspec
def centralmcp_batch_started(total: int) -> MaybeAwaitable:
    """A batch passed its whole-batch checks and is about to run. One that raises is logged and ignored.

    Called in the batch's own task before any entry starts, so a context variable set here is
    seen by every ``centralmcp_batch_item_completed`` and the ``centralmcp_batch_completed`` (or
    ``centralmcp_batch_cancelled``) of this batch (a tracer parents its entry spans this way). A
    rejected batch starts nothing.

    An implementation may answer ``False`` to hear nothing more of this batch: its plugin's
    ``centralmcp_rate_token_waited``, ``centralmcp_batch_item_completed``,
    ``centralmcp_batch_completed`` and ``centralmcp_batch_cancelled`` are then not called for
    it, which spares every entry the calls (a tracer with nowhere to send spans, a sampler that
    skips this batch). Any other answer, None included, keeps listening.

    :param total: how many entries the batch has, valid or not.
    """


@hookspec
def centralmcp_rate_token_waited(tool: ToolRef, seconds: float) -> MaybeAwaitable:
    """A backend call got its rate tokens, after waiting ``seconds`` for every limiter.

    Called once per backend call, single read or batch entry, once its slot came and right after
    ``centralmcp_acquire_rate_token``. One that raises is logged and ignored.

    :param tool: the tool about to be called.
    :param seconds: how long the call waited for its tokens.
    """


@hookspec
def centralmcp_batch_item_completed(item: Mapping[str, Any], seconds: float) -> MaybeAwaitable:
    """One batch entry finished, whatever its status. One that raises is logged and ignored.

    :param item: the entry's result item, as it appears in the response before any shrink.
    :param seconds: how long the entry took.
    """


@hookspec
def centralmcp_batch_completed(response: Mapping[str, Any], seconds: float) -> MaybeAwaitable:
    """One batch finished. One that raises is logged and ignored.

    :param response: the response as returned to the client.
    :param seconds: how long the whole batch took.
    """


@hookspec
def centralmcp_batch_cancelled(seconds: float) -> MaybeAwaitable:
    """A batch was cancelled before it could answer: its client cancelled the request, or the
    router is shutting down. No ``centralmcp_batch_completed`` follows. One that raises is logged
    and ignored.

    Called in the batch's own task as the cancellation passes through it, shielded from it for
    a second at most, so an ``async def`` implementation can still finish its work (a tracer
    ends the batch's span). The items of the entries that finished were told before.

    :param seconds: how long the batch ran.
    """
