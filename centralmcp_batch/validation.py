"""A backend's error about a call, retold so that it cannot quote an argument value.

Validators print the input they refuse: pydantic every value and dict key it met, jsonschema
(SDK 1.x's low-level ``Server``) ``'VALUE' is not of type 'integer'``, zod (the TypeScript SDK)
``received 'VALUE'``. Scrubbing such text cannot be made safe (a value may hold ``]`` or
``, input_type=``), and recognising each wording would miss the next one, so two rules hold
whatever the wording:

1. An error about the arguments is never passed on. It is told by JSON-RPC's "Invalid params" code
   (-32602) or by words every validator's text has (``is_argument_error``), and the message is built
   anew from what the caller did not choose: the tool's name, its input schema's field names and what
   the schema asks there (a type, a bound, its own enum values), list positions. The details come, best
   first, from pydantic's structured errors (an in-process backend), from the router's own check of the
   arguments against the tool's published schema (``schema_problems``), or else only the schema's
   fields the text names.
2. Any other error text is passed on with the call's own argument values cut out of it (``redacted``):
   every string in the arguments, keys included, and every number, as written or as JSON or Python
   escape it, of at least MIN_REDACTED_CHARS characters, and every run of FRAGMENT_CHARS characters it
   shares with a longer one (a value the backend cut short).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pydantic_core

INVALID_PARAMS = -32602  # JSON-RPC's "Invalid params"
# Words an argument-validation error has in the SDKs' and validators' own texts: pydantic's header and
# "validation error" (also the SDKs' "Input validation error"), the TypeScript SDK's "Invalid arguments for
# tool", JSON-RPC's code, jsonschema's and zod's phrases. Only the choice of message rests on them: a text
# that has none of them is still redacted.
_ARGUMENT_ERROR_WORDS = re.compile(
    r"\b\d+ validation errors? for |validation error|invalid (?:arguments?|params|parameters)\b|-32602"
    r"|is not of type|is a required property|additional properties are not allowed"
    r"|invalid_type|invalid_enum_value|invalid enum value|unrecognized keys?",
    re.IGNORECASE,
)
MAX_DETAILS = 5
# How much of a backend's error text is read and passed on: the batch shows 500 characters of it, and the
# redaction's cost grows with the text.
MAX_ERROR_CHARS = 2_000
MIN_REDACTED_CHARS = 4
FRAGMENT_CHARS = 12
REDACTED = "<value>"
WITHHELD = "(the backend's own message is withheld: it may quote the values)"

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


def is_argument_error(text: str, code: int | None = None) -> bool:
    """Whether a backend's error is about the call's arguments: JSON-RPC's "Invalid params", or a validator's words."""
    return code == INVALID_PARAMS or bool(_ARGUMENT_ERROR_WORDS.search(text[:MAX_ERROR_CHARS]))


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
    """The message for an argument error known only as text: the schema's field names the text mentions."""
    named = [field for field in fields if _mentions(text[:MAX_ERROR_CHARS], field)]
    check = f"; check {', '.join(named[:MAX_DETAILS])}" if named else ""
    return f"invalid arguments for tool {tool!r}{check} {WITHHELD}"


def retold(
    tool: str,
    text: str,
    arguments: Mapping[str, Any],
    schema: Mapping[str, Any],
    *,
    code: int | None = None,
    details: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """A backend's error ``text`` as the caller may see it: an argument error built anew from ``details``
    (pydantic's), else from the arguments checked against the tool's ``schema``, else from the schema's fields
    the text names; any other text with the argument values cut out. Pure Python over the arguments: the
    router calls it in a worker thread."""
    fields = field_names(schema)
    if not is_argument_error(text, code):
        return redacted(text, arguments, declared_names(schema))
    if details:
        return from_details(tool, details, fields)
    problems = schema_problems(arguments, schema)
    if problems:
        return f"invalid arguments for tool {tool!r}: {problems}"
    return from_text(tool, text, fields)


# -- the router's own check against the tool's schema ---------------------------------


def schema_problems(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """What ``arguments`` break in the tool's own input ``schema``, told in the schema's terms only; None when the
    check finds nothing or cannot run (no schema, one jsonschema refuses, a reference it will not follow).

    It is jsonschema's check, less the keywords that run the backend's regular expressions over the
    caller's text (``pattern``, ``patternProperties``): a pattern that backtracks would hold the thread.
    """
    if not isinstance(schema, Mapping) or not schema:
        return None
    try:
        validator = _checker(schema)
        found = list(itertools.islice(validator.iter_errors(dict(arguments)), MAX_DETAILS + 1))
    except Exception:  # a schema jsonschema refuses, a $ref it cannot resolve, a nesting too deep
        return None
    if not found:
        return None
    fields, declared = set(field_names(schema)), declared_names(schema)
    parts = [part for error in found[:MAX_DETAILS] for part in _schema_parts(error, fields, declared)]
    return "; ".join(parts) + (" (and more)" if len(found) > MAX_DETAILS else "")


def _checker(schema: Mapping[str, Any]) -> Any:
    # Imported only once a backend has refused a call's arguments; it ships no type stubs (used through Any).
    import jsonschema  # type: ignore[import-untyped]

    draft = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return _without_regexes(draft)(schema)


@functools.cache
def _without_regexes(draft: Any) -> Any:
    import jsonschema

    original = draft.VALIDATORS.get("additionalProperties")

    def skipped(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        return iter(())

    def additional(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        # jsonschema tells an additional property by matching every patternProperties pattern on it
        if original is None or "patternProperties" in schema:
            return iter(())
        return original(validator, value, instance, schema) or iter(())

    replaced = {"pattern": skipped, "patternProperties": skipped, "unevaluatedProperties": skipped}
    return jsonschema.validators.extend(draft, {**replaced, "additionalProperties": additional})


def _schema_parts(error: Any, fields: set[str], declared: set[str]) -> list[str]:
    error = _innermost(error)
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [name for name in error.validator_value if isinstance(name, str) and name not in error.instance]
        return [f"{_location([*path, name], fields, declared)}: required, and missing" for name in missing[:2]]
    return [f"{_location(path, fields, declared)}: {_schema_message(error)}"]


def _innermost(error: Any) -> Any:
    """For a value no choice of an anyOf or oneOf takes, the choice that took it furthest (``list[int] | None``
    given a list holding a string: the string, not "expected null"), as jsonschema's ``best_match`` picks it."""
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped] # no type stubs

    while error.validator in ("anyOf", "oneOf") and error.context:
        deeper = [sub for sub in error.context if sub.relative_path]
        if not deeper:
            break
        error = best_match(deeper)
    return error


def _schema_message(error: Any) -> str:
    keyword, expected = error.validator, error.validator_value
    if keyword == "type":
        return f"expected {_types(expected)}"
    if keyword in ("anyOf", "oneOf"):
        choices = [_expectation(sub) for sub in error.context if not sub.relative_path]
        return f"expected {' or '.join(dict.fromkeys(choices))}" if choices else "matches none of the schema's choices"
    if keyword in ("enum", "const"):
        return f"expected {_expectation(error)}"
    if keyword == "additionalProperties":
        return "has a key the schema does not allow"
    bound = _BOUNDS.get(keyword)
    if bound is not None:
        return bound.format(_shown(expected))
    return f"fails the schema's {_shown(keyword)} check"


def _expectation(error: Any) -> str:
    """What one refusing keyword asks for, from the schema's side only."""
    if error.validator == "type":
        return _types(error.validator_value)
    if error.validator == "enum":
        values = list(error.validator_value) if isinstance(error.validator_value, list) else []
        shown = ", ".join(_shown(value) for value in values[:MAX_DETAILS])
        return f"one of {shown}{', ...' if len(values) > MAX_DETAILS else ''}"
    if error.validator == "const":
        return _shown(error.validator_value)
    return "another shape"


_BOUNDS = {
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "exclusiveMinimum": "must be more than {}",
    "exclusiveMaximum": "must be less than {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters",
    "maxLength": "must be at most {} characters",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "minProperties": "must have at least {} keys",
    "maxProperties": "must have at most {} keys",
    "uniqueItems": "must have no item twice",
}


def _types(expected: Any) -> str:
    names = expected if isinstance(expected, list) else [expected]
    return " or ".join(_shown(name, quoted=False) for name in names[:MAX_DETAILS])


def _shown(value: Any, *, quoted: bool = True, limit: int = 40) -> str:
    """A value from the backend's schema (never the caller's), as compact JSON, cut."""
    if isinstance(value, str) and not quoted:
        text = value
    else:
        try:
            text = pydantic_core.to_json(value, fallback=repr).decode()
        except Exception:
            text = "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def declared_names(schema: Any, found: set[str] | None = None, depth: int = 0) -> set[str]:
    """Every property name the schema declares, at any depth (bounded): names the caller did not choose."""
    found = set() if found is None else found
    if depth > 32 or len(found) > 10_000:
        return found
    if isinstance(schema, Mapping):
        properties = schema.get("properties")
        if isinstance(properties, Mapping):
            found.update(name for name in properties if isinstance(name, str))
        for value in schema.values():
            declared_names(value, found, depth + 1)
    elif isinstance(schema, list):
        for value in schema:
            declared_names(value, found, depth + 1)
    return found


# -- any other error: the call's own values cut out -------------------------------------


def redacted(text: str, arguments: Any, names: Collection[str] = ()) -> str:
    """``text`` (cut to MAX_ERROR_CHARS) with each of the call's argument values in it, and each run of at least
    FRAGMENT_CHARS characters it shares with a longer one, replaced by REDACTED. ``names`` are the tool's own
    (its schema's field names): the caller did not choose them, so a key that is one stays."""
    text = text[:MAX_ERROR_CHARS]
    strings = {value for value in _strings(arguments) if value not in names}
    forms = {form for value in strings for form in _forms(value) if len(form) >= MIN_REDACTED_CHARS}
    if not forms or len(text) < MIN_REDACTED_CHARS:
        return text
    heads = _runs(text, MIN_REDACTED_CHARS)
    runs = _runs(text, FRAGMENT_CHARS)
    shared_runs = set(runs)
    cut = bytearray(len(text))  # 1 where a character is cut out
    for form in forms:
        if form[:MIN_REDACTED_CHARS] in heads:  # most forms are not in the text: told by one lookup
            for start in _occurrences(text, form):
                cut[start : start + len(form)] = b"\1" * len(form)
        if len(form) > FRAGMENT_CHARS:
            windows = {form[i : i + FRAGMENT_CHARS] for i in range(len(form) - FRAGMENT_CHARS + 1)}
            for run in windows & shared_runs:
                for start in runs[run]:
                    cut[start : start + FRAGMENT_CHARS] = _FRAGMENT_CUT
    return _spliced(text, cut)


_FRAGMENT_CUT = b"\1" * FRAGMENT_CHARS
_CUT_RUNS = re.compile(rb"\x01+")


def _spliced(text: str, cut: bytearray) -> str:
    """``text`` with each run of characters marked in ``cut`` replaced by REDACTED."""
    kept, end = [], 0
    for run in _CUT_RUNS.finditer(cut):
        kept += [text[end : run.start()], REDACTED]
        end = run.end()
    kept.append(text[end:])
    return "".join(kept)


def _runs(text: str, length: int) -> dict[str, list[int]]:
    """Where each run of ``length`` characters starts in ``text``. A run shared with a value is cut out at every
    place it stands, and a longer shared stretch is the union of its runs: each place holds one run only, so
    the work is bounded by the text, however often a run repeats in it."""
    found: dict[str, list[int]] = {}
    for start in range(len(text) - length + 1):
        found.setdefault(text[start : start + length], []).append(start)
    return found


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string and number in ``value``, dict keys included, as text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None or depth > 64:
        return
    elif isinstance(value, int | float):
        yield from {str(value), repr(value), _json_text(value)}
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, depth + 1)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def _json_text(value: Any) -> str:
    try:
        return pydantic_core.to_json(value).decode()
    except Exception:
        return ""


def _forms(text: str) -> set[str]:
    """``text`` as it may stand in another text: as is, and as JSON and Python escape it inside quotes."""
    if text.isascii() and text.isprintable() and not _ESCAPED.intersection(text):
        return {text}  # nothing in it that either escapes
    return {text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1], repr(text)[1:-1]}


_ESCAPED = frozenset("\\\"'")


def _occurrences(text: str, form: str) -> Iterator[int]:
    start = text.find(form)
    while start != -1:
        yield start
        start = text.find(form, start + 1)


# -- shared -----------------------------------------------------------------------------


def _mentions(text: str, name: str) -> bool:
    return bool(re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text))


def _location(loc: Sequence[Any], known: set[str], declared: set[str] | frozenset[str] = frozenset()) -> str:
    if not loc or loc[0] not in known:
        return "(arguments)"
    rendered = str(loc[0])
    for step in loc[1:]:
        # positions are safe to show, and names the schema declares; any other key may be the caller's own
        if isinstance(step, int) and not isinstance(step, bool):
            rendered += f"[{step}]"
        else:
            rendered += f".{step}" if step in declared else "[<key>]"
    return rendered


def _message(detail: Mapping[str, Any]) -> str:
    kind = str(detail.get("type", "invalid"))
    if kind in FIXED_MESSAGE_TYPES and isinstance(detail.get("msg"), str):
        return f"{detail['msg']} [{kind}]"
    return f"the value is not valid [{kind}]"
