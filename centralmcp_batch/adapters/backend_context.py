"""The Context a backend tool is handed for a batch entry: the batch's connection, not its request.

CentralMCP's ``invoke_read_tool`` hands its own request's Context to the backend it calls, so what
the backend sends through it (progress, log messages, requests to the client) belongs to that one
read. A batch calls many backends under one request, whose progress is the batch's own: one report
per entry. Handed the batch's Context, each backend's own progress went out under the batch's
token (12 notifications for 2 entries, going backwards), its log messages rode the batch's request,
and every entry read the batch's request id (on SDK 2.x also the batch's call parameters and input
responses). So each entry's backend gets a Context of its own, made from the batch's:

- its request id is its own, ``<the batch's request id>/<entry index>``;
- it carries no progress token, and its progress reports go nowhere: the batch reports each entry;
- its log messages go to the router's log (logger ``centralmcp_batch.adapters.backends``), not to
  the client;
- a request it sends the client (an elicitation, sampling) rides the batch's request, as a single
  read's rides that read's, so that the client can answer it;
- it holds none of the batch request's own state: not its SSE stream controls, and on SDK 2.x not
  its call parameters (it has the entry's own) nor its input responses (it starts at round one, as
  the SDK's own nested calls do, ``Context._nested_invocation``);
- the rest is the batch's connection: the client's info and capabilities, the lifespan context,
  the transport's request (its HTTP headers).

Both SDK lines keep a Context's request in a dataclass with these field names, inside a pydantic
model, so nothing here asks which line it runs on: a part that one line lacks is looked for, not
assumed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

from ..errors import text_of

backend_log = logging.getLogger("centralmcp_batch.adapters.backends")

# MCP's log levels (RFC 5424's) as Python's.
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}

# Request-context fields that act on the batch request itself (closing its HTTP stream).
STREAM_CONTROLS = ("close_sse_stream", "close_standalone_sse_stream")


def entry_context(ctx: Any, index: int, tool: str, arguments: Mapping[str, Any]) -> Any:
    """The Context for the backend of entry ``index``, a call of ``tool`` with ``arguments``, made from
    the batch's ``ctx``; ``ctx`` itself when it is None or belongs to no request."""
    try:
        request = ctx.request_context
    except (AttributeError, ValueError):  # None, or a Context made outside a request: no request to keep apart
        return ctx
    own_id = f"{request.request_id}/{index}"
    own = copy.copy(request)  # a dataclass: a shallow copy, then the entry's own fields (cheaper than replace)
    for name, value in _own_fields(request, own_id, tool, arguments).items():
        setattr(own, name, value)
    entry = ctx.model_copy()
    entry._request_context = own
    if "_input_params" in type(ctx).__private_attributes__:  # SDK 2.x: answers to the batch's own questions
        entry._input_params = None
    return entry


def _own_fields(request: Any, own_id: str, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    own: dict[str, Any] = {"request_id": own_id, "meta": without_progress_token(request.meta)}
    own["session"] = EntrySession(request.session, own_id, request.request_id, tool)
    fields = _field_names(type(request))
    own.update({name: None for name in STREAM_CONTROLS if name in fields})
    if "params" in fields:  # SDK 2.x: the call's parameters, which for the batch hold every entry
        own["params"] = {"name": tool, "arguments": dict(arguments)}
    return own


_FIELDS: dict[type, frozenset[str]] = {}  # each request-context class's fields, read once


def _field_names(request_type: type) -> frozenset[str]:
    names = _FIELDS.get(request_type)
    if names is None:
        names = _FIELDS[request_type] = frozenset(field.name for field in dataclasses.fields(request_type))
    return names


def without_progress_token(meta: Any) -> Any:
    """A request's ``_meta`` without its progress token: a mapping on SDK 2.x, a pydantic model on 1.x."""
    if meta is None:
        return None
    if isinstance(meta, Mapping):
        return {key: value for key, value in meta.items() if key != "progressToken"}
    copy = getattr(meta, "model_copy", None)
    return copy(update={"progressToken": None}) if callable(copy) else None


class EntrySession:
    """The batch's session as one entry's backend sees it: what the backend sends never goes out as the batch's.

    Progress is dropped and log messages go to the router's log. Anything else is the session's own;
    a request or notification the backend relates to its own request id is related to the batch's
    request instead, the one the client knows (on SDK 1.x over HTTP that id picks the stream it goes on).
    """

    def __init__(self, session: Any, own_id: str, batch_id: Any, tool: str) -> None:
        self._session, self._own_id, self._batch_id, self._tool = session, own_id, batch_id, tool

    async def report_progress(self, *args: Any, **kwargs: Any) -> None:
        """Dropped: the batch reports each entry as it finishes (SDK 2.x's Context reports through this)."""

    async def send_progress_notification(self, *args: Any, **kwargs: Any) -> None:
        """Dropped, as ``report_progress`` (SDK 1.x's Context reports through this, given a token)."""

    async def send_log_message(
        self, level: Any, data: Any, logger: str | None = None, *args: Any, **kwargs: Any
    ) -> None:
        named = f" [{logger}]" if logger else ""
        backend_log.log(
            LOG_LEVELS.get(str(level), logging.INFO),
            "%s%s (batch entry %s): %s",
            self._tool,
            named,
            self._own_id,
            text_of(data),
        )

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        """A progress or log notification sent as such is told as ``report_progress`` and ``send_log_message``."""
        message = getattr(notification, "root", notification)  # SDK 1.x wraps it in a root model
        method, params = getattr(message, "method", None), getattr(message, "params", None)
        if method == "notifications/progress":
            return
        if method == "notifications/message":
            await self.send_log_message(getattr(params, "level", "info"), getattr(params, "data", None))
            return
        if related_request_id == self._own_id:
            related_request_id = self._batch_id
        await self._session.send_notification(notification, related_request_id)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._session, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def on_the_batch_request(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("related_request_id") == self._own_id:
                kwargs["related_request_id"] = self._batch_id
            return attribute(*args, **kwargs)

        return on_the_batch_request
