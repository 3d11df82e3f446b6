"""Host hooks over CentralMCP's tool router module (``mcp_servers/tool_router.py``).

The router module is passed in, never imported here. Its own parts do the work: the catalog
is its loaded backend index, the gate its readOnlyHint test with its refusal text, cursors its
HMAC continuation cursors, the rate token its dispatch rate gate, dispatch its backends' tool
managers and its response bounding. A router adopts the plugin with :func:`adopt`::

    from centralmcp_batch.adapters.centralmcp import adopt
    adopt(importlib.import_module(__name__))  # the router module itself
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Optional

import pluggy

from .. import _compat, hosting, settings
from ..batch_tool import TOOL_NAME
from ..errors import HostContractError, InvalidCursor
from ..hookspecs import hookimpl
from ..models import CallContext, ToolRef

log = logging.getLogger(__name__)

NOT_READ_ONLY = "Tool '{name}' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."


class CentralMCPHooks:
    """Catalog, gate, cursors and dispatch of one CentralMCP router module."""

    def __init__(self, router: ModuleType) -> None:
        self.router = router
        # Routers before the batch era bound at their own byte budget only.
        self._bounds_per_call = "max_bytes" in inspect.signature(router._bound_router_response).parameters

    def _backend_tool(self, name: str) -> Any:
        self.router._load_all_backends()
        return self.router._tool_index.get(name)

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> Optional[ToolRef]:
        tool = self._backend_tool(name)
        if tool is None:
            return None
        return ToolRef(name, self.router._tool_backend_names.get(name), _compat.annotations_dict(tool.annotations))

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> Optional[str]:
        # The router's own tool object decides, as invoke_read_tool does: readOnlyHint and nothing else.
        backend_tool = self._backend_tool(tool.name)
        flags = _compat.annotations_dict(getattr(backend_tool, "annotations", None))
        return None if flags.get("readOnlyHint") else NOT_READ_ONLY.format(name=tool.name)

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> int:
        canonical = self.router._strip_null_arguments(dict(arguments))
        try:
            return self.router._decode_and_verify_continuation_cursor(cursor, name=tool.name, arguments=canonical)
        except self.router.CursorError as exc:
            raise InvalidCursor(str(exc)) from None

    @hookimpl
    async def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext) -> Any:
        self.router._load_all_backends()
        backend = self.router._tool_servers.get(tool.name)
        if backend is None:
            return {"error": f"Unknown tool '{tool.name}'. Use find_tool to discover.", "tool": tool.name, "status": "unknown_tool"}
        args = self.router._strip_null_arguments(dict(arguments))
        try:  # the router's Context goes through, as invoke_read_tool forwards it
            result = await _compat.call_manager_tool(backend._tool_manager, tool.name, args, context=context.request)
        except Exception as e:
            result = {"error": f"{type(e).__name__}: {e}"}
        bounds = {"max_bytes": max_bytes} if self._bounds_per_call else {}
        return self.router._bound_router_response(
            result, offset=resume or 0, enable_cursor=True, tool_name=tool.name, tool_arguments=args, **bounds
        )


class CentralMCPRateGate:
    """One token of the router's dispatch rate gate per backend call, as its single reads draw."""

    def __init__(self, router: ModuleType) -> None:
        self.router = router

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        await self.router._await_dispatch_rate_gate()


def has_rate_gate(router: ModuleType) -> bool:
    return callable(getattr(router, "set_dispatch_rate_gate", None)) and callable(getattr(router, "_await_dispatch_rate_gate", None))


def host_plugins(router: ModuleType) -> list[object]:
    """The host hook implementations over ``router``; no token hook when it has no rate gate."""
    plugins: list[object] = [CentralMCPHooks(router)]
    if has_rate_gate(router):
        plugins.append(CentralMCPRateGate(router))
    else:
        log.warning(
            "router %r has no set_dispatch_rate_gate: batch entries draw no rate token of their own "
            "(its RateLimitMiddleware charges one per inbound call, so one per batch)",
            router.__name__,
        )
    return plugins


def adopt(router: ModuleType, *, replace: bool = False) -> pluggy.PluginManager:
    """Publish ``invoke_read_tool_batch`` on ``router.mcp`` over the router's own parts.

    Works in minimal mode too: calling this is the explicit choice. A router that already
    publishes the tool is refused unless ``replace`` is true.
    """
    server = router.mcp
    if _compat.has_tool(server, TOOL_NAME):
        if not replace:
            raise HostContractError(
                f"router {router.__name__!r} already publishes {TOOL_NAME!r}; "
                "pass replace=True to adopt centralmcp-batch in its place"
            )
        _compat.remove_tool(server, TOOL_NAME)
    with settings.adopted_explicitly():
        return hosting.install(server, *host_plugins(router))
