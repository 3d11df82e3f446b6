"""The reference router: a host for the ``centralmcp`` plugins over real MCP backends."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Optional

import anyio

from .. import _compat, hosting, pipeline
from ..engine import Guards
from ..hookspecs import hookimpl
from ..host import HostHooks
from ..models import CallContext, ToolRef
from ..settings import BatchSettings, Setting
from .backends import RemoteBackend, is_remote
from ..ratelimit import RateLimitPlugin
from .bounding import Bounds, bound
from .catalog import BackendOptions, Catalog
from .cursors import CursorSigner
from .limiter import limiter_from_env

log = logging.getLogger(__name__)

MAX_ITEMS = Setting("CENTRALMCP_ROUTER_RESPONSE_MAX_ITEMS", 200, 1, 200)
MAX_BYTES = Setting("CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES", 200_000, 1_024)
CURSOR_TTL_ENV = "CENTRALMCP_ROUTER_CURSOR_TTL_SECONDS"
CURSOR_KEY_ENV = "CENTRALMCP_ROUTER_CURSOR_KEY"
NOT_READ_ONLY = "Tool '{name}' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
FIRST_CONNECT_SECONDS = 30.0


def _cursor_ttl(environ: Mapping[str, str]) -> int:
    try:
        ttl = int(environ.get(CURSOR_TTL_ENV, "900"))
    except ValueError:
        ttl = 900
    return min(3600, max(30, ttl))


class Router:
    """``backends``: server name → in-process server object, ``StdioBackend`` or ``HttpBackend``."""

    def __init__(self, backends: Mapping[str, Any], *, options: Optional[Mapping[str, BackendOptions]] = None, name: str = "centralmcp-batch-router") -> None:
        env = os.environ
        self.options = dict(options or {})
        self.limiter = limiter_from_env(env)  # account-wide: shared with every process on its store
        key = env.get(CURSOR_KEY_ENV, "").encode() or None
        self.cursors = CursorSigner(key, _cursor_ttl(env))
        self.max_items, self.max_bytes = int(MAX_ITEMS.read(env)), int(MAX_BYTES.read(env))
        self.catalog = Catalog()
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
            self.remotes[server] = RemoteBackend(server, backend)
        elif _compat.is_server(backend):
            self.local[server] = backend
            self.catalog.add_backend(server, _compat.server_tools(backend), self.options_for(server))
        else:
            raise TypeError(f"backend {server!r} is neither an MCP server object nor a remote spec: {type(backend).__name__}")

    def options_for(self, server: str) -> BackendOptions:
        return self.options.get(server, BackendOptions())

    @property
    def backend_errors(self) -> dict[str, str]:
        return {name: remote.error for name, remote in self.remotes.items() if remote.error}

    # -- remote connections -----------------------------------------------------------

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[Router]:
        """Keep every remote backend connected while open; nested uses share the sessions."""
        if self._connected or not self.remotes:
            self._connected += 1
            try:
                yield self
            finally:
                self._connected -= 1
            return
        async with anyio.create_task_group() as tasks:
            for remote in self.remotes.values():
                tasks.start_soon(remote.run)
            with anyio.move_on_after(FIRST_CONNECT_SECONDS):
                for remote in self.remotes.values():
                    await remote.first_attempt.wait()
            self._index_remotes()
            self._connected += 1
            try:
                yield self
            finally:
                self._connected -= 1
                tasks.cancel_scope.cancel()

    def _index_remotes(self) -> None:
        for name, remote in self.remotes.items():
            if remote.client is None:
                log.warning("backend %r did not start (%s); the other backends keep serving", name, remote.error)
                continue
            self.catalog.add_backend(name, remote.tools, self.options_for(name))

    @asynccontextmanager
    async def _lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        async with self.connected():
            yield {}

    # -- the backend call -------------------------------------------------------------

    async def call_backend(self, tool: ToolRef, arguments: Mapping[str, Any]) -> _compat.Answer:
        if tool.server in self.local:
            return await _compat.call_server_tool(self.local[tool.server], tool.name, arguments)
        return await self.remotes[tool.server or ""].call(tool.name, arguments)

    async def dispatch(self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: Optional[int]) -> Any:
        try:
            answer = await self.call_backend(tool, arguments)
        except ConnectionError as exc:
            return {"error": str(exc)}
        if answer.is_error:
            return {"error": without_input_values(answer.text) or "the tool reported an error"}
        bounds = Bounds(self.max_items, max_bytes or self.max_bytes)
        offset = int(resume or 0)
        return bound(answer.payload, bounds, offset, lambda at: self.cursors.issue(tool.name, arguments, at))

    # -- the router's own tools -------------------------------------------------------

    def _add_tools(self) -> None:
        read = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
        _compat.add_tool(self.server, self._find_tool_fn(), name="find_tool", description=FIND_TOOL, annotations=read)
        _compat.add_tool(self.server, self._invoke_read_tool_fn(), name="invoke_read_tool", description=INVOKE_READ_TOOL, annotations={**read, "openWorldHint": True})

    def _find_tool_fn(self) -> Any:
        async def find_tool(query: str, top_k: int = 5, server: Optional[str] = None, capability: Optional[str] = None) -> dict[str, Any]:
            hits = self.catalog.search(query, top_k, server, capability)
            return {"query": query, "count": len(hits), "results": hits}

        return find_tool

    def _invoke_read_tool_fn(self) -> Any:
        async def invoke_read_tool(ctx: _compat.Context, name: str, arguments: Optional[dict[str, Any]] = None, cursor: Optional[str] = None) -> dict[str, Any]:
            return await self.read(name, arguments or {}, cursor, request=ctx)

        return invoke_read_tool

    async def read(self, name: str, arguments: Mapping[str, Any], cursor: Optional[str] = None, request: Any = None) -> dict[str, Any]:
        """One read through the same pipeline as a batch entry."""
        context = CallContext(index=None, call_id=None, in_batch=False, request=request)
        guards = Guards(BatchSettings.from_env().call_timeout)
        outcome = await pipeline.read_one(self.hooks, name, arguments, cursor, max_bytes=self.max_bytes, context=context, guards=guards)
        if outcome.status == "ok":
            return outcome.result
        return {"error": outcome.error, "tool": name, "status": outcome.status}


_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]|$)", re.S)


def without_input_values(text: str) -> str:
    """A backend's error without the argument values the SDK's validation errors quote."""
    return _INPUT_VALUE.sub("input_value=<hidden>", text)


class RouterHooks:
    """The router's side of the hook contract."""

    def __init__(self, router: Router) -> None:
        self.router = router

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> Optional[ToolRef]:
        return self.router.catalog.find(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> Optional[str]:
        return None if tool.read_only else NOT_READ_ONLY.format(name=tool.name)

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> int:
        return self.router.cursors.verify(tool.name, arguments, cursor)

    @hookimpl
    async def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int) -> Any:
        return await self.router.dispatch(tool, arguments, resume, max_bytes)


FIND_TOOL = """Find backend tools by keywords over their names and descriptions.

Returns up to top_k matches with name, server, description, params, capability (read,
diagnostic, write, destructive), recommended_dispatcher and read_only. Filter by server or
capability. Call read tools with invoke_read_tool or, several at once, invoke_read_tool_batch."""

INVOKE_READ_TOOL = """Call one read-only backend tool by name.

Write, destructive, diagnostic and unannotated tools are refused with status "blocked".
Large answers are bounded: the longest list is paged and a next_cursor resumes it (pass it
back as cursor with the same name and arguments)."""
