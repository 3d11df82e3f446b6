"""The batch against a CentralMCP-style baseline: the same router parts, looped one call at a time.

Run from a checkout (it needs the CentralMCP stand-in in ``tests/standins``)::

    python benchmarks/centralmcp_baseline.py [--quick] [--repeat N] [--json PATH] [--scenarios a,b]

Two copies of the stand-in router (``tests/standins/centralmcp_router.py``) serve the same backend
(``baseline_backend.py``): ``builtin`` in default mode with its own sequential
``invoke_read_tool_batch``, ``plugin`` in minimal mode with centralmcp-batch adopted through
``adapters.centralmcp.adopt``. ``loop`` is a plain sequential loop over the router's own read path
(``_dispatch_read_tool``), which is what the built-in is. Every figure is the median (min–max) of the
rounds; in each round the variants run one after the other and a ratio is taken within the round.

Scenarios: ``in_process`` (zero latency, n=25 and n=1), ``mcp`` (the same over an in-memory MCP
session, the client's checks included, and a batch of 1 against one ``invoke_read_tool`` and
against a tool that does no work: it answers a fixed batch answer under the same output schema),
``schema`` (the SDK client's own output-schema check of one 25-entry answer), ``memory``
(tracemalloc peak, 25 answers of about 100 KB), ``http`` (8 clients over streamable HTTP) and
``records`` (25 answers of nested records, about 9 KB each, in process and over a session) and
``failures`` (25 entries that each fail: an unknown tool, a write the gate refuses, a backend that is
down, in turn; in process and over a session).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]  # the backend and the stand-ins

from centralmcp_batch import _compat, batch_tool, bench, budget, models  # noqa: E402 - after the path is set
from centralmcp_batch.adapters.centralmcp import adopt  # noqa: E402
from centralmcp_batch.bench import Run, ratios, rounds, summary  # noqa: E402
from centralmcp_batch.host import HostHooks  # noqa: E402
from centralmcp_batch.ratelimit.config import RATE, STORE_ENV  # noqa: E402

STANDIN = HERE.parent / "tests" / "standins" / "centralmcp_router.py"
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


# -- the two routers ----------------------------------------------------------------------


def lift_rate_limit() -> None:
    """No rate limit to speak of, in a bucket of this process's own.

    At the default of 8 calls a second the limiter, not the batch, would set every figure (a batch of
    25 takes 3 s), and the default store is the user's shared SQLite file, which is not the benchmark's.
    The token is still drawn on every path (loop, built-in, plugin), so its cost is the host's work.
    """
    os.environ[RATE.env] = "1000000"
    os.environ[STORE_ENV] = "memory"


def load_router(mode: str, label: str) -> ModuleType:
    """A fresh copy of the stand-in router over the benchmark backend, with its own rate gate.

    As the router's start-up installs it: a token bucket drawn once per backend call, here at a
    rate no benchmark reaches, so every path (loop, built-in, plugin) pays the same token.
    ``adopt`` then puts the account-wide limiter in front of it, as it does in production.
    """
    lift_rate_limit()
    os.environ["CENTRALMCP_ROUTER_MODE"] = mode
    spec = importlib.util.spec_from_file_location(f"standin_router_{label}", STANDIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._BACKENDS = {"bench": "baseline_backend"}
    module._load_all_backends()
    module.install_router_rate_gate(float(os.environ[RATE.env]))
    return module


@dataclass
class Routers:
    builtin: ModuleType  # default mode: the router's own sequential batch
    plugin: ModuleType  # minimal mode, centralmcp-batch adopted
    hooks: HostHooks


def make_routers() -> Routers:
    builtin = load_router("default", "builtin")
    plugin = load_router("minimal", "plugin")
    return Routers(builtin, plugin, HostHooks(adopt(plugin)))


def calls_of(n: int, tool: str = "wait", **arguments: Any) -> list[dict[str, Any]]:
    return [{"name": tool, "id": f"e{i}", "arguments": {**arguments, "tag": f"e{i}"}} for i in range(n)]


def check_results(results: Sequence[Any], calls: Sequence[Mapping[str, Any]], wrapped: bool) -> None:
    """Every answer at its call's place: batch items carry it under result, the loop's are bare."""
    answers = [item.get("result") if wrapped else item for item in results]
    tags = [(answer or {}).get("tag") if isinstance(answer, dict) else None for answer in answers]
    if tags != [call["arguments"]["tag"] for call in calls]:
        raise BaselineError(f"answers lost or out of place: {str(results)[:300]}")


def check_plugin(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> None:
    if not response.get("ok"):
        raise BaselineError(f"the plugin's batch failed: {str(response)[:300]}")
    check_results(response["results"], calls, wrapped=True)


def check_builtin(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> None:
    if not response.get("ok"):
        raise BaselineError(f"the built-in batch failed: {str(response)[:300]}")
    check_results(response["results"], calls, wrapped=True)


Calls = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Checks:
    """How a workload's answers are checked: the loop's bare answers, and each router's batch response."""

    loop: Callable[[list[Any], Calls], None]
    builtin: Callable[[Mapping[str, Any], Calls], None]
    plugin: Callable[[Mapping[str, Any], Calls], None]


# Every entry answered, at its call's place, and each batch ok.
ANSWERED = Checks(functools.partial(check_results, wrapped=False), check_builtin, check_plugin)


# -- in process ---------------------------------------------------------------------------


def in_process_variants(routers: Routers, calls: list[dict[str, Any]], checks: Checks = ANSWERED) -> dict[str, Run]:
    async def loop() -> None:
        read = routers.plugin._dispatch_read_tool
        checks.loop([await read(None, call["name"], call["arguments"]) for call in calls], calls)

    async def builtin() -> None:
        checks.builtin(await routers.builtin.invoke_read_tool_batch(None, calls), calls)

    async def plugin() -> None:
        checks.plugin(await batch_tool.run(routers.hooks, calls), calls)

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
                "own_us_per_entry": summary(
                    [(p - lp) / n for p, lp in zip(samples["plugin"], samples["loop"], strict=True)], 1e6
                ),
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
    await add_fixed_answer_tool(routers)
    async with _compat.connect(routers.builtin.mcp) as to_builtin, _compat.connect(routers.plugin.mcp) as to_plugin:
        calls, one = calls_of(25), calls_of(1)

        async def builtin() -> None:
            check_builtin(await call_checked(to_builtin, TOOL, {"calls": calls}), calls)

        async def plugin() -> None:
            check_plugin(await call_checked(to_plugin, TOOL, {"calls": calls}), calls)

        async def plugin_one() -> None:
            check_plugin(await call_checked(to_plugin, TOOL, {"calls": one}), one)

        async def single() -> None:
            read = {"name": "wait", "arguments": one[0]["arguments"]}
            answer = await call_checked(to_plugin, "invoke_read_tool", read)
            check_results([answer], one, wrapped=False)

        async def fixed_one() -> None:
            check_plugin(await call_checked(to_plugin, FIXED_ANSWER_TOOL, {"calls": one}), one)

        variants = {
            "builtin": builtin,
            "plugin": plugin,
            "plugin_one": plugin_one,
            "single": single,
            "fixed_one": fixed_one,
        }
        samples = await sampled(variants, plan)
    return [
        versus("n=25: plugin vs the built-in batch", samples["plugin"], samples["builtin"]),
        versus("n=1: plugin batch vs one invoke_read_tool", samples["plugin_one"], samples["single"]),
        versus("n=1: a fixed batch answer vs one invoke_read_tool", samples["fixed_one"], samples["single"]),
        versus("n=1: plugin batch vs a fixed batch answer", samples["plugin_one"], samples["fixed_one"]),
    ]


FIXED_ANSWER_TOOL = "fixed_batch_answer"


async def add_fixed_answer_tool(routers: Routers) -> None:
    """A tool on the plugin's router that does no work: it answers one entry's batch answer, made once.

    It publishes the batch tool's output schema and converts its answer the same way, behind the
    same middleware, so a batch of 1 against it is what a typed batch answer costs a round trip
    before the batch does anything: the floor under the batch-of-1 figure.
    """
    server = routers.plugin.mcp
    if _compat.has_tool(server, FIXED_ANSWER_TOOL):
        return
    published = next(tool for tool in _compat.server_tools(server) if tool.name == TOOL)
    if published.output_schema is None:
        raise BaselineError(f"{TOOL} publishes no output schema: the fixed answer would be checked against none")
    text = json.dumps(await batch_tool.run(routers.hooks, calls_of(1)))

    async def fixed_batch_answer(ctx: _compat.Context, calls: Any = None) -> dict[str, Any]:
        return json.loads(text)  # a fresh dict each call, as a batch builds one

    _compat.add_tool(
        server,
        fixed_batch_answer,
        name=FIXED_ANSWER_TOOL,
        description="The benchmark's fixed batch answer.",
        annotations=batch_tool.ANNOTATIONS,
        input_schema=published.input_schema,
        output_schema=published.output_schema,
    )
    _compat.answer_dicts_with_compact_json(server, FIXED_ANSWER_TOOL, budget.dumps)


def versus(case: str, plugin: list[float], baseline: list[float]) -> dict[str, Any]:
    return {
        "case": case,
        "plugin_us": summary(plugin, 1e6),
        "baseline_us": summary(baseline, 1e6),
        "plugin_over_baseline": summary(ratios(plugin, baseline)),
    }


# -- the client's output-schema check --------------------------------------------------------


def old_output_schema() -> dict[str, Any]:
    """The schema published before this benchmark: derived from the models, with $ref and anyOf."""
    return {"type": "object", **models.BatchOutcome.model_json_schema()}


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
        # The same check against the old schema. Listed first: a listing rebuilds the session's schema
        # table, and a name missing from it makes every check list the tools again (2.x) instead.
        await plugin_session.list_tools()
        await builtin_session.list_tools()
        plugin_session._tool_output_schemas["old_schema"] = old_output_schema()
        for n in (25, 1):
            calls = calls_of(n)
            plugin_raw = await plugin_session.call_tool(TOOL, {"calls": calls})
            builtin_raw = await builtin_session.call_tool(TOOL, {"calls": calls})
            variants = {
                "plugin": checking(plugin_session, TOOL, plugin_raw),
                "old": checking(plugin_session, "old_schema", plugin_raw),
                "builtin": checking(builtin_session, TOOL, builtin_raw),
            }
            samples = await sampled(variants, plan)
            rows += [schema_row(name, n, samples) for name in ("plugin", "old", "builtin")]
    return rows


def checking(session: Any, name: str, raw: Any) -> Run:
    validate = getattr(session, "validate_tool_result", None) or session._validate_tool_result  # 2.x / 1.x spelling

    async def run() -> None:
        await validate(name, raw)

    return run


def schema_row(name: str, n: int, samples: Mapping[str, list[float]]) -> dict[str, Any]:
    schemas = {"plugin": models.output_schema(), "old": old_output_schema()}
    size = len(json.dumps(schemas[name])) if name in schemas else "(the SDK's for dict[str, Any])"
    return {
        "schema": name,
        "n": n,
        "bytes": size,
        "check_ms": summary(samples[name], 1000),
        "over_builtin": summary(ratios(samples[name], samples["builtin"])),
    }


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
        for _ in range(plan.repeat):
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
    router = load_router("default", which) if which == "builtin" else load_router("minimal", which)
    if which == "plugin":
        adopt(router)
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
        checks = {"builtin": check_builtin, "plugin": check_plugin}
        for which in clients:
            await entries_per_second(clients[which], 0.3, checks[which])  # warm-up
        rates: dict[str, list[float]] = {"builtin": [], "plugin": []}
        for _ in range(plan.repeat):
            for which in ("builtin", "plugin"):
                rates[which].append(await entries_per_second(clients[which], plan.http_seconds, checks[which]))
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
            checks.builtin(await call_checked(to_builtin, TOOL, {"calls": calls}), calls)

        async def session_plugin() -> None:
            checks.plugin(await call_checked(to_plugin, TOOL, {"calls": calls}), calls)

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


FAILED = Checks(functools.partial(check_failed, wrapped=False), check_failed_batch, check_failed_batch)


async def failures_scenario(plan: Plan, routers: Routers) -> list[dict[str, Any]]:
    """25 entries that each fail, zero latency (see ``workload_rows``). An entry answered with another
    status stops the run."""
    return await workload_rows(plan, routers, failing_calls(25), FAILED)


# -- the report -------------------------------------------------------------------------------

TABLES = {
    "in_process": (
        "A. In process, zero latency: the plugin adopted vs the router's own loop and built-in batch",
        ["n", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin", "own_us_per_entry"],
    ),
    "mcp": (
        "B. In-memory MCP session, zero latency, the client's checks included",
        ["case", "plugin_us", "baseline_us", "plugin_over_baseline"],
    ),
    "schema": (
        "C. The SDK client's output-schema check of one answer (SDK 1.x: the server checks the built-in's too)",
        ["schema", "n", "bytes", "check_ms", "over_builtin"],
    ),
    "memory": (
        "D. Peak memory (tracemalloc), 25 answers of about 100 KB",
        ["where", "plugin_mb", "baseline_mb", "plugin_over_baseline"],
    ),
    "http": (
        "E. Streamable HTTP, 8 clients, batches of 25 zero-latency entries",
        ["clients", "n", "plugin_entries_per_s", "baseline_entries_per_s", "plugin_over_baseline"],
    ),
    "records": (
        f"F. Nested records: 25 answers of {RECORDS} device records (about 9 KB each), zero latency",
        ["where", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin"],
    ),
    "failures": (
        "G. Failing entries: 25, each an unknown tool, a write the gate refuses or a backend that is down",
        ["where", "loop_us", "builtin_us", "plugin_us", "plugin_over_loop", "plugin_over_builtin"],
    ),
}


Match = Mapping[str, Any]


def goal(name: str, rows: Sequence[Match], match: Match, key: str, limit: float, at_most: bool) -> dict[str, Any]:
    row = bench.find_row(rows, **match)
    if row is None:
        return {"target": name, "value": None, "threshold": limit, "met": None}
    value = row[key]["median"]
    met = value <= limit if at_most else value >= limit
    return {"target": name, "value": round(value, 3), "threshold": limit, "met": met}


BATCH_OF_ONE = {"case": "n=1: plugin batch vs one invoke_read_tool"}
BATCH_OF_25 = {"case": "n=25: plugin vs the built-in batch"}
SCHEMA_FLOOR = {"case": "n=1: a fixed batch answer vs one invoke_read_tool"}
BATCH_OF_ONE_TARGET = "n=1: plugin batch <= 1.1x one invoke_read_tool"  # shows SCHEMA_FLOOR's figure beside its own


GOALS = [  # (target, scenario, row, figure, limit, at most?)
    ("schema check of a 25-entry answer <= 1 ms", "schema", {"schema": "plugin", "n": 25}, "check_ms", 1.0, True),
    (BATCH_OF_ONE_TARGET, "mcp", BATCH_OF_ONE, "plugin_over_baseline", 1.1, True),
    ("n=25 in process: plugin <= 1.0x the loop", "in_process", {"n": 25}, "plugin_over_loop", 1.0, True),
    ("n=25 in process: own cost <= 25 us per entry", "in_process", {"n": 25}, "own_us_per_entry", 25.0, True),
    ("n=25 over MCP: plugin <= 1.0x the built-in batch", "mcp", BATCH_OF_25, "plugin_over_baseline", 1.0, True),
    ("HTTP 8 clients: entries/s >= 1.0x the built-in", "http", {"clients": 8}, "plugin_over_baseline", 1.0, False),
    ("peak memory over MCP <= 1.0x built-in", "memory", {"where": "MCP session"}, "plugin_over_baseline", 1, True),
    (
        "records in process: plugin <= 1.0x the built-in",
        "records",
        {"where": "in process"},
        "plugin_over_builtin",
        1,
        True,
    ),
    (
        "records over MCP: plugin <= 1.0x the built-in",
        "records",
        {"where": "MCP session"},
        "plugin_over_builtin",
        1,
        True,
    ),
    (
        "failures in process: plugin <= 1.0x the built-in",
        "failures",
        {"where": "in process"},
        "plugin_over_builtin",
        1,
        True,
    ),
    (
        "failures over MCP: plugin <= 1.0x the built-in",
        "failures",
        {"where": "MCP session"},
        "plugin_over_builtin",
        1,
        True,
    ),
]


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    def rows(name: str) -> list[Match]:
        return list(report.get(name, []))

    found = [goal(name, rows(scenario), match, key, limit, below) for name, scenario, match, key, limit, below in GOALS]
    floor = bench.find_row(rows("mcp"), **SCHEMA_FLOOR)
    if floor is not None:  # what the batch of 1 cannot go below while the tool publishes its output schema
        # By name, not by place in GOALS: a target added or moved must not take another's floor.
        batch_of_one = next(item for item in found if item["target"] == BATCH_OF_ONE_TARGET)
        batch_of_one["floor"] = round(floor["plugin_over_baseline"]["median"], 3)
    return found


async def run_plan(plan: Plan) -> dict[str, Any]:
    routers = make_routers()
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
    for name in plan.scenarios:
        report[name] = await steps[name](plan, routers)
    report["load_average_after"] = bench.load_average()
    report["targets"] = targets(report)
    return report


def render(report: Mapping[str, Any]) -> str:
    parts = [f"Figures: median (min–max) of {report['config']['repeat']} rounds; mcp {report['machine']['mcp']}.", ""]
    for key, (title, columns) in TABLES.items():
        if key in report:
            parts.append(bench.table(title, report[key], columns) + "\n")
    parts.append("### Targets\n")
    parts += [
        f"- {item['target']}: {item['value']} -> {bench.verdict(item['met'])}{_floor(item)}"
        for item in report["targets"]
    ]
    return "\n".join(parts)


def _floor(target: Mapping[str, Any]) -> str:
    return f" (a fixed batch answer under the same output schema: {target['floor']}x)" if "floor" in target else ""


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description="centralmcp-batch against a CentralMCP-style sequential baseline")
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
    plan = Plan(args.repeat or 1, 0.002, 0.3, chosen) if args.quick else Plan(args.repeat or 7, 0.05, 2.0, chosen)
    bench.quiet_logs()
    report = anyio.run(run_plan, plan)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
