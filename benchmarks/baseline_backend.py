"""The benchmark's backend for the CentralMCP-style comparison: one server, two read tools.

``wait`` sleeps as long as it is told (none at 0) and echoes its tag; ``blob`` answers about
``kb`` kilobytes in 1 KB rows (few enough rows that the router's 200-item page never clips it).
"""

from __future__ import annotations

from typing import Any

import anyio
from standins.centralmcp_shared import READ_ONLY

from centralmcp_batch import _compat

mcp = _compat.new_server("bench")
ROW = "x" * 1000


@mcp.tool(annotations=READ_ONLY)
async def wait(seconds: float = 0.0, tag: str = "") -> dict[str, Any]:
    """Sleep, then echo the tag."""
    if seconds > 0:
        await anyio.sleep(seconds)
    return {"tag": tag, "slept": seconds}


@mcp.tool(annotations=READ_ONLY)
def blob(kb: int = 100, tag: str = "") -> dict[str, Any]:
    """About ``kb`` KB of rows."""
    return {"tag": tag, "rows": [f"{i:05d}{ROW[5:]}" for i in range(kb)]}  # distinct rows, as a real answer has
