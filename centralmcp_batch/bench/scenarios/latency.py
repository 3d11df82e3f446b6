"""Scenario 1, latency-bound backends: a batch at concurrency 1, 4 and 8 against single round trips."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ... import _compat
from ..backends import build_router
from ..calls import checked_batch, single_reads, wait_calls
from ..environ import concurrency
from ..plan import CONCURRENCIES, Plan
from ..stats import Run, ratios, rounds, summary


def batch_at(client: _compat.ClientHandle, calls: list[dict[str, Any]], c: int) -> Run:
    async def run() -> None:
        with concurrency(c):  # the in-process router reads it on every call
            await checked_batch(client, calls)

    return run


async def latency_scenario(plan: Plan) -> list[dict[str, Any]]:
    rows = []
    async with _compat.connect(build_router().server) as client:
        for n in plan.sizes:
            calls = wait_calls(n, plan.latency)
            variants: dict[str, Run] = {f"batch c={c}": batch_at(client, calls, c) for c in CONCURRENCIES}

            async def singles(calls: list[dict[str, Any]] = calls) -> None:
                await single_reads(client, calls)

            variants["singles"] = singles
            await rounds(variants, 1)  # warm-up, not kept
            samples = await rounds(variants, plan.repeat)
            rows += latency_rows(n, plan.latency, samples)
    return rows


def latency_rows(n: int, latency: float, samples: Mapping[str, list[float]]) -> list[dict[str, Any]]:
    sequential = samples["batch c=1"]
    rows = []
    for variant, times in samples.items():
        c = int(variant.split("=")[1]) if variant.startswith("batch") else 1
        ideal = math.ceil(n / c) * latency if variant.startswith("batch") else n * latency
        rows.append(
            {
                "n": n,
                "mode": variant,
                "ideal_ms": ideal * 1000,
                "wall_ms": summary(times, 1000),
                "speedup_over_c1": summary(ratios(sequential, times)),
                "speedup_over_singles": summary(ratios(samples["singles"], times)),
                "efficiency": summary([ideal / time_ for time_ in times]),
            }
        )
    return rows
