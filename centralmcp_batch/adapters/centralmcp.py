"""Host hooks over CentralMCP's tool router module (``mcp_servers/tool_router.py``).

The router module is passed in, never imported here. Its own parts do the work: the catalog
is its loaded backend index, the gate its readOnlyHint test with its refusal text, cursors its
HMAC continuation cursors, the rate its dispatch rate gate (a batch books the account-wide
tokens at once, see ``centralmcp_rate``), dispatch its backends' tool managers and its response
bounding. A router adopts the plugin with :func:`adopt`::

    from centralmcp_batch.adapters.centralmcp import adopt
    adopt(importlib.import_module(__name__))  # the router module itself
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import pluggy
import pydantic

from .. import _compat, budget, hosting, models, settings, validation
from ..batch_tool import TOOL_NAME
from ..errors import HostContractError, InvalidCursor, text_of
from ..hookspecs import hookimpl
from ..models import CallContext, ToolRef
from ..ratelimit import RateLimiter
from .backend_context import entry_context
from .centralmcp_rate import (
    CentralMCPRateBooking,
    CentralMCPRateGate,
    account_limiter,
    gate_published_backend_tools,
    has_rate_gate,
    install_shared_rate_gate,
    report_coverage,
)

log = logging.getLogger(__name__)

NOT_READ_ONLY = (
    "Tool '{name}' is not read-only. Use invoke_tool only after explicit user intent for write/destructive actions."
)


class CentralMCPHooks:
    """Catalog, gate, cursors and dispatch of one CentralMCP router module."""

    def __init__(self, router: ModuleType) -> None:
        self.router = router
        # Routers before the batch era bound at their own byte budget only.
        self._bounds_per_call = "max_bytes" in inspect.signature(router._bound_router_response).parameters
        self._refs: dict[str, tuple[Any, Any, ToolRef]] = {}  # name -> (tool object, its annotations, the ref)
        # The router's single-read bound as the batch running in this context read it at its start; None
        # outside a batch. Per instance, as two routers in one process have budgets of their own.
        self._batch_read_bytes: ContextVar[int | None] = ContextVar(
            f"centralmcp_adapter_read_bytes_{id(self)}", default=None
        )

    def _backend_tool(self, name: str) -> Any:
        self.router._load_all_backends()
        return self.router._tool_index.get(name)

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> ToolRef | None:
        tool = self._backend_tool(name)
        if tool is None:
            return None
        server = self.router._tool_backend_names.get(name)
        # Made once per tool object, annotations object and server: dumping the annotations was a tenth
        # of an entry's own cost. A reloaded catalog has new objects, so it is never served a stale one.
        made = self._refs.get(name)
        if made is not None and made[0] is tool and made[1] is tool.annotations and made[2].server == server:
            return made[2]
        ref = ToolRef(name, server, _compat.annotations_dict(tool.annotations))
        self._refs[name] = (tool, tool.annotations, ref)
        return ref

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> str | None:
        # The router's own tool object decides, as invoke_read_tool does: readOnlyHint and nothing else,
        # by the router's own test where it has one.
        backend_tool = self._backend_tool(tool.name)
        return None if self._is_read_only(backend_tool) else NOT_READ_ONLY.format(name=tool.name)

    def _is_read_only(self, backend_tool: Any) -> bool:
        own_test = getattr(self.router, "_is_read_only_tool", None)
        if callable(own_test):
            return bool(own_test(backend_tool))
        return bool(_compat.annotations_dict(getattr(backend_tool, "annotations", None)).get("readOnlyHint"))

    @hookimpl
    def centralmcp_resume_cursor(self, tool: ToolRef, arguments: Mapping[str, Any], cursor: str) -> int:
        canonical = self.router._strip_null_arguments(dict(arguments))
        try:
            offset: int = self.router._decode_and_verify_continuation_cursor(
                cursor, name=tool.name, arguments=canonical
            )
            return offset
        except self.router.CursorError as exc:
            raise InvalidCursor(text_of(exc)) from None

    @hookimpl
    async def centralmcp_dispatch_read(
        self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext
    ) -> Any:
        self.router._load_all_backends()
        backend = self.router._tool_servers.get(tool.name)
        if backend is None:
            return {
                "error": f"Unknown tool '{tool.name}'. Use find_tool to discover.",
                "tool": tool.name,
                "status": "unknown_tool",
            }
        args = self.router._strip_null_arguments(arguments)  # a new dict: what the backend is given
        # invoke_read_tool forwards its own Context; an entry's backend gets one of its own, made from the
        # batch's, so that nothing it sends goes out as the batch's (see backend_context).
        request = (
            entry_context(context.request, context.index or 0, tool.name, args) if context.in_batch else context.request
        )
        try:
            result = await _compat.call_manager_tool(backend._tool_manager, tool.name, args, context=request)
        except Exception as e:
            return {"error": _error_text(e, functools.partial(self._backend_tool, tool.name), args)}
        limit = self._entry_limit(max_bytes, context)
        answer = self._bound(result, limit, resume or 0, tool.name, args)
        if _clipped(answer):  # a page, or a preview of the text
            bound = functools.partial(self._bound, offset=resume or 0, name=tool.name, args=args)
            answer = self._refit(answer, result, bound, limit, max_bytes)
        return answer

    # The three observer hooks take every argument of their specs, unused: the facade calls them directly.
    @hookimpl
    def centralmcp_batch_started(self, total: int) -> None:
        # The router reads its environment each time it is asked (2 us): asked once here, in the batch's own
        # task before any entry starts, it holds for every entry of this batch (its workers' tasks copy this
        # context) and no other; the next batch asks again, so a change applies to it. A batch of one
        # leaves it to its entry: still one question, and none for an entry that never dispatches.
        try:
            self._batch_read_bytes.set(self._single_read_bytes() if total > 1 else None)
        except Exception:  # each entry asks again, and fails there as a single read would
            self._batch_read_bytes.set(None)

    @hookimpl
    def centralmcp_batch_completed(self, response: Mapping[str, Any], seconds: float) -> None:
        self._batch_read_bytes.set(None)  # a read after the batch, in the task that ran it, asks the router

    @hookimpl
    def centralmcp_batch_cancelled(self, seconds: float) -> None:
        self._batch_read_bytes.set(None)

    def _entry_limit(self, share: int, context: CallContext) -> int:
        """The bytes an entry is bounded at: its share, but never more than a single read of the router gets.

        The router bounds ``invoke_read_tool`` at its own byte budget (``CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES``);
        a share above that (a batch of one, or of a few under a lowered budget) would let an entry
        answer more than the same read alone may. A batch entry takes the bound its batch read as it
        started (see ``centralmcp_batch_started``); any other call asks the router.
        """
        single_read_bytes = self._batch_read_bytes.get() if context.in_batch else None
        if single_read_bytes is None:
            single_read_bytes = self._single_read_bytes()
        return min(share, single_read_bytes)

    def _single_read_bytes(self) -> int:
        """The router's bound on one ``invoke_read_tool`` now; no bound for a router that has none."""
        budget_bytes = getattr(self.router, "_response_budget_bytes", None)
        return int(budget_bytes()) if callable(budget_bytes) else sys.maxsize

    def _bound(self, value: Any, limit: int, offset: int, name: str, args: dict[str, Any]) -> Any:
        """The router's own bounding of ``value``, to ``limit`` bytes where the router takes a limit per call."""
        bounds = {"max_bytes": limit} if self._bounds_per_call else {}
        return self.router._bound_router_response(
            value, offset=offset, enable_cursor=True, tool_name=name, tool_arguments=args, **bounds
        )

    def _refit(self, answer: Any, result: Any, bound: Callable[[Any, int], Any], limit: int, max_bytes: int) -> Any:
        """A clipped answer with no secret left in a preview, and within the entry's share (see ``_within_share``)."""
        if _is_preview(answer):
            # A preview is the result's JSON text, cut: the router's secret tokenizer reads keys and finds none
            # in it. A batch entry's share is small enough that previews are common, so this one is made of
            # the result with its secret-named keys' values blanked out.
            result = without_secrets(result)
            answer = bound(result, limit)
        if self._bounds_per_call:
            answer = _within_share(answer, functools.partial(bound, result), max_bytes)
        return answer


def _error_text(exc: Exception, find_backend_tool: Callable[[], Any], arguments: Mapping[str, Any]) -> str:
    """``Type: message``; a message about invalid arguments is retold as the reference router retells one
    (``validation``): each field of the tool's own schema and pydantic's fixed message, never the value
    given, a key the caller chose or a custom validator's text (the SDK's own text quotes values, and a
    value may be a secret the tokenizer put back). The tool is found only for such a message. Any other text has
    the call's own argument values cut out (``validation.redacted``)."""
    invalid = _validation_error(exc)
    if invalid is None:
        return validation.redacted(f"{type(exc).__name__}: {text_of(exc)}", arguments)
    details = invalid.errors(include_url=False, include_input=False, include_context=False)
    fields = validation.field_names(getattr(find_backend_tool(), "parameters", None) or {})
    return f"{type(exc).__name__}: invalid arguments: {validation.details_text(details, fields)}"


def _validation_error(exc: BaseException) -> pydantic.ValidationError | None:
    """The pydantic ValidationError ``exc`` is, or was raised from (the SDK wraps it in its ToolError)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None or isinstance(seen, pydantic.ValidationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _clipped(answer: Any) -> bool:
    """Whether the router clipped the answer: its bounds marker is on it."""
    return type(answer) is dict and "_response_bounds" in answer


# The router's answer for a result too large for its share, with no list to page through: its JSON
# text, cut to the share, under a "_response_bounds" marker.
def _is_preview(answer: Any) -> bool:
    return _clipped(answer) and isinstance(answer.get("preview"), str)


# How many times a clipped answer over its share is bounded again, each time to a share cut by how
# far over it came: the router cuts a preview's text to the share, and the marker and the escaping
# of the text inside JSON come on top (a third more for text full of quotes).
SHARE_TRIES = 3


def _within_share(answer: Any, bound_to: Callable[[int], Any], max_bytes: int) -> Any:
    """``answer``, or the router's bounding of the same result to a smaller limit, so that it fits
    ``max_bytes`` as the batch counts it: a batch whose results each fill their share loses none."""
    limit = max_bytes
    for _ in range(SHARE_TRIES):
        if not _clipped(answer):
            return answer  # the router found it within the limit
        try:
            size = budget.size(answer)
        except (TypeError, ValueError, RecursionError):
            return answer  # not plain JSON: the batch writes it as JSON and measures it then
        if size <= max_bytes:
            return answer
        limit = max(1, limit * max_bytes // size - 1)
        answer = bound_to(limit)
    return answer


# The keys CentralMCP treats as holding secrets (its tokenizer's and its redaction's rule): the key in
# snake_case is one of these, or ends with one of the suffixes.
SECRET_KEYS = frozenset({"auth", "authorization", "key", "community_string", "snmp_read", "snmp_write"})
SECRET_KEY_ENDINGS = (
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
BLANKED = "******"


def is_secret_key(key: Any) -> bool:
    words = _snake_case(str(key))
    return words in SECRET_KEYS or words.endswith(SECRET_KEY_ENDINGS)


def _snake_case(key: str) -> str:
    """``signingSecret`` and ``Signing-Secret`` as ``signing_secret``: a word break before each capital
    that follows a small letter or a digit, all in lower case, every run of other characters one ``_``."""
    broken = "".join(
        f"_{char}" if char in _CAPITALS and previous in _SMALL_OR_DIGIT else char
        for previous, char in zip(" " + key, key, strict=False)
    )
    words = "".join(char if char in _SMALL_OR_DIGIT else " " for char in broken.strip().lower())
    return "_".join(words.split())


_CAPITALS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SMALL_OR_DIGIT = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def without_secrets(value: Any) -> Any:
    """``value`` with every secret-named key's value blanked out, at any depth."""
    if isinstance(value, dict):
        return {key: BLANKED if is_secret_key(key) else without_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [without_secrets(item) for item in value]
    return value


def host_plugins(router: ModuleType) -> list[object]:
    """The host hook implementations over ``router``; no rate hooks when it has no rate gate.

    The booking and the per-call token are two plugins: the batch asks no plugin that books for a token.
    """
    plugins: list[object] = [CentralMCPHooks(router)]
    if has_rate_gate(router):
        plugins += [CentralMCPRateBooking(router), CentralMCPRateGate(router)]
    return plugins


def adopt(router: ModuleType, *, replace: bool = True, rate_limiter: RateLimiter | None = None) -> pluggy.PluginManager:
    """Publish ``invoke_read_tool_batch`` on ``router.mcp`` over the router's own parts.

    The same call serves every router mode. In minimal mode the router has no batch and this
    adds one: calling ``adopt`` is the explicit choice. In default mode the router defines its
    own batch; this tool takes its place (logged), so one process never runs two batches.
    The module's own ``invoke_read_tool_batch`` then calls this tool too, for callers in the
    router's process; in minimal mode the module keeps having none, as its own tests expect.
    ``replace=False`` refuses a router that has its own batch. A router with a dispatch rate
    gate gets the account-wide limiter (``rate_limiter``, or the one the environment names)
    in it, so its single reads and every batch entry draw from one shared bucket (a batch books
    its entries' tokens at once); so do the backend tools it publishes under their own names in
    direct mode (see ``centralmcp_rate``).
    """
    server = router.mcp
    own_batch = None
    if _compat.has_tool(server, TOOL_NAME):
        if not replace:
            raise HostContractError(
                f"router {router.__name__!r} already publishes {TOOL_NAME!r} and replace=False was passed"
            )
        log.info("router %r: centralmcp-batch's %s replaces the router's own", router.__name__, TOOL_NAME)
        own_batch = _compat.remove_tool(server, TOOL_NAME)
    limiter = account_limiter(router, rate_limiter)
    gated = has_rate_gate(router)
    if gated:
        install_shared_rate_gate(router, limiter)
    report_coverage(router, limiter, gated, gate_published_backend_tools(router, limiter))
    try:
        with settings.adopted_explicitly():
            pm = hosting.install(server, *host_plugins(router))
    except Exception:
        # A broken plugin stops the adoption: a router that starts anyway keeps the batch it had.
        _compat.remove_tool(server, TOOL_NAME)
        if own_batch is not None:
            _compat.put_tool(server, TOOL_NAME, own_batch)
        raise
    _compat.publish_output_schema(server, TOOL_NAME, adopted_output_schema())
    if hasattr(router, TOOL_NAME):  # default mode: the router's own function name now calls this tool
        setattr(router, TOOL_NAME, in_process_batch(_compat.tool_function(server, TOOL_NAME)))
    return pm


def in_process_batch(tool: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The tool as the router module's own ``invoke_read_tool_batch(ctx, calls)`` is called in process.

    Callers in the router's process (its tests, its wrappers) may pass the router's pydantic
    ``BatchCall`` objects, as its own batch accepts; they become the JSON objects a client
    would send. Over MCP entries are always JSON, so the published tool never sees them.
    """

    async def invoke_read_tool_batch(ctx: Any, calls: Any = None) -> dict[str, Any]:
        if isinstance(calls, list):
            calls = [_as_json_object(call) for call in calls]
        return await tool(ctx, calls)

    return invoke_read_tool_batch


def _as_json_object(call: Any) -> Any:
    dump = getattr(call, "model_dump", None)
    return dump(mode="json") if callable(dump) and not isinstance(call, Mapping) else call


ENVELOPED_REJECTION = (
    " Behind the router's ResponseEnvelopeMiddleware a rejected batch arrives enveloped (ok false, status, data "
    "holding the rejection, message, tool); this schema admits that as it is."
)


def adopted_output_schema() -> dict[str, Any]:
    """The plugin's output schema, saying what the router's envelope middleware makes of a rejection.

    Clients validate structured content against the published schema, so an enveloped rejection
    must pass it: it does, as the flat schema requires only a boolean ``ok`` and allows other keys.
    A branch of its own for the envelope (an ``anyOf``) cost SDK 1.x 0.5 ms of every check.
    """
    schema = models.output_schema()
    schema["description"] += ENVELOPED_REJECTION
    return schema
