"""Under the account's rate: the plugin against CentralMCP's built-in batch, each against the earliest schedule.

Run from a checkout (it drives the CentralMCP stand-in in ``tests/standins``)::

    python benchmarks/account_rate.py [--quick] [--repeat N] [--store URL] [--json PATH]

CentralMCP's users share one account-wide limit (Aruba Central allows about 10 requests a second
for the whole account). Here every backend read takes 200 ms, the account allows 10 calls a second
with a burst of 5, and three batches are sent: 25 distinct reads; 25 reads of which 8 are distinct
(a model often repeats a read); 10 distinct reads.

Two copies of the stand-in router answer them over an in-memory MCP session: ``built-in``, the
router's own batch (one call after the other), and ``plugin``, centralmcp-batch adopted. Both draw
one token per backend call from a limiter at that rate on ``--store`` (default: a SQLite file, as the
default store is), and each batch starts on a full bucket (the benchmark waits ``burst / rate``
seconds before it).

Each batch is set against the earliest schedule its concurrency and the rate allow: a call starts
no sooner than its token (the first ``burst`` at once, then one every ``1 / rate`` seconds) and the
end of the call ``c`` places before it, and the schedule ends one read after the last start. Where
reads repeat, the schedule is that of the distinct ones: nothing obliges a batch to read one thing
twice. ``of_schedule`` is schedule / wall time (1.0: nothing left to win at that concurrency).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import standin  # puts the backend and the stand-ins on sys.path, so it comes first

from centralmcp_batch import _compat, bench, settings
from centralmcp_batch.adapters.centralmcp import adopt
from centralmcp_batch.batch_tool import TOOL_NAME
from centralmcp_batch.ratelimit import RateLimiter, open_store

Limit = tuple[float, int]  # (calls a second, burst)


def earliest_schedule(calls: int, latency: float, concurrency: int, limits: Sequence[Limit]) -> float:
    """Seconds from the first start to the last end of ``calls`` reads of ``latency`` seconds each.

    Call ``i`` starts at the later of its token (under every limit: a burst at once, then one an
    interval) and the end of call ``i - concurrency``; the schedule ends one read after the last start.
    """
    starts: list[float] = []
    for i in range(calls):
        token = max((max(0, i - burst + 1) / rate for rate, burst in limits), default=0.0)
        free = starts[i - concurrency] + latency if i >= concurrency else 0.0
        starts.append(max(token, free))
    return starts[-1] + latency if starts else 0.0


@dataclass(frozen=True)
class Workload:
    label: str
    reads: int
    distinct: int

    def calls(self, latency: float) -> list[dict[str, Any]]:
        """``reads`` entries of ``distinct`` different reads, repeats spread over the batch as a model sends them."""
        return [
            {"name": "wait", "id": f"e{i}", "arguments": {"seconds": latency, "tag": f"read-{i % self.distinct}"}}
            for i in range(self.reads)
        ]


WORKLOADS = (Workload("25 distinct", 25, 25), Workload("25 reads, 8 distinct", 25, 8), Workload("10 distinct", 10, 10))
SHARED = WORKLOADS[1]


@dataclass(frozen=True)
class Plan:
    repeat: int
    latency: float  # seconds a backend read takes
    rate: float  # the account's calls a second
    burst: int
    store: str | None  # the limiter's store URL; None: a SQLite file in a temporary directory


def make_plan(quick: bool, repeat: int | None, store: str | None) -> Plan:
    if quick:  # only shows it runs: short reads under a quick rate
        return Plan(repeat or 1, 0.02, 100.0, 5, store)
    return Plan(repeat or 5, 0.2, 10.0, 5, store)


class BenchError(RuntimeError):
    """An answer was wrong: its timing would mean nothing."""


# -- the two routers ---------------------------------------------------------------------------


@dataclass
class Routers:
    builtin: ModuleType  # default mode: the router's own batch, the limiter as its dispatch rate gate
    plugin: ModuleType  # minimal mode, centralmcp-batch adopted with the limiter
    builtin_limiter: RateLimiter
    plugin_limiter: RateLimiter


def make_routers(plan: Plan, store_url: str) -> Routers:
    """Each router its own bucket of the account's rate, so one's batches never wait for the other's."""
    limiters = [RateLimiter(open_store(store_url), plan.rate, plan.burst, key=f"bench-{uuid.uuid4()}") for _ in "ab"]
    builtin = standin.load_router("default", "rate_builtin")
    builtin.set_dispatch_rate_gate(limiters[0].acquire)
    plugin = standin.load_router("minimal", "rate_plugin")
    adopt(plugin, rate_limiter=limiters[1])
    return Routers(builtin, plugin, limiters[0], limiters[1])


async def batch(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await client.call_tool(TOOL_NAME, {"calls": calls}, timeout=120)
    value = answer.structured if isinstance(answer.structured, dict) else answer.payload
    if answer.is_error or not isinstance(value, dict):
        raise BenchError(f"{TOOL_NAME} failed: {answer.text[:300]}")
    return value


def check(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]], variant: str) -> None:
    """Every entry ok, at its place, with its own read's answer (a shared read's answer for each repeat)."""
    results = response.get("results") or []
    seen = [(item.get("id"), (item.get("result") or {}).get("tag")) for item in results]
    wanted = [(call["id"], call["arguments"]["tag"]) for call in calls]
    if not response.get("ok") or seen != wanted:
        raise BenchError(f"the {variant} batch answered wrongly: {str(response)[:300]}")


# -- a run -------------------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    backend_calls: int
    tokens: int | None  # the plugin's rate report; the built-in has none


async def timed(client: _compat.ClientHandle, calls: list[dict[str, Any]], variant: str, plan: Plan) -> Sample:
    await anyio.sleep(plan.burst / plan.rate)  # the bucket refills: every batch starts on a full one
    made = standin.backend.CALLS["wait"]
    started = time.perf_counter()
    response = await batch(client, calls)
    seconds = time.perf_counter() - started
    check(response, calls, variant)
    tokens = response["rate"]["tokens"] if "rate" in response else None
    return Sample(seconds, standin.backend.CALLS["wait"] - made, tokens)


async def measure(plan: Plan, routers: Routers) -> dict[tuple[str, str], list[Sample]]:
    """``plan.repeat`` rounds; in each, every workload on the built-in then the plugin, back to back."""
    samples: dict[tuple[str, str], list[Sample]] = {}
    clients = {"built-in": _compat.connect(routers.builtin.mcp), "plugin": _compat.connect(routers.plugin.mcp)}
    async with clients["built-in"] as to_builtin, clients["plugin"] as to_plugin:
        for_variant = {"built-in": to_builtin, "plugin": to_plugin}
        for variant, client in for_variant.items():  # warm-up: the client lists the tools on its first call
            await timed(client, Workload("warm-up", 2, 2).calls(0.0), variant, plan)
        for _ in range(plan.repeat):
            for workload in WORKLOADS:
                calls = workload.calls(plan.latency)
                for variant, client in for_variant.items():
                    sample = await timed(client, calls, variant, plan)
                    samples.setdefault((workload.label, variant), []).append(sample)
    return samples


def rows(plan: Plan, samples: Mapping[tuple[str, str], list[Sample]]) -> list[dict[str, Any]]:
    limits = [(plan.rate, plan.burst)]
    concurrency = {"built-in": 1, "plugin": settings.BatchSettings.from_env().concurrency}
    found = []
    for workload in WORKLOADS:
        for variant, c in concurrency.items():
            runs = samples[(workload.label, variant)]
            schedule = earliest_schedule(workload.distinct, plan.latency, c, limits)
            tokens = {run.tokens for run in runs}
            found.append(
                {
                    "workload": workload.label,
                    "variant": variant,
                    "concurrency": c,
                    "backend_calls": max(run.backend_calls for run in runs),
                    "tokens": tokens.pop() if len(tokens) == 1 and None not in tokens else "-",
                    "schedule_s": round(schedule, 3),
                    "wall_s": bench.summary([run.seconds for run in runs]),
                    "of_schedule": bench.summary([schedule / run.seconds for run in runs]),
                }
            )
    return found


def speedups(samples: Mapping[tuple[str, str], list[Sample]]) -> list[dict[str, Any]]:
    """The built-in's time over the plugin's, round by round."""
    return [
        {
            "workload": workload.label,
            "builtin_over_plugin": bench.summary(
                bench.ratios(
                    [run.seconds for run in samples[(workload.label, "built-in")]],
                    [run.seconds for run in samples[(workload.label, "plugin")]],
                )
            ),
        }
        for workload in WORKLOADS
    ]


TARGET = f"{SHARED.label}: the plugin reaches >= 0.9 of the earliest schedule for its {SHARED.distinct}"


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    row = bench.find_row(report.get("batches", []), workload=SHARED.label, variant="plugin")
    return [bench.target(TARGET, row, "of_schedule", 0.9, at_least=True)]


async def run_plan(plan: Plan) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store_url = plan.store or f"sqlite:///{Path(tmp) / 'rate.sqlite3'}"
        routers = make_routers(plan, store_url)
        report: dict[str, Any] = {
            "config": {
                "repeat": plan.repeat,
                "latency_s": plan.latency,
                "rate_per_s": plan.rate,
                "burst": plan.burst,
                "store": store_url.split(":", 1)[0],
            },
            "machine": bench.machine(),
            "load_average_before": bench.load_average(),
        }
        try:
            samples = await measure(plan, routers)
        finally:
            await routers.builtin_limiter.close()
            await routers.plugin_limiter.close()
    report["load_average_after"] = bench.load_average()
    report["batches"] = rows(plan, samples)
    report["speedups"] = speedups(samples)
    report["targets"] = targets(report)
    return report


COLUMNS = ["workload", "variant", "concurrency", "backend_calls", "tokens", "schedule_s", "wall_s", "of_schedule"]


def render(report: Mapping[str, Any]) -> str:
    config = report["config"]
    parts = [
        f"Figures: median (min–max) of {config['repeat']} rounds; reads of {config['latency_s'] * 1000:g} ms, "
        f"{config['rate_per_s']:g} calls/s, burst {config['burst']}, store {config['store']}; "
        f"mcp {report['machine']['mcp']}; load average {report['load_average_before']} -> "
        f"{report['load_average_after']}.",
        "",
        bench.table("Each batch against the earliest schedule", report["batches"], COLUMNS) + "\n",
        bench.table("The built-in's time over the plugin's", report["speedups"], ["workload", "builtin_over_plugin"]),
        "",
        "### Targets\n",
    ]
    parts += [f"- {item['target']}: {item['value']} -> {bench.verdict(item['met'])}" for item in report["targets"]]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--quick", action="store_true", help="short reads under a quick rate: only shows it runs")
    cli.add_argument("--repeat", type=int, help="rounds (default 5; 1 with --quick)")
    cli.add_argument("--store", metavar="URL", help="the limiter's store (default: a SQLite file in a temp dir)")
    cli.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = cli.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        cli.error("--repeat must be at least 1")
    bench.quiet_logs()
    report = anyio.run(run_plan, make_plan(args.quick, args.repeat, args.store))
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
