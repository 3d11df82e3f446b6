"""Every difference between MCP SDK 1.x (``FastMCP``) and 2.x (``MCPServer``), in one place.

Nothing else in the package branches on the SDK version: servers are made, tools are added,
backends are called and client results are read through these functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.metadata import version
from typing import Any, TypeVar

import anyio
import pydantic

from .errors import ToolNameTaken
from .process_groups import BackendProcesses
from .worker_threads import run_sync_abandonable

SDK_VERSION = version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])
# A plain name, so mypy can take it as a constant (always_true in pyproject.toml): mypy checks
# the 2.x branches, and the 1.x branches are held by the SDK 1.x leg of the test suite.
SDK_2 = SDK_MAJOR >= 2

if SDK_2:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.shared.exceptions import MCPError as ErrorResponse
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
else:  # pragma: no cover - exercised by the SDK 1.x leg of CI
    from mcp import ClientSession, StdioServerParameters
    from mcp.client import streamable_http as _http_1x
    from mcp.client.stdio import stdio_client
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError
    from mcp.shared.exceptions import McpError as ErrorResponse
    from mcp.shared.memory import create_connected_server_and_client_session
    from mcp.types import CallToolResult, TextContent, ToolAnnotations

__all__ = [
    "SDK_MAJOR",
    "Context",
    "Server",
    "SessionClosed",
    "AnswerLost",
    "SessionUnknown",
    "StdioServerParameters",
    "ToolError",
]


# -- servers and tools ----------------------------------------------------------------


def new_server(name: str, *, instructions: str | None = None, lifespan: Any = None) -> Any:
    return Server(name, instructions=instructions, lifespan=lifespan)


def is_server(value: Any) -> bool:
    return isinstance(value, Server)


def _tools(server: Any) -> dict[str, Any]:
    # Both SDK lines keep their registered tools in a dict on the tool manager.
    tools: dict[str, Any] = server._tool_manager._tools  # noqa: SLF001 - no public registry API in either SDK line
    return tools


def has_tool(server: Any, name: str) -> bool:
    return name in _tools(server)


def tool_names(server: Any) -> list[str]:
    return list(_tools(server))


def remove_tool(server: Any, name: str) -> Any:
    """Take the tool called ``name`` off ``server``; what was there (None if nothing), for ``put_tool``."""
    return _tools(server).pop(name, None)


def put_tool(server: Any, name: str, tool: Any) -> None:
    """Publish again a tool that ``remove_tool`` took off."""
    _tools(server)[name] = tool


@contextmanager
def refusing_duplicate_tools(server: Any) -> Iterator[None]:
    """While open, adding a tool under a name ``server`` already publishes raises ``ToolNameTaken``.

    Both SDK lines keep the tool they have and only log ``Tool already exists``, which names
    neither who added the second tool nor that it was dropped.
    """
    manager = server._tool_manager  # noqa: SLF001 - both SDK lines add every tool through it
    shadowed = vars(manager).get("add_tool")  # a wrapper a host may have set on this instance
    add = manager.add_tool

    def add_new_only(*args: Any, **kwargs: Any) -> Any:
        before = set(_tools(server))
        tool = add(*args, **kwargs)
        if tool.name in before:
            raise ToolNameTaken(tool.name)
        return tool

    manager.add_tool = add_new_only
    try:
        yield
    finally:
        if shadowed is None:
            del manager.add_tool
        else:
            manager.add_tool = shadowed


def add_tool(
    server: Any,
    fn: Callable[..., Any],
    *,
    name: str,
    description: str,
    annotations: Mapping[str, Any],
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
) -> None:
    """Register ``fn``; the schemas, when given, replace what the SDK derived for clients to read.

    The SDK still validates arguments against ``fn``'s own signature, so a function that takes
    a loose ``Any`` can answer malformed input itself while the published schema states the
    strict shape.
    """
    server.add_tool(
        fn,
        name=name,
        description=description,
        annotations=ToolAnnotations.model_validate(dict(annotations)),
        structured_output=True,
    )
    tool = _tools(server)[name]
    if input_schema is not None:
        tool.parameters = input_schema
    if output_schema is not None:
        tool.fn_metadata.output_schema = output_schema
        tool.__dict__.pop("output_schema", None)  # 2.x caches the derived schema on the tool


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    output_schema: dict[str, Any] | None = None


def annotations_dict(annotations: Any) -> dict[str, Any]:
    """ToolAnnotations (either SDK, or a mapping) as a dict with camelCase keys."""
    if annotations is None:
        return {}
    if isinstance(annotations, Mapping):
        return dict(annotations)
    dumped: dict[str, Any] = annotations.model_dump(by_alias=True, exclude_none=True)
    return dumped


def annotation_hint(annotations: Any, hint: str) -> Any:
    """One hint of ToolAnnotations (either SDK) or of a mapping, by its camelCase name; None when unset.

    An attribute read, as CentralMCP's own gate reads it: no dump of the whole model per call.
    """
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        return annotations.get(hint)
    return getattr(annotations, _HINT_ATTRIBUTES.get(hint, hint) if SDK_2 else hint, None)


# SDK 2.x names the model's fields in snake_case (the camelCase names are their aliases).
_HINT_ATTRIBUTES = {
    "readOnlyHint": "read_only_hint",
    "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint",
    "openWorldHint": "open_world_hint",
}


def server_tools(server: Any) -> list[ToolInfo]:
    """The tools an in-process server publishes."""
    return [
        ToolInfo(
            tool.name,
            tool.description or "",
            dict(tool.parameters),
            annotations_dict(tool.annotations),
            tool.output_schema,
        )
        for tool in _tools(server).values()
    ]


async def call_server_tool(server: Any, name: str, arguments: Mapping[str, Any]) -> Answer:
    """Call a tool of an in-process server through its tool manager, with the Context the server's
    own ``call_tool`` would give it; a ``ToolError`` is an error answer."""
    try:
        manager = server._tool_manager  # noqa: SLF001 - no public way to reach a server's tools
        raw = await call_manager_tool(manager, name, arguments, context=_server_context(server), convert_result=True)
    except ToolError as exc:
        return Answer(is_error=True, text=str(exc))
    if isinstance(raw, CallToolResult):
        return read_result(raw)
    if isinstance(raw, tuple):  # 1.x: (content blocks, structured content)
        return _from_blocks(raw[0], raw[1])
    return _from_blocks(raw)


def argument_errors(server: Any, name: str, arguments: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Why an in-process tool refuses ``arguments``, as pydantic's structured errors without the input.

    None when the tool is unknown or the arguments validate. Both SDK lines validate with the
    tool's ``fn_metadata.arg_model`` after ``pre_parse_json``, so this repeats their check.
    """
    tool = _tools(server).get(name)
    if tool is None:
        return None
    metadata = tool.fn_metadata
    try:
        metadata.arg_model.model_validate(metadata.pre_parse_json(dict(arguments)))
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        return [{"type": error["type"], "loc": error["loc"], "msg": error["msg"]} for error in errors]
    except Exception:  # the SDK's own check failed some other way: the caller falls back to the schema's names
        return None
    return None


def call_manager_tool(
    manager: Any, name: str, arguments: Mapping[str, Any], *, context: Any, convert_result: bool = False
) -> Awaitable[Any]:
    """What ``manager.call_tool(name, arguments, context=context)`` answers (to be awaited), except
    that a sync (``def``) tool runs in a worker thread that a cancelled call abandons.

    Both SDK lines would otherwise hold a cancelled call until the function returns (2.x waits for
    its thread; 1.x runs it on the event loop, freezing every other request). An abandoned thread
    runs on to its end, and its late result is discarded. The tool's own ``run`` coroutine is
    answered as it is, so a call costs no coroutine of this module's.
    """
    tool = manager.get_tool(name)
    if tool is None:
        raise ToolError(f"Unknown tool: {name}")
    # The SDK's run validates into a new dict and never changes the one it is given.
    given = arguments if type(arguments) is dict else dict(arguments)
    return _abandonable(tool).run(given, context=context, convert_result=convert_result)  # type: ignore[no-any-return]


# The key of the 2026-07-28 protocol's per-request _meta (SDK 2.x's modern era).
MODERN_META_KEY = "io.modelcontextprotocol/protocolVersion"


def progress_may_be_heard(ctx: Any) -> bool:
    """Whether ``ctx.report_progress`` can reach anyone; True whenever the request does not make it plain.

    A request that carries a progress token is heard. Without one, 1.x and a 2.x request of the
    legacy era send nothing (2.x's dispatcher drops it after the SDK's own calls, a few us an
    entry), so the batch skips progress. On 2.x the request's dispatch context says it outright
    (see ``_outbound_hears``), which also covers the 2026-07-28 era, whose in-process callback
    its ``_meta`` does not show; a 2.x request whose context cannot tell is always told.
    """
    try:
        request = ctx.request_context  # read once: on 2.x each read is a few us of pydantic's private lookup
        meta = request.meta
    except Exception:  # no request context to read: tell, as before
        return True
    if SDK_2:
        heard = _outbound_hears(request)
        if heard is not None:
            return heard
    if meta is None:
        return False
    if _meta_field(meta, "progress_token", "progressToken") is not None:
        return True
    return SDK_2 and _meta_field(meta, MODERN_META_KEY) is not None


# Where SDK 2.x's dispatch contexts keep what a progress report goes to: the in-process
# dispatcher's callback, the JSON-RPC dispatcher's token, the 2026-07-28 HTTP exchange's token.
# Each drops a report when its own is None.
_PROGRESS_SINKS = ("_on_progress", "_progress_token", "progress_token")


def _outbound_hears(request: Any) -> bool | None:
    """Whether the request's dispatch context has somewhere to send progress; None when it does not say."""
    outbound = getattr(getattr(request, "session", None), "_request_outbound", None)
    for _ in range(4):  # a modern-era request's context wraps the dispatcher's own (its _inner)
        for name in _PROGRESS_SINKS:
            if hasattr(outbound, name):
                return getattr(outbound, name) is not None
        outbound = getattr(outbound, "_inner", None)
    return None


def _meta_field(meta: Any, *names: str) -> Any:
    """A field of a request's ``_meta``: a mapping on 2.x, a pydantic model on 1.x."""
    for name in names:
        value = meta.get(name) if isinstance(meta, Mapping) else getattr(meta, name, None)
        if value is not None:
            return value
    return None


def _server_context(server: Any) -> Any:
    """The Context ``server.call_tool`` makes for a call from inside the process."""
    if SDK_2:
        # As MCPServer.call_tool makes it; 2.x has no public accessor for the subscriptions.
        return Context(mcp_server=server, subscriptions=server._subscriptions)  # noqa: SLF001
    return server.get_context()


# Each sync tool's stand-in, made once per tool object and dropped with it.
_THREADED: dict[int, tuple[weakref.ref[Any], Any]] = {}


def _abandonable(tool: Any) -> Any:
    """``tool`` itself when async; for a sync tool, a copy whose function runs in an abandonable thread.

    The copy keeps everything else of the SDK's own run: argument validation, the Context
    parameter, result conversion and the wrapping of failures in ``ToolError``.
    """
    if tool.is_async:
        return tool
    key = id(tool)
    cached = _THREADED.get(key)
    if cached is not None and cached[0]() is tool:
        return cached[1]
    threaded = tool.model_copy(update={"fn": _in_worker_thread(tool.fn), "is_async": True})
    _THREADED[key] = (weakref.ref(tool, lambda _gone: _THREADED.pop(key, None)), threaded)
    return threaded


def _in_worker_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    def boxed(**kwargs: Any) -> list[Any]:
        return [fn(**kwargs)]

    async def run_in_worker_thread(**kwargs: Any) -> Any:
        # The answer comes back in a box, emptied here: anyio's worker thread holds the future that
        # carried it until the thread next gets the GIL, and a batch whose entries never yield keeps
        # the GIL, so the last raw answer (100 KB, say) would stay alive through the batch's encoding.
        box = await run_sync_abandonable(functools.partial(boxed, **kwargs))
        return box.pop()

    return run_in_worker_thread


def structured_result(structured: dict[str, Any], text: str) -> Any:
    """A tool result with both forms: ``structured`` and ``text`` (its compact JSON)."""
    if SDK_2:
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)
    return CallToolResult(content=[TextContent(type="text", text=text)], structuredContent=structured)


def answer_dicts_with_compact_json(server: Any, name: str, encode: Callable[[dict[str, Any]], str]) -> None:
    """Tool ``name`` returns a plain dict; the SDK's conversion then gives it ``encode(dict)`` as its text.

    The SDK turns a tool's return value into content in ``fn_metadata.convert_result``, and a
    host that wraps the tool manager (CentralMCP's middleware installer) calls that same method
    after its middlewares have seen, and perhaps replaced, the raw dict. Converting there, and
    only there, makes the structured content and the text both the dict the middlewares left,
    with compact JSON text where the SDK's default would be indented. Anything that is not a
    dict (a middleware's own substitute) keeps the SDK's conversion.
    """
    metadata = _tools(server)[name].fn_metadata
    sdk_convert = metadata.convert_result

    def convert_result(result: Any) -> Any:
        if not isinstance(result, dict):
            return sdk_convert(result)
        return structured_result(result, encode(result))

    # FuncMetadata is a pydantic model that refuses unknown attributes; an instance attribute
    # shadows the class method on this one tool only.
    object.__setattr__(metadata, "convert_result", convert_result)


def publish_output_schema(server: Any, name: str, schema: dict[str, Any]) -> None:
    """Replace the output schema tool ``name`` publishes (clients validate structured content against it)."""
    tool = _tools(server)[name]
    tool.fn_metadata.output_schema = schema
    tool.__dict__.pop("output_schema", None)  # 2.x caches the published schema on the tool


def tool_function(server: Any, name: str) -> Callable[..., Any]:
    """The Python function behind tool ``name``."""
    return _tools(server)[name].fn  # type: ignore[no-any-return]


# -- results --------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A tool call's answer, whichever SDK produced it."""

    is_error: bool
    structured: Any | None = None
    text: str = ""
    # every content block as its JSON, when some are not text (images, audio, resources, links)
    blocks: tuple[dict[str, Any], ...] = ()

    @property
    def payload(self) -> Any:
        """Structured content if given, else the blocks when some are not text, else the text as JSON, else the text.

        Reading only the text would answer an image, or a resource, as an empty ``ok``.
        """
        if self.structured is not None:
            return self.structured
        if self.blocks:
            return {"content": list(self.blocks)}
        try:
            return json.loads(self.text)
        except ValueError:
            return self.text


def _joined_text(blocks: Sequence[Any]) -> str:
    return "\n".join(getattr(block, "text", "") for block in blocks if getattr(block, "type", None) == "text")


def _non_text_blocks(blocks: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """All of ``blocks`` as JSON when any is not text; none when all are (the joined text says it all)."""
    if all(getattr(block, "type", None) == "text" for block in blocks):
        return ()
    return tuple(block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in blocks)


def _from_blocks(blocks: Sequence[Any], structured: Any = None, *, is_error: bool = False) -> Answer:
    return Answer(is_error, structured, _joined_text(blocks), _non_text_blocks(blocks))


def read_result(result: Any) -> Answer:
    if SDK_2:
        return _from_blocks(result.content, result.structured_content, is_error=bool(result.is_error))
    return _from_blocks(result.content, result.structuredContent, is_error=bool(result.isError))


# -- clients --------------------------------------------------------------------------


MAX_TOOL_PAGES = 1_000
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

    async def list_tools(self) -> list[ToolInfo]:
        """Every page of the server's tool list (a server may split it, with ``nextCursor``)."""
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
        if cursor is None:
            return await self.session.list_tools()
        if SDK_2:
            return await self.session.list_tools(cursor=cursor)
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


def _tool_info(tool: Any) -> ToolInfo:
    schema = tool.input_schema if SDK_2 else tool.inputSchema
    output = tool.output_schema if SDK_2 else tool.outputSchema
    return ToolInfo(tool.name, tool.description or "", dict(schema or {}), annotations_dict(tool.annotations), output)


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
    ended = ended or anyio.Event()
    calls_by_id: dict[Any, _CallRecord] = {}
    async with _session(target, calls_by_id) as session:
        handle = ClientHandle(session, ended=ended, calls_by_id=calls_by_id)
        try:
            yield handle
        finally:  # before the SDK closes it: the requests still waiting on it fail now
            handle.close()


@asynccontextmanager
async def _session(target: Any, calls_by_id: Mapping[Any, _CallRecord]) -> AsyncIterator[Any]:
    if SDK_2 and isinstance(target, str):
        http = _http_client(calls_by_id)
        async with http, Client(streamable_http_client(target, http_client=http)) as client:
            yield client
    elif SDK_2:
        mode = "legacy" if is_server(target) else "auto"  # legacy: real JSON-RPC over memory streams
        async with Client(target, mode=mode) as client:
            yield client
    else:  # pragma: no cover - SDK 1.x leg
        async with _connect_1x(target, calls_by_id) as session:
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
        target: Any, calls_by_id: Mapping[Any, _CallRecord]
    ) -> AsyncIterator[Any]:  # pragma: no cover - SDK 1.x leg
        if is_server(target):
            async with create_connected_server_and_client_session(target._mcp_server) as session:
                yield session
            return
        if isinstance(target, str):
            http = _http_client(calls_by_id)
            transport = _http_1x.streamable_http_client(target, http_client=http)
        else:  # stdio_client's, watched
            http, transport = contextlib.nullcontext(), target
        async with http, transport as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session


# -- running a server -----------------------------------------------------------------


async def run_stdio(server: Any) -> None:
    await server.run_stdio_async()


# What both SDK lines allow by default on a loopback address: DNS-rebinding protection on.
LOCAL_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCAL_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def transport_security(allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()) -> Any:
    """DNS-rebinding protection that accepts localhost and, besides, exactly the hosts and origins given.

    The SDKs compare ``allowed_hosts`` with the whole Host header, port included, and read a
    trailing ``:*`` as any port; the caller passes the patterns it means. They compare in the
    case given: the patterns are put in lower case here, as ``http_app`` puts the headers.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = list(dict.fromkeys(lower_ascii(host) for host in [*LOCAL_HOSTS, *allowed_hosts]))
    origins = list(dict.fromkeys(lower_ascii(origin) for origin in [*LOCAL_ORIGINS, *allowed_origins]))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


# Only A-Z: Unicode's lower() maps some other letters to ASCII ones (the Kelvin sign to k).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower_ascii(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def http_app(
    server: Any,
    *,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    stateless: bool = False,
    event_store: Any = None,
) -> Any:
    """The streamable HTTP ASGI app of ``server``, served at ``/mcp``, checking Host and Origin.

    ``stateless``: no session lives in the process, so any replica can answer any request.
    ``event_store``: the SDK's ``EventStore`` that keeps each stream's events, so that a client whose
    stream broke can resume it (its SSE events carry ids).
    """
    security = transport_security(allowed_hosts, allowed_origins)
    if SDK_2:
        return _host_and_origin_in_lower_case(
            server.streamable_http_app(transport_security=security, stateless_http=stateless, event_store=event_store)
        )
    server.settings.transport_security = security  # 1.x reads it from the settings made at construction
    server.settings.stateless_http = stateless
    if event_store is not None:  # 1.x takes it only at construction, where the caller gave none
        server._event_store = event_store  # noqa: SLF001 - the attribute streamable_http_app reads
    return _host_and_origin_in_lower_case(server.streamable_http_app())


_CASELESS_HEADERS = (b"host", b"origin")


def _host_and_origin_in_lower_case(app: Any) -> Any:
    """``app`` seeing the Host and Origin headers in lower case, as the SDK's check compares them.

    Host names and schemes are case-insensitive (RFC 3986), and what else these two headers hold,
    a port, has no case. ``bytes.lower()`` changes A-Z only.
    """

    async def lowered(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = [(key, value.lower() if key in _CASELESS_HEADERS else value) for key, value in scope["headers"]]
            scope = {**scope, "headers": headers}
        await app(scope, receive, send)

    return lowered
