"""Scenario 2, over a real transport: the router subprocess over stdio and streamable HTTP."""

from __future__ import annotations

from typing import Any

from ... import _compat
from ..calls import checked_batch, single_reads, wait_calls
from ..plan import Plan
from ..router_process import stdio_params
from ..stats import ratios, rounds, summary


async def transport_scenario(plan: Plan, http_url: str) -> list[dict[str, Any]]:
    calls = wait_calls(plan.largest, plan.latency)
    rows = []
    for transport, target in (("stdio", stdio_params()), ("streamable HTTP", http_url)):
        async with _compat.connect(target) as client:
            await checked_batch(client, calls)  # warm-up: imports and first connections

            async def one_batch(client: _compat.ClientHandle = client) -> None:
                await checked_batch(client, calls)

            async def singles(client: _compat.ClientHandle = client) -> None:
                await single_reads(client, calls)

            samples = await rounds({"batch": one_batch, "singles": singles}, plan.repeat)
        rows.append(
            {
                "transport": transport,
                "n": len(calls),
                "batch_ms": summary(samples["batch"], 1000),
                "singles_ms": summary(samples["singles"], 1000),
                "speedup": summary(ratios(samples["singles"], samples["batch"])),
            }
        )
    return rows
