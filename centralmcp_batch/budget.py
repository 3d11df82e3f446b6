"""Byte accounting for the batch response and the deterministic shrink that makes it fit.

The whole response, as compact UTF-8 JSON written the way the MCP SDKs write a tool's answer
(see ``dumps``), must fit the budget. Each stage runs only while the response is still over, and
every step adjusts a running total by the size of the one item it changed, so the cost is linear
in the number of items and in their size.

1. ok items, last first, drop their result: ``result: null, result_truncated: true``;
2. error texts, last first, are cut to 80 characters with ``error_truncated: true``;
   (in both, only where the marked item is smaller than the item as it was)
3. the skeleton: every item becomes ``{index, id, status}`` with ``skeleton: true``; while
   still over, ok skeleton items are left out, last first (``omitted`` counts them), then
   ``failed_ids`` is cut from the end (``failed_ids_truncated``), and as a last step failed
   skeleton items are left out, last first. ``counts`` and ``failed_indexes`` are always whole.
"""

from __future__ import annotations

import json
import math
import re
import threading
from json.encoder import c_make_encoder  # type: ignore[attr-defined] # None where Python has no _json
from json.encoder import encode_basestring as _encode_string  # what the checker below does to a string
from typing import Any

import pydantic_core

SHORT_ERROR_CHARS = 80


# ``json.dumps(value, allow_nan=False)``'s checks, made once: every item and every entry's arguments
# are checked with it. Each thread keeps a C encoder of its own (building one was half the cost of
# encoding an item), with the table of the containers it is inside, so that a cyclic value fails as
# not JSON (ValueError) instead of recursing until the interpreter's stack gives out, which a raised
# recursion limit turns into a crash.
_CHECKER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_PER_THREAD = threading.local()


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder() -> tuple[dict[int, Any], Any]:
    markers: dict[int, Any] = {}
    return markers, c_make_encoder(markers, _not_json, _encode_string, None, ":", ",", False, False, False)


def check_plain(value: Any) -> None:
    """Raise TypeError or ValueError unless ``value`` is plain JSON: dicts with string (or number, bool
    or None) keys, lists and tuples, strings, numbers, booleans and None; no NaN or infinity, no cycle.

    Python's ``json`` draws that line. pydantic, which writes the answer, would also write a set, a
    datetime, a model or NaN, each its own way and without a word: the caller converts such a value
    (``as_json``) so that what it holds is what goes out.
    """
    if c_make_encoder is None:  # a Python without the _json accelerator
        _CHECKER.encode(value)
        return
    try:
        markers, encode = _PER_THREAD.encoder
    except AttributeError:
        markers, encode = _PER_THREAD.encoder = _c_encoder()
    try:
        encode(value, 0)
    except BaseException:
        markers.clear()  # a failed encoding leaves behind the containers it was inside
        raise


def encode(value: Any) -> bytes:
    """The wire form the budget measures: plain JSON (see ``check_plain``) as both MCP SDK lines write a tool's
    answer.

    They write the JSON-RPC message, and the structured content in it, with pydantic, which writes some floats
    otherwise than Python's ``json`` (``1e-05`` as ``0.00001``, ``1e-07`` as ``1e-7``) and a key None as
    ``"None"``: measured with the same encoder, a response within the budget is within it as sent. Compact and
    UTF-8 (``\\u`` escapes for control characters only). Text UTF-8 cannot hold (a lone surrogate) raises
    ValueError, as the SDKs' own writing of it does; nesting deeper than pydantic writes (about 250 levels),
    RecursionError.
    """
    check_plain(value)
    try:
        return pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError as exc:
        if _TOO_DEEP in str(exc):
            raise RecursionError("nested deeper than pydantic writes") from None
        raise


# pydantic's errors have no type of their own. Its words: "Maximum serialization depth exceeded" (pydantic-core
# 2.34 on), "Circular reference detected (depth exceeded)" before.
_TOO_DEEP = "depth exceeded"


def dumps(value: Any) -> str:
    """``encode(value)`` as text: what the batch tool sends as its text content, the same bytes as its structured
    content."""
    return encode(value).decode()


def written(value: Any) -> str:
    """``dumps(value)`` without ``check_plain``, for a value already found plain: an assembled response, each of
    whose items was sized. The check costs four times pydantic's encoding (70 against 15 us for a batch of 25
    device reads). Should anything not plain be left in it, it is written as the SDKs write the structured
    content beside it (NaN as null)."""
    return pydantic_core.to_json(value, inf_nan_mode="null").decode()


def as_json(value: Any) -> Any:
    """``value`` in plain JSON values, as an MCP server SDK writes a tool's answer: pydantic's rules
    (a datetime as ISO text, a model as its fields, a set as a list), ``str()`` for anything else.
    NaN and the infinities, which JSON has no form for, become null. Raises ValueError for a cycle."""
    return _finite(pydantic_core.to_jsonable_python(value, fallback=str))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())  # ASCII: as many bytes as characters


def size(value: Any) -> int:
    return len(encode(value))


def string_size(text: str) -> int:
    """The encoded size of one JSON string, quotes and escapes included (ValueError for a lone surrogate)."""
    return len(pydantic_core.to_json(text))


# What ``nesting`` keeps of the wire form: quotes, and each bracket as a brace (an array nests as an object does).
_BRACKETS_AS_BRACES = bytes.maketrans(b"[]", b"{}")
_ALL_BUT_QUOTES_AND_BRACKETS = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_STRING = re.compile(rb'"[^"]*"')


def nesting(text: str, limit: int) -> int:
    """Levels of objects and arrays in JSON ``text`` (``{}`` is 1, ``{"a":[1]}`` 2), counted to ``limit + 1`` at most.

    Read off the text, not the value: walking a value of nested records in Python took twice as
    long as encoding it. The escaped backslashes and quotes go, then every byte but quotes and
    brackets (UTF-8 puts no ASCII byte inside another character), then the strings with whatever
    brackets they hold. Each pass then takes out the innermost pairs: one level a pass. Text no
    UTF-8 can hold (a lone surrogate) raises UnicodeEncodeError, as ``text_size`` does.
    """
    data = text.encode()
    if b"\\" in data:
        # Pairs of backslashes first, from the left: in \\\" the first two are one escaped backslash.
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = data.translate(_BRACKETS_AS_BRACES, _ALL_BUT_QUOTES_AND_BRACKETS)
    if b'"' in shape:
        # Two quotes side by side are an empty string, or one string's end and the next one's start
        # with nothing between them: taking them out moves no bracket into a string or out of one.
        shape = shape.replace(b'""', b"")
        shape = _STRING.sub(b"", shape) if b'"' in shape else shape
    levels = 0
    while shape and levels <= limit:
        shape = shape.replace(b"{}", b"")  # each pair found in this pass's text: the containers holding none
        levels += 1
    return levels


class _Sized:
    """A response being shrunk, with its encoded size kept up to date item by item."""

    def __init__(self, response: dict[str, Any], sizes: list[int] | None = None) -> None:
        self.response = response
        self.items: list[dict[str, Any]] = response["results"]
        self.sizes = list(sizes) if sizes is not None else [size(item) for item in self.items]
        self._items_bytes = sum(self.sizes)
        self.shrunk = False  # whether an item was changed or left out yet
        self._measure_envelope()

    def _measure_envelope(self) -> None:
        self.envelope = size({**self.response, "results": []})

    @property
    def total(self) -> int:
        return self.envelope + self._items_bytes + max(0, len(self.items) - 1)

    def fits(self, budget: int) -> bool:
        """Within ``budget``, and truly shrunk: ``truncated: true`` is a byte shorter than ``false``,
        so a response one byte over would fit by saying it was shrunk without being so."""
        return self.shrunk and self.total <= budget

    def replace(self, index: int, item: dict[str, Any], new: int | None = None) -> None:
        new = size(item) if new is None else new
        self.shrunk = True
        self._items_bytes += new - self.sizes[index]
        self.items[index], self.sizes[index] = item, new

    def shrink(self, index: int, item: dict[str, Any]) -> None:
        """Put ``item`` in place of the one at ``index`` if it is smaller: a marker that outweighs
        what it stands for (a tiny result, an error a few characters over the cut) would only grow it."""
        new = size(item)
        if new < self.sizes[index]:
            self.replace(index, item, new)

    def remove(self, index: int) -> None:
        self.shrunk = True
        self._items_bytes -= self.sizes[index]
        del self.items[index]
        del self.sizes[index]

    def set_field(self, key: str, value: Any) -> None:
        self.response[key] = value
        self._measure_envelope()


def fit(response: dict[str, Any], budget: int, sizes: list[int] | None = None) -> dict[str, Any]:
    """Shrink ``response`` (in place) until its encoding is at most ``budget`` bytes.

    ``sizes``, when given, are the encoded sizes of ``response["results"]``, so a caller that
    already encoded each item does not pay for it twice.
    """
    sized = _Sized(response, sizes)
    if sized.total <= budget:
        return response
    sized.set_field("truncated", True)
    for stage in (_drop_results, _shorten_errors, _skeleton):
        if sized.fits(budget):
            break
        stage(sized, budget)
    return response


def _drop_results(sized: _Sized, budget: int) -> None:
    for index in reversed(range(len(sized.items))):
        if sized.fits(budget):
            return
        item = sized.items[index]
        if item["status"] == "ok" and not item.get("result_truncated"):
            sized.shrink(index, {**_without(item, "result"), "result": None, "result_truncated": True})


def _shorten_errors(sized: _Sized, budget: int) -> None:
    for index in reversed(range(len(sized.items))):
        if sized.fits(budget):
            return
        item = sized.items[index]
        error = item.get("error")
        if isinstance(error, str) and len(error) > SHORT_ERROR_CHARS:
            short = {**_without(item, "error"), "error": error[:SHORT_ERROR_CHARS], "error_truncated": True}
            sized.shrink(index, short)


def _skeleton(sized: _Sized, budget: int) -> None:
    for index, item in enumerate(sized.items):
        sized.replace(index, {"index": item["index"], "id": item["id"], "status": item["status"]})
    sized.set_field("skeleton", True)
    _omit_last_first(sized, budget, "ok")
    # Then failed_ids, before a failed entry's own item: an id is the caller's own, found again by its index in
    # failed_indexes (always whole), where a failed entry's status is in its item alone.
    failed_ids = sized.response["failed_ids"]
    if sized.total > budget and failed_ids:
        sized.set_field("failed_ids_truncated", True)
    while sized.total > budget and failed_ids:
        failed_ids.pop()
        sized.set_field("failed_ids", failed_ids)
    _omit_last_first(sized, budget, None)


def _omit_last_first(sized: _Sized, budget: int, status: Any) -> None:
    """Leave out skeleton items, last first: those with ``status``, or any when None."""
    for index in reversed(range(len(sized.items))):
        if sized.total <= budget:
            return
        if status is None or sized.items[index]["status"] == status:
            sized.remove(index)
            sized.set_field("omitted", sized.response.get("omitted", 0) + 1)


def _without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}
