"""The server side: making servers, adding and reading their tools, calling an in-process tool,
structured answers and progress."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pydantic

from ..errors import ToolNameTaken
from ..worker_threads import run_sync_abandonable
from .results import Answer, ToolInfo, _from_blocks, annotations_dict, read_result
from .sdk import SDK_2, CallToolResult, Context, Server, TextContent, ToolAnnotations, ToolError


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
