"""A stdio backend whose tools depend on a state file read at start-up, to test the catalog after a restart.

``down``: exits at once, as a backend that will not start. ``v1``: ``flip`` and ``vanish`` are reads.
``v2``: ``flip`` is destructive, ``vanish`` is gone and ``fresh`` is new. ``whoami`` is always a read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


def shifting_server(state: str) -> Any:
    server = _compat.new_server("shifting")

    def whoami() -> dict[str, Any]:
        return {"pid": os.getpid(), "state": state}

    def flip() -> dict[str, str]:
        return {"flipped": state}

    def vanish() -> dict[str, str]:
        return {"here": state}

    def fresh() -> dict[str, str]:
        return {"fresh": state}

    tools = [(whoami, READ), (flip, READ if state == "v1" else DESTRUCTIVE)]
    tools += [(vanish, READ)] if state == "v1" else [(fresh, READ)]
    for fn, hints in tools:
        _compat.add_tool(
            server, fn, name=fn.__name__, description=f"{fn.__name__} in the shifting backend", annotations=hints
        )
    return server


if __name__ == "__main__":
    current = Path(os.environ["SHIFTING_STATE"]).read_text().strip()
    if current == "down":
        sys.exit(3)
    anyio.run(_compat.run_stdio, shifting_server(current))
