"""How big a run is, and the fixed settings every scenario shares."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from .. import batch_tool
from ..ratelimit import RateLimiter, open_store
from ..ratelimit.config import BURST_ENV, STORE_ENV

RATE_ENV = "CENTRALMCP_ROUTER_RATE_PER_SECOND"
# The benchmark measures the batch, not the limiter: a burst no run reaches, so no token waits, and a
# bucket in the router's own memory. The rate's interval (1 ms) stays longer than a zero-latency call
# takes to start, as under a real rate: a call that starts after its token's place on the timeline books
# again, a round trip of its own, so at 1,000,000 a second every call of a zero-latency batch would.
UNLIMITED_RATE = "1000"
UNLIMITED_BURST = "1000000000"
LIFTED_LIMIT = {RATE_ENV: UNLIMITED_RATE, BURST_ENV: UNLIMITED_BURST, STORE_ENV: "memory"}
BATCH_TOOL = batch_tool.TOOL_NAME
SIZES = (1, 5, 10, 25)
CONCURRENCIES = (1, 4, 8)
TRANSPORT_CONCURRENCY = 8
LOAD_CLIENTS = (1, 8, 32)
SCENARIOS = ("latency", "transport", "overhead", "budget", "load", "rate")


def lifted_limiter(store_url: str = "memory") -> RateLimiter:
    """A limiter at the lifted limit on ``store_url``, in a bucket of its own."""
    return RateLimiter(open_store(store_url), float(UNLIMITED_RATE), int(UNLIMITED_BURST), key=f"bench-{uuid.uuid4()}")


@dataclass(frozen=True)
class Plan:
    """How big a run is: the full one publishes figures, the quick one only proves it runs."""

    repeat: int
    latency: float
    sizes: tuple[int, ...]
    budget_kb: tuple[int, ...]
    sample_seconds: float  # each overhead sample loops until it has taken at least this long
    load_seconds: float
    load_clients: tuple[int, ...]
    scenarios: tuple[str, ...]

    @property
    def largest(self) -> int:
        return max(self.sizes)


def make_plan(quick: bool, repeat: int | None, scenarios: Sequence[str]) -> Plan:
    if quick:
        return Plan(repeat or 1, 0.01, (1, 5), (40, 80), 0.002, 0.3, (1, 2), tuple(scenarios))
    return Plan(repeat or 5, 0.05, SIZES, (50, 100, 200, 400), 0.05, 3.0, LOAD_CLIENTS, tuple(scenarios))
