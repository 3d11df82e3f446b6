"""Scenario 6, the rate-bound limit: a zero-latency batch against the reference router's default token bucket."""

from __future__ import annotations

import os
import time
from typing import Any

from ... import _compat
from ..backends import backend_server
from ..calls import checked_batch, wait_calls
from ..environ import concurrency
from ..plan import RATE_ENV, TRANSPORT_CONCURRENCY, Plan
from ..stats import summary


def default_limiter_router() -> Any:
    """The reference router at its default limiter (nothing in the environment overrides it)."""
    from ...ratelimit.config import BURST_ENV, STORE_ENV
    from ...router import Router

    saved = {key: os.environ.pop(key) for key in (RATE_ENV, BURST_ENV, STORE_ENV) if key in os.environ}
    os.environ[STORE_ENV] = "memory"  # this process's own bucket: the user's shared SQLite file is not the bench's
    try:
        return Router({"bench": backend_server()})
    finally:
        os.environ.pop(STORE_ENV)
        os.environ.update(saved)


async def rate_scenario(plan: Plan) -> list[dict[str, Any]]:
    """A zero-latency batch against the default token bucket: it can do no better than (n - burst) / rate."""
    calls = wait_calls(max(plan.largest, 10), 0.0)  # past the burst even in a quick run
    times: list[float] = []
    limiter = default_limiter_router().limiter
    for _ in range(plan.repeat):
        router = default_limiter_router()  # a full bucket each round, as a fresh process has
        async with _compat.connect(router.server) as client:
            with concurrency(TRANSPORT_CONCURRENCY):
                started = time.perf_counter()
                await checked_batch(client, calls)
                times.append(time.perf_counter() - started)
    ideal = max(0, len(calls) - limiter.burst) / limiter.rate
    return [
        {
            "n": len(calls),
            "rate_per_s": limiter.rate,
            "burst": limiter.burst,
            "ideal_ms": ideal * 1000,
            "wall_ms": summary(times, 1000),
            "efficiency": summary([ideal / seconds for seconds in times]) if ideal else "n <= burst",
        }
    ]
