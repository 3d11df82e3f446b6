"""A backend with typed arguments, for the validation-error leak tests: in process, or as a stdio subprocess."""

from __future__ import annotations

from typing import Any, Literal

import anyio

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False}


def probe_server() -> Any:
    server = _compat.new_server("probe")

    def probe_read(
        serial: str,
        count: int = 0,
        tags: list[list[int]] | None = None,
        filters: dict[str, int] | None = None,
        mode: Literal["fast", "full"] = "fast",
    ) -> dict[str, Any]:
        return {"serial_length": len(serial), "count": count, "mode": mode}

    _compat.add_tool(server, probe_read, name="probe_read", description="a read with typed arguments", annotations=READ)
    return server


if __name__ == "__main__":
    anyio.run(_compat.run_stdio, probe_server())
