"""The demo's output as plain text: aligned tables, short result summaries, a progress line.

Plain text on purpose: it reads the same in a terminal, a CI log and a pipe, and costs no
dependency. Only the progress line uses a terminal control (redrawing itself), and only on a TTY.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with aligned columns."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(header)] + [len(row[column]) for row in cells]) for column, header in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  " + "  ".join(value.ljust(width) for value, width in zip(values, widths, strict=False)).rstrip()

    rule = "  " + "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule] + [line(row) for row in cells])


def summary(item: Mapping[str, Any], width: int = 64) -> str:
    """A short, readable gist of one batch item: list sizes and a cursor, fields, or the error."""
    if item.get("status") != "ok":
        return cut(str(item.get("error", "")), width)
    result = item.get("result")
    if not isinstance(result, dict):
        return cut(json.dumps(result, separators=(",", ":")), width)
    lists = [(key, value) for key, value in result.items() if isinstance(value, list)]
    if lists:
        key, value = lists[0]
        text = f"{len(value)} of {result['total']} {key}" if "total" in result else f"{len(value)} {key}"
        return cut(text + (" + next_cursor" if result.get("next_cursor") else ""), width)
    fields = (f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in result.items())
    return cut(" ".join(fields), width)


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


class ProgressLine:
    """Shows the batch's progress notifications as they arrive: one redrawn line on a terminal.

    Anywhere else (a pipe, a CI log) each notification is a line of its own, with no control codes.
    """

    def __init__(self, say: Callable[[str], None], stream: TextIO | None = None) -> None:
        self.say, self.shown = say, False
        self.stream = sys.stdout if stream is None else stream
        self.redraw = self.stream.isatty()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        text = f"  progress {progress:g}/{total:g}" if total else f"  progress {progress:g}"
        text += f"  {message}" if message else ""
        if self.redraw:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
        else:
            self.say(text)
        self.shown = True

    def finish(self) -> None:
        if self.redraw and self.shown:
            self.stream.write("\n")
