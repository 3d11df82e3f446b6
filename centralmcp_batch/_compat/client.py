"""The backend client: a session to a server object, a stdio process or a URL, its tool list and calls,
and, on SDK 1.x over HTTP, the record of each call that tells a lost answer."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from ..process_groups import BackendProcesses
from .results import Answer, ToolInfo, _tool_info, read_result
from .sdk import SDK_2, ErrorResponse, StdioServerParameters
from .server import is_server

if SDK_2:
    from mcp import Client
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
else:  # pragma: no cover - exercised by the SDK 1.x leg of CI
    from mcp import ClientSession
    from mcp.client import streamable_http as _http_1x
    from mcp.client.stdio import stdio_client
    from mcp.shared.memory import create_connected_server_and_client_session


log = logging.getLogger(__name__)
MAX_TOOL_PAGES = 1_000
# What a server sends when its tool list changed: on a session of the 2026-07-28 protocol (SDK 2.x) only
# while the client listens for it (``subscriptions/listen``), on an earlier one whenever it likes.
TOOLS_CHANGED = "notifications/tools/list_changed"
# SDK 2.x: how long after a subscription to a server's changes was lost the client asks for another.
RELISTEN_SECONDS = 1.0
# How long the notice that a request was abandoned may wait to be sent (SDK 1.x: see ``_call_tool``).
CANCEL_NOTICE_SECONDS = 1.0
# SDK 1.x over HTTP: how long after the task that read a call's answer stream ended the call is checked for an
# answer (the session has taken any answer that task passed on by then: see _awaits_response).
ANSWER_GRACE_SECONDS = 0.5
_T = TypeVar("_T")


@dataclass
class ClientHandle:
    """One connected MCP client session, with the calls the project needs."""

    session: Any
    tool_infos: list[ToolInfo] = field(default_factory=list)
    # Set when the transport's read side ends: the server closed its end (a stdio process that
    # exited, crashed or was killed). Never set for a transport that does not tell (HTTP, in memory).
    ended: anyio.Event = field(default_factory=anyio.Event)
    # Set as the client closes the session: a request still waiting on it then fails (``SessionClosed``).
    closed: anyio.Event = field(default_factory=anyio.Event)
    calls_in_flight: int = 0  # tool calls sent on this session and not yet answered
    _waiting: set[anyio.CancelScope] = field(default_factory=set)  # the scopes of the requests under way
    # SDK 1.x over HTTP: the tool calls under way, by JSON-RPC id, for the HTTP client's response hook
    # (which runs in the transport's task, not the caller's); see ``_CallRecord``.
    calls_by_id: dict[Any, _CallRecord] = field(default_factory=dict)
    # Set when the server says its tool list changed; ``list_tools`` replaces it as it begins, so that a
    # change told while the list is read is heard again. ``tools_changes`` counts them.
    tools_changed: anyio.Event = field(default_factory=anyio.Event)
    tools_changes: int = 0

    async def on_message(self, message: Any) -> None:
        """The session's message handler: hears that the server's tools changed; anything else, as the SDK's own."""
        if _notification_method(message) == TOOLS_CHANGED:
            self.tools_changes += 1
            self.tools_changed.set()
        await anyio.lowlevel.checkpoint()

    async def list_tools(self) -> list[ToolInfo]:
        """Every page of the server's tool list (a server may split it, with ``nextCursor``)."""
        self.tools_changed = anyio.Event()
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):  # a server handing out cursors for ever still ends
            listed = await self._tools_page(cursor)
            tools += listed.tools
            cursor = listed.next_cursor if SDK_2 else listed.nextCursor
            if not cursor:
                break
        self.tool_infos = [_tool_info(tool) for tool in tools]
        return self.tool_infos

    async def _tools_page(self, cursor: str | None) -> Any:
        if SDK_2:  # past the client's response cache: the list is read because it may have changed
            return await self.session.list_tools(cursor=cursor, cache_mode="bypass")
        if cursor is None:
            return await self.session.list_tools()
        from mcp.types import PaginatedRequestParams

        return await self.session.list_tools(params=PaginatedRequestParams(cursor=cursor))

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: Callable[[float, float | None, str | None], Any] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """The tool's answer; raises ``SessionUnknown`` when the server refused the call for its session."""
        wait = None if timeout is None else (timeout if SDK_2 else timedelta(seconds=timeout))
        record = _CallRecord(listed=name in getattr(self.session, "_tool_output_schemas", ()))
        noted = _CALL.set(record)
        self.calls_in_flight += 1
        try:
            request = functools.partial(self._call_tool, name, dict(arguments or {}), wait, progress, record)
            result = await self._unless_closed(request)
        except Exception as exc:
            if record.proves_session_unknown(exc):
                raise SessionUnknown("it does not know the router's MCP session (HTTP 404)") from exc
            raise
        finally:
            self.calls_in_flight -= 1
            _CALL.reset(noted)
        return read_result(result)

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], wait: Any, progress: Any, record: _CallRecord
    ) -> Any:
        request_id = getattr(self.session, "_request_id", None)  # 1.x: the id the next request gets
        if not SDK_2:
            self.calls_by_id[request_id] = record
            record.unanswered = functools.partial(_awaits_response, self.session, request_id)
        try:
            with anyio.CancelScope() as record.waiting:  # cancelled (SDK 1.x) once its answer cannot come
                return await self.session.call_tool(
                    name, arguments, read_timeout_seconds=wait, progress_callback=progress
                )
            await self._abandon(record, request_id)
            raise AnswerLost(
                "the MCP client gave up on the call's HTTP response without an answer (its stream ended, or could "
                "not be read or resumed)"
            )
        except anyio.get_cancelled_exc_class():
            await self._abandon(record, request_id)
            raise
        finally:
            self.calls_by_id.pop(request_id, None)
            record.waiting = record.unanswered = None  # a late check finds nothing to cancel

    async def _abandon(self, record: _CallRecord, request_id: Any) -> None:
        # Shielded from the call's own cancellation, but not for ever: a backend that stopped
        # reading its input holds every message to it, this notice too.
        with anyio.move_on_after(CANCEL_NOTICE_SECONDS, shield=True):
            if not SDK_2:  # 2.x tells the server when a request is abandoned; 1.x does not
                await _send_cancelled(self.session, request_id)
            await record.abandon()

    async def _unless_closed(self, request: Callable[[], Awaitable[_T]]) -> _T:
        """``request()``'s outcome, or ``SessionClosed`` as soon as the session closes under it.

        SDK 1.x leaves a request that is waiting as its session closes waiting for its whole time limit
        (the session's reader, cancelled, tells the requests nothing); 2.x fails them. Here it fails at once.
        """
        if self.closed.is_set():
            raise SessionClosed("the router closed the session")
        with anyio.CancelScope() as waiting:
            self._waiting.add(waiting)
            try:
                return await request()
            finally:
                self._waiting.discard(waiting)
        raise SessionClosed("the router closed the session while the request waited")

    def close(self) -> None:
        """Fail the requests waiting on the session, and any made after: the client is closing it."""
        self.closed.set()
        for waiting in self._waiting:
            waiting.cancel()

    async def probe(self) -> None:
        """One round trip that any live session answers; raises when the session does not.

        2.x servers of the 2026-07-28 protocol no longer answer ``ping``, so 2.x asks for the
        first page of the tool list instead, past the client's response cache.
        """
        await self._unless_closed(self._probe)

    async def _probe(self) -> None:
        if SDK_2:
            await self.session.list_tools(cache_mode="bypass")
        else:
            await self.session.send_ping()


def error_response_text(exc: BaseException) -> str | None:
    """The message of the JSON-RPC error a peer answered a request with; None for any other failure."""
    return exc.error.message if isinstance(exc, ErrorResponse) else None


class SessionClosed(ConnectionError):
    """A request was waiting on a session as the client closed it."""


class AnswerLost(ConnectionError):
    """SDK 1.x over HTTP: a tool call's answer can no longer come (see ``_CallRecord.watch_carrier``)."""


class SessionUnknown(ConnectionError):
    """The server answered a tool call that it does not know the client's session: the call reached no tool.

    A stateful streamable HTTP server answers HTTP 404 to a request whose ``Mcp-Session-Id`` it does not
    hold (it restarted, or ended the session) before the request reaches any handler. The client should
    open a new session (the MCP specification says so), and the call may be sent again on it.
    """


@dataclass
class _CallRecord:
    """One ``call_tool``'s HTTP exchange: whether the server refused its request itself with HTTP 404, so
    that no tool ran, and the response the answer streams on, closed if the client abandons the call.

    A streamable HTTP server answers a call on a response stream of its own, open until the answer.
    Cancelled, the call tells the server so (a notice on a session: the transport leaves the stream
    open for the answer), but a backend that never answers (a tool that ignores its cancellation, a
    stuck worker) kept that stream, its connection and the transport's task reading it, until the
    HTTP client's read time limit (300 s): one a call, for every call cut off, until the pool ran out
    of connections and the backend's other calls waited for one. So the call closes it. But a server
    that keeps an event store gives the stream's events ids, and the SDK's client, finding the stream
    closed with no answer, asks for the rest after the server's retry interval (1 s by default): a GET
    with ``Last-Event-ID``, from the task that read it, on a stream the server holds open until the
    answer, as long. So such a request of an abandoned call is refused before it is sent
    (``_refuse_resuming_abandoned_calls``), and the response of one sent before the call was abandoned
    (a server may close an answer's stream at will, and the client resumes it) is closed as the first is.

    SDK 1.x turns a 404 into an error of its own, code 32600 (positive: none of JSON-RPC's codes)
    "Session terminated", and makes it nowhere else. After a call it lists the tools to check the
    result against the tool's output schema when the session has not listed that tool, and a 404 to
    that list comes after the tool ran: so the error tells only for a tool the session ``listed`` (the
    router lists every tool of a session as it opens it).

    SDK 2.x raises the JSON-RPC error in a 404's body, each server's own words, so its error does not
    tell. But its HTTP client sends a request in the context of the task that made it, where the
    response hook of an HTTP backend's client (``_call_response_hook``) sets ``refused`` when the
    ``tools/call`` request was answered 404 while it carried a session id.
    """

    listed: bool
    refused: bool = False
    response: Any = None  # the HTTP response the answer comes on (the request's, or a resumed stream's), once it came
    abandoned: bool = False
    waiting: anyio.CancelScope | None = None  # the caller's wait for the answer
    # SDK 1.x: whether the session still waits for the answer (None: it cannot tell yet; see _awaits_response)
    unanswered: Callable[[], bool | None] | None = None

    def watch_carrier(self) -> None:
        """SDK 1.x over HTTP: fail the call once the task that reads its answer has ended without it.

        1.x reads a call's answer stream, and asks for the rest of one that broke, in a task of the
        transport's own, where this runs (from the response hook). A stream that ends with no answer and
        cannot be resumed (the backend was killed or restarted; its events had no ids; the tries to
        resume ran out) ends that task and tells the call nothing, so the call waited out its whole time
        limit (2.x answers it with an error at once). So do an answer that cannot be read, and one that comes
        on any other stream, which the protocol does not allow (2.x refuses those too). Once the task has
        ended, ANSWER_GRACE_SECONDS later, a call the session still waits for is answered ``AnswerLost``.
        Only on asyncio, where the task can be watched; elsewhere the time limit still ends it.
        """
        try:
            carrier = asyncio.current_task()
        except RuntimeError:  # another event loop (trio)
            return
        if carrier is not None:
            carrier.add_done_callback(self._carrier_ended)

    def _carrier_ended(self, carrier: asyncio.Task[Any]) -> None:
        carrier.get_loop().call_later(ANSWER_GRACE_SECONDS, self._give_up_unless_answered)

    def _give_up_unless_answered(self) -> None:
        if self.waiting is None or self.unanswered is None:
            return  # the call has ended
        unanswered = self.unanswered()
        if unanswered is None:  # messages wait for the session's reader, this answer maybe: look again later
            asyncio.get_running_loop().call_later(ANSWER_GRACE_SECONDS, self._give_up_unless_answered)
        elif unanswered:
            self.waiting.cancel()

    async def abandon(self) -> None:
        """The caller gave up on the call: its response, if one came or comes, is closed."""
        self.abandoned = True
        if self.response is not None:
            await self.response.aclose()

    def proves_session_unknown(self, exc: Exception) -> bool:
        if SDK_2:
            return self.refused
        return self.listed and isinstance(exc, ErrorResponse) and _is_1x_404(exc.error)


def _awaits_response(session: Any, request_id: Any) -> bool | None:
    """SDK 1.x: whether ``session`` still waits for request ``request_id``'s answer: it holds a way in for the
    answer until the answer arrives or the request ends. None while messages wait in the session's read
    stream, where the answer may be (1.28 to 1.30 hand a message over unbuffered, so none ever waits there
    once the transport's task has ended; a buffer in a later release would)."""
    if request_id not in getattr(session, "_response_streams", ()):
        return False
    stream = getattr(session, "_read_stream", None)
    try:
        queued = stream.statistics() if stream is not None else None
    except Exception:  # noqa: BLE001 - a stream without statistics tells nothing: the request still waits
        queued = None
    if queued is not None and (queued.current_buffer_used or queued.tasks_waiting_send):
        return None
    return True


def _is_1x_404(error: Any) -> bool:
    return bool(error.code == 32600 and error.message == "Session terminated")


# The record of the tool call under way in this task, and in the transport's task that carries its
# request (on SDK 2.x a copy of the caller's context; on 1.x set there by ``_call_response_hook``).
_CALL: contextvars.ContextVar[_CallRecord | None] = contextvars.ContextVar("centralmcp_batch_call", default=None)
MCP_SESSION_ID_HEADER = "mcp-session-id"
LAST_EVENT_ID_HEADER = "last-event-id"


def _call_response_hook(calls_by_id: Mapping[Any, _CallRecord]) -> Callable[[Any], Awaitable[None]]:
    """An HTTP backend client's response hook, noting in its call's record each response a call's answer
    may come on: the ``tools/call`` request's, and that of each request to resume it (``Last-Event-ID``).

    SDK 2.x sends a request in the context of the task that made it, so the record is that task's
    (``_CALL``); 1.x sends it from the transport's own task, so the record is found by the request's id,
    and kept in that task's context, where the SDK asks for the rest of an answer whose stream broke.
    """

    async def note(response: Any) -> None:
        request = response.request
        if request.method == "GET":
            record = _CALL.get() if LAST_EVENT_ID_HEADER in request.headers else None
        else:
            record = _posted_call(request, calls_by_id)
            if record is not None and not SDK_2:
                _CALL.set(record)
                record.watch_carrier()
            if record is not None and response.status_code == 404 and MCP_SESSION_ID_HEADER in request.headers:
                record.refused = True
        if record is None:
            return
        record.response = response
        if record.abandoned:  # given up on before this response began: nobody will read it
            await response.aclose()

    return note


def _posted_call(request: Any, calls_by_id: Mapping[Any, _CallRecord]) -> _CallRecord | None:
    """The record of the call whose ``tools/call`` request ``request`` is; None for any other request."""
    if request.method != "POST" or (_CALL.get() is None if SDK_2 else not calls_by_id):
        return None  # no call under way that this could answer: no body to parse (up to 84 us, at 20 KB)
    body = _rpc_request(request)
    if body is None or body.get("method") != "tools/call":
        return None
    return _CALL.get() if SDK_2 else calls_by_id.get(body.get("id"))


class _AnswerNotWanted(Exception):
    """Raised, by the request hook, in place of a request to resume the answer of an abandoned call."""


async def _refuse_resuming_abandoned_calls(request: Any) -> None:
    """An HTTP backend client's request hook: a call given up on is not resumed (see ``_CallRecord``).

    The request to resume is made in the task that read the call's answer, where ``_CALL`` holds the
    call's record. Both SDK lines (1.28 to 2.3) log the failure at DEBUG, try once more after the same
    wait, then let the call go: no request reaches the server, and the task ends.
    """
    if request.method != "GET" or LAST_EVENT_ID_HEADER not in request.headers:
        return
    record = _CALL.get()
    if record is not None and record.abandoned:
        raise _AnswerNotWanted("the router gave up on this call: the rest of its answer is not asked for")


def _rpc_request(request: Any) -> dict[str, Any] | None:
    try:
        body = json.loads(request.content)
    except Exception:  # no JSON-RPC request in the body: not a call of ours
        return None
    return body if isinstance(body, dict) else None


if not SDK_2:  # the 1.x client side: defined only there (mypy checks the 2.x line)

    async def _send_cancelled(session: Any, request_id: Any) -> None:  # pragma: no cover - SDK 1.x leg
        from mcp import types

        params = types.CancelledNotificationParams(requestId=request_id, reason="the client abandoned the request")
        notification = types.ClientNotification(types.CancelledNotification(params=params))
        # the session may already be closing; the server then cancels on its own
        with contextlib.suppress(Exception):
            await session.send_notification(notification)


@asynccontextmanager
async def connect(target: Any) -> AsyncIterator[ClientHandle]:
    """A client session to ``target``: a server object (in memory), StdioServerParameters, or a URL.

    A stdio server's processes are stopped after the SDK has stopped the server, so the ones it
    started do not outlive it (see ``process_groups``); the handle's ``ended`` tells when the
    server's process has closed its end (exited), while nothing calls.
    """
    if not isinstance(target, StdioServerParameters):
        async with _connect(target) as client:
            yield client
        return
    processes = BackendProcesses()
    ended = anyio.Event()
    try:
        # a transport: 2.0's Client takes no StdioServerParameters (2.1 added them, as this same transport)
        transport = _watched(stdio_client(target.model_copy(update={"env": processes.env(target.env)})), ended)
        async with _connect(transport, ended) as client:
            yield client
    finally:
        with anyio.CancelScope(shield=True):  # a session may still end by a cancel (past the router's close window)
            await processes.stop()


@asynccontextmanager
async def _connect(target: Any, ended: anyio.Event | None = None) -> AsyncIterator[ClientHandle]:
    """A session to a server object, a URL, or a transport (what ``stdio_client`` makes), whose end sets ``ended``."""
    handle = ClientHandle(None, ended=ended or anyio.Event())
    async with _session(target, handle.calls_by_id, handle.on_message) as session:
        handle.session = session
        async with _hearing_tool_changes(handle):
            try:
                yield handle
            finally:  # before the SDK closes it: the requests still waiting on it fail now
                handle.close()


def _notification_method(message: Any) -> str | None:
    """The method of a notification the session's message handler is given (SDK 1.x wraps it in a root model)."""
    return getattr(message if SDK_2 else getattr(message, "root", None), "method", None)


@asynccontextmanager
async def _hearing_tool_changes(handle: ClientHandle) -> AsyncIterator[None]:
    """SDK 2.x: while open, the session listens for the server's tool changes where the protocol asks it to.

    A server of the 2026-07-28 protocol tells its changes only on a ``subscriptions/listen`` stream; the
    SDK passes each event on to the message handler as well, which is what ``tools_changed`` hears.
    """
    if not SDK_2 or not _of_the_2026_protocol(handle.session):  # the server sends its changes unasked
        yield
        return
    async with anyio.create_task_group() as listening:
        listening.start_soon(_listen_for_tool_changes, handle)
        try:
            yield
        finally:
            listening.cancel_scope.cancel()


def _of_the_2026_protocol(client: Any) -> bool:
    """SDK 2.x: whether ``client``'s session speaks a protocol of the 2026-07-28 era (no handshake, changes
    told only to ``subscriptions/listen`` streams)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return client.session.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _listen_for_tool_changes(handle: ClientHandle) -> None:
    """Hold a ``subscriptions/listen`` stream for tool changes open, and open another if it is lost.

    No event is replayed after a loss, so the tools are read again as if they had changed.
    """
    from mcp.client.subscriptions import SubscriptionLost

    while True:
        try:
            async with handle.session.listen(tools_list_changed=True) as changes:
                async for _ in changes:  # each one reaches ``on_message`` as well, which counts it
                    pass
            return  # the server ended the subscription itself
        except SubscriptionLost:
            log.debug("the subscription to the server's tool changes was lost; listening again")
        except Exception as exc:  # a server that does not take subscriptions: it tells no change
            log.debug("not listening for the server's tool changes: %s", type(exc).__name__)
            return
        handle.tools_changes += 1
        handle.tools_changed.set()
        await anyio.sleep(RELISTEN_SECONDS)


@asynccontextmanager
async def _session(target: Any, calls_by_id: Mapping[Any, _CallRecord], on_message: Any) -> AsyncIterator[Any]:
    if SDK_2 and isinstance(target, str):
        http = _http_client(calls_by_id)
        transport = streamable_http_client(target, http_client=http)
        async with http, Client(transport, message_handler=on_message) as client:
            yield client
    elif SDK_2:
        mode = "legacy" if is_server(target) else "auto"  # legacy: real JSON-RPC over memory streams
        async with Client(target, mode=mode, message_handler=on_message) as client:
            yield client
    else:  # pragma: no cover - SDK 1.x leg
        async with _connect_1x(target, calls_by_id, on_message) as session:
            yield session


def _http_client(calls_by_id: Mapping[Any, _CallRecord]) -> Any:
    """The HTTP client the SDK makes for a URL (its timeouts), which also notes each tool call's response."""
    from mcp.shared._httpx_utils import create_mcp_http_client  # the SDK's own defaults; no public name for them

    http = create_mcp_http_client()
    http.event_hooks = {"request": [_refuse_resuming_abandoned_calls], "response": [_call_response_hook(calls_by_id)]}
    return http


@asynccontextmanager
async def _watched(transport: Any, ended: anyio.Event) -> AsyncIterator[tuple[Any, Any]]:
    """``transport``'s streams, its read stream wrapped so that ``ended`` is set when the session's reader leaves it."""
    async with transport as (read_stream, write_stream):
        yield _EndTellingStream(read_stream, ended), write_stream


class _EndTellingStream:
    """A read stream that sets ``ended`` when it is closed.

    Both SDK lines read a session's stream in one loop, ``async with stream: async for message in
    stream``, and leave it, closing it, once the transport has closed its end: for stdio, when the
    process's stdout reaches end of file. The loop iterates the wrapped stream itself (``__aiter__``),
    so a message costs nothing more.
    """

    def __init__(self, stream: Any, ended: anyio.Event) -> None:
        self._stream = stream
        self._ended = ended

    def __aiter__(self) -> Any:
        return self._stream.__aiter__()

    async def __aenter__(self) -> _EndTellingStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._ended.set()
        await self._stream.aclose()

    def __getattr__(self, name: str) -> Any:  # receive, statistics, 2.x's per-message context: the stream's own
        return getattr(self._stream, name)


if not SDK_2:  # the 1.x client side: defined only there (mypy checks the 2.x line)

    @asynccontextmanager
    async def _connect_1x(
        target: Any, calls_by_id: Mapping[Any, _CallRecord], on_message: Any
    ) -> AsyncIterator[Any]:  # pragma: no cover - SDK 1.x leg
        if is_server(target):
            in_memory = create_connected_server_and_client_session(target._mcp_server, message_handler=on_message)
            async with in_memory as session:
                yield session
            return
        if isinstance(target, str):
            http = _http_client(calls_by_id)
            transport = _http_1x.streamable_http_client(target, http_client=http)
        else:  # stdio_client's, watched
            http, transport = contextlib.nullcontext(), target
        async with (
            http,
            transport as streams,
            ClientSession(streams[0], streams[1], message_handler=on_message) as session,
        ):
            await session.initialize()
            yield session
