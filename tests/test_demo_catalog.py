"""The embedded demo catalog, called over real in-memory MCP client sessions."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from centralmcp_batch import _compat
from centralmcp_batch.ratelimit import KEY_ENV, STORE_ENV
from centralmcp_batch.router import demo

READ_HINTS = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
EXPECTED_TOOLS = {
    "inventory": {"list_sites", "get_site", "list_devices", "get_device", "list_clients"},
    "monitoring": {"list_alerts", "get_device_health", "get_site_health"},
    "changes": {"reboot_device", "set_device_firmware", "delete_site"},
}


@pytest.fixture(autouse=True)
def no_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(demo.LATENCY_ENV, "0")


async def call(server: Any, name: str, arguments: dict[str, Any]) -> _compat.Answer:
    async with _compat.connect(server) as client:
        return await client.call_tool(name, arguments)


@pytest.mark.anyio
async def test_each_backend_publishes_its_tools_with_hints() -> None:
    for backend, server in demo.demo_backends().items():
        async with _compat.connect(server) as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
        assert set(tools) == EXPECTED_TOOLS[backend]
        for tool in tools.values():
            assert tool.description
            if backend == "changes":
                assert tool.annotations["readOnlyHint"] is False
            else:
                assert tool.annotations == READ_HINTS
    changes = {tool.name: tool.annotations for tool in _compat.server_tools(demo.demo_backends()["changes"])}
    assert changes["delete_site"]["destructiveHint"] is True
    assert changes["reboot_device"]["destructiveHint"] is False


@pytest.mark.anyio
async def test_list_clients_is_larger_than_the_router_item_budget() -> None:
    answer = await call(demo.demo_backends()["inventory"], "list_clients", {})
    assert not answer.is_error
    clients = answer.payload["clients"]
    assert len(clients) == answer.payload["total"] > 200
    assert len({client["mac"] for client in clients}) == len(clients)


@pytest.mark.anyio
async def test_filters_narrow_the_lists() -> None:
    inventory = demo.demo_backends()["inventory"]
    site = demo.SITES[1][0]
    devices = (await call(inventory, "list_devices", {"site_id": site, "kind": "access_point"})).payload["devices"]
    assert devices and all(device["site_id"] == site and device["kind"] == "access_point" for device in devices)
    guests = (await call(inventory, "list_clients", {"ssid": "guest"})).payload
    assert 0 < guests["total"] < len(demo.DemoNetwork().clients)
    assert {client["ssid"] for client in guests["clients"]} == {"guest"}


@pytest.mark.anyio
async def test_health_and_alerts_agree_with_the_inventory() -> None:
    network = demo.DemoNetwork()
    monitoring = demo.demo_backends(network)["monitoring"]
    down = next(device for device in network.devices if device["status"] == "down")
    health = (await call(monitoring, "get_device_health", {"serial": down["serial"]})).payload
    assert health["status"] == "down" and health["uptime_seconds"] == 0
    critical = (await call(monitoring, "list_alerts", {"severity": "critical"})).payload["alerts"]
    assert down["serial"] in {alert["serial"] for alert in critical}
    site = (await call(monitoring, "get_site_health", {"site_id": down["site_id"]})).payload
    assert site["devices_down"] >= 1 and site["devices_up"] + site["devices_down"] == len(
        [device for device in network.devices if device["site_id"] == down["site_id"]]
    )


SECRET = "SECRET-7f3a"
ID_TOOLS = [
    ("inventory", "get_device", "serial"),
    ("inventory", "get_site", "site_id"),
    ("monitoring", "get_device_health", "serial"),
    ("monitoring", "get_site_health", "site_id"),
    ("changes", "reboot_device", "serial"),
    ("changes", "delete_site", "site_id"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("server", "tool", "argument"), ID_TOOLS)
async def test_unknown_ids_are_tool_errors_with_a_hint_and_no_value(server: str, tool: str, argument: str) -> None:
    answer = await call(demo.demo_backends()[server], tool, {argument: SECRET})
    assert answer.is_error
    kind = "site" if argument == "site_id" else "device"
    assert f"Unknown {kind}: no {kind} has that {argument}." in answer.text and "gives the" in answer.text
    assert SECRET not in answer.text


@pytest.mark.anyio
async def test_through_the_demo_router_an_unknown_id_never_reaches_the_response() -> None:
    router = demo.demo_router()
    reads = [{"name": tool, "arguments": {key: SECRET}} for server, tool, key in ID_TOOLS if server != "changes"]
    async with _compat.connect(router.server) as client:
        batch = await client.call_tool("invoke_read_tool_batch", {"calls": reads})
        single = await client.call_tool("invoke_read_tool", {"name": "get_device", "arguments": {"serial": SECRET}})
    assert [item["status"] for item in batch.payload["results"]] == ["error"] * len(reads)
    assert "Unknown device: no device has that serial" in batch.payload["results"][0]["error"]
    for answer in (batch, single):
        assert SECRET not in answer.text and SECRET not in str(answer.structured)


@pytest.mark.anyio
async def test_writes_really_change_the_shared_network() -> None:
    network = demo.DemoNetwork()
    backends = demo.demo_backends(network)
    serial, site = network.devices[0]["serial"], network.sites[-1]["site_id"]
    reboot = await call(backends["changes"], "reboot_device", {"serial": serial})
    assert reboot.payload["action"] == "reboot" and reboot.payload["change_id"] == "CHG-0001"
    assert (await call(backends["inventory"], "get_device", {"serial": serial})).payload["status"] == "rebooting"
    await call(backends["changes"], "delete_site", {"site_id": site})
    sites = (await call(backends["inventory"], "list_sites", {})).payload["sites"]
    assert site not in {entry["site_id"] for entry in sites}
    assert [change["action"] for change in network.changes] == ["reboot", "delete_site"]


def test_the_data_is_the_same_on_every_run() -> None:
    assert demo.DemoNetwork() == demo.DemoNetwork()


LATENCIES = [("0", 0.0), ("250", 0.25), ("", 0.08), ("fast", 0.08), ("2.5", 0.08), ("-5", 0.0), ("999999", 5.0)]


@pytest.mark.parametrize(("raw", "seconds"), LATENCIES)
def test_latency_setting(monkeypatch: pytest.MonkeyPatch, raw: str, seconds: float) -> None:
    monkeypatch.setenv(demo.LATENCY_ENV, raw)
    assert demo.latency_seconds() == pytest.approx(seconds)


@pytest.mark.anyio
async def test_reads_wait_the_simulated_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(demo.LATENCY_ENV, "300")
    started = time.perf_counter()
    await call(demo.demo_backends()["inventory"], "list_sites", {})
    assert time.perf_counter() - started >= 0.25


@pytest.mark.anyio
@pytest.mark.parametrize(("named", "bucket"), [(None, "demo"), ("lab", "lab")])
async def test_the_demo_draws_from_a_bucket_of_its_own_in_the_shared_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str | None, bucket: str
) -> None:
    # Real routers on this machine share the account's bucket ("central") in this file; the demo's
    # made-up calls spend none of it, unless a key is named for it.
    store = tmp_path / "rate.sqlite3"
    monkeypatch.setenv(STORE_ENV, f"sqlite:///{store}")
    if named is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, named)
    router = demo.demo_router()
    try:
        async with _compat.connect(router.server) as client:
            answer = await client.call_tool("invoke_read_tool_batch", {"calls": [{"name": "list_sites"}] * 3})
    finally:
        await router.limiter.close()
    assert answer.payload["ok"] is True
    with sqlite3.connect(store) as db:
        assert [key for (key,) in db.execute("SELECT key FROM gcra_buckets")] == [bucket]
