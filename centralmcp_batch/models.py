"""The data the batch exchanges: the host's tool reference and the published schemas.

Pure: imports neither pluggy nor mcp, so the engine can be tested with plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

MAX_CALLS = 25
MAX_ID_CHARS = 100
MAX_NAME_CHARS = 200
MAX_ARGUMENT_BYTES = 20_000
MAX_ARGUMENT_DEPTH = 8

Status = Literal["ok", "invalid_call", "unknown_tool", "blocked", "invalid_cursor", "error"]
FAILED_STATUSES = ("invalid_call", "unknown_tool", "blocked", "invalid_cursor", "error")


@dataclass(frozen=True)
class ToolRef:
    """A backend tool as the host's catalog knows it.

    ``annotations`` are MCP ToolAnnotations with their camelCase keys (an MCP ``ToolAnnotations``
    model is taken as its fields, None as none);
    ``concurrency`` caps how many calls run at once on that tool's server.
    """

    name: str
    server: str | None
    annotations: Mapping[str, Any] = field(default_factory=dict)
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.server is not None and not isinstance(self.server, str):  # it is written into the answer
            raise TypeError(
                f"ToolRef {self.name!r}: server must be a string or None; got a {type(self.server).__name__}"
            )
        annotations = self.annotations
        if type(annotations) is dict:
            return
        if annotations is None:
            object.__setattr__(self, "annotations", {})
        elif isinstance(annotations, BaseModel):  # an MCP ToolAnnotations, say a listed Tool's own
            object.__setattr__(self, "annotations", annotations.model_dump(by_alias=True, exclude_none=True))
        elif not isinstance(annotations, Mapping):
            raise TypeError(
                f"ToolRef {self.name!r}: annotations must be MCP ToolAnnotations as a mapping with their camelCase "
                f"keys ({{'readOnlyHint': True}}), a ToolAnnotations or None; got a {type(annotations).__name__}"
            )

    @property
    def read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True


@dataclass(frozen=True)
class CallContext:
    """What dispatch is told about the call it serves.

    ``request`` is the MCP request context of the client's call (SDK-specific,
    may be None); a host may use it for logging or progress of its own.
    """

    index: int | None
    call_id: str | None
    in_batch: bool
    request: Any = None


@dataclass(frozen=True)
class RateBooking:
    """What a limiter answers ``centralmcp_reserve_rate_tokens``: the tokens it booked, in call order.

    ``waits``: seconds from the answer until each booked call may start, for the first ``len(waits)``
    of the calls asked for; the rest could not start within the time asked, and nothing was booked for
    them. A limiter whose store read its clock before it answered counts the time since: a late answer
    must not put a slot later than the store did.
    ``starts_by``: seconds from the answer by which each booked call must have started; a call that
    starts later would crowd the callers booked after it, so it books again (None: no such limit).
    ``next_free``: seconds from the answer until the limiter's next free slot (None: not known).
    ``give_back``: called with the positions (0 the first) of booked calls that never started, so their
    slots go to whoever books next; it may answer an awaitable, which is awaited.
    """

    waits: Sequence[float]
    starts_by: Sequence[float] | None = None
    next_free: float | None = None
    give_back: Callable[[Sequence[int]], Any] | None = None


class BatchCall(BaseModel):
    """One entry of ``calls``, as the published input schema states it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=MAX_NAME_CHARS, description="The backend tool's name, as find_tool returns it."
    )
    arguments: dict[str, Any] | None = Field(
        default=None,
        description=(
            f"The tool's arguments; at most {MAX_ARGUMENT_BYTES} bytes as JSON, "
            f"nested at most {MAX_ARGUMENT_DEPTH} levels."
        ),
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="Correlates the result with this call; unique in the batch. Defaults to the index as a string.",
    )
    cursor: str | None = Field(
        default=None, description="A next_cursor from an earlier clipped read of the same tool and arguments."
    )


class BatchInput(BaseModel):
    calls: list[BatchCall] = Field(
        min_length=1, max_length=MAX_CALLS, description="The read calls, answered in this order."
    )


class BatchItem(BaseModel):
    """One entry's outcome. Keys come in this order: index, id, tool, server, status, then result or error."""

    index: int
    id: str | None
    tool: str | None
    server: str | None
    status: Status
    result: Any = None
    result_truncated: bool | None = None
    error: str | None = None
    error_truncated: bool | None = None


class SkeletonItem(BaseModel):
    index: int
    id: str | None
    status: Status


class Counts(BaseModel):
    total: int
    succeeded: int
    failed: int


class RateReport(BaseModel):
    """What the account's rate did to the batch."""

    tokens: int = Field(description="Rate tokens the batch drew: one per backend call it made.")
    waited_seconds: float = Field(description="How long the batch's calls waited for the account's rate, at most.")
    next_free_seconds: float | None = Field(
        description="Seconds from the answer until the account's rate has a token free; null when not known."
    )


class BatchResponse(BaseModel):
    ok: bool
    results: list[BatchItem | SkeletonItem]
    counts: Counts
    failed_ids: list[str | None]
    failed_indexes: list[int]
    truncated: bool
    skeleton: bool | None = Field(
        default=None, description="True when results were reduced to index, id and status to fit the budget."
    )
    omitted: int | None = Field(
        default=None, description="Skeleton items left out, last first, because even the skeleton did not fit."
    )
    failed_ids_truncated: bool | None = Field(
        default=None, description="True when failed_ids was cut from the end to fit; failed_indexes stays whole."
    )
    shared_calls: list[list[int]] | None = Field(
        default=None,
        description="Entries answered by one backend call (the same tool, arguments and cursor), by index.",
    )
    rate: RateReport


@dataclass(slots=True)
class Outcome:
    """What one read came to, before it becomes a batch item or a single-call answer."""

    status: Status
    tool: ToolRef | None = None
    result: Any = None
    error: str | None = None


class BatchRejection(BaseModel):
    ok: Literal[False]
    error: str


class BatchOutcome(RootModel[BatchResponse | BatchRejection]):
    pass


def input_schema() -> dict[str, Any]:
    """The schema clients read: the call object with its bounds, inlined (some clients skip $ref)."""
    schema = BatchInput.model_json_schema()
    definitions = schema.pop("$defs", {})
    entry = definitions["BatchCall"]
    entry["properties"] = {name: _nullable_as_type(field) for name, field in entry["properties"].items()}
    schema["properties"]["calls"]["items"] = entry
    # SDK 1.x's server checks every call's arguments with jsonschema.validate, which first checks
    # this schema against its dialect's metaschema: draft-07's takes half the time of the 2020-12
    # default (1.9 ms, not 4.3, a call). Every keyword here means the same in both.
    return {"$schema": OUTPUT_DIALECT, **schema}


def _nullable_as_type(field: dict[str, Any]) -> dict[str, Any]:
    """pydantic's ``anyOf: [{type: T, ...}, {type: null}]`` as ``type: [T, null]`` with the same bounds.

    The same meaning (string and object bounds do not apply to null), checked without trying two
    branches per field of every entry: the larger part of SDK 1.x's input check of 25 entries.
    """
    branches = field.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and branches[1] == {"type": "null"}):
        return field
    typed = branches[0]
    if not isinstance(typed.get("type"), str):
        return field
    merged = {key: value for key, value in field.items() if key != "anyOf"}
    return {**merged, **typed, "type": [typed["type"], "null"]}


# The published output schema is written out lean, not derived from the models above. The MCP
# client checks every structured answer against it, and SDK 1.x calls jsonschema.validate, which
# first checks the schema itself against its metaschema, so every schema node is paid per call,
# and every node under ``results.items`` once per item: jsonschema enters a subschema at about
# 4-14 us a time, so typing the items' fields cost a 25-entry answer 0.34 ms on SDK 2.x, more
# than the rest of the client's work on the answer. Hence: the envelope typed (what a client
# branches on first: ok, error, the results array and its bound, counts, truncated), the items
# described, no $ref and no anyOf, and the draft-07 dialect (its metaschema checks about 5x faster
# than 2020-12's). The models stay the strict description the tests hold answers to; a test
# holds this schema to them.
OUTPUT_DIALECT = "http://json-schema.org/draft-07/schema#"
ITEM_KEYS = (
    "index (integer), id, tool, server, status, then result (ok) or error, with result_truncated or "
    "error_truncated when shrunk; a skeleton item has only index, id and status"
)
STATUS_TEXT = ", ".join(["ok", *FAILED_STATUSES])


def output_schema() -> dict[str, Any]:
    """Both response shapes in one object: a batch answer (results and its tallies) or a rejection (ok false, error)."""
    return {
        "$schema": OUTPUT_DIALECT,
        "type": "object",
        "required": ["ok"],
        "properties": {
            "ok": {"type": "boolean", "description": "True only if every entry succeeded."},
            "error": {"type": "string", "description": "Only on a rejected batch: why; nothing ran, no results."},
            "results": {
                "type": "array",
                "maxItems": MAX_CALLS,
                "description": (
                    f"One item per entry, in call order: {ITEM_KEYS}. id and tool may be null. "
                    f"status is one of {STATUS_TEXT}."
                ),
            },
            "counts": {"type": "object", "required": ["total", "succeeded", "failed"], "description": "Integers."},
            "truncated": {"type": "boolean", "description": "True when the response was shrunk to fit its budget."},
            "shared_calls": {
                "type": "array",
                "description": (
                    "Only when identical reads (the same tool, arguments and cursor) shared one backend call: "
                    "each such group's entry indexes, in call order. Each entry still has its own item."
                ),
            },
            "rate": {
                "type": "object",
                "required": ["tokens", "waited_seconds", "next_free_seconds"],
                "description": (
                    "What the account's rate did to the batch: tokens (integer, one per backend call made), "
                    "waited_seconds (the longest wait of a call for its token), next_free_seconds (seconds from "
                    "the answer until a token is free; null when the limiter cannot tell)."
                ),
            },
        },
        "description": (
            "A batch answer carries results, counts, failed_ids and failed_indexes (arrays: the failed entries' ids "
            "and indexes, in call order) and truncated; a shrunk one may add skeleton (items cut to index, id, "
            "status), omitted (skeleton items left out) and failed_ids_truncated."
        ),
    }
