"""Scenario 3, the batch's own cost: zero-latency entries, the batch against the same calls made directly."""

from __future__ import annotations

import time
from typing import Any

from ... import _compat, batch_tool, hosting
from ...host import HostHooks
from ..backends import wait, zero_host
from ..calls import check_batch, checked_batch, wait_calls
from ..plan import Plan
from ..stats import loops_for, rounds, summary


async def overhead_scenario(plan: Plan) -> list[dict[str, Any]]:
    host = zero_host()
    hooks = HostHooks(hosting.plugin_manager(host))
    server = _compat.new_server("bench-overhead")
    hosting.install(server, host)
    rows = []
    async with _compat.connect(server) as client:
        for n in plan.sizes:
            rows.append(await overhead_row(plan, n, hooks, client))
    return rows


async def overhead_row(plan: Plan, n: int, hooks: HostHooks, client: _compat.ClientHandle) -> dict[str, Any]:
    calls = wait_calls(n, 0.0)

    async def direct() -> None:
        for call in calls:
            await wait(**call["arguments"])

    async def in_process() -> None:
        check_batch(await batch_tool.run(hooks, calls), calls)

    async def over_mcp() -> None:
        await checked_batch(client, calls)

    variants = {"direct": direct, "batch": in_process, "mcp": over_mcp}
    inner = {name: await loops_for(run, plan.sample_seconds) for name, run in variants.items()}
    cpu_started = time.process_time()
    samples = await rounds(variants, plan.repeat, inner)
    per_entry = [(batch - plain) / n for batch, plain in zip(samples["batch"], samples["direct"], strict=True)]
    wall_seconds = sum(sum(times) * inner[name] for name, times in samples.items())
    return {
        "n": n,
        "direct_us": summary(samples["direct"], 1e6),
        "batch_us": summary(samples["batch"], 1e6),
        "overhead_us_per_entry": summary(per_entry, 1e6),
        "mcp_in_memory_us": summary(samples["mcp"], 1e6),
        "cpu_share": round((time.process_time() - cpu_started) / wall_seconds, 2),
    }
