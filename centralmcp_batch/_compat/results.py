"""What a tool and a tool's answer look like, read the same way whichever SDK line made them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .sdk import SDK_2


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    output_schema: dict[str, Any] | None = None


def annotations_dict(annotations: Any) -> dict[str, Any]:
    """ToolAnnotations (either SDK, or a mapping) as a dict with camelCase keys."""
    if annotations is None:
        return {}
    if isinstance(annotations, Mapping):
        return dict(annotations)
    dumped: dict[str, Any] = annotations.model_dump(by_alias=True, exclude_none=True)
    return dumped


def annotation_hint(annotations: Any, hint: str) -> Any:
    """One hint of ToolAnnotations (either SDK) or of a mapping, by its camelCase name; None when unset.

    An attribute read, as CentralMCP's own gate reads it: no dump of the whole model per call.
    """
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        return annotations.get(hint)
    return getattr(annotations, _HINT_ATTRIBUTES.get(hint, hint) if SDK_2 else hint, None)


# SDK 2.x names the model's fields in snake_case (the camelCase names are their aliases).
_HINT_ATTRIBUTES = {
    "readOnlyHint": "read_only_hint",
    "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint",
    "openWorldHint": "open_world_hint",
}


@dataclass(frozen=True)
class Answer:
    """A tool call's answer, whichever SDK produced it."""

    is_error: bool
    structured: Any | None = None
    text: str = ""
    # every content block as its JSON, when some are not text (images, audio, resources, links)
    blocks: tuple[dict[str, Any], ...] = ()

    @property
    def payload(self) -> Any:
        """Structured content if given, else the blocks when some are not text, else the text as JSON, else the text.

        Reading only the text would answer an image, or a resource, as an empty ``ok``.
        """
        if self.structured is not None:
            return self.structured
        if self.blocks:
            return {"content": list(self.blocks)}
        try:
            return json.loads(self.text)
        except ValueError:
            return self.text


def _joined_text(blocks: Sequence[Any]) -> str:
    return "\n".join(getattr(block, "text", "") for block in blocks if getattr(block, "type", None) == "text")


def _non_text_blocks(blocks: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """All of ``blocks`` as JSON when any is not text; none when all are (the joined text says it all)."""
    if all(getattr(block, "type", None) == "text" for block in blocks):
        return ()
    return tuple(block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in blocks)


def _from_blocks(blocks: Sequence[Any], structured: Any = None, *, is_error: bool = False) -> Answer:
    return Answer(is_error, structured, _joined_text(blocks), _non_text_blocks(blocks))


def read_result(result: Any) -> Answer:
    if SDK_2:
        return _from_blocks(result.content, result.structured_content, is_error=bool(result.is_error))
    return _from_blocks(result.content, result.structuredContent, is_error=bool(result.isError))


def _tool_info(tool: Any) -> ToolInfo:
    schema = tool.input_schema if SDK_2 else tool.inputSchema
    output = tool.output_schema if SDK_2 else tool.outputSchema
    return ToolInfo(tool.name, tool.description or "", dict(schema or {}), annotations_dict(tool.annotations), output)
