"""The batch's first stage, validate: the whole-batch checks, then each entry's, in the documented order.

Pure: imports neither pluggy nor mcp. What comes out is one ``ValidCall`` or ``InvalidCall`` per
entry; nothing here reaches the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from . import budget
from .models import (
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENT_DEPTH,
    MAX_CALLS,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    BatchCall,
)

# The keys of a call object, as the published input schema states them (it allows no others).
ENTRY_KEYS = frozenset(BatchCall.model_fields)
# How much of an unknown key an invalid_call item shows.
UNKNOWN_KEY_CHARS = 40


@dataclass(slots=True)
class ValidCall:
    index: int
    id: str
    name: str
    arguments: dict[str, Any]
    cursor: str | None


@dataclass(slots=True)
class InvalidCall:
    index: int
    id: str | None
    tool: str | None
    error: str


Entry = ValidCall | InvalidCall


def validate(calls: Any) -> list[Entry] | str:
    """Each entry checked in the documented order, or why the whole batch is refused before anything runs."""
    problem = check_batch(calls)
    if problem is not None:
        return problem
    entries = parse_entries(calls)
    repeated = duplicate_id(entries)
    if repeated is not None:
        return f"duplicate call id '{repeated}': ids must be unique within a batch so results can be correlated"
    return entries


def check_batch(calls: Any) -> str | None:
    if not isinstance(calls, list):
        return "calls must be a list"
    if not calls:
        return "calls must contain at least one entry"
    if len(calls) > MAX_CALLS:
        return f"calls has {len(calls)} entries, exceeding the {MAX_CALLS}-entry bound"
    return None


def parse_entries(calls: list[Any]) -> list[Entry]:
    """``parse_entry`` for each call, the arguments' bounds told for the whole batch at once.

    The common batch's arguments all fit the bounds together: one encoding of them all tells it,
    where one encoding per entry was 2 % of a zero-latency entry's bytecode. Otherwise each entry's
    own arguments are measured, and the other checks have passed: the outcome is ``parse_entry``'s.
    """
    entries = [parse_entry(index, raw, measure_arguments=False) for index, raw in enumerate(calls)]
    # Each one's encoding is a part of the list's, so none is larger, and the list is a level above the deepest.
    given = [entry.arguments for entry in entries if type(entry) is ValidCall]
    if _encoding_problem(given, wrapping=1) is None:
        return entries
    return [_with_arguments_measured(entry) for entry in entries]


def _with_arguments_measured(entry: Entry) -> Entry:
    if not isinstance(entry, ValidCall):
        return entry
    problem = _arguments_problem(entry.arguments)
    return entry if problem is None else InvalidCall(entry.index, entry.id, entry.name, problem)


def parse_entry(index: int, raw: Any, *, measure_arguments: bool = True) -> Entry:
    """Validate one entry in the documented order; the first failure wins.

    ``measure_arguments=False`` leaves out only the arguments' size and nesting (see ``parse_entries``).
    """
    if type(raw) is dict:  # the common entry, told valid in one pass; anything else is checked in order below
        call_id, name, arguments, cursor = raw.get("id"), raw.get("name"), raw.get("arguments"), raw.get("cursor")
        if call_id is None:
            call_id = str(index)
        if (
            type(call_id) is str
            and 0 < len(call_id) <= MAX_ID_CHARS
            and call_id.isascii()
            and type(name) is str
            and 0 < len(name) <= MAX_NAME_CHARS
            and name.isascii()
            and (cursor is None or type(cursor) is str)
            and raw.keys() <= ENTRY_KEYS
            and (
                _arguments_problem(arguments) is None
                if measure_arguments
                else arguments is None or type(arguments) is dict
            )
        ):
            return ValidCall(index, call_id, name, arguments or {}, cursor)
    try:
        return _parse_in_order(index, raw)
    except Exception as exc:  # a mapping of an in-process caller's whose own methods raise: that entry is invalid
        return InvalidCall(index, str(index), None, f"call at index {index} could not be read: {type(exc).__name__}")


def _parse_in_order(index: int, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        return InvalidCall(index, str(index), None, f"call at index {index} must be an object")
    call_id = raw.get("id")
    if call_id is None:
        call_id = str(index)
    name = raw.get("name")
    echo = name if isinstance(name, str) and len(name) <= MAX_NAME_CHARS and is_utf8(name) else None
    if not isinstance(call_id, str) or not call_id:
        return InvalidCall(index, None, echo, "id must be a non-empty string")
    if not is_utf8(call_id):
        return InvalidCall(index, None, echo, "id must be valid Unicode text")
    if len(call_id) > MAX_ID_CHARS:
        return InvalidCall(index, None, echo, f"id must be at most {MAX_ID_CHARS} characters")
    problem = _name_problem(name) or _arguments_problem(raw.get("arguments"))
    if problem is None and raw.get("cursor") is not None and not isinstance(raw.get("cursor"), str):
        problem = "cursor must be a string"
    if problem is None:
        problem = _unknown_key_problem(raw)
    if problem is not None:
        return InvalidCall(index, call_id, echo, problem)
    return ValidCall(index, call_id, cast(str, name), raw.get("arguments") or {}, raw.get("cursor"))  # checked above


def _unknown_key_problem(entry: dict[Any, Any]) -> str | None:
    """A key the call object does not have: a misspelled ``argumnts`` would otherwise run the call with ``{}``.

    The key is named (cut, and escaped by ``repr``) so the typo can be found; it is the entry's own key,
    never a value, and no middleware puts a secret back into a key.
    """
    unknown = next((key for key in entry if key not in ENTRY_KEYS), None)
    if unknown is None:
        return None
    shown = repr(unknown)
    if len(shown) > UNKNOWN_KEY_CHARS:
        shown = shown[: UNKNOWN_KEY_CHARS - 3] + "..."
    return f"unknown key {shown}: a call has only name, arguments, id and cursor"


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "name must be a non-empty string"
    if len(name) > MAX_NAME_CHARS:
        return f"name must be at most {MAX_NAME_CHARS} characters"
    if not is_utf8(name):
        return "name must be valid Unicode text"
    return None


def is_utf8(text: str) -> bool:
    """False for text with lone surrogates, which no JSON on the wire can carry."""
    if text.isascii():  # the common case, told without encoding a copy
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _arguments_problem(arguments: Any) -> str | None:
    if arguments is None:
        return None
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    return _encoding_problem(arguments)


def _encoding_problem(value: Any, wrapping: int = 0) -> str | None:
    """The first of the arguments' bounds ``value`` breaks as JSON; its outer ``wrapping`` levels are
    containers around arguments (``parse_entries``' list of them), not the arguments' own."""
    try:
        text = budget.dumps(value)
        encoded_bytes = budget.text_size(text)
    except Exception:  # TypeError, ValueError, RecursionError, or whatever a value's own methods raise
        return "arguments must be JSON-serializable"
    if encoded_bytes > MAX_ARGUMENT_BYTES:
        return f"arguments must be at most {MAX_ARGUMENT_BYTES} bytes as JSON"
    if nests_deeper(text, MAX_ARGUMENT_DEPTH + wrapping):
        return f"arguments must be nested at most {MAX_ARGUMENT_DEPTH} levels deep"
    return None


def nests_deeper(text: str, levels: int) -> bool:
    """Whether JSON ``text`` nests more than ``levels`` deep.

    Each level of nesting opens with a bracket of its own, so text with no more brackets than
    ``levels`` cannot nest deeper: most texts are told by counting them.
    """
    return text.count("{") + text.count("[") > levels and budget.nesting(text, levels) > levels


def duplicate_id(entries: Sequence[Entry]) -> str | None:
    seen: set[str] = set()
    for entry in entries:
        if entry.id is None:
            continue
        if entry.id in seen:
            return entry.id
        seen.add(entry.id)
    return None
