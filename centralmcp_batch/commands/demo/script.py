"""What the demo sends, what each call must answer, and how an answer is checked (plain data, no I/O)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DemoCall:
    id: str
    name: str
    arguments: Mapping[str, Any]
    expected: str  # the status the batch must give it

    def entry(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


def demo_calls() -> list[DemoCall]:
    """The demo's mixed batch: reads, one write the gate must block, one unknown tool."""
    from ...router.demo import DemoNetwork

    network = DemoNetwork()
    site = network.sites[0]["site_id"]
    access_point = next(device for device in network.devices if device["kind"] == "access_point")["serial"]
    return [
        DemoCall("sites", "list_sites", {}, "ok"),
        DemoCall("site-health", "get_site_health", {"site_id": site}, "ok"),
        DemoCall("aps", "list_devices", {"site_id": site, "kind": "access_point"}, "ok"),
        DemoCall("device", "get_device", {"serial": access_point}, "ok"),
        DemoCall("health", "get_device_health", {"serial": access_point}, "ok"),
        DemoCall("critical", "list_alerts", {"severity": "critical"}, "ok"),
        DemoCall("clients", "list_clients", {}, "ok"),
        DemoCall("reboot", "reboot_device", {"serial": access_point}, "blocked"),
        DemoCall("vlans", "list_vlans", {"site_id": site}, "unknown_tool"),
    ]


def batch_problems(response: Mapping[str, Any], calls: list[DemoCall]) -> list[str]:
    """Every way the batch's answer differs from what the demo expects; empty when none."""
    statuses = {item.get("id"): item.get("status") for item in response.get("results", [])}
    problems = [
        f"call {call.id!r} ({call.name}) was {statuses.get(call.id)!r}, expected {call.expected!r}"
        for call in calls
        if statuses.get(call.id) != call.expected
    ]
    clients: Mapping[str, Any] = next((item for item in response.get("results", []) if item.get("id") == "clients"), {})
    if clients.get("status") == "ok" and "next_cursor" not in json.dumps(clients.get("result")):
        problems.append("list_clients came back whole: the router did not clip it to a page with a next_cursor")
    return problems


def same_data(single: Any, batched: Any) -> bool:
    """Whether a single call and the batch answered the same, ignoring what depends on the byte budget."""
    return bool(_data(single) == _data(batched))


def _data(result: Any) -> Any:
    # The bounding markers and the cursor depend on the budget of the call, not on the data.
    if not isinstance(result, dict):
        return result
    return {key: value for key, value in result.items() if not key.startswith("_") and key != "next_cursor"}
