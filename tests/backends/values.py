"""A backend that answers the values it is given, repeated: for the tests of the budget as the answer is written.

``values(rows, times)`` answers ``{"rows": rows * times}``: floats pydantic writes longer than Python's
``json`` (``1e-05`` as ``0.00001``), text with escapes, control characters and characters outside ASCII,
as many times over as a test needs to pass a budget. In process, or as a module backend of ``serve``.
"""

from __future__ import annotations

from typing import Any

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False}


def values_server() -> Any:
    server = _compat.new_server("values")

    def values(rows: list[Any], times: int = 1) -> dict[str, Any]:
        return {"rows": rows * times}

    _compat.add_tool(server, values, name="values", description="the rows given, times over", annotations=READ)
    return server
