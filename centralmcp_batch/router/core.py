"""The reference router: a host for the ``centralmcp`` plugins over real MCP backends."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .. import _compat, engine, hosting, pipeline, validation
from ..entries import is_utf8
from ..errors import HostContractError
from ..hookspecs import hookimpl
from ..host import HostHooks
from ..models import MAX_ARGUMENT_BYTES, MAX_ARGUMENT_DEPTH, MAX_NAME_CHARS, ToolRef
from ..ratelimit import RateLimitPlugin
from ..settings import BatchSettings, Setting
from ..worker_threads import run_sync_abandonable
from .backends import CLOSE_SECONDS, RemoteBackend, StdioBackend, ToolsChanged, is_remote
from .bounding import Bounds, bound
from .catalog import (
    CAPABILITIES,
    MAX_QUERY_CHARS,
    MAX_QUERY_WORDS,
    MAX_SERVER_CHARS,
    MAX_TOP_K,
    BackendOptions,
    Catalog,
    search_problem,
    whole_number,
)
from .cursors import CursorSigner
from .limiter import RateLimiter, limiter_from_env
from .urls import hosts_only, known_urls_masked

log = logging.getLogger(__name__)

MAX_ITEMS = Setting("CENTRALMCP_ROUTER_RESPONSE_MAX_ITEMS", 200, 1, 200)
MAX_BYTES = Setting("CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES", 200_000, 1_024)
CURSOR_TTL = Setting("CENTRALMCP_ROUTER_CURSOR_TTL_SECONDS", 900, 30, 3600)
CURSOR_KEY_ENV = "CENTRALMCP_ROUTER_CURSOR_KEY"
NOT_READ_ONLY = (
    "Tool '{name}' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
)
CHANGED_SINCE_CHECKED = (
    "Tool '{name}' changed on its backend after this call was checked, and was not called: call it again."
)
FIRST_CONNECT_SECONDS = 30.0


def cursor_key(environ: Mapping[str, str]) -> bytes | None:
    """The signing key as the bytes the operator set; any bytes are a key, none means a random one.

    On POSIX ``os.environ`` keeps undecodable bytes as surrogates, and ``os.fsencode`` gives them back
    unchanged, so a key that is not UTF-8 neither stops the router nor reaches an error message.
    """
    return os.fsencode(environ.get(CURSOR_KEY_ENV, "")) or None


class Router:
    """``backends``: server name → in-process server object, ``StdioBackend`` or ``HttpBackend``."""

    def __init__(
        self,
        backends: Mapping[str, Any],
        *,
        options: Mapping[str, BackendOptions] | None = None,
        name: str = "centralmcp-batch-router",
        limiter: RateLimiter | None = None,
    ) -> None:
        env = os.environ
        self.options = dict(options or {})
        # account-wide: shared with every process on its store (the environment's, unless one is given)
        self.limiter = limiter if limiter is not None else limiter_from_env(env)
        self.cursors = CursorSigner(cursor_key(env), int(CURSOR_TTL.read(env)))
        self.max_items, self.max_bytes = int(MAX_ITEMS.read(env)), int(MAX_BYTES.read(env))
        self.catalog = Catalog()
        self.conflicts: dict[str, dict[str, str]] = {}  # remote server -> {its tool name: the server that has it}
        self.local: dict[str, Any] = {}
        self.remotes: dict[str, RemoteBackend] = {}
        for server, backend in backends.items():
            self._add_backend(server, backend)
        self._connected = 0
        self.server = _compat.new_server(name, lifespan=self._lifespan)
        self._add_tools()
        self.plugin_manager = hosting.install(self.server, RouterHooks(self), RateLimitPlugin(self.limiter))
        self.hooks = HostHooks(self.plugin_manager)

    def _add_backend(self, server: str, backend: Any) -> None:
        if is_remote(backend):
            self.remotes[server] = RemoteBackend(server, backend, on_tools=self._index_remote)
        elif _compat.is_server(backend):
            self.local[server] = backend
            self.catalog.add_backend(server, _compat.server_tools(backend), self.options_for(server))
        else:
            raise TypeError(
                f"backend {server!r} is neither an MCP server object nor a remote spec: {type(backend).__name__}"
            )

    def options_for(self, server: str) -> BackendOptions:
        return self.options.get(server, BackendOptions())

    @property
    def backend_errors(self) -> dict[str, str]:
        return {name: remote.error for name, remote in self.remotes.items() if remote.error}

    # -- remote connections -----------------------------------------------------------

    @asynccontextmanager
    async def connected(self, abandon: anyio.Event | None = None) -> AsyncIterator[Router]:
        """Keep every remote backend connected while open; nested uses share the sessions.

        Entering waits for each backend's first attempt to connect, up to FIRST_CONNECT_SECONDS;
        ``abandon``, once set, ends that wait at once (a stop signal during start-up): the body then
        runs with the backends not yet up, and leaving it stops them.
        """
        if self._connected or not self.remotes:
            self._connected += 1
            try:
                yield self
            finally:
                self._connected -= 1
            return
        async with anyio.create_task_group() as tasks:
            for remote in self.remotes.values():
                remote.reset()  # SDK 1.x enters the lifespan once per session: this may be a second time
                tasks.start_soon(remote.run)
            await self._first_attempts(abandon)
            if abandon is None or not abandon.is_set():  # when stopping, who started no longer matters
                self._check_first_connects()
            self._connected += 1
            try:
                yield self
            finally:
                self._connected -= 1
                await self._close_stdio_sessions()
                tasks.cancel_scope.cancel()

    async def _close_stdio_sessions(self) -> None:
        """Let each stdio backend's session end as a client ends one, within CLOSE_SECONDS (even when
        the router is being cancelled); what is left then, HTTP sessions included, is cancelled."""
        stdio = [remote for remote in self.remotes.values() if isinstance(remote.spec, StdioBackend)]
        for remote in stdio:
            remote.close()
        with anyio.CancelScope(shield=True, deadline=anyio.current_time() + CLOSE_SECONDS):
            for remote in stdio:
                await remote.stopped.wait()

    async def _first_attempts(self, abandon: anyio.Event | None) -> None:
        with anyio.move_on_after(FIRST_CONNECT_SECONDS):
            async with anyio.create_task_group() as waits:
                if abandon is not None:
                    waits.start_soon(_cancel_when, abandon, waits.cancel_scope)
                for remote in self.remotes.values():
                    await remote.first_attempt.wait()
                waits.cancel_scope.cancel()  # every first attempt is over: stop watching ``abandon``

    def _index_remote(self, name: str, tools: list[_compat.ToolInfo]) -> None:
        """On every (re)connect, and each time the backend says its tools changed: the catalog holds the
        backend's current tools, and only those. Names another backend serves are left out; a name this
        one gave up goes to a backend that was refused it before."""
        before = {entry.ref.name for entry in self.catalog.entries.values() if entry.ref.server == name}
        conflicts = self.catalog.replace_backend(name, tools, self.options_for(name))
        if conflicts and conflicts != self.conflicts.get(name):  # told again only when it changes
            left_out = ", ".join(sorted(conflicts))
            log.error("backend %r publishes tool names other backends serve, left out: %s", name, left_out)
        if conflicts:
            self.conflicts[name] = conflicts
        else:
            self.conflicts.pop(name, None)
        freed = before - {tool.name for tool in tools}
        for other, refused in list(self.conflicts.items()):
            if other != name and freed & refused.keys() and other in self.remotes:
                self._index_remote(other, self.remotes[other].tools)

    def _check_first_connects(self) -> None:
        if self.conflicts:  # at start-up, as for in-process backends, a duplicate name is an error
            name, conflicts = next(iter(self.conflicts.items()))
            tool = min(conflicts)
            raise HostContractError(f"duplicate backend tool name {tool!r}: served by {conflicts[tool]!r} and {name!r}")
        for name, remote in self.remotes.items():
            if remote.client is None:
                why = remote.error or f"no answer within {FIRST_CONNECT_SECONDS:g}s yet"
                log.warning("backend %r did not start (%s); the others serve, and it joins when it comes up", name, why)

    @asynccontextmanager
    async def _lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        async with self.connected():
            yield {}

    # -- the backend call -------------------------------------------------------------

    def find(self, name: str) -> ToolRef | None | Awaitable[ToolRef | None]:
        """The catalog's tool ``name``; to be awaited while a backend that may serve it reads its changed tools.

        The backend that serves it now, or, for a name no backend serves, every backend whose new list
        is pending (a tool may be new, or renamed).
        """
        tool = self.catalog.find(name)
        servers = [tool.server] if tool is not None else self.remotes
        pending = [self.remotes[server] for server in servers if server in self.remotes]
        if not any(remote.tools_pending() for remote in pending):
            return tool
        return self._found_once_listed(name, pending)

    async def _found_once_listed(self, name: str, remotes: list[RemoteBackend]) -> ToolRef | None:
        for remote in remotes:
            await remote.tools_listed()
        return self.catalog.find(name)

    async def call_backend(self, tool: ToolRef, arguments: Mapping[str, Any]) -> _compat.Answer:
        """``tool``'s answer; ``ToolsChanged`` when its remote backend changed it after it was looked up."""
        if tool.server in self.local:
            return await _compat.call_server_tool(self.local[tool.server], tool.name, arguments)
        remote = self.remotes[tool.server or ""]
        return await remote.call(tool.name, arguments, unchanged=lambda: self.catalog.find(tool.name) == tool)

    def refusal_after_change(self, tool: ToolRef) -> dict[str, str]:
        """What a call to ``tool`` is answered once its backend changed it after the call was checked: the gate
        decides again on the tool as it is now (a tool that is still a read, but another, is refused all the same)."""
        now = self.catalog.find(tool.name)
        if now is None:
            return {"status": "unknown_tool", "error": pipeline.unknown_tool_message(tool.name)}
        if not now.read_only:
            return {"status": "blocked", "error": NOT_READ_ONLY.format(name=tool.name)}
        return {"status": "blocked", "error": CHANGED_SINCE_CHECKED.format(name=tool.name)}

    async def dispatch(self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int | None) -> Any:
        try:
            answer = await self.call_backend(tool, arguments)
        except ToolsChanged:
            return self.refusal_after_change(tool)
        except ConnectionError as exc:
            return {"error": hosts_only(str(exc))}
        if answer.is_error:
            code = getattr(answer, "code", None)  # a JSON-RPC error's (see backends.ErrorResponse)
            text = known_urls_masked(await self.error_text(tool, arguments, answer.text, code))
            return {"error": text or "the tool reported an error"}
        # A batch entry's share of the batch budget may be larger than a single read's own bound: an
        # entry is never bounded looser than the same read alone would be.
        bounds = Bounds(self.max_items, min(max_bytes or self.max_bytes, self.max_bytes))
        offset = int(resume or 0)
        return bound(answer.payload, bounds, offset, lambda at: self.cursors.issue(tool.name, arguments, at))

    async def error_text(self, tool: ToolRef, arguments: Mapping[str, Any], text: str, code: int | None = None) -> str:
        """A backend's error as the caller may see it, never with an argument value (see ``validation``): an
        argument error is built anew, any other text has the call's values cut out."""
        schema = self.catalog.input_schema(tool.name)
        local = self.local.get(tool.server or "")
        details = None
        if local is not None and validation.is_argument_error(text, code):
            details = _compat.argument_errors(local, tool.name, arguments)
        # Pure Python over up to 20,000 bytes of arguments (a jsonschema check, a search for each value): in a
        # worker thread, so that a batch of such errors never holds the event loop that serves other clients.
        told = functools.partial(validation.retold, tool.name, text, arguments, schema, code=code, details=details)
        return await run_sync_abandonable(told)

    # -- the router's own tools -------------------------------------------------------

    def _add_tools(self) -> None:
        read = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
        _compat.add_tool(
            self.server,
            self._find_tool_fn(),
            name="find_tool",
            description=FIND_TOOL,
            annotations=read,
            input_schema=FIND_TOOL_SCHEMA,
        )
        _compat.add_tool(
            self.server,
            self._invoke_read_tool_fn(),
            name="invoke_read_tool",
            description=INVOKE_READ_TOOL,
            annotations={**read, "openWorldHint": True},
            input_schema=INVOKE_READ_TOOL_SCHEMA,
        )

    def _find_tool_fn(self) -> Any:
        # Loose parameters, checked here against the published schema's bounds: the SDK's own check
        # would answer a wrong type with pydantic's text, which quotes the value.
        async def find_tool(
            query: Any = None, top_k: Any = 5, server: Any = None, capability: Any = None
        ) -> dict[str, Any]:
            problem = search_problem(query, top_k, server, capability)
            if problem is not None:
                raise _compat.ToolError(problem)
            hits = self.catalog.search(query, whole_number(top_k) or 0, server, capability)
            return {"query": query, "count": len(hits), "results": hits}

        return find_tool

    def _invoke_read_tool_fn(self) -> Any:
        # Loose parameters, as find_tool's: the stages check them as a batch entry is checked, where the SDK's
        # own check would answer a wrong type with pydantic's text, which quotes the value.
        async def invoke_read_tool(
            ctx: _compat.Context, name: Any = None, arguments: Any = None, cursor: Any = None
        ) -> dict[str, Any]:
            return await self.read(name, arguments, cursor, request=ctx)

        return invoke_read_tool

    async def read(self, name: Any, arguments: Any, cursor: Any = None, request: Any = None) -> dict[str, Any]:
        """One read through the same stages as a batch entry (``engine.read_one``)."""
        if isinstance(name, str) and not is_utf8(name):
            # SDK 1.x's HTTP parser lets a lone surrogate through; echoed back, it made an answer no
            # JSON can carry, and the client got the SDK's "Error serializing to JSON" instead.
            shown = name.encode("utf-8", "backslashreplace").decode()
            return {"error": NOT_UNICODE_NAME, "tool": shown, "status": "unknown_tool"}
        host = pipeline.HostPipeline(self.hooks.calls(), request, in_batch=False)
        outcome = await engine.read_one(name, arguments, cursor, host, BatchSettings.from_env(), self.max_bytes)
        if outcome.status == "ok":
            result: dict[str, Any] = outcome.result
            return result
        echoed = name if isinstance(name, str) and len(name) <= MAX_NAME_CHARS else None  # what was refused is not
        return {"error": outcome.error, "tool": echoed, "status": outcome.status}


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


NOT_UNICODE_NAME = "Unknown tool: its name is not valid Unicode text. Use find_tool to discover."


class RouterHooks:
    """The router's side of the hook contract."""

    def __init__(self, router: Router) -> None:
        self.router = router

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None | Awaitable[ToolRef | None]:
        return self.router.find(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        return None if tool.read_only else NOT_READ_ONLY.format(name=tool.name)

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> int:
        return self.router.cursors.verify(tool.name, arguments, cursor)

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int
    ) -> Any:
        return await self.router.dispatch(tool, arguments, resume, max_bytes)


FIND_TOOL = """Find backend tools by keywords over their names and descriptions.

Returns up to top_k matches with name, server, description, params, capability (read,
diagnostic, write, destructive), recommended_dispatcher and read_only. Filter by server or
capability. Call read tools with invoke_read_tool or, several at once, invoke_read_tool_batch."""

FIND_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "maxLength": MAX_QUERY_CHARS,
            "description": f"keywords, at most {MAX_QUERY_WORDS} distinct",
        },
        "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 5},
        "server": {"anyOf": [{"type": "string", "maxLength": MAX_SERVER_CHARS}, {"type": "null"}], "default": None},
        "capability": {"anyOf": [{"enum": list(CAPABILITIES)}, {"type": "null"}], "default": None},
    },
    "required": ["query"],
}

INVOKE_READ_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "description": "the backend tool"},
        "arguments": {
            "anyOf": [{"type": "object"}, {"type": "null"}],
            "default": None,
            "description": f"at most {MAX_ARGUMENT_BYTES} bytes as JSON, {MAX_ARGUMENT_DEPTH} levels deep",
        },
        "cursor": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    },
    "required": ["name"],
}

INVOKE_READ_TOOL = """Call one read-only backend tool by name.

Write, destructive, diagnostic and unannotated tools are refused with status "blocked".
Large answers are bounded: the longest list is paged and a next_cursor resumes it (pass it
back as cursor with the same name and arguments)."""
