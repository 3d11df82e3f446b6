"""The batch's last stage, assemble: the items in call order, their sizes, each entry's share of the budget.

Pure: imports neither pluggy nor mcp. ``budget.fit`` then shrinks the response to the budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from . import budget
from .entries import Entry, InvalidCall, ValidCall, is_utf8, nests_deeper
from .models import FAILED_STATUSES, Outcome

ERROR_CHARS = 500
MIN_SHARE = 1024
# Room kept in each entry's share for its server's name, which is not known until the entry is
# resolved: longer names can cost the last results their place in a response filled to the brim.
SERVER_NAME_RESERVE = 64
# Levels of objects and arrays a result may nest. Both SDK lines write a response with pydantic's
# serializer, which refuses a value about 250 levels deep and fails the whole answer with it; the
# json module measuring the budget goes on as deep as Python's C recursion limit (about 1,000
# levels, 10,000 on Python 3.13), so it cannot be the judge.
MAX_RESULT_DEPTH = 200


def make_item(
    index: int, call_id: str | None, tool: str | None, server: str | None, outcome: Outcome
) -> dict[str, Any]:
    item: dict[str, Any] = {"index": index, "id": call_id, "tool": tool, "server": server, "status": outcome.status}
    if outcome.status == "ok":
        item["result"] = outcome.result
    else:
        item["error"] = cut(outcome.error or outcome.status)
    return item


def cut(text: str, limit: int = ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit]


def entry_share(
    entries: Sequence[Entry],
    response_max_bytes: int,
    keys_sizes: Sequence[int] | None = None,
    extras: dict[str, Any] | None = None,
) -> int:
    """The ``max_bytes`` each valid entry dispatches with.

    What the response needs besides the results is reserved first: the envelope (counts and
    failed lists as if every valid entry succeeds), every item's own keys, the invalid entries'
    items whole, the separators. The rest is split evenly over the valid entries, so that many
    results each filling its share still fit; never less than ``MIN_SHARE``. ``keys_sizes``, when
    given, is ``ok_keys_sizes(entries)``; ``extras``, the response's other keys (shared calls, the
    rate report) at their widest.
    """
    if keys_sizes is None:
        keys_sizes = ok_keys_sizes(entries)
    invalid = [
        make_item(entry.index, entry.id, entry.tool, None, Outcome("invalid_call", error=entry.error))
        for entry in entries
        if isinstance(entry, InvalidCall)
    ]
    valid = len(entries) - len(invalid)
    # The envelope holds the invalid items and the commas between them; the rest of the commas are added.
    reserved = _envelope_size(len(entries), invalid, extras or {}) + (len(entries) - 1) - max(0, len(invalid) - 1)
    for entry in entries:
        if isinstance(entry, ValidCall):
            reserved += keys_sizes[entry.index] + SERVER_NAME_RESERVE + 2  # the server, at its longest, quoted
    return max(MIN_SHARE, (response_max_bytes - reserved) // max(1, valid))


def _envelope_size(total: int, invalid: list[dict[str, Any]], extras: dict[str, Any]) -> int:
    """The response's size without its ok items, as if every valid entry succeeds."""
    envelope = {**assemble(invalid), **extras}
    envelope["counts"] = {"total": total, "succeeded": total - len(invalid), "failed": len(invalid)}
    return budget.size(envelope)


# An ok item as compact JSON without its index, id, tool, server and result:
# {"index":I,"id":"ID","tool":"NAME","server":"SERVER","status":"ok","result":RESULT}
_OK_ITEM_BARE = len('{"index":,"id":,"tool":,"server":,"status":"ok","result":}')
# A failed item's bare keys, less an ok item's: {"index":I,...,"status":"STATUS","error":"TEXT"}
_FAILED_OVER_OK = len('{"index":,"id":,"tool":,"server":,"status":,"error":}') - _OK_ITEM_BARE


def ok_keys_sizes(entries: Sequence[Entry]) -> list[int]:
    """For each entry, the bytes its ok item takes besides its server and result (0 for an invalid entry)."""
    return [_ok_keys_size(entry) if isinstance(entry, ValidCall) else 0 for entry in entries]


def _ok_keys_size(call: ValidCall) -> int:
    return _OK_ITEM_BARE + len(str(call.index)) + budget.string_size(call.id) + budget.string_size(call.name)


def ok_item_size(item: dict[str, Any], keys_size: int) -> int:
    """``item_size(item)`` for an ok item made by ``make_item``, whose ``ok_keys_sizes`` entry is ``keys_size``.

    Only the server and the result are encoded: encoding the whole item cost an entry twice as much,
    and the other keys are the entry's own, measured once as the batch starts.
    """
    server = item["server"]
    text = budget.dumps(item["result"])
    if nests_deeper(text, MAX_RESULT_DEPTH):
        raise RecursionError(f"nested more than {MAX_RESULT_DEPTH} levels deep")
    return keys_size + (4 if server is None else budget.string_size(server)) + budget.text_size(text)


def failed_item_size(item: dict[str, Any], keys_size: int) -> int:
    """``item_size(item)`` for a failed item made by ``make_item`` (a status and an error text, no
    result), whose ``ok_keys_sizes`` entry is ``keys_size``: only its strings are measured."""
    server = item["server"]
    return (
        keys_size
        + _FAILED_OVER_OK
        + budget.string_size(item["status"])
        + budget.string_size(item["error"])
        + (4 if server is None else budget.string_size(server))
    )


def sized_item(item: dict[str, Any], keys_size: int) -> tuple[dict[str, Any], int]:
    """``item`` and its encoded size; an item that cannot be encoded as it is, as ``_as_json_item`` mends it.

    ``keys_size`` is the entry's ``ok_keys_sizes`` entry: 0 for an invalid entry, whose item echoes what
    it could of the entry and is encoded whole.
    """
    try:
        if not keys_size:
            return item, item_size(item)
        if item["status"] == "ok":
            return item, ok_item_size(item, keys_size)
        return item, failed_item_size(item, keys_size)
    except Exception as exc:  # TypeError, ValueError, RecursionError, or what a result's own methods raise
        # (a container whose items() raise, an object whose __str__ does): that entry fails, not the batch
        return _as_json_item(item, exc)


def _as_json_item(item: dict[str, Any], exc: Exception) -> tuple[dict[str, Any], int]:
    """An item JSON could not encode (``exc``), and its encoded size: an ok item's result as the
    server SDK would have written it for a single read (a datetime, a model, NaN), or, where even
    that fails (a cycle, a nesting too deep, broken Unicode), an error item. Broken Unicode in the
    item's own texts (a server name, an error) is replaced (see ``_encodable``): a failed item keeps
    its status and its error, an ok item its result."""
    texts = {key: _encodable(value) for key, value in item.items() if key != "result" and isinstance(value, str)}
    mended = {**item, **texts}
    try:
        if "result" not in item:
            return mended, item_size(mended)
        if not isinstance(exc, RecursionError):  # converting never makes a value shallower
            converted = {**mended, "result": budget.as_json(item["result"])}
            return converted, item_size(converted)
    except Exception as failed:  # as in _Run.finish: whatever the result's own methods raise
        exc = failed
    return _unencodable_item(mended, exc)


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, every surrogate is a lone one: UTF-8 has no form for it


def _encodable(text: str) -> str:
    """``text`` with each character UTF-8 cannot hold (a lone surrogate) as U+FFFD, the replacement character:
    an error is what its caller needs, and told as an unencodable result it would name the wrong part."""
    return text if is_utf8(text) else _SURROGATE.sub("\ufffd", text)


def item_size(item: dict[str, Any]) -> int:
    """``budget.size(item)``; RecursionError when its result nests deeper than ``MAX_RESULT_DEPTH``."""
    text = budget.dumps(item)
    if nests_deeper(text, MAX_RESULT_DEPTH + 1):  # the item's own object is a level above its result
        raise RecursionError(f"nested more than {MAX_RESULT_DEPTH} levels deep")
    return budget.text_size(text)


def _unencodable_item(item: dict[str, Any], exc: Exception) -> tuple[dict[str, Any], int]:
    """An item JSON cannot encode even mended (a result no JSON can hold, most often), as an error item,
    and its encoded size."""
    keep = {key: item[key] for key in ("index", "id", "tool", "server")}
    failed = {**keep, "status": "error", "error": f"{type(exc).__name__}: the tool's result is not JSON-serializable"}
    return failed, budget.size(failed)


def assemble(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    failed = [item for item in items if item["status"] in FAILED_STATUSES]
    return {
        "ok": not failed,
        "results": list(items),
        "counts": {"total": len(items), "succeeded": len(items) - len(failed), "failed": len(failed)},
        "failed_ids": [item["id"] for item in failed],
        "failed_indexes": [item["index"] for item in failed],
        "truncated": False,
    }
