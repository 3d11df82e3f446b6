"""A small ticket backend for the router tests: in process, or as a stdio subprocess (``python tickets.py``)."""

from __future__ import annotations

import os
from typing import Any

import anyio

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}
DIAGNOSTIC = {"title": "Diagnostic", "readOnlyHint": False, "destructiveHint": False}
TICKETS = [{"id": f"T-{n:04d}", "title": f"ticket {n}", "state": "open" if n % 3 else "closed"} for n in range(450)]


def tickets_server(prefix: str = "") -> Any:
    server = _compat.new_server(f"tickets{prefix}")

    def list_tickets(state: str | None = None) -> dict[str, Any]:
        return {"tickets": [t for t in TICKETS if state in (None, t["state"])], "source": "tickets"}

    def get_ticket(ticket_id: str) -> dict[str, Any]:
        return next(t for t in TICKETS if t["id"] == ticket_id)

    async def slow_ticket(seconds: float = 0.05) -> dict[str, Any]:
        await anyio.sleep(seconds)
        return {"slept": seconds, "pid": os.getpid()}

    def process_id() -> dict[str, int]:
        return {"pid": os.getpid()}

    def close_ticket(ticket_id: str) -> dict[str, Any]:
        return {"closed": ticket_id}

    def purge_tickets() -> dict[str, Any]:
        return {"purged": True}

    def ping_ticketing() -> str:
        return "pong"

    def unannotated_ticket_count() -> int:
        return len(TICKETS)

    for fn, hints in [
        (list_tickets, READ),
        (get_ticket, READ),
        (slow_ticket, READ),
        (process_id, READ),
        (close_ticket, WRITE),
        (purge_tickets, DESTRUCTIVE),
        (ping_ticketing, DIAGNOSTIC),
        (unannotated_ticket_count, None),
    ]:
        name = prefix + fn.__name__
        server.add_tool(
            fn,
            name=name,
            description=f"{fn.__name__.replace('_', ' ')} in the ticketing system",
            annotations=_annotations(hints),
        )
    return server


def _annotations(annotations: dict[str, Any] | None) -> Any:
    return None if annotations is None else _compat.ToolAnnotations.model_validate(annotations)


if __name__ == "__main__":
    anyio.run(_compat.run_stdio, tickets_server(os.environ.get("TICKETS_PREFIX", "")))
