"""The one typed facade over ``pm.hook.*``: business code calls these methods, never pluggy.

Each method forwards to one hook with keyword arguments and awaits an awaitable answer, so a
host may implement any hook with ``def`` or ``async def``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any, Optional

import pluggy

from .errors import InvalidCursor
from .models import CallContext, ToolRef

log = logging.getLogger(__name__)

NO_GATE = "refused: the host registers no centralmcp_read_gate, so no read can be allowed"
NO_CURSORS = "this host does not support continuation cursors"


async def await_me_maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _gate_failed(tool: ToolRef, exc: Exception) -> str:
    log.warning("centralmcp_read_gate raised for %r; refusing", tool.name, exc_info=exc)
    return f"refused: the read gate failed ({type(exc).__name__})"


class HostHooks:
    """The host's hooks, as the plugin calls them."""

    def __init__(self, pluginmanager: pluggy.PluginManager) -> None:
        self.pluginmanager = pluginmanager
        self._hook = pluginmanager.hook

    async def find_tool(self, name: str) -> Optional[ToolRef]:
        return await await_me_maybe(self._hook.centralmcp_find_tool(name=name))

    async def read_gate(self, tool: ToolRef) -> Optional[str]:
        """None allows; otherwise the first refusal. Fails closed on a raise or a missing gate."""
        if not self._hook.centralmcp_read_gate.get_hookimpls():
            return NO_GATE
        try:
            answers = self._hook.centralmcp_read_gate(tool=tool)
        except Exception as exc:
            return _gate_failed(tool, exc)
        refusals = []
        for answer in answers:  # await every answer, so no coroutine is left unawaited
            try:
                refusals.append(await await_me_maybe(answer))
            except Exception as exc:
                refusals.append(_gate_failed(tool, exc))
        for refusal in refusals:
            if refusal is not None:
                return refusal if isinstance(refusal, str) else f"refused by the read gate ({type(refusal).__name__})"
        return None

    async def resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        """The resume state for ``cursor``; raises InvalidCursor when the host refuses it."""
        if not self._hook.centralmcp_resume_cursor.get_hookimpls():
            raise InvalidCursor(NO_CURSORS)
        answer = self._hook.centralmcp_resume_cursor(tool=tool, arguments=arguments, cursor=cursor)
        return await await_me_maybe(answer)

    async def acquire_rate_token(self, tool: ToolRef) -> None:
        """Wait for every limiter once; a limiter that fails is logged and does not block."""
        try:
            waits = self._hook.centralmcp_acquire_rate_token(tool=tool)
        except Exception:
            log.warning("centralmcp_acquire_rate_token raised for %r; proceeding", tool.name, exc_info=True)
            return
        for wait in waits:
            try:
                await await_me_maybe(wait)
            except Exception:
                log.warning("centralmcp_acquire_rate_token failed for %r; proceeding", tool.name, exc_info=True)

    async def dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        answer = self._hook.centralmcp_dispatch_read(
            tool=tool, arguments=arguments, resume=resume, max_bytes=max_bytes, context=context
        )
        return await await_me_maybe(answer)

    async def batch_started(self, total: int) -> None:
        await self._notify("centralmcp_batch_started", total=total)

    async def rate_token_waited(self, tool: ToolRef, seconds: float) -> None:
        await self._notify("centralmcp_rate_token_waited", tool=tool, seconds=seconds)

    async def batch_item_completed(self, item: Mapping[str, Any], seconds: float) -> None:
        await self._notify("centralmcp_batch_item_completed", item=item, seconds=seconds)

    async def batch_completed(self, response: Mapping[str, Any], seconds: float) -> None:
        await self._notify("centralmcp_batch_completed", response=response, seconds=seconds)

    async def _notify(self, name: str, **kwargs: Any) -> None:
        """Observers, each on its own: one that fails is logged and the others still hear."""
        for impl in reversed(getattr(self._hook, name).get_hookimpls()):  # pluggy's calling order
            if impl.hookwrapper or impl.wrapper:
                continue
            try:
                await await_me_maybe(impl.function(*(kwargs[arg] for arg in impl.argnames)))
            except Exception:
                log.warning("observer %s of plugin %r failed; ignored", name, impl.plugin_name, exc_info=True)
