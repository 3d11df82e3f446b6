"""Response bounding, CentralMCP's way: the longest top-level list is the page.

A clipped page carries ``_pagination`` and ``next_cursor``; every bounded answer carries
``_response_bounds``; an answer with nothing to slice that is still too large becomes a
bounded ``preview``. An answer that is not plain JSON (NaN or an infinity most often) is bounded
as the SDKs write it (see ``budget.as_json``): a read that returns NaN is a read, and JSON says null.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..budget import as_json, encode

PREVIEW_RESERVE = 256  # room for the markers around a preview


@dataclass(frozen=True)
class Bounds:
    max_items: int
    max_bytes: int


def as_object(payload: Any) -> dict[str, Any]:
    if isinstance(payload, dict):
        return payload
    return {"items": payload} if isinstance(payload, list) else {"result": payload}


def page_key(payload: dict[str, Any]) -> str | None:
    lists = [(len(value), key) for key, value in payload.items() if isinstance(value, list) and not key.startswith("_")]
    return max(lists)[1] if lists else None


def bound(
    payload: Any, bounds: Bounds, offset: int = 0, cursor_for: Callable[[int], str] | None = None
) -> dict[str, Any]:
    """``payload`` within ``bounds`` from ``offset``; ``cursor_for(next_offset)`` makes next_cursor."""
    try:
        return _bound(as_object(payload), bounds, offset, cursor_for)
    except (TypeError, ValueError):
        # Not plain JSON where it was encoded: NaN or an infinity, from a float an in-process tool returns or a
        # backend that writes NaN. Converted only now, so a plain answer (nearly every one) is not walked twice.
        return _bound(as_object(as_json(payload)), bounds, offset, cursor_for)


def _bound(
    answer: dict[str, Any], bounds: Bounds, offset: int, cursor_for: Callable[[int], str] | None
) -> dict[str, Any]:
    key = page_key(answer)
    if key is None:
        return _preview_if_large(answer, bounds)
    whole = answer[key]
    count = _fitting_count(answer, key, whole[offset : offset + bounds.max_items], bounds)
    page = whole[offset : offset + count]
    has_more = offset + count < len(whole)
    bounded = {**answer, key: page}
    bounded["_pagination"] = {
        "key": key,
        "offset": offset,
        "returned": count,
        "total": len(whole),
        "has_more": has_more,
    }
    bounded["_response_bounds"] = {
        "max_items": bounds.max_items,
        "max_bytes": bounds.max_bytes,
        "clipped": has_more or offset > 0,
    }
    if has_more and cursor_for is not None:
        bounded["next_cursor"] = cursor_for(offset + count)
    if len(encode(bounded)) > bounds.max_bytes:  # even one item is too large, or the rest is
        return _preview(answer, bounds)
    return bounded


def _fitting_count(answer: dict[str, Any], key: str, page: list[Any], bounds: Bounds) -> int:
    """The most items of ``page`` that fit, by bisection: O(log n) encodings, not n."""
    low, high = 0, len(page)
    reserve = PREVIEW_RESERVE + 600  # markers and a cursor are added after the count is chosen
    while low < high:
        middle = (low + high + 1) // 2
        if len(encode({**answer, key: page[:middle]})) + reserve <= bounds.max_bytes:
            low = middle
        else:
            high = middle - 1
    return max(low, 1) if page else 0


def _preview_if_large(answer: dict[str, Any], bounds: Bounds) -> dict[str, Any]:
    if len(encode(answer)) <= bounds.max_bytes:
        return answer
    return _preview(answer, bounds)


def _preview(answer: dict[str, Any], bounds: Bounds) -> dict[str, Any]:
    text = json.dumps(answer, ensure_ascii=False, default=str).encode()
    marks = {
        "max_items": bounds.max_items,
        "max_bytes": bounds.max_bytes,
        "clipped": True,
        "resumable": False,
        "original_bytes": len(text),
    }
    room = max(0, bounds.max_bytes - PREVIEW_RESERVE)
    while True:  # escaping can grow the preview: cut again by the overflow until it fits
        result = {"preview": text[:room].decode(errors="ignore"), "_response_bounds": marks}
        overflow = len(encode(result)) - bounds.max_bytes
        if overflow <= 0 or room == 0:
            return result
        room = max(0, room - overflow)
