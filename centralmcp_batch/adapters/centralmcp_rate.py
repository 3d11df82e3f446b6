"""The account-wide limiter in CentralMCP's router: every backend call the router makes draws one token.

The router charges its backend calls at its dispatch rate gate (``set_dispatch_rate_gate``), which
``invoke_read_tool``, ``invoke_tool`` and its convenience wrappers await once per backend call. The
adapter puts the account-wide limiter in that gate, in front of the gate the router installs at
start-up (its per-process bucket), so both limits hold. A batch books its calls' account-wide tokens
at once on that same limiter (``centralmcp_reserve_rate_tokens``: one store round trip per batch, a
call the rate cannot start in time answered at once, the slots a cancelled batch did not reach given
back), and each of its backend calls then awaits the router's own gate alone
(``centralmcp_acquire_rate_token``): two plugins, as the batch asks no plugin that books for a token.

In direct mode the router also publishes every backend tool under its own name, and a client's call
to one goes from the router's tool manager straight to the backend's tool, past that gate: the
router's ``RateLimitMiddleware`` charges it one token of its per-process bucket, no more, so three
routers ran at three times the account's rate. The adapter wraps the router's tool manager, so that
a call of a backend tool published there draws one account-wide token as well. The router's own
tools are told apart by identity: a published backend tool is the very object the router's catalog
holds, where a wrapper of the same name (``list_sites``) is the router's own, which draws at the gate.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any

from ..hookspecs import hookimpl
from ..models import RateBooking, ToolRef
from ..ratelimit import RateLimiter, limiter_from_env

log = logging.getLogger("centralmcp_batch.adapters.centralmcp")


class CentralMCPRateBooking:
    """A batch's account-wide tokens, booked at once on the limiter in the router's dispatch rate gate."""

    def __init__(self, router: ModuleType) -> None:
        self.router = router

    @hookimpl
    async def centralmcp_reserve_rate_tokens(self, tools: Sequence[ToolRef], within: float) -> RateBooking | None:
        gate = shared_gate(self.router)
        if gate is None:  # a gate the adapter did not install: each call draws the whole of it (CentralMCPRateGate)
            return None
        return await gate.limiter.reserve(len(tools), within)


class CentralMCPRateGate:
    """What a batch's backend call awaits beside its booked token: the router's own gate, once per call.

    The account-wide token was booked with the batch (``CentralMCPRateBooking``), so only the gate the
    router installed behind it is awaited here. Where the router's gate is not the adapter's (the router
    was not adopted, or its gate was set by hand), nothing was booked and the whole gate is awaited, as
    the router's single reads await it.
    """

    def __init__(self, router: ModuleType) -> None:
        self.router = router

    @hookimpl
    def centralmcp_acquire_rate_token(self, tool: ToolRef) -> Awaitable[None] | None:
        gate = shared_gate(self.router)
        if gate is None:
            return self.router._await_dispatch_rate_gate()  # type: ignore[no-any-return] # the router's own coroutine
        return None if gate.own is None else _await_own_gate(self.router, gate.own)


def shared_gate(router: ModuleType) -> SharedRateGate | None:
    """The router's dispatch rate gate when it is the adapter's (the account-wide limiter in front)."""
    gate = getattr(router, "_dispatch_rate_gate", None)
    return gate if isinstance(gate, SharedRateGate) else None


async def _await_own_gate(router: ModuleType, own: Callable[[], Awaitable[None]]) -> None:
    try:
        await own()
    except Exception:  # as the router forgives its gate: rate limiting must never block a call outright
        log.warning("router %r: dispatch rate gate failed; proceeding", router.__name__, exc_info=True)


class SharedRateGate:
    """The router's dispatch rate gate: the account-wide limiter first, then the router's own gate, if any.

    Both limits hold: the account's across every process, and whatever the router's own bucket enforces.
    """

    def __init__(self, limiter: RateLimiter, own: Callable[[], Awaitable[None]] | None) -> None:
        self.limiter, self.own = limiter, own

    async def __call__(self) -> None:
        await self.limiter.acquire()
        if self.own is not None:
            await self.own()


def has_rate_gate(router: ModuleType) -> bool:
    return callable(getattr(router, "set_dispatch_rate_gate", None)) and callable(
        getattr(router, "_await_dispatch_rate_gate", None)
    )


def account_limiter(router: ModuleType, given: RateLimiter | None) -> RateLimiter:
    """The limiter a router adopted before keeps; else ``given``, else the one the environment names."""
    current = getattr(router, "_dispatch_rate_gate", None)
    if isinstance(current, SharedRateGate):
        return current.limiter
    return given or limiter_from_env()


def install_shared_rate_gate(router: ModuleType, limiter: RateLimiter) -> None:
    """Make ``limiter`` the router's dispatch rate gate, also after the router installs its own at start-up."""
    current = getattr(router, "_dispatch_rate_gate", None)
    if isinstance(current, SharedRateGate):  # adopted before: keep its limiter and its setter
        return
    install = router.set_dispatch_rate_gate

    def set_dispatch_rate_gate(gate: Callable[[], Awaitable[None]] | None) -> None:
        install(SharedRateGate(limiter, gate))

    set_dispatch_rate_gate(current)
    # The router's start-up calls it by this name; ModuleType declares no such attribute.
    router.set_dispatch_rate_gate = set_dispatch_rate_gate  # type: ignore[attr-defined]


# The tool managers whose calls already draw for published backend tools: adopting twice draws once.
_DRAWING: weakref.WeakSet[Any] = weakref.WeakSet()


def gate_published_backend_tools(router: ModuleType, limiter: RateLimiter) -> bool:
    """Make each call of a backend tool the router publishes under its own name draw one token of ``limiter``.

    The router's tool manager is wrapped as the router's own middleware installer wraps it, so its
    chain, installed at start-up after the adoption, runs first. False when the router has no tool
    manager to wrap.
    """
    manager = getattr(router.mcp, "_tool_manager", None)
    call_tool = getattr(manager, "call_tool", None)
    if manager is None or not callable(call_tool) or not callable(getattr(manager, "get_tool", None)):
        return False
    if manager in _DRAWING:
        return True

    async def call_tool_drawing_for_backend_tools(name: str, arguments: Any, *args: Any, **kwargs: Any) -> Any:
        if is_published_backend_tool(router, manager, name):
            await _draw(limiter)
        return await call_tool(name, arguments, *args, **kwargs)

    manager.call_tool = call_tool_drawing_for_backend_tools
    _DRAWING.add(manager)
    return True


def is_published_backend_tool(router: ModuleType, manager: Any, name: str) -> bool:
    """Whether ``name`` on the router's tool manager is a backend's own tool (direct mode), not the router's."""
    backend_tool = getattr(router, "_tool_index", {}).get(name)
    return backend_tool is not None and manager.get_tool(name) is backend_tool


async def _draw(limiter: RateLimiter) -> None:
    try:
        await limiter.acquire()
    except Exception:  # as the router's own gate: a broken limiter must never block a call outright
        log.warning("account-wide rate limiter failed; proceeding", exc_info=True)


def published_backend_tools(router: ModuleType) -> list[str]:
    """The backend tools the router publishes under their own names now (direct mode; none in the others)."""
    manager = router.mcp._tool_manager
    return sorted(
        name for name in getattr(router, "_tool_index", {}) if is_published_backend_tool(router, manager, name)
    )


GATE_DRAWS = "invoke_read_tool, invoke_tool and the router's wrappers (its dispatch rate gate)"


def report_coverage(router: ModuleType, limiter: RateLimiter, gated: bool, drawing: bool) -> None:
    """Say at start-up what draws from the account-wide limiter, and which paths stay outside it."""
    drawn = [GATE_DRAWS, "batch entries (booked a batch at a time)"] if gated else []
    direct = published_backend_tools(router) if drawing else []
    if direct:  # direct mode; a tool published later draws as well
        drawn.append(f"the {len(direct)} backend tools published under their own names")
    log.info(
        "router %r: account-wide rate %g/s, burst %d, key %r in %s, drawn by %s",
        router.__name__,
        limiter.rate,
        limiter.burst,
        limiter.key,
        limiter.store.url,
        "; ".join(drawn) or "nothing",
    )
    if not gated:
        log.warning(
            "router %r has no set_dispatch_rate_gate: invoke_read_tool, invoke_tool and its wrappers draw no "
            "account-wide token, and batch entries no token of their own (its RateLimitMiddleware charges one per "
            "inbound call, so one per batch, in this process's bucket only)",
            router.__name__,
        )
    if not drawing:
        log.warning(
            "router %r has no tool manager to wrap: backend tools it publishes under their own names (direct mode) "
            "draw no account-wide token",
            router.__name__,
        )
