"""How big a run is, and the fixed settings every scenario shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import batch_tool

RATE_ENV = "CENTRALMCP_ROUTER_RATE_PER_SECOND"
UNLIMITED_RATE = "1000000"
# The benchmark measures the batch, not the limiter: the rate lifted, and a bucket in the router's own
# memory. The default store, the machine's shared SQLite file, costs a transaction per entry (at 8
# clients over HTTP it held the routers to a quarter of their throughput).
LIFTED_LIMIT = {RATE_ENV: UNLIMITED_RATE, "CENTRALMCP_ROUTER_RATE_STORE": "memory"}
BATCH_TOOL = batch_tool.TOOL_NAME
SIZES = (1, 5, 10, 25)
CONCURRENCIES = (1, 4, 8)
TRANSPORT_CONCURRENCY = 8
LOAD_CLIENTS = (1, 8, 32)
SCENARIOS = ("latency", "transport", "overhead", "budget", "load", "rate")


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
