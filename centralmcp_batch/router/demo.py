"""The embedded demo catalog: a small, read-mostly network inventory behind three MCP servers.

``inventory`` (sites, devices, wireless clients), ``monitoring`` (alerts, health) and
``changes`` (writes, one of them destructive, which the router's read-only gate must block).
Every record is generated here from fixed numbers, so the demo needs no data files and gives
the same answers on every run and every install.

Each read waits a little, like a real management API: ``CENTRALMCP_DEMO_LATENCY_MS``
(default 80, from 0 to 5000; a number out of range clamps to the nearest bound, anything that is
not a whole number means the default) sets the delay per read.
``list_clients`` answers hundreds of records, more than the router's item budget, so the
router clips it and hands out a continuation cursor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import _compat
from ..settings import Setting

LATENCY_ENV = "CENTRALMCP_DEMO_LATENCY_MS"
DEFAULT_LATENCY_MS = 80
MAX_LATENCY_MS = 5000
LATENCY = Setting(LATENCY_ENV, DEFAULT_LATENCY_MS, 0, MAX_LATENCY_MS)

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": True}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}

SITES = (
    ("site-sjc", "HQ San Jose", "San Jose", "US"),
    ("site-aus", "Branch Austin", "Austin", "US"),
    ("site-nyc", "Branch New York", "New York", "US"),
    ("site-lon", "EMEA London", "London", "GB"),
    ("site-ber", "Branch Berlin", "Berlin", "DE"),
    ("site-sin", "APAC Singapore", "Singapore", "SG"),
)
# (kind, model, how many per site)
DEVICE_MIX = (("gateway", "9004", 1), ("switch", "CX 6300M", 2), ("access_point", "AP-635", 7))
SSIDS = ("corp", "guest", "iot")
ALERT_KINDS = (
    ("critical", "Device unreachable"),
    ("major", "High CPU utilisation"),
    ("major", "DHCP scope nearly exhausted"),
    ("minor", "Rogue access point detected"),
    ("minor", "Firmware update available"),
)
CLIENTS_PER_AP = 12


def latency_seconds() -> float:
    """The simulated delay of one read, read on every call so a test can change it."""
    return LATENCY.read(os.environ) / 1000


async def simulated_latency() -> None:
    await anyio.sleep(latency_seconds())


def _sites() -> list[dict[str, Any]]:
    return [{"site_id": sid, "name": name, "city": city, "country": country} for sid, name, city, country in SITES]


def _devices() -> list[dict[str, Any]]:
    devices = []
    for site_number, (site_id, *_rest) in enumerate(SITES):
        for kind, model, count in DEVICE_MIX:
            for unit in range(count):
                serial = f"CN{site_number:02d}{kind[0].upper()}{unit:03d}"
                devices.append(
                    {
                        "serial": serial,
                        "name": f"{site_id[5:]}-{kind.replace('_', '')}-{unit + 1}",
                        "kind": kind,
                        "model": model,
                        "site_id": site_id,
                        "firmware": "10.6.0.2" if unit % 3 else "10.5.1.4",
                        # one unreachable access point per site makes the alerts and health agree
                        "status": "down" if kind == "access_point" and unit == count - 1 else "up",
                    }
                )
    return devices


def _clients(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    clients = []
    access_points = [device for device in devices if device["kind"] == "access_point" and device["status"] == "up"]
    for ap_number, ap in enumerate(access_points):
        for slot in range(CLIENTS_PER_AP):
            number = ap_number * CLIENTS_PER_AP + slot
            clients.append(
                {
                    "mac": f"02:00:5e:{number >> 8 & 0xFF:02x}:{number & 0xFF:02x}:{slot:02x}",
                    "hostname": f"host-{number:04d}",
                    "ssid": SSIDS[number % len(SSIDS)],
                    "vlan": 10 + 10 * (number % len(SSIDS)),
                    "ap_serial": ap["serial"],
                    "site_id": ap["site_id"],
                    "signal_dbm": -40 - (number * 7) % 40,
                }
            )
    return clients


def _alerts(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = []
    for position, device in enumerate(devices):
        if device["status"] == "up" and position % 3:
            continue
        number = len(alerts)
        severity, title = ALERT_KINDS[0] if device["status"] == "down" else ALERT_KINDS[1 + number % 4]
        alerts.append(
            {
                "alert_id": f"AL-{1000 + number}",
                "severity": severity,
                "title": title,
                "serial": device["serial"],
                "site_id": device["site_id"],
                "state": "open" if number % 3 else "acknowledged",
                "opened_at": f"2026-11-{1 + number % 28:02d}T{number % 24:02d}:15:00Z",
            }
        )
    return alerts


@dataclass
class DemoNetwork:
    """The demo's state, shared by its three servers; the write tools really change it."""

    sites: list[dict[str, Any]] = field(default_factory=_sites)
    devices: list[dict[str, Any]] = field(default_factory=_devices)
    clients: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clients = self.clients or _clients(self.devices)
        self.alerts = self.alerts or _alerts(self.devices)

    def site(self, site_id: str) -> dict[str, Any]:
        for site in self.sites:
            if site["site_id"] == site_id:
                return site
        # Never the value asked for: the README tells hosts to keep argument values out of errors.
        raise _compat.ToolError("Unknown site: no site has that site_id. list_sites gives the site ids.")

    def device(self, serial: str) -> dict[str, Any]:
        for device in self.devices:
            if device["serial"] == serial:
                return device
        raise _compat.ToolError("Unknown device: no device has that serial. list_devices gives the serials.")

    def record_change(self, action: str, target: str, **details: Any) -> dict[str, Any]:
        change = {"change_id": f"CHG-{len(self.changes) + 1:04d}", "action": action, "target": target, **details}
        self.changes.append(change)
        return change


def _matching(records: list[dict[str, Any]], **wanted: str | None) -> list[dict[str, Any]]:
    """The records whose fields equal every filter that was given."""
    filters = {key: value for key, value in wanted.items() if value is not None}
    return [record for record in records if all(record.get(key) == value for key, value in filters.items())]


def inventory_server(network: DemoNetwork) -> Any:
    server = _compat.new_server("inventory", instructions="Sites, devices and wireless clients of the demo network.")

    async def list_sites() -> dict[str, Any]:
        await simulated_latency()
        return {"sites": network.sites, "total": len(network.sites)}

    async def get_site(site_id: str) -> dict[str, Any]:
        await simulated_latency()
        devices = _matching(network.devices, site_id=site_id)
        return {
            **network.site(site_id),
            "device_count": len(devices),
            "client_count": len(_matching(network.clients, site_id=site_id)),
        }

    async def list_devices(site_id: str | None = None, kind: str | None = None) -> dict[str, Any]:
        await simulated_latency()
        devices = _matching(network.devices, site_id=site_id, kind=kind)
        return {"devices": devices, "total": len(devices)}

    async def get_device(serial: str) -> dict[str, Any]:
        await simulated_latency()
        return network.device(serial)

    async def list_clients(site_id: str | None = None, ssid: str | None = None) -> dict[str, Any]:
        await simulated_latency()
        clients = _matching(network.clients, site_id=site_id, ssid=ssid)
        return {"clients": clients, "total": len(clients)}

    _add(server, list_sites, "List every site of the network with its city and country.", READ)
    _add(server, get_site, "One site by site_id, with its device and client counts.", READ)
    _add(
        server,
        list_devices,
        "List network devices (gateways, switches, access points), optionally by site_id or kind.",
        READ,
    )
    _add(server, get_device, "One network device by serial: model, firmware, site and status.", READ)
    _add(
        server,
        list_clients,
        "List connected wireless clients (MAC, hostname, SSID, VLAN, signal), optionally by site_id or ssid.",
        READ,
    )
    return server


def monitoring_server(network: DemoNetwork) -> Any:
    server = _compat.new_server("monitoring", instructions="Alerts and health of the demo network.")

    async def list_alerts(
        severity: str | None = None, site_id: str | None = None, state: str | None = None
    ) -> dict[str, Any]:
        await simulated_latency()
        alerts = _matching(network.alerts, severity=severity, site_id=site_id, state=state)
        return {"alerts": alerts, "total": len(alerts)}

    async def get_device_health(serial: str) -> dict[str, Any]:
        await simulated_latency()
        device = network.device(serial)
        up = device["status"] == "up"
        # deterministic figures derived from the serial, so repeated reads agree
        seed = sum(map(ord, serial))
        return {
            "serial": serial,
            "status": device["status"],
            "cpu_percent": seed % 70 + 5 if up else None,
            "memory_percent": seed % 50 + 30 if up else None,
            "uptime_seconds": seed * 3607 if up else 0,
            "client_count": len(_matching(network.clients, ap_serial=serial)),
        }

    async def get_site_health(site_id: str) -> dict[str, Any]:
        await simulated_latency()
        network.site(site_id)
        devices = _matching(network.devices, site_id=site_id)
        open_alerts = _matching(network.alerts, site_id=site_id, state="open")
        return {
            "site_id": site_id,
            "devices_up": sum(device["status"] == "up" for device in devices),
            "devices_down": sum(device["status"] == "down" for device in devices),
            "open_alerts": {
                level: len(_matching(open_alerts, severity=level)) for level in ("critical", "major", "minor")
            },
        }

    _add(
        server,
        list_alerts,
        "List alerts (severity critical, major or minor; state open or acknowledged), optionally by site_id.",
        READ,
    )
    _add(
        server, get_device_health, "Health of one device by serial: status, CPU, memory, uptime and client count.", READ
    )
    _add(server, get_site_health, "Health summary of one site: devices up and down, open alerts by severity.", READ)
    return server


def changes_server(network: DemoNetwork) -> Any:
    server = _compat.new_server(
        "changes", instructions="Configuration changes to the demo network. Writes: not for a read-only router."
    )

    async def reboot_device(serial: str) -> dict[str, Any]:
        device = network.device(serial)
        device["status"] = "rebooting"
        return network.record_change("reboot", serial)

    async def set_device_firmware(serial: str, firmware: str) -> dict[str, Any]:
        device = network.device(serial)
        previous, device["firmware"] = device["firmware"], firmware
        return network.record_change("set_firmware", serial, previous=previous, firmware=firmware)

    async def delete_site(site_id: str) -> dict[str, Any]:
        network.sites.remove(network.site(site_id))
        network.devices[:] = [device for device in network.devices if device["site_id"] != site_id]
        return network.record_change("delete_site", site_id)

    _add(server, reboot_device, "Reboot one device by serial. Changes the network.", WRITE)
    _add(server, set_device_firmware, "Schedule a firmware version on one device. Changes the network.", WRITE)
    _add(server, delete_site, "Delete a site and every device in it. Destructive and irreversible.", DESTRUCTIVE)
    return server


def _add(server: Any, fn: Any, description: str, annotations: dict[str, Any]) -> None:
    _compat.add_tool(server, fn, name=fn.__name__, description=description, annotations=annotations)


def demo_backends(network: DemoNetwork | None = None) -> dict[str, Any]:
    """The demo's backend servers by name, over one (fresh unless given) :class:`DemoNetwork`."""
    network = DemoNetwork() if network is None else network
    return {
        "inventory": inventory_server(network),
        "monitoring": monitoring_server(network),
        "changes": changes_server(network),
    }


# The demo's bucket in the rate store, unless CENTRALMCP_ROUTER_RATE_KEY names one: its made-up calls
# must not spend the account's tokens (key "central") that real routers on this machine draw from.
DEMO_RATE_KEY = "demo"


def demo_router() -> Any:
    """The reference router over the demo backends, with the installed plugins loaded."""
    from ..ratelimit import KEY_ENV, limiter_from_env
    from . import Router  # the package imports this module's siblings; import late to keep demo standalone

    environ = dict(os.environ)
    if not environ.get(KEY_ENV, "").strip():
        environ[KEY_ENV] = DEMO_RATE_KEY
    return Router(demo_backends(), name="centralmcp-demo", limiter=limiter_from_env(environ))
