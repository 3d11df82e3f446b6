"""Stand-in for CentralMCP's ``mcp_servers/tool_router.py`` (the CENTRALMCP_-era names).

Small but faithful to what CentralMCP's public docs and code state: the module-level ``mcp``
server, ``_BACKENDS`` and ``_load_all_backends()`` filling ``_tool_index``/``_tool_servers``/
``_tool_backend_names`` from each backend's tool manager, the readOnlyHint gate and its refusal,
HMAC continuation cursors with ``CursorError``, ``_bound_router_response``, the dispatch rate
gate (``set_dispatch_rate_gate``) and the per-process bucket its start-up puts there, a built-in
batch (typed entries, an item and a status per call, the batch's byte budget) and a convenience
wrapper outside minimal mode, and direct mode's backend tools published under their own names.
Written here; none of CentralMCP's code is copied.
"""

import base64
import hashlib
import hmac
import importlib
import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from standins.centralmcp_middleware import RateLimitMiddleware
from standins.centralmcp_shared import DESTRUCTIVE, DIAGNOSTIC, MAX_LIST_LIMIT, READ_ONLY, bound_collection_response

from centralmcp_batch import _compat
from centralmcp_batch._compat import Context

log = logging.getLogger(__name__)

_ROUTER_MODE = os.getenv("CENTRALMCP_ROUTER_MODE", "default").strip().lower()
mcp = _compat.new_server("aruba-tool-router")

_BACKENDS = {"aruba-monitoring": "standins.monitoring_backend", "aruba-config": "standins.config_backend"}
_tool_index: dict[str, Any] = {}  # name -> backend Tool
_tool_servers: dict[str, Any] = {}  # name -> owning backend server (for dispatch)
_tool_backend_names: dict[str, str] = {}  # name -> owning server name


def _load_all_backends() -> None:
    """Import every backend once and index tools by name."""
    if _tool_index:
        return
    for server_name, module_path in _BACKENDS.items():
        mod = importlib.import_module(module_path)
        for name, tool in mod.mcp._tool_manager._tools.items():
            previous = _tool_backend_names.get(name)
            if previous is not None:
                raise RuntimeError(f"duplicate backend tool name {name!r}: {previous!r} and {server_name!r}")
            _tool_index[name] = tool
            _tool_servers[name] = mod.mcp
            _tool_backend_names[name] = server_name


# Attribute reads, as the router's own: its gate runs on every read, and a dump of the annotations
# model would make the stand-in's reads dearer than the real router's.
def _is_read_only_tool(tool: Any) -> bool:
    return bool(_compat.annotation_hint(getattr(tool, "annotations", None), "readOnlyHint"))


def _tool_capability(tool: Any) -> str:
    annotations = getattr(tool, "annotations", None)
    if _compat.annotation_hint(annotations, "readOnlyHint"):
        return "read"
    if _compat.annotation_hint(annotations, "destructiveHint"):
        return "destructive"
    return "diagnostic" if getattr(tool, "annotations", None) == DIAGNOSTIC else "write"


# -- response bounding ------------------------------------------------------------------

_RESPONSE_BUDGET_ITEMS_ENV = "CENTRALMCP_ROUTER_RESPONSE_MAX_ITEMS"
_RESPONSE_BUDGET_BYTES_ENV = "CENTRALMCP_ROUTER_RESPONSE_MAX_BYTES"
_RESPONSE_BUDGET_MIN_BYTES = 1024
_RESPONSE_BUDGET_SHRINK_STEPS = 6


def _env_positive_int(name: str, default: int, *, minimum: int = 1) -> int:
    try:
        value = int(os.getenv(name, "").strip())
    except ValueError:
        return default
    return value if value >= minimum else default


def _response_budget_bytes() -> int:
    """The bytes a single read is bounded at (the router reads its environment on every call)."""
    return _env_positive_int(_RESPONSE_BUDGET_BYTES_ENV, 200_000, minimum=_RESPONSE_BUDGET_MIN_BYTES)


def _json_byte_size(value: Any) -> int | None:
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
    except (TypeError, ValueError):
        return None


def _preview(result: Any, bytes_budget: int, reason: str, item_limit: int | None) -> dict[str, Any]:
    raw = json.dumps(result, ensure_ascii=False, default=str).encode("utf-8")
    marker = {"truncated": True, "reason": "byte_budget", "byte_limit": bytes_budget, "size_bytes": len(raw)}
    if item_limit is not None:
        marker["item_limit"] = item_limit
    marker.update({"resumable": False, "resumable_reason": reason})
    return {"_response_bounds": marker, "preview": raw[:bytes_budget].decode("utf-8", errors="replace")}


def _bound_router_response(
    result: Any,
    *,
    max_items: int | None = None,
    max_bytes: int | None = None,
    offset: int = 0,
    enable_cursor: bool = False,
    tool_name: str | None = None,
    tool_arguments: dict[str, Any] | None = None,
) -> Any:
    if (isinstance(result, dict) and "error" in result) or not isinstance(result, (dict, list)):
        return result
    items_budget = max(
        1, min(max_items or _env_positive_int(_RESPONSE_BUDGET_ITEMS_ENV, MAX_LIST_LIMIT), MAX_LIST_LIMIT)
    )
    bytes_budget = max_bytes or _response_budget_bytes()
    resume_offset = max(0, int(offset or 0))
    data = {"items": result} if isinstance(result, list) else result
    lists = [(len(v), k) for k, v in data.items() if isinstance(v, list) and k != "_pagination"]
    key = max(lists)[1] if lists else None
    remaining = len(data[key]) - resume_offset if key else 0
    item_overflow = key is not None and remaining > items_budget
    byte_overflow = resume_offset == 0 and (_json_byte_size(result) or 0) > bytes_budget
    if not (item_overflow or byte_overflow or (key and resume_offset > 0)):
        return result
    if key is None:
        return _preview(result, bytes_budget, "no_sliceable_collection", None)
    limit, byte_shrunk = items_budget, False
    page = bound_collection_response(data, limit=limit, offset=resume_offset, list_key=key)
    for _ in range(_RESPONSE_BUDGET_SHRINK_STEPS):
        if (_json_byte_size(page) or 0) <= bytes_budget or limit == 1:
            break
        limit, byte_shrunk = max(1, limit // 2), True
        page = bound_collection_response(data, limit=limit, offset=resume_offset, list_key=key)
    if (_json_byte_size(page) or 0) > bytes_budget:
        return _preview(result, bytes_budget, "single_item_exceeds_byte_budget", limit)
    next_offset = resume_offset + len(page[key])
    if not (page["_pagination"]["truncated"] or byte_shrunk):
        return page
    reason = (
        "+".join(r for r, on in (("item_budget", item_overflow), ("byte_budget", byte_shrunk)) if on) or "item_budget"
    )
    clipped = next_offset < len(data[key])
    can_emit_cursor = enable_cursor and clipped and tool_name is not None and tool_arguments is not None
    marker = {
        "truncated": True,
        "reason": reason,
        "byte_limit": bytes_budget,
        "item_limit": limit,
        "resumable": can_emit_cursor,
    }
    page = {**page, "_response_bounds": marker}
    if can_emit_cursor:
        page["next_cursor"] = _encode_continuation_cursor(
            name=tool_name, arguments=tool_arguments, next_offset=next_offset
        )
        page["cursor_expires_in_seconds"] = _cursor_ttl_seconds()
    return page


# -- continuation cursors ---------------------------------------------------------------

_CURSOR_VERSION = 1
_CURSOR_TTL_ENV = "CENTRALMCP_ROUTER_CURSOR_TTL_SECONDS"
_CURSOR_MAX_LENGTH = 512
_CURSOR_HMAC_KEY = secrets.token_bytes(32)


class CursorError(Exception):
    """Raised for any malformed/tampered/expired/mismatched cursor."""


def _cursor_ttl_seconds() -> int:
    return max(30, min(_env_positive_int(_CURSOR_TTL_ENV, 900), 3600))


def _strip_null_arguments(arguments: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (arguments or {}).items() if v is not None}


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _args_digest(arguments: dict[str, Any]) -> str:
    return _digest(json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str))


def _b64u(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(payload: bytes) -> bytes:
    return hmac.new(_CURSOR_HMAC_KEY, payload, hashlib.sha256).digest()[:16]


def _encode_continuation_cursor(*, name: str, arguments: dict[str, Any], next_offset: int) -> str:
    payload = {
        "v": _CURSOR_VERSION,
        "exp": int(time.time()) + _cursor_ttl_seconds(),
        "off": int(next_offset),
        "t": _digest(name),
        "a": _args_digest(arguments),
    }
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return f"{_b64u(raw)}.{_b64u(_sign(raw))}"


def _decode_and_verify_continuation_cursor(cursor: str, *, name: str, arguments: dict[str, Any]) -> int:
    if not isinstance(cursor, str) or not cursor:
        raise CursorError("cursor is missing or malformed")
    if len(cursor) > _CURSOR_MAX_LENGTH:
        raise CursorError("cursor exceeds the maximum allowed length")
    parts = cursor.split(".")
    try:
        if len(parts) != 2:
            raise ValueError
        raw, mac = _unb64u(parts[0]), _unb64u(parts[1])
    except ValueError:
        raise CursorError("cursor is malformed") from None
    if not hmac.compare_digest(mac, _sign(raw)):
        raise CursorError("cursor signature is invalid (tampered, or the server process restarted)")
    try:
        payload = json.loads(raw)
    except ValueError:
        raise CursorError("cursor is malformed") from None
    if not isinstance(payload, dict):
        raise CursorError("cursor is malformed")
    if payload.get("v") != _CURSOR_VERSION:
        raise CursorError("cursor version is unsupported")
    exp, off = payload.get("exp"), payload.get("off")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise CursorError("cursor is malformed")
    if time.time() >= exp:
        raise CursorError("cursor has expired")
    if not isinstance(off, int) or isinstance(off, bool) or off < 0:
        raise CursorError("cursor is malformed")
    if payload.get("t") != _digest(name):
        raise CursorError("cursor does not match the requested tool")
    if payload.get("a") != _args_digest(arguments):
        raise CursorError("cursor does not match the requested arguments")
    return off


# -- the dispatch rate gate -------------------------------------------------------------

_dispatch_rate_gate: Callable[[], Awaitable[None]] | None = None


def set_dispatch_rate_gate(gate: Callable[[], Awaitable[None]] | None) -> None:
    """Install (or clear) the per-backend-call rate gate awaited by dispatch."""
    global _dispatch_rate_gate
    _dispatch_rate_gate = gate


async def _await_dispatch_rate_gate() -> None:
    gate = _dispatch_rate_gate
    if gate is None:
        return
    try:
        await gate()
    except Exception:  # a broken gate must never block dispatch outright
        log.warning("dispatch rate gate failed; proceeding", exc_info=True)


def install_router_rate_gate(rate: float = 8.0) -> RateLimitMiddleware:
    """What the router's ``__main__`` block does for its rate limit: one per-process bucket, drawn per
    backend call at the gate and, once in the middleware chain, per inbound call of any tool that does
    not draw there (its dispatching tools and wrappers are exempt)."""
    bucket = RateLimitMiddleware(rate, _DISPATCHING_TOOLS | frozenset(_WRAPPERS))
    set_dispatch_rate_gate(bucket.acquire)
    return bucket


# -- dispatch and the router's tools ----------------------------------------------------


def _unknown_tool_error(name: str) -> dict[str, Any]:
    return {"error": f"Unknown tool '{name}'. Use find_tool to discover.", "tool": name, "status": "unknown_tool"}


async def _dispatch_tool(
    ctx: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    resume_offset: int = 0,
    enable_cursor: bool = False,
    max_items: int | None = None,
    max_bytes: int | None = None,
) -> Any:
    _load_all_backends()
    backend = _tool_servers.get(name)
    if backend is None:
        return _unknown_tool_error(name)
    args = _strip_null_arguments(arguments)
    await _await_dispatch_rate_gate()
    try:
        result = await backend._tool_manager.call_tool(name, args, context=ctx)
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {e}"}
    cursor_eligible = enable_cursor and _tool_capability(_tool_index[name]) == "read"
    return _bound_router_response(
        result,
        max_items=max_items,
        max_bytes=max_bytes,
        offset=resume_offset,
        enable_cursor=cursor_eligible,
        tool_name=name,
        tool_arguments=args,
    )


async def _dispatch_read_tool(
    ctx: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    cursor: str | None = None,
    *,
    max_items: int | None = None,
    max_bytes: int | None = None,
) -> Any:
    _load_all_backends()
    tool = _tool_index.get(name)
    if tool is None:
        return _unknown_tool_error(name)
    if not _is_read_only_tool(tool):
        return {
            "error": (
                f"Tool '{name}' is not read-only. "
                "Use invoke_tool only after explicit user intent for write/destructive actions."
            ),
            "tool": name,
            "status": "blocked",
        }
    resume_offset = 0
    if cursor is not None:
        try:
            resume_offset = _decode_and_verify_continuation_cursor(
                cursor, name=name, arguments=_strip_null_arguments(arguments)
            )
        except CursorError as exc:
            return {"error": str(exc), "tool": name, "status": "invalid_cursor"}
    return await _dispatch_tool(
        ctx, name, arguments, resume_offset=resume_offset, enable_cursor=True, max_items=max_items, max_bytes=max_bytes
    )


# The router's tools that dispatch to a backend, and its convenience wrappers (below): they draw one token
# per backend call at the dispatch rate gate, so its rate middleware leaves them alone.
_DISPATCHING_TOOLS = frozenset({"invoke_tool", "invoke_read_tool", "invoke_read_tool_batch"})
_WRAPPERS: set[str] = set()


@mcp.tool(annotations=READ_ONLY)
def find_tool(query: str, top_k: int = 5) -> list[dict[str, Any]]:
    """Find backend tools by keyword."""
    _load_all_backends()
    words = {w for w in query.lower().split() if len(w) >= 3}
    hits = [name for name in sorted(_tool_index) if words & set(name.split("_"))]
    return [
        {"name": n, "server": _tool_backend_names[n], "capability": _tool_capability(_tool_index[n])}
        for n in hits[: max(1, min(top_k, 10))]
    ]


@mcp.tool(annotations=READ_ONLY)
async def invoke_read_tool(
    ctx: Context, name: str, arguments: dict[str, Any] | None = None, cursor: str | None = None
) -> Any:
    """Call a read-only tool by name (from find_tool)."""
    return await _dispatch_read_tool(ctx, name, arguments, cursor)


@mcp.tool(annotations=DESTRUCTIVE)
async def invoke_tool(ctx: Context, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call a tool by name (from find_tool)."""
    return await _dispatch_tool(ctx, name, arguments)


if _ROUTER_MODE != "minimal":
    # -- the built-in batch: the tool here, its entries' checks and its budget in centralmcp_builtin_batch --

    from standins.centralmcp_builtin_batch import (
        BatchCall,
        _batch_budget_bytes,
        _batch_refusal,
        _check_entry,
        _clip,
        _items_bytes,
        _overflow_envelope,
        _shrink_to_budget,
    )

    _BATCH_KEPT_STATUSES = ("blocked", "invalid_cursor", "unknown_tool")  # dispatch refusals an item keeps

    async def _batch_item(ctx: Any, index: int, entry: Any, max_bytes: int) -> dict[str, Any]:
        """One entry's item: ``index``/``id``/``tool``/``server``/``status`` and ``result`` or ``error``."""
        call_id, name, call, why = _check_entry(entry, index)
        if call is None:
            tool = name if isinstance(name, str) else None
            return {"index": index, "id": call_id, "tool": tool, "server": None, "status": "invalid_call", "error": why}
        try:
            result = await _dispatch_read_tool(ctx, name, call["arguments"], call["cursor"], max_bytes=max_bytes)
        except Exception as exc:  # dispatch already answers backend failures: this is the router's own
            log.warning("batch item %d (%s) raised", index, name, exc_info=True)
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        item = {"index": index, "id": call_id, "tool": name, "server": _tool_backend_names.get(name)}
        refused = isinstance(result, dict) and result.get("status") in _BATCH_KEPT_STATUSES
        if refused or (isinstance(result, dict) and "error" in result):
            status = result["status"] if refused else "error"
            return {**item, "status": status, "error": _clip(str(result.get("error", "")))}
        return {**item, "status": "ok", "result": result}

    @mcp.tool(annotations=READ_ONLY)
    async def invoke_read_tool_batch(ctx: Context, calls: list[BatchCall]) -> dict[str, Any]:
        """Run up to 25 read-only tool calls in order, one at a time, through invoke_read_tool's own path.

        Each entry: "name", optional "arguments" (at most 20000 JSON bytes, 8 levels deep), "id" (unique,
        default the index) and "cursor". One item per call, in order: "index", "id", "tool", "server",
        "status" (ok, error, blocked, unknown_tool, invalid_cursor, invalid_call) and "result" or "error".
        Also "ok", "counts", "failed_ids", "failed_indexes" and "truncated" (the answer was shrunk to
        CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES, default 300000).
        """
        refusal = _batch_refusal(calls)
        if refusal is not None:
            return {"ok": False, "error": refusal}
        budget = _batch_budget_bytes()
        # Each call reads within its share (never under the router's floor): one large read cannot
        # crowd the others out of the answer.
        share = max(_RESPONSE_BUDGET_MIN_BYTES, budget // len(calls))
        items = [await _batch_item(ctx, index, entry, share) for index, entry in enumerate(calls)]
        failed = [item for item in items if item["status"] != "ok"]
        summary = {
            "counts": {"total": len(items), "succeeded": len(items) - len(failed), "failed": len(failed)},
            "failed_ids": [item["id"] for item in failed],
            "failed_indexes": [item["index"] for item in failed],
        }
        results, truncated = _shrink_to_budget(items, budget)
        if _items_bytes(results) > budget:
            return _overflow_envelope(items, summary, budget)
        return {"ok": not failed, "results": results, **summary, "truncated": truncated}


if _ROUTER_MODE != "minimal":
    # A convenience wrapper named as the backend tool it calls: the router keeps its own under that name.

    @mcp.tool(annotations=READ_ONLY)
    async def list_sites(ctx: Context) -> Any:
        """List sites."""
        return await _dispatch_tool(ctx, "list_sites")

    _WRAPPERS.add("list_sites")


def _register_direct_backend_tools() -> list[str]:
    """Direct mode: every backend tool published on the router under its own name, as the backend's own
    tool object (not a copy), never in place of a router tool of that name."""
    _load_all_backends()
    published = [name for name in _tool_index if not _compat.has_tool(mcp, name)]
    for name in published:
        _compat.put_tool(mcp, name, _tool_index[name])
    return published


if _ROUTER_MODE == "direct":
    _register_direct_backend_tools()


def install_router_middlewares(rate_limit: Any = None) -> list[Any]:
    """What the router's ``__main__`` block does before serving: its middleware chain, in its order, with
    its rate bucket (``install_router_rate_gate``'s) second when given."""
    from standins.centralmcp_middleware import (
        AuditLogMiddleware,
        NullStripMiddleware,
        ResponseEnvelopeMiddleware,
        SecretTokenizeMiddleware,
        install_middleware,
    )

    chain = [NullStripMiddleware(), ResponseEnvelopeMiddleware(), SecretTokenizeMiddleware(), AuditLogMiddleware()]
    if rate_limit is not None:
        chain.insert(1, rate_limit)
    install_middleware(mcp, chain)
    return chain
