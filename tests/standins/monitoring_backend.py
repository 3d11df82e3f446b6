"""Stand-in backend ``aruba-monitoring``: read tools (a long list, one that takes the caller's
Context, one whose upstream fails) and a diagnostic."""

import time
from typing import Annotated, Any

from pydantic import AfterValidator
from standins.centralmcp_shared import DIAGNOSTIC, READ_ONLY

from centralmcp_batch import _compat
from centralmcp_batch._compat import Context

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


@mcp.tool(annotations=READ_ONLY)
async def get_device_events(serial: str, ctx: Context, pages: int = 5) -> dict[str, Any]:
    # A long read that reports its own progress and logs, as a backend that pages through its upstream
    # does; it answers the request id it was handed.
    calls.append(("get_device_events", {"serial": serial}))
    for page in range(1, pages + 1):
        await ctx.report_progress(page, pages, f"events page {page} of {pages}")
    await ctx.info(f"read {pages} pages of events for {serial}")
    return {"serial": serial, "request_id": ctx.request_id, "pages": pages}


@mcp.tool(annotations=READ_ONLY)
def get_device_clock(serial: str) -> dict[str, Any]:
    # The wall clock as the backend is called: the tests count the calls that reach it in each second.
    calls.append(("get_device_clock", {"serial": serial}))
    return {"serial": serial, "at": time.time()}


@mcp.tool(annotations=READ_ONLY)
def get_radio_stats(serial: str) -> dict[str, Any]:
    calls.append(("get_radio_stats", {"serial": serial}))
    raise RuntimeError(f"radio service unavailable for {serial}")


@mcp.tool(annotations=READ_ONLY)
def get_client_details(mac: str) -> dict[str, Any]:
    # A read that reports its upstream's failures in an errors list, with no error key.
    calls.append(("get_client_details", {"mac": mac}))
    return {"mac": mac, "details": None, "errors": [f"404 at /clients/{mac}"]}


WEBHOOK_SECRET = "whsec-7f3a9c"


@mcp.tool(annotations=READ_ONLY)
def get_webhook(site_id: str) -> dict[str, Any]:
    # A secret-named field, as a read that mints or shows a credential returns it.
    calls.append(("get_webhook", {"site_id": site_id}))
    return {"site_id": site_id, "url": f"https://hooks.example/{site_id}", "signing_secret": WEBHOOK_SECRET}


@mcp.tool(annotations=READ_ONLY)
def check_webhook_secret(site_id: str, signing_secret: str) -> dict[str, Any]:
    calls.append(("check_webhook_secret", {"site_id": site_id, "signing_secret": signing_secret}))
    return {"site_id": site_id, "valid": signing_secret == WEBHOOK_SECRET}


@mcp.tool(annotations=READ_ONLY)
def get_webhook_report(site_id: str, notes_kb: int = 20) -> dict[str, Any]:
    # Large, and nothing in it is a list to page through: past its byte budget the router previews its text.
    calls.append(("get_webhook_report", {"site_id": site_id, "notes_kb": notes_kb}))
    webhook = {"url": f"https://hooks.example/{site_id}", "signing_secret": WEBHOOK_SECRET, "apiKey": WEBHOOK_SECRET}
    return {"site_id": site_id, "webhook": webhook, "notes": "n" * (notes_kb * 1000)}


@mcp.tool(annotations=READ_ONLY)
def get_running_config(serial: str, kb: int = 20) -> dict[str, Any]:
    # Text full of quotes, which JSON escapes: a preview of it grows once more inside the batch's answer.
    calls.append(("get_running_config", {"serial": serial, "kb": kb}))
    line = 'snmp-server location "Building 7" contact "noc"\n'
    return {"serial": serial, "config": line * (kb * 1000 // len(line))}


@mcp.tool(annotations=READ_ONLY)
def get_webhook_by_number(number: int) -> dict[str, Any]:
    calls.append(("get_webhook_by_number", {"number": number}))
    return {"number": number}


@mcp.tool(annotations=READ_ONLY)
def count_devices_by_tag(tags: dict[str, int]) -> dict[str, Any]:
    calls.append(("count_devices_by_tag", {"tags": tags}))
    return {"tags": tags}


def _site_code(code: str) -> str:
    if not code.isupper():
        raise ValueError(f"site code {code!r} must be upper case")  # quotes the value, as many validators do
    return code


@mcp.tool(annotations=READ_ONLY)
def get_site_by_code(code: Annotated[str, AfterValidator(_site_code)]) -> dict[str, Any]:
    calls.append(("get_site_by_code", {"code": code}))
    return {"code": code}


@mcp.tool(annotations=DIAGNOSTIC)
def ping_device(serial: str) -> dict[str, Any]:
    calls.append(("ping_device", {"serial": serial}))
    return {"serial": serial, "rtt_ms": 3}
