"""A backend whose one read says when it ran: the shared-rate tests judge the pace from these stamps."""

from __future__ import annotations

import os
import time
from typing import Any

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


def clock_server() -> Any:
    server = _compat.new_server("clock")

    def stamp(tag: str) -> dict[str, Any]:
        return {
            "tag": tag,
            "at": time.time(),
            "pid": os.getpid(),
        }  # the wall clock: one timeline for every process here

    server.add_tool(
        stamp,
        name="stamp",
        description="the time this call ran",
        annotations=_compat.ToolAnnotations.model_validate(READ),
    )
    return server
