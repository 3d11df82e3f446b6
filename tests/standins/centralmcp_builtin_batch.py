"""Stand-in for the built-in batch of CentralMCP's tool router: its entry model and checks, its
whole-batch refusals and the fitting of its answer to its byte budget. The router module defines
the tool itself over these, outside minimal mode.

As the router's own: typed entries, each bounded on its own, dispatched one at a time through the
same read path as invoke_read_tool, one item per call (a bad call never aborts the rest), and the
whole answer held to a byte budget read at call time. Written here; none of CentralMCP's code is copied.
"""

import json
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MIN_RESPONSE_BYTES = 1024  # the router's floor for any byte budget

MAX_BATCH_CALLS = 25
MAX_BATCH_CALL_ID_CHARS = 100
MAX_BATCH_TOOL_NAME_CHARS = 200
MAX_BATCH_ARGUMENTS_BYTES = 20_000
MAX_BATCH_ARGUMENTS_DEPTH = 8
MAX_BATCH_ERROR_CHARS = 500
MIN_BATCH_ERROR_CHARS = 80  # what a failure's text is squeezed to before the answer may go over budget
_BATCH_RESPONSE_BUDGET_BYTES_ENV = "CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES"
_BATCH_RESPONSE_BUDGET_DEFAULT_BYTES = 300_000


class BatchCall(BaseModel):
    """One entry of a batch. A model, not a bare dict: the input schema publishes the shape and its
    caps, and the SDK validates every entry before the tool runs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_BATCH_TOOL_NAME_CHARS, description="Backend tool name.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments (default {}).")
    id: str | None = Field(
        default=None,
        max_length=MAX_BATCH_CALL_ID_CHARS,
        description="Correlation id, unique in the batch (default: the entry's index).",
    )
    cursor: str | None = Field(default=None, description="next_cursor of an earlier, truncated read.")


def _batch_budget_bytes() -> int:
    # Read per call, so an operator's change applies without a restart; below the floor, the default.
    try:
        value = int(os.getenv(_BATCH_RESPONSE_BUDGET_BYTES_ENV, "").strip())
    except ValueError:
        return _BATCH_RESPONSE_BUDGET_DEFAULT_BYTES
    return value if value >= MIN_RESPONSE_BYTES else _BATCH_RESPONSE_BUDGET_DEFAULT_BYTES


def _clip(text: str, limit: int = MAX_BATCH_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _nesting(value: Any, depth: int = 0) -> int:
    # Stops descending past the bound, so a pathological payload costs bounded recursion.
    if depth > MAX_BATCH_ARGUMENTS_DEPTH or not isinstance(value, (dict, list)) or not value:
        return depth
    return max(_nesting(child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))


def _as_mapping(entry: Any) -> Any:
    # The SDK hands the tool BatchCall objects; in-process callers pass dicts (or BatchCalls).
    return entry.model_dump() if isinstance(entry, BatchCall) else entry


def _check_entry(entry: Any, index: int) -> tuple[str, Any, dict[str, Any] | None, str | None]:
    """``(id, name, call, why)``: ``call`` to dispatch, or ``why`` not. ``why`` states only facts of
    the entry's shape, never an argument value (a secret in the arguments must not echo back)."""
    entry = _as_mapping(entry)
    fallback = str(index)
    if not isinstance(entry, dict):
        return fallback, None, None, "call must be an object"
    name, call_id = entry.get("name"), entry.get("id")
    call_id = fallback if call_id is None else call_id
    if not isinstance(call_id, str) or not call_id.strip():
        return fallback, name, None, "id must be a non-empty string"
    if len(call_id) > MAX_BATCH_CALL_ID_CHARS:
        return fallback, name, None, f"id exceeds the {MAX_BATCH_CALL_ID_CHARS}-character bound"
    if not isinstance(name, str) or not name.strip():
        return call_id, name, None, "name must be a non-empty string"
    if len(name) > MAX_BATCH_TOOL_NAME_CHARS:
        return call_id, name, None, f"name exceeds the {MAX_BATCH_TOOL_NAME_CHARS}-character bound"
    arguments = entry.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        return call_id, name, None, "arguments must be an object"
    try:
        size = len(json.dumps(arguments, default=str).encode("utf-8"))
    except (TypeError, ValueError):
        return call_id, name, None, "arguments must be JSON-serializable"
    if size > MAX_BATCH_ARGUMENTS_BYTES:
        return call_id, name, None, f"arguments exceed the {MAX_BATCH_ARGUMENTS_BYTES}-byte bound"
    if _nesting(arguments) > MAX_BATCH_ARGUMENTS_DEPTH:
        return call_id, name, None, f"arguments exceed the {MAX_BATCH_ARGUMENTS_DEPTH}-level nesting bound"
    cursor = entry.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        return call_id, name, None, "cursor must be a string"
    return call_id, name, {"name": name, "arguments": arguments, "cursor": cursor}, None


def _batch_refusal(calls: Any) -> str | None:
    """Why the whole batch is refused before any dispatch, if it is."""
    if not isinstance(calls, list):
        return "calls must be a list"
    if not calls:
        return "calls must contain at least one entry"
    if len(calls) > MAX_BATCH_CALLS:
        return f"calls has {len(calls)} entries, exceeding the {MAX_BATCH_CALLS}-entry bound"
    seen: set[str] = set()
    for entry in map(_as_mapping, calls):  # only explicit ids: a defaulted one is its unique index
        call_id = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(call_id, str) and call_id.strip():
            if call_id in seen:
                return f"duplicate call id {call_id!r}: ids must be unique within a batch so results can be correlated"
            seen.add(call_id)
    return None


def _items_bytes(items: list[dict[str, Any]]) -> int:
    return len(json.dumps(items, ensure_ascii=False, default=str).encode("utf-8"))


def _shrink_to_budget(items: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """The items within ``budget`` if shrinking can do it, none dropped: first ok results give way
    to a marker, the last call's first; then failure texts are squeezed. Every failure keeps its
    index, id and status, so going over budget never hides that a call failed."""
    items, shrunk = [dict(item) for item in items], False
    for pos in reversed(range(len(items))):
        if _items_bytes(items) <= budget:
            return items, shrunk
        if items[pos]["status"] == "ok":
            kept = {key: items[pos][key] for key in ("index", "id", "tool", "server")}
            items[pos], shrunk = {**kept, "status": "ok", "result_truncated": True, "result": None}, True
    for pos, item in enumerate(items):
        if _items_bytes(items) <= budget:
            break
        if isinstance(item.get("error"), str) and len(item["error"]) > MIN_BATCH_ERROR_CHARS:
            items[pos] = {**item, "error": _clip(item["error"], MIN_BATCH_ERROR_CHARS), "error_truncated": True}
            shrunk = True
    return items, shrunk


def _overflow_envelope(items: list[dict[str, Any]], summary: dict[str, Any], budget: int) -> dict[str, Any]:
    """The last resort when even shrunk items do not fit (many long names and ids): the counts and
    an index/id/status skeleton, itself clipped to half the budget, never an over-budget body."""
    skeleton = [{"index": item["index"], "id": item["id"], "status": item["status"]} for item in items]
    while skeleton and _items_bytes(skeleton) > budget // 2:
        skeleton.pop()
    return {
        "ok": False,
        "error": f"batch response exceeded the {budget}-byte budget; results omitted",
        "results": skeleton,
        "results_omitted": len(items) - len(skeleton),
        **summary,
        "truncated": True,
    }
