"""The one typed facade over ``pm.hook.*``: business code calls these methods, never pluggy.

Each method forwards to one hook with its arguments by name and awaits an awaitable answer, so
a host may implement any hook with ``def`` or ``async def``.

A batch calls four hooks per entry, so the facade calls plain implementations itself, in pluggy's
order and with pluggy's result rules, while that is exactly what pluggy would do: no wrapper on
the hook, no argument with a default (pluggy releases differ on those) and no call monitoring or
tracing on the manager. Anything else goes through pluggy.
What to call is worked out in a :class:`HookCalls`, fixed when it is made: a batch makes one as
it starts (a plugin registered while it runs is heard from the next batch on), and each
``HostHooks`` method uses one that is remade whenever the plugins change.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import CoroutineType
from typing import Any

import pluggy

from .errors import InvalidCursor
from .models import CallContext, RateBooking, ToolRef

log = logging.getLogger(__name__)

NO_GATE = "refused: the host registers no centralmcp_read_gate, so no read can be allowed"
NO_CURSORS = "this host does not support continuation cursors"

# Each hook the facade calls, with its arguments in the spec's order.
SPEC_ARGS: dict[str, tuple[str, ...]] = {
    "centralmcp_find_tool": ("name",),
    "centralmcp_read_gate": ("tool",),
    "centralmcp_resume_cursor": ("tool", "arguments", "cursor"),
    "centralmcp_reserve_rate_tokens": ("tools", "within"),
    "centralmcp_acquire_rate_token": ("tool",),
    "centralmcp_dispatch_read": ("tool", "arguments", "resume", "max_bytes", "context"),
    "centralmcp_batch_started": ("total",),
    "centralmcp_rate_token_waited": ("tool", "seconds"),
    "centralmcp_batch_item_completed": ("item", "seconds"),
    "centralmcp_batch_completed": ("response", "seconds"),
    "centralmcp_batch_cancelled": ("seconds",),
}
# What an observer that answered False to centralmcp_batch_started no longer hears of that batch.
_AFTER_START = frozenset(
    {
        "centralmcp_rate_token_waited",
        "centralmcp_batch_item_completed",
        "centralmcp_batch_completed",
        "centralmcp_batch_cancelled",
    }
)
OBSERVERS = _AFTER_START | {"centralmcp_batch_started"}


async def await_me_maybe(value: Any) -> Any:
    if is_awaitable(value):
        return await value
    return value


def is_awaitable(value: Any) -> bool:
    # The common answers (a coroutine, None, a dict, a ToolRef) are told apart without the ABC check.
    if type(value) is CoroutineType:
        return True
    return value is not None and type(value) not in _NEVER_AWAITABLE and inspect.isawaitable(value)


_NEVER_AWAITABLE = frozenset({dict, list, str, int, ToolRef})

# One implementation as the facade calls it: its function, which of the spec's arguments it takes,
# by position (None: all of them, in the spec's order, the common case), and its plugin's name.
Impl = tuple[Callable[..., Any], tuple[int, ...] | None, str]


def _is_pluggys_own_call(hookexec: Any) -> bool:
    """True for the manager's unmonitored hook execution (pluggy's ``_multicall``)."""
    name, module = getattr(hookexec, "__name__", ""), getattr(hookexec, "__module__", "")
    return name == "_multicall" and module.startswith("pluggy.")


def _gate_failed(tool: ToolRef, exc: Exception) -> str:
    log.warning("centralmcp_read_gate raised for %r; refusing", tool.name, exc_info=exc)
    return f"refused: the read gate failed ({type(exc).__name__})"


def _as_impl(hookimpl: Any, spec_args: Sequence[str]) -> Impl:
    picks = tuple(spec_args.index(name) for name in hookimpl.argnames)
    return hookimpl.function, None if picks == tuple(range(len(spec_args))) else picks, hookimpl.plugin_name


def _call(impl: Impl, args: tuple[Any, ...]) -> Any:
    function, picks, _ = impl
    return function(*args) if picks is None else function(*[args[i] for i in picks])


def _through_pluggy_alone(
    pluginmanager: pluggy.PluginManager, hook: str, spec_args: Sequence[str], hookimpl: Any
) -> Impl:
    """One observer as pluggy calls it on its own: call monitoring and tracing see the call, and
    its arguments with defaults get what the installed pluggy gives them."""

    def call(*args: Any) -> Any:
        # pluggy's own execution of a list of implementations (what its hook callers run), with this one alone.
        answers = pluginmanager._hookexec(hook, [hookimpl], dict(zip(spec_args, args, strict=True)), False)
        assert isinstance(answers, list)  # not firstresult: the list of answers that are not None
        return answers[0] if answers else None

    return call, None, hookimpl.plugin_name


class HookCalls:
    """The host's hooks as one batch (or one read) calls them: each hook's implementations, fixed when made.

    Each hook is one method that takes the spec's arguments by position and answers without
    waiting: its answer, or an awaitable of it when an implementation is ``async`` (the caller
    awaits what ``is_awaitable`` says is). No coroutine is made where no implementation needs
    one, so an entry over ``def`` hooks costs no coroutine of the facade's. Hooks are called
    directly, in pluggy's order and with its result rules, or through pluggy when it must make
    the call (a wrapper on the hook, or call monitoring on the manager). Observers are told
    each on their own, in order; one that fails is logged and the others still hear.
    """

    def __init__(self, pluginmanager: pluggy.PluginManager, plans: Mapping[str, tuple[Impl, ...] | None]) -> None:
        self._hook = pluginmanager.hook
        self._plans = plans
        # (plans, plugin) -> those plans without that plugin's observers after batch_started. Shared by the
        # copies ``for_batch`` makes: a plugin that answers False does so batch after batch, and narrowing
        # anew each time was 2 us of every batch (3% of a batch of one).
        self._narrowed: dict[tuple[int, str], tuple[Mapping[str, tuple[Impl, ...] | None], dict[str, Any]]] = {}
        gates = self._hook.centralmcp_read_gate.get_hookimpls()
        # A gate that is only a wrapper wraps nothing: no implementation answers, so none allows.
        self.has_gate = _has_plain(gates)
        # Nor does a resume hook that is only a wrapper: pluggy's None would read from the start, not refuse.
        self.has_cursors = _has_plain(self._hook.centralmcp_resume_cursor.get_hookimpls())
        self.hears_tokens = bool(plans["centralmcp_rate_token_waited"])
        self.hears_items = bool(plans["centralmcp_batch_item_completed"])
        self.find_tool: Callable[[str], Any] = self._first_caller("centralmcp_find_tool")
        self.dispatch_read: Callable[[ToolRef, Mapping[str, Any], Any, int, CallContext], Any] = self._first_caller(
            "centralmcp_dispatch_read"
        )
        self._resume = self._first_caller("centralmcp_resume_cursor")
        self._pluginmanager = pluginmanager
        # Limiters that book a batch's tokens at once: each is asked on its own, and no longer per call.
        self._bookers = [
            _through_pluggy_alone(pluginmanager, "centralmcp_reserve_rate_tokens", ("tools", "within"), impl)
            for impl in reversed(self._hook.centralmcp_reserve_rate_tokens.get_hookimpls())
            if _is_plain(impl)
        ]
        booking = {impl[2] for impl in self._bookers}
        token_plan = plans["centralmcp_acquire_rate_token"]
        if token_plan is not None:
            token_plan = tuple(impl for impl in token_plan if impl[2] not in booking)
        self._token_plan = token_plan
        # Where a hook has one plain implementation taking every argument (the common host), it is
        # called as it is: the general path's list and loop were a tenth of an entry's own cost.
        self._sole_gate = _sole(plans["centralmcp_read_gate"])
        self._sole_token = _sole(token_plan)
        # Where pluggy makes the token call, each limiter is guarded: its raise must not stop the rest.
        self._guarded_tokens = (
            [
                _guarded(impl)
                for impl in self._hook.centralmcp_acquire_rate_token.get_hookimpls()
                if impl.plugin_name not in booking
            ]
            if token_plan is None
            else []
        )

    def _first_caller(self, hook: str) -> Callable[..., Any]:
        """A ``firstresult`` hook as one callable: the first answer that is not None, as pluggy gives it."""
        impls = self._plans[hook]
        if impls is None:
            return functools.partial(self._through_pluggy, hook)
        if len(impls) == 1 and impls[0][1] is None:
            return impls[0][0]  # the implementation itself: the common case, and an entry's hottest path

        def first(*args: Any) -> Any:
            for impl in impls:
                answer = _call(impl, args)
                if answer is not None:
                    return answer
            return None

        return first

    def _through_pluggy(self, hook: str, *args: Any) -> Any:
        return getattr(self._hook, hook)(**dict(zip(SPEC_ARGS[hook], args, strict=True)))

    def _all(self, hook: str, args: tuple[Any, ...]) -> list[Any]:
        """Every answer that is not None, in pluggy's order; a raise stops the rest, as in pluggy."""
        impls = self._plans[hook]
        if impls is None:
            return list(self._through_pluggy(hook, *args))
        answers = []
        for impl in impls:
            answer = _call(impl, args)
            if answer is not None:
                answers.append(answer)
        return answers

    def read_gate(self, tool: ToolRef) -> str | None | Awaitable[str | None]:
        """None allows; otherwise the first refusal. Fails closed on a raise or a missing gate."""
        if not self.has_gate:
            return NO_GATE
        try:
            if self._sole_gate is not None:
                answer = self._sole_gate(tool)
                if answer is None or type(answer) is str:
                    return answer
                answers = [answer]
            else:
                answers = self._all("centralmcp_read_gate", (tool,))
        except Exception as exc:
            return _gate_failed(tool, exc)
        for answer in answers:
            if is_awaitable(answer):
                return _gate_awaiting(tool, answers)
        return _first_refusal(answers)

    def resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        """The resume state for ``cursor`` (or an awaitable of it); raises InvalidCursor when the host refuses it."""
        if not self.has_cursors:
            raise InvalidCursor(NO_CURSORS)
        return self._resume(tool, arguments, cursor)

    def acquire_rate_token(self, tool: ToolRef) -> list[Awaitable[Any]]:
        """What to await for one token of every limiter: each may fail, which is logged and does not block.

        Every limiter is asked, also when one raises, so a broken one (a third party's, say) never
        costs the host's limiter its token. Where pluggy makes the call (see ``HostHooks._make``),
        it calls guarded copies of the limiters, with the hook's wrappers around them.
        """
        try:
            if self._sole_token is not None:
                wait = self._sole_token(tool)
                return [wait] if wait is not None and is_awaitable(wait) else []
            impls = self._token_plan
            if impls is None:
                answers = self._pluginmanager._hookexec(
                    "centralmcp_acquire_rate_token", self._guarded_tokens, {"tool": tool}, False
                )
                assert isinstance(answers, list)  # not firstresult: the answers that are not None
                return [wait for wait in answers if is_awaitable(wait)]
        except Exception:
            token_failed(tool)
            return []
        waits = []
        for impl in impls:  # each on its own: one that raises costs no other limiter its token
            try:
                wait = _call(impl, (tool,))
            except Exception:
                token_failed(tool, impl[2])
                continue
            if wait is not None and is_awaitable(wait):
                waits.append(wait)
        return waits

    @property
    def books_rates(self) -> bool:
        """Whether a limiter books a batch's tokens at once (``centralmcp_reserve_rate_tokens``)."""
        return bool(self._bookers)

    async def reserve_rate_tokens(self, tools: Sequence[ToolRef], within: float) -> list[RateBooking]:
        """Each booking limiter's booking, asked in pluggy's order; one that fails is logged and left out."""
        bookings = []
        for impl in self._bookers:
            try:
                booking = await await_me_maybe(_call(impl, (tools, within)))
            except Exception:
                log.warning(
                    "centralmcp_reserve_rate_tokens of plugin %r failed; its %d calls go on unbooked",
                    impl[2],
                    len(tools),
                    exc_info=True,
                )
                continue
            if isinstance(booking, RateBooking):
                bookings.append(booking)
            elif booking is not None:
                log.warning(
                    "centralmcp_reserve_rate_tokens of plugin %r answered a %s, not a RateBooking; ignored",
                    impl[2],
                    type(booking).__name__,
                )
        return bookings

    def for_batch(self) -> HookCalls:
        """A copy for one batch, which ``batch_started`` may narrow to the observers still listening."""
        copy = object.__new__(HookCalls)
        copy.__dict__.update(self.__dict__)
        return copy

    def batch_started(self, total: int) -> Awaitable[None] | None:
        """Tell the observers; a plugin whose answer is ``False`` hears nothing more of this batch.

        Only a copy made by ``for_batch`` may be narrowed: the calls a ``HostHooks`` keeps serve every batch.
        """
        return self._notify("centralmcp_batch_started", (total,), self._quiet_if_false)

    def _quiet_if_false(self, impl: Impl, answer: Any) -> None:
        if answer is not False:
            return
        plugin = impl[2]
        key = (id(self._plans), plugin)
        known = self._narrowed.get(key)
        if known is None or known[0] is not self._plans:  # the plans themselves are kept: an id is not reused
            if len(self._narrowed) >= 64:  # plugins that answer False now and then: only the latest kept
                self._narrowed.clear()
            known = (self._plans, _without_observer(self._plans, plugin))
            self._narrowed[key] = known
        self._plans = known[1]
        self.hears_tokens = bool(self._plans["centralmcp_rate_token_waited"])
        self.hears_items = bool(self._plans["centralmcp_batch_item_completed"])

    def rate_token_waited(self, tool: ToolRef, seconds: float) -> Awaitable[None] | None:
        return self._notify("centralmcp_rate_token_waited", (tool, seconds))

    def batch_item_completed(self, item: Mapping[str, Any], seconds: float) -> Awaitable[None] | None:
        return self._notify("centralmcp_batch_item_completed", (item, seconds))

    def batch_completed(self, response: Mapping[str, Any], seconds: float) -> Awaitable[None] | None:
        return self._notify("centralmcp_batch_completed", (response, seconds))

    def batch_cancelled(self, seconds: float) -> Awaitable[None] | None:
        return self._notify("centralmcp_batch_cancelled", (seconds,))

    def _notify(
        self, hook: str, args: tuple[Any, ...], heard: Callable[[Impl, Any], None] | None = None
    ) -> Awaitable[None] | None:
        """Tell each observer in turn, handing each answer to ``heard``; from the first that answers
        an awaitable on, the rest in a coroutine."""
        impls = self._plans[hook] or ()
        for position, impl in enumerate(impls):
            try:
                answer = _call(impl, args)
            except Exception:
                _observer_failed(hook, impl)
                continue
            if is_awaitable(answer):
                return _notify_rest(hook, args, impl, answer, impls[position + 1 :], heard)
            if heard is not None:
                heard(impl, answer)
        return None


def _without_observer(plans: Mapping[str, tuple[Impl, ...] | None], plugin: str) -> dict[str, Any]:
    """``plans`` with ``plugin`` no longer told what follows ``centralmcp_batch_started``."""
    return {
        name: tuple(i for i in impls if i[2] != plugin) if name in _AFTER_START and impls else impls
        for name, impls in plans.items()
    }


def _is_plain(hookimpl: Any) -> bool:
    """An implementation that answers: neither kind of wrapper."""
    return not (hookimpl.wrapper or hookimpl.hookwrapper)


def _has_plain(hookimpls: Sequence[Any]) -> bool:
    return any(map(_is_plain, hookimpls))


def _sole(impls: tuple[Impl, ...] | None) -> Callable[..., Any] | None:
    """The implementation itself, when it is the hook's only one and takes every argument in order."""
    return impls[0][0] if impls is not None and len(impls) == 1 and impls[0][1] is None else None


def _first_refusal(answers: Sequence[Any]) -> str | None:
    for answer in answers:
        if answer is not None:
            return answer if isinstance(answer, str) else f"refused by the read gate ({type(answer).__name__})"
    return None


async def _gate_awaiting(tool: ToolRef, answers: Sequence[Any]) -> str | None:
    said = []
    for answer in answers:  # await every answer, so no coroutine is left unawaited
        try:
            said.append((await answer) if is_awaitable(answer) else answer)
        except Exception as exc:
            said.append(_gate_failed(tool, exc))
    return _first_refusal(said)


def token_failed(tool: ToolRef | None, plugin: str | None = None) -> None:
    """A limiter failed for ``tool``: logged, and the call goes on (a broken limiter never blocks a read)."""
    of = "" if plugin is None else f" of plugin {plugin!r}"
    called = "a call" if tool is None else repr(tool.name)
    log.warning("centralmcp_acquire_rate_token%s failed for %s; proceeding", of, called, exc_info=True)


def _guarded(hookimpl: Any) -> Any:
    """A copy of a limiter that logs its raise and answers None, for pluggy to call instead; a wrapper as it is."""
    if not _is_plain(hookimpl):
        return hookimpl
    function, takes_tool = hookimpl.function, "tool" in hookimpl.argnames

    def guarded(*args: Any) -> Any:
        try:
            return function(*args)
        except Exception:
            token_failed(args[hookimpl.argnames.index("tool")] if takes_tool else None, hookimpl.plugin_name)
            return None

    copy = pluggy.HookImpl(hookimpl.plugin, hookimpl.plugin_name, function, hookimpl.opts)
    copy.function = guarded  # type: ignore[misc]  # its argument names stay the limiter's own, as pluggy read them
    return copy


async def _notify_rest(
    hook: str,
    args: tuple[Any, ...],
    impl: Impl,
    answer: Any,
    rest: Sequence[Impl],
    heard: Callable[[Impl, Any], None] | None,
) -> None:
    """``_notify`` from the first observer that answered an awaitable (``answer``) on: each awaited in turn."""
    for current in (impl, *rest):
        try:
            said = answer if current is impl else _call(current, args)
            if is_awaitable(said):
                said = await said
        except Exception:
            _observer_failed(hook, current)
            continue
        if heard is not None:
            heard(current, said)


def _observer_failed(hook: str, impl: Impl) -> None:
    log.warning("observer %s of plugin %r failed; ignored", hook, impl[2], exc_info=True)


class HostHooks:
    """The host's hooks, as the plugin calls them.

    :meth:`calls` gives the current :class:`HookCalls`; the methods here are one-off calls through it.
    """

    def __init__(self, pluginmanager: pluggy.PluginManager) -> None:
        self.pluginmanager = pluginmanager
        self._hook = pluginmanager.hook
        self._plain_exec = getattr(pluginmanager, "_inner_hookexec", None)
        if not _is_pluggys_own_call(self._plain_exec):
            self._plain_exec = None  # already monitored: always go through pluggy
        self._made: tuple[list[Any], HookCalls] | None = None  # (every hook's implementations, what was made of them)

    def calls(self) -> HookCalls:
        """The hooks as they stand now: remade when a plugin came or went, or call monitoring changed."""
        impls = [getattr(self._hook, name).get_hookimpls() for name in SPEC_ARGS]
        impls.append([self._monitored()])
        if self._made is None or self._made[0] != impls:
            self._made = (impls, self._make(impls[:-1]))
        return self._made[1]

    def _monitored(self) -> bool:
        return self._plain_exec is None or getattr(self.pluginmanager, "_inner_hookexec", None) is not self._plain_exec

    def _make(self, impls: list[list[Any]]) -> HookCalls:
        monitored = self._monitored()  # call monitoring or tracing must see every call: pluggy makes them all
        plans: dict[str, tuple[Impl, ...] | None] = {}
        for (name, spec_args), hook_impls in zip(SPEC_ARGS.items(), impls, strict=True):
            plain = [impl for impl in reversed(hook_impls) if _is_plain(impl)]
            if name in OBSERVERS:  # each observer is told on its own, so wrappers have nothing to wrap
                plans[name] = tuple(
                    _through_pluggy_alone(self.pluginmanager, name, spec_args, impl)
                    if monitored or impl.kwargnames
                    else _as_impl(impl, spec_args)
                    for impl in plain
                )
            elif monitored or len(plain) != len(hook_impls) or any(impl.kwargnames for impl in plain):
                # Also an argument with a default: what it is given depends on the pluggy release.
                plans[name] = None
            else:
                plans[name] = tuple(_as_impl(impl, spec_args) for impl in plain)
        return HookCalls(self.pluginmanager, plans)

    async def find_tool(self, name: str) -> ToolRef | None:
        return await await_me_maybe(self.calls().find_tool(name))  # type: ignore[no-any-return]

    async def read_gate(self, tool: ToolRef) -> str | None:
        return await await_me_maybe(self.calls().read_gate(tool))  # type: ignore[no-any-return]

    async def resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> Any:
        return await await_me_maybe(self.calls().resume_cursor(tool, arguments, cursor))

    async def acquire_rate_token(self, tool: ToolRef) -> None:
        for wait in self.calls().acquire_rate_token(tool):
            try:
                await wait
            except Exception:
                token_failed(tool)

    async def dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        return await await_me_maybe(self.calls().dispatch_read(tool, arguments, resume, max_bytes, context))

    async def batch_started(self, total: int) -> None:
        await await_me_maybe(self.calls().for_batch().batch_started(total))

    async def rate_token_waited(self, tool: ToolRef, seconds: float) -> None:
        await await_me_maybe(self.calls().rate_token_waited(tool, seconds))

    async def batch_item_completed(self, item: Mapping[str, Any], seconds: float) -> None:
        await await_me_maybe(self.calls().batch_item_completed(item, seconds))

    async def batch_completed(self, response: Mapping[str, Any], seconds: float) -> None:
        await await_me_maybe(self.calls().batch_completed(response, seconds))

    async def batch_cancelled(self, seconds: float) -> None:
        await await_me_maybe(self.calls().batch_cancelled(seconds))
