"""The benchmark's backend for the CentralMCP-style comparison: one server, four read tools and a write.

``wait`` sleeps as long as it is told (none at 0) and echoes its tag (``CALLS`` counts its calls);
``blob`` answers about ``kb`` kilobytes in 1 KB rows (few enough rows that the router's 200-item page never clips it);
``records`` answers ``count`` nested device records of about 350 bytes, shaped as an API's device
listing is (objects and lists in objects in a list, four levels deep), at once. ``unavailable``
fails at once, as a backend that is down does; ``reboot`` is a write, which the read-only gate
refuses before it runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
from standins.centralmcp_shared import READ_ONLY, WRITE

from centralmcp_batch import _compat

mcp = _compat.new_server("bench")
ROW = "x" * 1000
CALLS: Counter[str] = Counter()  # backend calls by tool, for a benchmark that counts what reached the backend


@mcp.tool(annotations=READ_ONLY)
async def wait(seconds: float = 0.0, tag: str = "") -> dict[str, Any]:
    """Sleep, then echo the tag."""
    CALLS["wait"] += 1
    if seconds > 0:
        await anyio.sleep(seconds)
    return {"tag": tag, "slept": seconds}


@mcp.tool(annotations=READ_ONLY)
def blob(kb: int = 100, tag: str = "") -> dict[str, Any]:
    """About ``kb`` KB of rows."""
    return {"tag": tag, "rows": [f"{i:05d}{ROW[5:]}" for i in range(kb)]}  # distinct rows, as a real answer has


@mcp.tool(annotations=READ_ONLY)
async def records(count: int = 40, tag: str = "") -> dict[str, Any]:
    """``count`` device records, each with a site, two radios, an uplink and labels."""
    return {"tag": tag, "count": count, "devices": [_device(i) for i in range(count)]}


def _device(i: int) -> dict[str, Any]:
    return {
        "serial": f"CN{i:08d}",
        "name": f"ap-{i:04d}",
        "model": "AP-515",
        "status": "Up" if i % 9 else "Down",
        "ip": f"10.{i // 256 % 256}.{i % 256}.2",
        "site": {"id": 1000 + i % 7, "name": f"site-{i % 7}"},
        "radios": [
            {"band": "2.4GHz", "channel": 1 + i % 11, "power_dbm": 12.5, "clients": i % 13},
            {"band": "5GHz", "channel": 36 + 4 * (i % 8), "power_dbm": 18.0, "clients": i % 29},
        ],
        "uplink": {"port": f"0/0/{i % 4}", "vlans": [1, 10 + i % 5], "speed": {"mbps": 1000, "duplex": "full"}},
        "labels": ["floor-2", "east"] if i % 2 else ["floor-1"],
        "uptime_s": 86_400 + 37 * i,
    }


@mcp.tool(annotations=READ_ONLY)
async def unavailable(tag: str = "") -> dict[str, Any]:
    """A read whose backend is down: it fails at once, naming the tag."""
    raise RuntimeError(f"backend unavailable for {tag}")


@mcp.tool(annotations=WRITE)
async def reboot(tag: str = "") -> dict[str, Any]:
    """A write: a read path must refuse it before it runs."""
    raise AssertionError(f"a read path ran the write reboot for {tag}")
