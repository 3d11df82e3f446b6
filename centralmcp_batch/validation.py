"""A backend's argument-validation error, retold so that it cannot quote an argument value.

The SDKs answer bad arguments with pydantic's text, which prints every input value and every
dict key it met. Scrubbing that text cannot be made safe (a value may hold ``]`` or
``, input_type=``), so the router never passes it on: it recognises the error and builds a new
message only from things that did not come from the caller: the tool's name, the field names of
its own input schema, list positions, and pydantic's error type and fixed message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# pydantic's header line, "N validation error(s) for <Model>": constant text, whatever the values.
_VALIDATION_ERROR = re.compile(r"\b\d+ validation errors? for ")
MAX_DETAILS = 5

# Error types whose pydantic message is a fixed sentence or carries only schema facts (bounds,
# expected literals, a pattern). Any other type (value_error, custom errors, union tags) may put
# the input into its message, so only its type is shown.
FIXED_MESSAGE_TYPES = frozenset(
    {
        "missing",
        "extra_forbidden",
        "string_type",
        "string_too_short",
        "string_too_long",
        "string_pattern_mismatch",
        "int_type",
        "int_parsing",
        "int_from_float",
        "float_type",
        "float_parsing",
        "bool_type",
        "bool_parsing",
        "dict_type",
        "list_type",
        "tuple_type",
        "set_type",
        "model_type",
        "model_attributes_type",
        "none_required",
        "too_short",
        "too_long",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "finite_number",
        "literal_error",
        "enum",
        "is_instance_of",
        "arguments_type",
    }
)


def is_validation_error(text: str) -> bool:
    return bool(_VALIDATION_ERROR.search(text))


def field_names(input_schema: Mapping[str, Any]) -> list[str]:
    properties = input_schema.get("properties")
    return list(properties) if isinstance(properties, Mapping) else []


def from_details(tool: str, details: Sequence[Mapping[str, Any]], fields: Iterable[str]) -> str:
    """The message for pydantic's structured errors (type, loc, msg; never the input)."""
    return f"invalid arguments for tool {tool!r}: " + details_text(details, fields)


def details_text(details: Sequence[Mapping[str, Any]], fields: Iterable[str]) -> str:
    """Each of pydantic's structured errors as ``field: message``, built only from what the caller did not choose."""
    known = set(fields)
    parts = [f"{_location(detail.get('loc', ()), known)}: {_message(detail)}" for detail in details[:MAX_DETAILS]]
    more = f" (and {len(details) - MAX_DETAILS} more)" if len(details) > MAX_DETAILS else ""
    return "; ".join(parts) + more


def from_text(tool: str, text: str, fields: Sequence[str]) -> str:
    """The message for a validation error that arrived as text: only the schema's field names it mentions."""
    mentioned = {line.split(".", 1)[0].split("[", 1)[0].strip() for line in text.splitlines()}
    named = [field for field in fields if field in mentioned]
    check = f"; check {', '.join(named)}" if named else ""
    return f"invalid arguments for tool {tool!r}{check} (the backend's own message is withheld: it quotes the values)"


def retold(tool: str, text: str, details: Sequence[Mapping[str, Any]] | None, fields: Sequence[str]) -> str:
    """``text`` when it is not a validation error, else a message built without it."""
    if not is_validation_error(text):
        return text
    return from_details(tool, details, fields) if details else from_text(tool, text, fields)


def _location(loc: Sequence[Any], known: set[str]) -> str:
    if not loc or loc[0] not in known:
        return "(arguments)"
    rendered = str(loc[0])
    for step in loc[1:]:
        # positions are safe to show; a string below the top level may be a key the caller chose
        rendered += f"[{step}]" if isinstance(step, int) and not isinstance(step, bool) else "[<key>]"
    return rendered


def _message(detail: Mapping[str, Any]) -> str:
    kind = str(detail.get("type", "invalid"))
    if kind in FIXED_MESSAGE_TYPES and isinstance(detail.get("msg"), str):
        return f"{detail['msg']} [{kind}]"
    return f"the value is not valid [{kind}]"
