"""Stand-in backend ``aruba-config``: one read, one write and one destructive tool."""

from typing import Any

from standins.centralmcp_shared import DESTRUCTIVE, READ_ONLY, WRITE
from standins.monitoring_backend import calls

from centralmcp_batch import _compat

mcp = _compat.new_server("aruba-config")


@mcp.tool(annotations=READ_ONLY)
def list_sites() -> list[dict[str, Any]]:
    calls.append(("list_sites", {}))
    return [{"site_id": name} for name in ("hq", "branch")]


@mcp.tool(annotations=WRITE)
def rename_site(site_id: str, name: str) -> dict[str, Any]:
    calls.append(("rename_site", {"site_id": site_id}))
    return {"renamed": site_id}


@mcp.tool(annotations=DESTRUCTIVE)
def reboot_device(serial: str) -> dict[str, Any]:
    calls.append(("reboot_device", {"serial": serial}))
    return {"rebooted": serial}
