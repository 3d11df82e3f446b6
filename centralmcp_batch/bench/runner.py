"""A whole run: the chosen scenarios in a fixed order, with the machine and the targets around them."""

from __future__ import annotations

import time
from typing import Any

from .machine import load_average, machine
from .plan import LIFTED_LIMIT, TRANSPORT_CONCURRENCY, Plan
from .router_process import http_router
from .scenarios.budget import budget_scenario
from .scenarios.latency import latency_scenario
from .scenarios.load import load_scenario
from .scenarios.overhead import overhead_scenario
from .scenarios.rate import rate_scenario
from .scenarios.transport import transport_scenario
from .targets import targets


def run_config(plan: Plan) -> dict[str, Any]:
    return {
        "repeat": plan.repeat,
        "latency_ms": plan.latency * 1000,
        "sizes": list(plan.sizes),
        "quick": plan.sample_seconds < 0.05,
        "transport_concurrency": TRANSPORT_CONCURRENCY,
        **LIFTED_LIMIT,
    }


async def run_plan(plan: Plan) -> dict[str, Any]:
    report: dict[str, Any] = {"config": run_config(plan)}
    report["machine"] = machine()
    report["load_average_before"] = load_average()
    started = time.perf_counter()
    await run_scenarios(plan, report)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_average_after"] = load_average()
    report["targets"] = targets(report)
    return report


async def run_scenarios(plan: Plan, report: dict[str, Any]) -> None:
    chosen = set(plan.scenarios)
    if "latency" in chosen:
        report["latency_bound"] = await latency_scenario(plan)
    if "overhead" in chosen:
        report["overhead"] = await overhead_scenario(plan)
    if "budget" in chosen:
        report["budget"] = await budget_scenario(plan)
    if "rate" in chosen:
        report["rate_bound"] = await rate_scenario(plan)
    if {"transport", "load"} & chosen:
        async with http_router() as url:  # one router subprocess for both
            if "transport" in chosen:
                report["transports"] = await transport_scenario(plan, url)
            if "load" in chosen:
                report["load"] = await load_scenario(plan, url)
