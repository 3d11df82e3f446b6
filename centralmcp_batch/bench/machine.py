"""What the figures were measured on: the CPU, the versions, the load average."""

from __future__ import annotations

import os
import platform
from importlib.metadata import version
from typing import Any


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        model = platform.processor()
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "mcp": version("mcp"),
        "anyio": version("anyio"),
        "pluggy": version("pluggy"),
        "platform": platform.platform(),
    }


def load_average() -> list[float] | None:
    return [round(value, 2) for value in os.getloadavg()] if hasattr(os, "getloadavg") else None
