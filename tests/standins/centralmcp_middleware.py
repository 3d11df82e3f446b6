"""Stand-in for CentralMCP's ``mcp_servers/_middleware``: the installer and four middlewares.

Modelled on what CentralMCP's router does with them, as observed from outside; written here,
none of its code is copied.

- ``install_middleware(server, middlewares)`` replaces ``server._tool_manager.call_tool``. Each
  call runs every ``before_call(name, arguments)`` (a returned dict replaces the arguments),
  calls the original with ``convert_result=False``, hands the raw return value to every
  ``after_call(name, arguments, result)`` (a returned value replaces it), and only then, when
  the caller asked for conversion, converts with ``tool.fn_metadata.convert_result``. When the
  tool raises anything, a cancellation included, each ``on_error(name, arguments, exc)`` runs
  until one returns a value, which then goes through ``after_call`` as a result would; with
  none, the exception goes on. A hook that declares ``context`` gets the call's Context; a hook
  that raises is logged and skipped.
- ``SecretTokenizeMiddleware`` (on with ``CENTRALMCP_TOKENIZE_SECRETS=1``): string values under
  secret-named keys in a result become ``cmcp_secret_<32 hex>`` tokens, kept per client session;
  a token found anywhere in a later call's arguments is swapped back for its value. (The
  router runs on SDK 1.x; on 2.x, where a session object lasts one request, one scope is kept.)
- ``RateLimitMiddleware``: the router's per-process token bucket, its dispatch rate gate too; in the
  chain it charges one token per inbound call, except for the tools it is told are exempt (the
  dispatching tools and wrappers, which draw at the gate per backend call).
- ``NullStripMiddleware``: drops the call's top-level arguments whose value is None (nested ones
  stay), so a ``"calls": null`` reaches the tool, and the audit, as no ``calls`` at all.
- ``ResponseEnvelopeMiddleware``: a dict result with an ``error`` key, a failure ``status`` (by
  name, or a number of 400 and up, also as digits) or a non-empty ``errors`` list is wrapped as
  ``{ok: false, status, data, message, tool, platform}``; others pass untouched.
- ``AuditLogMiddleware``: one record per call with the outcome: ``error`` for a dict whose ``ok``
  is false, that has an ``error`` or a non-empty ``errors`` list, a failure ``status`` by name,
  else ``success``; for a call that raised (its ``on_error``), ``cancelled``, ``timeout`` or
  ``exception``, with the exception's type.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
import secrets
import time
import weakref
from typing import Any

from centralmcp_batch import _compat

log = logging.getLogger(__name__)

TOKEN_PREFIX = "cmcp_secret_"
_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + "[0-9a-f]{32}")
_SECRET_NAMES = {"auth", "authorization", "key", "community_string", "snmp_read", "snmp_write"}
_SECRET_ENDINGS = (
    "api_key",
    "apikey",
    "credential",
    "credentials",
    "_key",
    "passphrase",
    "password",
    "psk",
    "secret",
    "token",
)
_FAILURE_STATUS = {
    "blocked": 403,
    "forbidden": 403,
    "not_found": 404,
    "cancelled": 409,
    "declined": 409,
    "error": 500,
    "failed": 500,
}


# -- the installer ------------------------------------------------------------------------


async def _call_hook(hook: Any, context: Any, *args: Any) -> Any:
    extra = {"context": context} if "context" in inspect.signature(hook).parameters else {}
    value = hook(*args, **extra)
    return await value if inspect.isawaitable(value) else value


async def _answer_of(middleware: Any, hook_name: str, context: Any, *args: Any) -> Any:
    """What the middleware's hook answers; None when it has no such hook or the hook raised (logged)."""
    hook = getattr(middleware, hook_name, None)
    if hook is None:
        return None
    try:
        return await _call_hook(hook, context, *args)
    except Exception as exc:  # fail open, as the router's installer does
        log.warning("middleware %s.%s failed: %s", type(middleware).__name__, hook_name, exc)
        return None


async def _run_hooks(middlewares: list[Any], hook_name: str, context: Any, name: str, *args: Any) -> Any:
    """Every middleware's hook in order; each non-None answer replaces the last argument."""
    *fixed, current = args
    for middleware in middlewares:
        replacement = await _answer_of(middleware, hook_name, context, name, *fixed, current)
        if replacement is not None:
            current = replacement
    return current


async def _substitute(middlewares: list[Any], context: Any, name: str, args: dict[str, Any], exc: BaseException) -> Any:
    """The first ``on_error`` answer that is not None: what the call answers instead of raising."""
    for middleware in middlewares:
        substitute = await _answer_of(middleware, "on_error", context, name, args, exc)
        if substitute is not None:
            return substitute
    return None


def install_middleware(server: Any, middlewares: list[Any]) -> None:
    manager = server._tool_manager
    original = manager.call_tool

    async def call_tool(name: str, arguments: dict[str, Any], context: Any = None, convert_result: bool = False) -> Any:
        args = await _run_hooks(middlewares, "before_call", context, name, dict(arguments or {}))
        try:
            raw = await original(name, args, context=context, convert_result=False)
        except BaseException as exc:  # a cancelled call too: the router's audit records it
            raw = await _substitute(middlewares, context, name, args, exc)
            if raw is None:
                raise
        result = await _run_hooks(middlewares, "after_call", context, name, args, raw)
        if not convert_result:
            return result
        return manager.get_tool(name).fn_metadata.convert_result(result)

    manager.call_tool = call_tool


# -- the per-process rate bucket ---------------------------------------------------------------


class RateLimitMiddleware:
    """The router's per-process token bucket (8 calls a second there, with a burst of ``max(2, rate)``).

    Its ``acquire`` is the dispatch rate gate; in the chain it charges every inbound call except the
    tools named exempt, which draw at the gate once per backend call.
    """

    def __init__(self, rate: float = 8.0, exempt_names: frozenset[str] = frozenset()) -> None:
        self.rate, self.burst = rate, max(2.0, float(int(rate)))
        self.exempt_names = exempt_names
        self._tokens, self._refilled = self.burst, time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        while True:
            async with self._lock:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rate)
                self._refilled = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                short = (1.0 - self._tokens) / self.rate
            await asyncio.sleep(short)

    async def before_call(self, name: str, arguments: dict[str, Any]) -> None:
        if name not in self.exempt_names:
            await self.acquire()


# -- null arguments -------------------------------------------------------------------------


class NullStripMiddleware:
    def before_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        kept = {key: value for key, value in arguments.items() if value is not None}
        return kept if len(kept) < len(arguments) else None


# -- secret tokenizing ----------------------------------------------------------------------


def is_secret_name(key: Any) -> bool:
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key).strip()).lower()
    normalized = re.sub(r"[^a-z0-9]+", "_", words).strip("_")
    return normalized in _SECRET_NAMES or normalized.endswith(_SECRET_ENDINGS)


def tokenizing() -> bool:
    return os.environ.get("CENTRALMCP_TOKENIZE_SECRETS", "").strip().lower() in {"1", "true", "yes"}


class SecretTokenizeMiddleware:
    def __init__(self) -> None:
        self._by_session: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
        self._no_session: dict[str, str] = {}

    def vault(self, context: Any) -> dict[str, str]:
        # The router (SDK 1.x) scopes tokens to the client's session object. SDK 2.x hands each
        # request a session object of its own, so there the stand-in keeps one process scope.
        session = getattr(context, "session", None) if _compat.SDK_MAJOR < 2 else None
        if session is None:
            return self._no_session
        return self._by_session.setdefault(session, {})

    def before_call(self, name: str, arguments: dict[str, Any], context: Any = None) -> dict[str, Any] | None:
        return self._resolve(arguments, self.vault(context)) if tokenizing() else None

    def after_call(self, name: str, arguments: dict[str, Any], result: Any, context: Any = None) -> Any:
        return self._tokenize(result, self.vault(context), None) if tokenizing() else None

    def _tokenize(self, value: Any, vault: dict[str, str], key: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._tokenize(v, vault, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._tokenize(v, vault, key) for v in value]
        if isinstance(value, str) and value and value != "******" and key is not None and is_secret_name(key):
            token = TOKEN_PREFIX + secrets.token_hex(16)
            vault[token] = value
            return token
        return value

    def _resolve(self, value: Any, vault: dict[str, str]) -> Any:
        if isinstance(value, dict):
            return {k: self._resolve(v, vault) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._resolve(v, vault) for v in value]
        if isinstance(value, str) and _TOKEN.fullmatch(value.strip()):
            return vault.get(value.strip(), value)
        return value


# -- the failure envelope ---------------------------------------------------------------------


def failure_status(result: dict[str, Any]) -> int | None:
    status = result.get("status")
    code = int(status) if isinstance(status, str) and status.isdigit() else status
    if isinstance(code, int) and code >= 400:
        return code
    if isinstance(status, str) and status.strip().lower() in _FAILURE_STATUS:
        return _FAILURE_STATUS[status.strip().lower()]
    return 500 if "error" in result or _listed_errors(result) else None


def _listed_errors(result: dict[str, Any]) -> list[Any]:
    """The entries of the result's ``errors`` list: a failure the envelope and the audit both see."""
    errors = result.get("errors")
    return errors if isinstance(errors, list) else []


class ResponseEnvelopeMiddleware:
    def after_call(self, name: str, arguments: dict[str, Any], result: Any) -> dict[str, Any] | None:
        if not isinstance(result, dict) or {"ok", "data", "tool"} <= set(result):
            return None
        status = failure_status(result)
        if status is None:
            return None
        message = next((str(result[k]) for k in ("message", "error", "detail") if result.get(k)), None)
        if message is None and _listed_errors(result):
            message = "; ".join(str(error) for error in _listed_errors(result))
        return {"ok": False, "status": status, "data": result, "message": message, "tool": name, "platform": None}


# -- the audit log ------------------------------------------------------------------------------


def classify_outcome(result: Any) -> str:
    if not isinstance(result, dict):
        return "success"
    if result.get("ok") is False or result.get("error") or _listed_errors(result):
        return "error"
    status = str(result.get("status") or "").strip().lower()
    return status if status in _FAILURE_STATUS else "success"


def classify_exception(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "timeout" if isinstance(exc, TimeoutError) else "exception"


class AuditLogMiddleware:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def after_call(self, name: str, arguments: dict[str, Any], result: Any) -> None:
        self._record(name, arguments, classify_outcome(result), None)

    def on_error(self, name: str, arguments: dict[str, Any], exc: BaseException) -> None:
        self._record(name, arguments, classify_exception(exc), type(exc).__name__)

    def _record(self, name: str, arguments: dict[str, Any], outcome: str, error_type: str | None) -> None:
        self.records.append(
            {"tool": name, "argument_keys": sorted(arguments), "outcome": outcome, "error_type": error_type}
        )
