"""Stand-in for CentralMCP's ``mcp_servers/shared.py``: annotation constants and list paging.

Written from CentralMCP's public docs and the facts its code states; none of its code is copied.
"""

from typing import Any

from centralmcp_batch._compat import ToolAnnotations

MAX_LIST_LIMIT = 200

READ_ONLY = ToolAnnotations.model_validate(
    {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
)
WRITE = ToolAnnotations.model_validate(
    {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": True}
)
DESTRUCTIVE = ToolAnnotations.model_validate(
    {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}
)
DIAGNOSTIC = ToolAnnotations.model_validate(
    {
        "title": "Diagnostic",
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
    }
)


def _longest_list_key(data: dict[str, Any]) -> str | None:
    lists = [(len(value), key) for key, value in data.items() if isinstance(value, list) and key != "_pagination"]
    return max(lists)[1] if lists else None


def bound_collection_response(data: Any, *, limit: int, offset: int = 0, list_key: str | None = None) -> Any:
    """One page of a list (or of a dict's longest list) with a ``_pagination`` block."""
    limit = max(1, min(int(limit), MAX_LIST_LIMIT))
    if isinstance(data, list):
        data, list_key = {"items": data}, "items"
    if not isinstance(data, dict):
        return data
    key = list_key or _longest_list_key(data)
    if key is None:
        return data
    items = data[key]
    page = items[offset : offset + limit]
    pagination = {"offset": offset, "limit": limit, "total": len(items), "truncated": len(items) > offset + len(page)}
    return {**data, key: page, "_pagination": pagination}
