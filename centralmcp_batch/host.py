"""The one typed facade over ``pm.hook.*``: business code calls these methods, never pluggy.

Each method forwards to one hook with keyword arguments and awaits an awaitable answer, so a
host may implement any hook with ``def`` or ``async def``.

A batch calls four hooks per entry, so the facade calls plain implementations itself, in pluggy's
order and with pluggy's result rules, while that is exactly what pluggy would do: no wrapper on
the hook and no call monitoring or tracing on the manager. Anything else goes through pluggy.
The plan is rebuilt whenever the hook's implementations change (a plugin registered later).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from types import CoroutineType
from typing import Any

import pluggy

from .errors import InvalidCursor
from .models import CallContext, ToolRef

log = logging.getLogger(__name__)

NO_GATE = "refused: the host registers no centralmcp_read_gate, so no read can be allowed"
NO_CURSORS = "this host does not support continuation cursors"


async def await_me_maybe(value: Any) -> Any:
    # The common answers (a coroutine, None, a plain value) are told apart without the ABC check.
    if type(value) is CoroutineType or (value is not None and inspect.isawaitable(value)):
        return await value
    return value


Impl = tuple[Callable[..., Any], Sequence[str]]  # an implementation's function and its argument names


def _is_pluggys_own_call(hookexec: Any) -> bool:
    """True for the manager's unmonitored hook execution (pluggy's ``_multicall``)."""
    name, module = getattr(hookexec, "__name__", ""), getattr(hookexec, "__module__", "")
    return name == "_multicall" and module.startswith("pluggy.")


def _gate_failed(tool: ToolRef, exc: Exception) -> str:
    log.warning("centralmcp_read_gate raised for %r; refusing", tool.name, exc_info=exc)
    return f"refused: the read gate failed ({type(exc).__name__})"


class HostHooks:
    """The host's hooks, as the plugin calls them."""

    def __init__(self, pluginmanager: pluggy.PluginManager) -> None:
        self.pluginmanager = pluginmanager
        self._hook = pluginmanager.hook
        self._plain_exec = getattr(pluginmanager, "_inner_hookexec", None)
        if not _is_pluggys_own_call(self._plain_exec):
            self._plain_exec = None  # already monitored: always go through pluggy
        self._plans: dict[str, tuple[list[Any], Any]] = {}  # hook name -> (its implementations, what was made of them)

    def _plan(self, name: str) -> list[Impl] | None:
        """The hook's implementations in calling order, or None when pluggy must make the call."""
        if self._plain_exec is None or getattr(self.pluginmanager, "_inner_hookexec", None) is not self._plain_exec:
            return None  # call monitoring or tracing was switched on: it must see every call
        impls = getattr(self._hook, name).get_hookimpls()
        cached = self._plans.get(name)
        if cached is not None and cached[0] == impls:
            known: list[Impl] | None = cached[1]
            return known
        wrapped = any(impl.hookwrapper or impl.wrapper for impl in impls)
        plan = None if wrapped else [(impl.function, impl.argnames) for impl in reversed(impls)]
        self._plans[name] = (impls, plan)
        return plan

    def _call_first(self, hook: str, /, **kwargs: Any) -> Any:
        """A ``firstresult`` hook: the first answer that is not None, as pluggy gives it."""
        plan = self._plan(hook)
        if plan is None:
            return getattr(self._hook, hook)(**kwargs)
        for function, argnames in plan:
            answer = function(*[kwargs[arg] for arg in argnames])
            if answer is not None:
                return answer
        return None

    def _call_all(self, hook: str, /, **kwargs: Any) -> list[Any]:
        """Every implementation's answer that is not None, in pluggy's order; a raise stops the rest, as in pluggy."""
        plan = self._plan(hook)
        if plan is None:
            return list(getattr(self._hook, hook)(**kwargs))
        answers = []
        for function, argnames in plan:
            answer = function(*[kwargs[arg] for arg in argnames])
            if answer is not None:
                answers.append(answer)
        return answers

    async def find_tool(self, name: str) -> ToolRef | None:
        tool: ToolRef | None = await await_me_maybe(self._call_first("centralmcp_find_tool", name=name))
        return tool  # whatever the host answered: read_one checks that it is a ToolRef

    async def read_gate(self, tool: ToolRef) -> str | None:
        """None allows; otherwise the first refusal. Fails closed on a raise or a missing gate."""
        plan = self._plan("centralmcp_read_gate")
        if not (plan if plan is not None else self._hook.centralmcp_read_gate.get_hookimpls()):
            return NO_GATE
        try:
            answers = self._call_all("centralmcp_read_gate", tool=tool)
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
        answer = self._call_first("centralmcp_resume_cursor", tool=tool, arguments=arguments, cursor=cursor)
        return await await_me_maybe(answer)

    async def acquire_rate_token(self, tool: ToolRef) -> None:
        """Wait for every limiter once; a limiter that fails is logged and does not block."""
        try:
            waits = self._call_all("centralmcp_acquire_rate_token", tool=tool)
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
        answer = self._call_first(
            "centralmcp_dispatch_read",
            tool=tool,
            arguments=arguments,
            resume=resume,
            max_bytes=max_bytes,
            context=context,
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
        for impl in self._observers(name):
            try:
                await await_me_maybe(impl.function(*[kwargs[arg] for arg in impl.argnames]))
            except Exception:
                log.warning("observer %s of plugin %r failed; ignored", name, impl.plugin_name, exc_info=True)

    def _observers(self, name: str) -> list[Any]:
        """The hook's plain implementations in pluggy's calling order, kept until the plugins change."""
        impls = getattr(self._hook, name).get_hookimpls()
        cached = self._plans.get(name)
        if cached is None or cached[0] != impls:
            cached = (impls, [impl for impl in reversed(impls) if not (impl.hookwrapper or impl.wrapper)])
            self._plans[name] = cached
        return cached[1]
