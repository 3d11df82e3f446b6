"""Stand-in backend ``aruba-monitoring``: read tools, one of them a long list, and a diagnostic."""

from typing import Any

from centralmcp_batch import _compat
from standins.centralmcp_shared import DIAGNOSTIC, READ_ONLY

mcp = _compat.new_server("aruba-monitoring")
calls: list[tuple[str, dict[str, Any]]] = []  # what reached this backend, for the tests


@mcp.tool(annotations=READ_ONLY)
def list_devices(site_id: str, count: int = 450) -> dict[str, Any]:
    calls.append(("list_devices", {"site_id": site_id, "count": count}))
    return {"site_id": site_id, "devices": [{"serial": f"SN{i:05d}", "site": site_id} for i in range(count)]}


@mcp.tool(annotations=READ_ONLY)
def get_device(serial: str) -> dict[str, Any]:
    calls.append(("get_device", {"serial": serial}))
    return {"serial": serial, "status": "up"}


@mcp.tool(annotations=DIAGNOSTIC)
def ping_device(serial: str) -> dict[str, Any]:
    calls.append(("ping_device", {"serial": serial}))
    return {"serial": serial, "rtt_ms": 3}
