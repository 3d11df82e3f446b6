"""The batch against CentralMCP's built-in batch, on the stand-in of CentralMCP's router, at zero latency.

Run from a checkout (it needs the CentralMCP stand-in in ``tests/standins``)::

    python benchmarks/centralmcp_baseline.py [--quick] [--repeat N] [--json PATH] [--scenarios a,b]

Copies of the stand-in router (``tests/standins/centralmcp_router.py``) serve the same backend
(``baseline_backend.py``): ``builtin`` in default mode with its own sequential
``invoke_read_tool_batch``, ``plugin`` in minimal mode with centralmcp-batch adopted through
``adapters.centralmcp.adopt``, and ``plugin_sqlite`` the same with the account-wide limiter on a
SQLite file, as the default store is. ``loop`` is a plain sequential loop over the router's own read
path (``_dispatch_read_tool``), which is what the built-in is. Every router has its own rate gate and
every plugin its account-wide limiter, lifted so that neither binds (``bench.LIFTED_LIMIT``): every
path draws its token, and none waits. Every figure is the median (min–max) of the rounds; in each
round the variants run one after the other and a ratio is taken within the round.

Backends that answer at once are not where users are (their backends are an API under an account's
rate: see ``account_rate.py``); these figures show what the batch itself costs against the built-in.

Scenarios: ``in_process`` (n=25 and n=1), ``mcp`` (the same over an in-memory MCP session, the
client's checks included: n=25 on the memory and the SQLite store, and a batch of 1 against one
``invoke_read_tool``), ``schema`` (the SDK client's own output-schema check of one answer),
``memory`` (tracemalloc peak, 25 answers of about 100 KB), ``http`` (8 clients over streamable
HTTP), ``records`` (25 answers of nested records, about 9 KB each, in process and over a session)
and ``failures`` (25 entries that each fail: an unknown tool, a write the gate refuses, a backend
that is down, in turn; in process and over a session).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import standin  # puts the backend and the stand-ins on sys.path, so it comes first

from centralmcp_batch import _compat, batch_tool, bench
from centralmcp_batch.adapters.centralmcp import adopt
from centralmcp_batch.bench import Run, ratios, rounds, summary
from centralmcp_batch.host import HostHooks
from centralmcp_batch.ratelimit import RateLimiter

TOOL = batch_tool.TOOL_NAME
SCENARIOS = ("in_process", "mcp", "schema", "memory", "http", "records", "failures")
HTTP_CLIENTS = 8


class BaselineError(RuntimeError):
    """An answer was wrong: its timing would mean nothing."""


@dataclass(frozen=True)
class Plan:
    repeat: int
    sample_seconds: float  # each sample loops until it has taken at least this long
    http_seconds: float
    scenarios: tuple[str, ...]
    quick: bool = False


# -- the routers --------------------------------------------------------------------------


# The router's own per-process bucket (a plain token bucket), lifted so that it never binds.
ROUTER_OWN_RATE = 1e6


def builtin_router(label: str = "builtin") -> ModuleType:
    """The router with its own batch, and its own rate gate as its start-up installs it (lifted here)."""
    router = standin.load_router("default", label)
    router.install_router_rate_gate(ROUTER_OWN_RATE)
    return router


def plugin_router(label: str, limiter: RateLimiter) -> tuple[ModuleType, HostHooks]:
    """The router in minimal mode with the plugin adopted, its account-wide limiter ``limiter``."""
    router = standin.load_router("minimal", label)
    router.install_router_rate_gate(ROUTER_OWN_RATE)
    return router, HostHooks(adopt(router, rate_limiter=limiter))


@dataclass
class Routers:
    builtin: ModuleType  # default mode: the router's own sequential batch
    plugin: ModuleType  # minimal mode, centralmcp-batch adopted, its limiter in memory
    hooks: HostHooks
    plugin_sqlite: ModuleType  # the same, its limiter on a SQLite file
    limiters: list[RateLimiter]


def make_routers(sqlite_url: str) -> Routers:
    limiters = [bench.lifted_limiter(), bench.lifted_limiter(sqlite_url)]
    plugin, hooks = plugin_router("plugin", limiters[0])
    plugin_sqlite, _ = plugin_router("plugin_sqlite", limiters[1])
    return Routers(builtin_router(), plugin, hooks, plugin_sqlite, limiters)


def calls_of(n: int, tool: str = "wait", **arguments: Any) -> list[dict[str, Any]]:
    return [{"name": tool, "id": f"e{i}", "arguments": {**arguments, "tag": f"e{i}"}} for i in range(n)]


def check_results(results: Sequence[Any], calls: Sequence[Mapping[str, Any]], wrapped: bool) -> None:
    """Every answer at its call's place: batch items carry it under result, the loop's are bare."""
    answers = [item.get("result") if wrapped else item for item in results]
    tags = [(answer or {}).get("tag") if isinstance(answer, dict) else None for answer in answers]
    if tags != [call["arguments"]["tag"] for call in calls]:
        raise BaselineError(f"answers lost or out of place: {str(results)[:300]}")


def check_batch(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> None:
    if not response.get("ok"):
        raise BaselineError(f"the batch failed: {str(response)[:300]}")
    check_results(response["results"], calls, wrapped=True)


Calls = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Checks:
    """How a workload's answers are checked: the loop's bare answers, and a batch response."""

    loop: Callable[[list[Any], Calls], None]
    batch: Callable[[Mapping[str, Any], Calls], None]


# Every entry answered, at its call's place, and each batch ok.
ANSWERED = Checks(functools.partial(check_results, wrapped=False), check_batch)


# -- in process ---------------------------------------------------------------------------


def in_process_variants(routers: Routers, calls: list[dict[str, Any]], checks: Checks = ANSWERED) -> dict[str, Run]:
    async def loop() -> None:
        read = routers.plugin._dispatch_read_tool
        checks.loop([await read(None, call["name"], call["arguments"]) for call in calls], calls)

    async def builtin() -> None:
        checks.batch(await routers.builtin.invoke_read_tool_batch(None, calls), calls)

    async def plugin() -> None:
        checks.batch(await batch_tool.run(routers.hooks, calls), calls)

    return {"loop": loop, "builtin": builtin, "plugin": plugin}


async def sampled(variants: Mapping[str, Run], plan: Plan) -> dict[str, list[float]]:
    inner = {name: await bench.loops_for(run, plan.sample_seconds) for name, run in variants.items()}
    await rounds(variants, 1, inner)  # warm-up, not kept
    return await rounds(variants, plan.repeat, inner)


async def in_process_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    rows = []
    for n in (1, 25):
        calls = calls_of(n)
        samples = await sampled(in_process_variants(routers, calls), plan)
        rows.append(
            {
                "n": n,
                "loop_us": summary(samples["loop"], 1e6),
                "builtin_us": summary(samples["builtin"], 1e6),
                "plugin_us": summary(samples["plugin"], 1e6),
                "plugin_over_loop": summary(ratios(samples["plugin"], samples["loop"])),
                "plugin_over_builtin": summary(ratios(samples["plugin"], samples["builtin"])),
            }
        )
    return rows


# -- over an in-memory MCP session -----------------------------------------------------------


async def call_checked(client: _compat.ClientHandle, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    answer = await client.call_tool(tool, arguments, timeout=120)
    if tool == "invoke_read_tool":
        # It returns Any, so its answer is the text: CentralMCP's router publishes no output schema for it from
        # Python 3.11 on (typing.Any is a class there), and on 3.10 the SDK wraps it in {"result": ...}.
        answer = replace(answer, structured=None)
    value = answer.structured if isinstance(answer.structured, dict) else answer.payload
    if answer.is_error or not isinstance(value, dict):
        raise BaselineError(f"{tool} failed: {answer.text[:300]}")
    return value


async def mcp_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    async with AsyncExitStack() as stack:
        to_builtin = await stack.enter_async_context(_compat.connect(routers.builtin.mcp))
        to_plugin = await stack.enter_async_context(_compat.connect(routers.plugin.mcp))
        to_sqlite = await stack.enter_async_context(_compat.connect(routers.plugin_sqlite.mcp))
        calls, one = calls_of(25), calls_of(1)

        def batch_of(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> Run:
            async def run() -> None:
                check_batch(await call_checked(client, TOOL, {"calls": calls}), calls)

            return run

        async def single() -> None:
            read = {"name": "wait", "arguments": one[0]["arguments"]}
            answer = await call_checked(to_plugin, "invoke_read_tool", read)
            check_results([answer], one, wrapped=False)

        variants = {
            "builtin": batch_of(to_builtin, calls),
            "plugin": batch_of(to_plugin, calls),
            "plugin_sqlite": batch_of(to_sqlite, calls),
            "plugin_one": batch_of(to_plugin, one),
            "single": single,
        }
        samples = await sampled(variants, plan)
    return [
        versus(BATCH_OF_25, samples["plugin"], samples["builtin"]),
        versus(BATCH_OF_25_SQLITE, samples["plugin_sqlite"], samples["builtin"]),
        versus(BATCH_OF_ONE, samples["plugin_one"], samples["single"]),
    ]


BATCH_OF_25 = "n=25: plugin (memory store) vs the built-in batch"
BATCH_OF_25_SQLITE = "n=25: plugin (SQLite store, the default) vs the built-in batch"
BATCH_OF_ONE = "n=1: plugin batch vs one invoke_read_tool"


def versus(case: str, plugin: list[float], baseline: list[float]) -> dict[str, Any]:
    return {
        "case": case,
        "plugin_us": summary(plugin, 1e6),
        "baseline_us": summary(baseline, 1e6),
        "plugin_over_baseline": summary(ratios(plugin, baseline)),
    }


# -- the client's output-schema check --------------------------------------------------------


def sdk_session(client: _compat.ClientHandle) -> Any:
    return getattr(client.session, "session", client.session)  # 2.x: Client wraps its ClientSession


async def schema_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    """The SDK's own ``validate_tool_result`` on real answers of 25 and of 1 entries, as call_tool runs it.

    On SDK 1.x the server runs the same ``jsonschema.validate`` on the built-in's answer (a plain
    dict) before sending it, so its round trip pays this figure twice; the plugin's answer reaches
    the SDK as a finished ``CallToolResult``, which 1.x's server passes on unchecked.
    """
    rows = []
    async with _compat.connect(routers.builtin.mcp) as to_builtin, _compat.connect(routers.plugin.mcp) as to_plugin:
        plugin_session, builtin_session = sdk_session(to_plugin), sdk_session(to_builtin)
        await plugin_session.list_tools()  # the session's table of output schemas, which the check reads
        await builtin_session.list_tools()
        for n in (25, 1):
            calls = calls_of(n)
            variants = {
                "plugin": checking(plugin_session, await plugin_session.call_tool(TOOL, {"calls": calls})),
                "builtin": checking(builtin_session, await builtin_session.call_tool(TOOL, {"calls": calls})),
            }
            samples = await sampled(variants, plan)
            rows += [
                {
                    "schema": name,
                    "n": n,
                    "check_ms": summary(samples[name], 1000),
                    "over_builtin": summary(ratios(samples[name], samples["builtin"])),
                }
                for name in variants
            ]
    return rows


def checking(session: Any, raw: Any) -> Run:
    validate = getattr(session, "validate_tool_result", None) or session._validate_tool_result  # 2.x / 1.x spelling

    async def run() -> None:
        await validate(TOOL, raw)

    return run


# -- memory -----------------------------------------------------------------------------------


async def peak_bytes(run: Run) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        await run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# Peaks taken per variant in a full run. The plugin's peak is set by how many of its concurrent calls hold a
# raw answer (about 100 KB, and its JSON text while the router bounds it) at the same moment, which the
# threads that run ``blob`` decide: its peaks fall on a few levels, so a median needs more of them than a time.
MEMORY_ROUNDS = 21


async def memory_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    calls = calls_of(25, "blob", kb=100)
    async with _compat.connect(routers.builtin.mcp) as to_builtin, _compat.connect(routers.plugin.mcp) as to_plugin:
        variants: dict[str, Run] = {
            "in process: plugin": lambda: batch_tool.run(routers.hooks, calls),
            "in process: built-in": lambda: routers.builtin.invoke_read_tool_batch(None, calls),
            "MCP session: plugin": lambda: call_checked(to_plugin, TOOL, {"calls": calls}),
            "MCP session: built-in": lambda: call_checked(to_builtin, TOOL, {"calls": calls}),
        }
        for run in variants.values():
            await run()  # warm-up: imports and caches are not the answer's memory
        peaks: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(plan.repeat if plan.quick else max(plan.repeat, MEMORY_ROUNDS)):
            for name, run in variants.items():
                peaks[name].append(await peak_bytes(run))
    rows = []
    for where in ("in process", "MCP session"):
        plugin, builtin = peaks[f"{where}: plugin"], peaks[f"{where}: built-in"]
        rows.append(
            {
                "where": where,
                "plugin_mb": summary(plugin, 1e-6),
                "baseline_mb": summary(builtin, 1e-6),
                "plugin_over_baseline": summary(ratios(plugin, builtin)),
            }
        )
    return rows


# -- streamable HTTP, 8 clients ---------------------------------------------------------------


def serve(which: str, port: int) -> None:
    """The subprocess: one stand-in router (built-in or plugin) over streamable HTTP."""
    import uvicorn

    bench.quiet_logs()
    router = builtin_router(which) if which == "builtin" else plugin_router(which, bench.lifted_limiter())[0]
    uvicorn.run(_compat.http_app(router.mcp), host="127.0.0.1", port=port, log_level="warning")


@asynccontextmanager
async def served(which: str) -> AsyncIterator[str]:
    port = bench.free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", which, "--port", str(port)]
    async with bench.http_server(command, port) as url:
        yield url


async def entries_per_second(clients: Sequence[_compat.ClientHandle], seconds: float, check: Any) -> float:
    calls = calls_of(25)
    done = 0
    stop_at = time.perf_counter() + seconds

    async def client_loop(client: _compat.ClientHandle) -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            check(await call_checked(client, TOOL, {"calls": calls}), calls)
            done += len(calls)

    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for client in clients:
            tasks.start_soon(client_loop, client)
    return done / (time.perf_counter() - started)


async def http_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    async with AsyncExitStack() as stack:
        urls = {which: await stack.enter_async_context(served(which)) for which in ("builtin", "plugin")}
        # A loop, not a comprehension: Python 3.10 refuses an await in a list inside a dict comprehension.
        clients: dict[str, list[_compat.ClientHandle]] = {}
        for which, url in urls.items():
            clients[which] = [await stack.enter_async_context(_compat.connect(url)) for _ in range(HTTP_CLIENTS)]
        for which in clients:
            await entries_per_second(clients[which], 0.3, check_batch)  # warm-up
        rates: dict[str, list[float]] = {"builtin": [], "plugin": []}
        for _ in range(plan.repeat):
            for which in ("builtin", "plugin"):
                rates[which].append(await entries_per_second(clients[which], plan.http_seconds, check_batch))
    return [
        {
            "clients": HTTP_CLIENTS,
            "n": 25,
            "plugin_entries_per_s": summary(rates["plugin"]),
            "baseline_entries_per_s": summary(rates["builtin"]),
            "plugin_over_baseline": summary(ratios(rates["plugin"], rates["builtin"])),
        }
    ]


# -- nested records ---------------------------------------------------------------------------

# Records an answer: about 9 KB (over 200 brackets: see engine.nests_deeper), so 25 answers fill most
# of the default 300,000-byte budget, unclipped.
RECORDS = 26
# A sample's shortest time here. A batch of records leaves the cycle collector's oldest generation
# enough to collect every few batches, at more than a batch's own time: a shorter sample catches one or
# none by chance, and a variant's figure with it. A sample of many batches pays its share of them.
RECORDS_SAMPLE_SECONDS = 0.5


async def records_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    """25 answers of nested records, zero latency: in process against the loop and the built-in, and
    over an in-memory session against the built-in. A clipped answer loses its tag and stops the run."""
    calls = calls_of(25, "records", count=RECORDS)
    await check_unclipped(routers, calls)
    long_samples = replace(plan, sample_seconds=max(plan.sample_seconds, RECORDS_SAMPLE_SECONDS))
    return await workload_rows(long_samples, routers, calls, ANSWERED)


async def workload_rows(
    plan: Plan, routers: Routers, calls: list[dict[str, Any]], checks: Checks
) -> list[dict[str, Any]]:
    """One workload in process against the loop and the built-in, and over an in-memory session against
    the built-in; every answer checked by ``checks``."""
    async with _compat.connect(routers.builtin.mcp) as to_builtin, _compat.connect(routers.plugin.mcp) as to_plugin:

        async def session_builtin() -> None:
            checks.batch(await call_checked(to_builtin, TOOL, {"calls": calls}), calls)

        async def session_plugin() -> None:
            checks.batch(await call_checked(to_plugin, TOOL, {"calls": calls}), calls)

        variants = {
            **in_process_variants(routers, calls, checks),
            "session_builtin": session_builtin,
            "session_plugin": session_plugin,
        }
        samples = await sampled(variants, plan)
    return [
        {
            "where": "in process",
            "loop_us": summary(samples["loop"], 1e6),
            "builtin_us": summary(samples["builtin"], 1e6),
            "plugin_us": summary(samples["plugin"], 1e6),
            "plugin_over_loop": summary(ratios(samples["plugin"], samples["loop"])),
            "plugin_over_builtin": summary(ratios(samples["plugin"], samples["builtin"])),
        },
        {
            "where": "MCP session",
            "builtin_us": summary(samples["session_builtin"], 1e6),
            "plugin_us": summary(samples["session_plugin"], 1e6),
            "plugin_over_builtin": summary(ratios(samples["session_plugin"], samples["session_builtin"])),
        },
    ]


async def check_unclipped(routers: Routers, calls: list[dict[str, Any]]) -> None:
    """Both batches answer every record: a router that pages its answers would time its paging instead."""
    answers = [await batch_tool.run(routers.hooks, calls), await routers.builtin.invoke_read_tool_batch(None, calls)]
    for answer in answers:
        if any("_response_bounds" in item["result"] for item in answer["results"]):
            raise BaselineError(f"answers of {RECORDS} records were clipped: {str(answer)[:300]}")


# -- failing entries ----------------------------------------------------------------------------

# Each entry fails one of three ways, in turn, and is answered with the status the router gives it.
FAILING = (("no_such_tool", "unknown_tool"), ("reboot", "blocked"), ("unavailable", "error"))


def failing_calls(n: int) -> list[dict[str, Any]]:
    return [{**call, "name": FAILING[i % 3][0]} for i, call in enumerate(calls_of(n))]


def check_failed(results: Sequence[Any], calls: Calls, wrapped: bool) -> None:
    """Every entry failed as its tool should, at its call's place (a batch item names its id)."""
    seen = [(item.get("id"), item.get("status")) if wrapped else (None, bare_status(item)) for item in results]
    expected = [(call["id"] if wrapped else None, FAILING[i % 3][1]) for i, call in enumerate(calls)]
    if seen != expected:
        raise BaselineError(f"entries failed otherwise than their tools should: {str(results)[:300]}")


def bare_status(answer: Mapping[str, Any]) -> str:
    """The status of the router's own answer: the one it names, or error where the backend failed."""
    return str(answer.get("status", "error" if "error" in answer else "ok"))


def check_failed_batch(response: Mapping[str, Any], calls: Calls) -> None:
    check_failed(response["results"], calls, wrapped=True)


FAILED = Checks(functools.partial(check_failed, wrapped=False), check_failed_batch)


async def failures_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    """25 entries that each fail, zero latency (see ``workload_rows``). An entry answered with another
    status stops the run."""
    return await workload_rows(plan, routers, failing_calls(25), FAILED)


# -- the report -------------------------------------------------------------------------------

TABLES = {
    "in_process": (
        "A. In process: the plugin adopted vs the router's own loop and built-in batch",
        ["n", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin"],
    ),
    "mcp": (
        "B. In-memory MCP session, the client's checks included",
        ["case", "plugin_us", "baseline_us", "plugin_over_baseline"],
    ),
    "schema": (
        "C. The SDK client's output-schema check of one answer (SDK 1.x: the server checks the built-in's too)",
        ["schema", "n", "check_ms", "over_builtin"],
    ),
    "memory": (
        f"D. Peak memory (tracemalloc), 25 answers of about 100 KB ({MEMORY_ROUNDS} peaks in a full run)",
        ["where", "plugin_mb", "baseline_mb", "plugin_over_baseline"],
    ),
    "http": (
        "E. Streamable HTTP, 8 clients, batches of 25 zero-latency entries",
        ["clients", "n", "plugin_entries_per_s", "baseline_entries_per_s", "plugin_over_baseline"],
    ),
    "records": (
        f"F. Nested records: 25 answers of {RECORDS} device records (about 9 KB each)",
        ["where", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin"],
    ),
    "failures": (
        "G. Failing entries: 25, each an unknown tool, a write the gate refuses or a backend that is down",
        ["where", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin"],
    ),
}


Match = Mapping[str, Any]

# (what, scenario, row, figure, limit, at most?): a figure with a limit is a target (issue 35's); one with
# None is recorded against the built-in, not held to a limit (zero latency is not where users are).
FIGURES: list[tuple[str, str, Match, str, float | None, bool]] = [
    ("peak memory over a session, 25 x 100 KB: plugin <= 1.2x the built-in", "memory",
     {"where": "MCP session"}, "plugin_over_baseline", 1.2, True),
    ("n=25 over a session, default store (SQLite): plugin / built-in", "mcp",
     {"case": BATCH_OF_25_SQLITE}, "plugin_over_baseline", None, True),
    ("n=25 over a session, memory store: plugin / built-in", "mcp",
     {"case": BATCH_OF_25}, "plugin_over_baseline", None, True),
    ("n=1 over a session: plugin batch / one invoke_read_tool", "mcp",
     {"case": BATCH_OF_ONE}, "plugin_over_baseline", None, True),
    ("n=25 in process: plugin / built-in", "in_process", {"n": 25}, "plugin_over_builtin", None, True),
    ("HTTP, 8 clients: plugin / built-in entries per second", "http",
     {"clients": HTTP_CLIENTS}, "plugin_over_baseline", None, False),
    ("records over a session: plugin / built-in", "records",
     {"where": "MCP session"}, "plugin_over_builtin", None, True),
    ("failures over a session: plugin / built-in", "failures",
     {"where": "MCP session"}, "plugin_over_builtin", None, True),
]  # fmt: skip


def figure(name: str, rows: Sequence[Match], match: Match, key: str, limit: float | None, at_most: bool) -> dict:
    row = bench.find_row(rows, **match)
    value = None if row is None else round(row[key]["median"], 3)
    met = None if value is None or limit is None else (value <= limit if at_most else value >= limit)
    return {"target": name, "value": value, "threshold": limit, "met": met}


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        figure(name, list(report.get(scenario, [])), match, key, limit, at_most)
        for name, scenario, match, key, limit, at_most in FIGURES
    ]


async def run_plan(plan: Plan) -> dict[str, Any]:
    report: dict[str, Any] = {
        "config": {"repeat": plan.repeat, "sample_seconds": plan.sample_seconds},
        "machine": bench.machine(),
        "load_average_before": bench.load_average(),
    }
    steps = {
        "in_process": in_process_scenario,
        "mcp": mcp_scenario,
        "schema": schema_scenario,
        "memory": memory_scenario,
        "http": http_scenario,
        "records": records_scenario,
        "failures": failures_scenario,
    }
    with tempfile.TemporaryDirectory() as tmp:
        routers = make_routers(f"sqlite:///{Path(tmp) / 'rate.sqlite3'}")
        try:
            for name in plan.scenarios:
                report[name] = await steps[name](plan, routers)
        finally:
            for limiter in routers.limiters:
                await limiter.close()
    report["load_average_after"] = bench.load_average()
    report["targets"] = targets(report)
    return report


def render(report: Mapping[str, Any]) -> str:
    config, machine = report["config"], report["machine"]
    loads = f"load average {report['load_average_before']} -> {report['load_average_after']}"
    parts = [f"Figures: median (min–max) of {config['repeat']} rounds; mcp {machine['mcp']}; {loads}.", ""]
    for key, (title, columns) in TABLES.items():
        if key in report:
            parts.append(bench.table(title, report[key], columns) + "\n")
    parts.append("### Targets and figures against the built-in\n")
    for item in report["targets"]:
        verdict = "recorded" if item["threshold"] is None and item["value"] is not None else bench.verdict(item["met"])
        parts.append(f"- {item['target']}: {item['value']} -> {verdict}")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="centralmcp-batch against CentralMCP's built-in batch, zero latency")
    cli.add_argument("--quick", action="store_true", help="a tiny run that only shows it works")
    cli.add_argument("--repeat", type=int, help="rounds per figure (default 7; 1 with --quick)")
    cli.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    everything = ",".join(SCENARIOS)
    cli.add_argument("--scenarios", default=everything, help=f"comma-separated subset of {everything}")
    cli.add_argument("--serve", choices=("builtin", "plugin"), help=argparse.SUPPRESS)
    cli.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    chosen = tuple(name.strip() for name in args.scenarios.split(",") if name.strip())
    if set(chosen) - set(SCENARIOS) or (args.repeat is not None and args.repeat < 1):
        cli.error(f"scenarios must be among {','.join(SCENARIOS)} and --repeat at least 1")
    plan = Plan(args.repeat or 1, 0.002, 0.3, chosen, True) if args.quick else Plan(args.repeat or 7, 0.05, 2.0, chosen)
    bench.quiet_logs()
    report = anyio.run(run_plan, plan)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
