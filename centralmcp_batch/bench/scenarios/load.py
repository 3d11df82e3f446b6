"""Scenario 5, concurrent clients over streamable HTTP: throughput and latency, and no entry lost or reordered."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio

from ... import _compat
from ..calls import mcp_batch, misplaced, wait_calls
from ..plan import Plan
from ..stats import percentile, summary


@dataclass
class LoadRound:
    latencies: list[float]
    entries: int = 0
    lost: int = 0
    reordered: int = 0


async def client_loop(client: _compat.ClientHandle, number: int, stop_at: float, tally: LoadRound, n: int) -> None:
    batch_no = 0
    while time.perf_counter() < stop_at and batch_no < 100_000:
        calls = wait_calls(n, 0.0, prefix=f"c{number}b{batch_no}e")
        started = time.perf_counter()
        response = await mcp_batch(client, calls)
        tally.latencies.append(time.perf_counter() - started)
        lost, reordered = misplaced(response, calls)
        tally.entries += len(calls)
        tally.lost += lost
        tally.reordered += reordered
        batch_no += 1


async def load_round(clients: Sequence[_compat.ClientHandle], seconds: float, n: int) -> tuple[LoadRound, float]:
    tally = LoadRound([])
    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for number, client in enumerate(clients):
            tasks.start_soon(client_loop, client, number, started + seconds, tally, n)
    return tally, time.perf_counter() - started


async def load_scenario(plan: Plan, http_url: str) -> list[dict[str, Any]]:
    rows = []
    for count in plan.load_clients:
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(_compat.connect(http_url)) for _ in range(count)]
            await load_round(clients, 0.2, plan.largest)  # warm-up
            measured = [await load_round(clients, plan.load_seconds, plan.largest) for _ in range(plan.repeat)]
        rows.append(load_row(count, plan.largest, measured))
    return rows


def load_row(count: int, n: int, measured: Sequence[tuple[LoadRound, float]]) -> dict[str, Any]:
    return {
        "clients": count,
        "n": n,
        "batches_per_s": summary([len(tally.latencies) / seconds for tally, seconds in measured]),
        "entries_per_s": summary([tally.entries / seconds for tally, seconds in measured]),
        "p50_ms": summary([percentile(tally.latencies, 0.50) for tally, _ in measured], 1000),
        "p99_ms": summary([percentile(tally.latencies, 0.99) for tally, _ in measured], 1000),
        "batches": sum(len(tally.latencies) for tally, _ in measured),
        "entries": sum(tally.entries for tally, _ in measured),
        "lost_or_reordered": sum(tally.lost + tally.reordered for tally, _ in measured),
    }
