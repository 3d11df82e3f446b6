"""The benchmark: what one batch saves over single calls, in wall time, measured side by side.

``python -m centralmcp_batch.bench [--quick] [--json PATH] [--repeat N]`` prints markdown tables
and writes the same figures as JSON. Every figure is the median of ``--repeat`` rounds with their
min and max; within a round the variants being compared run one after the other, so a ratio is
always taken between runs that shared the machine's state at that moment.

Scenarios: latency-bound backends (``latency``), the router over stdio and streamable HTTP
(``transport``), the batch's own cost (``overhead``), the response budget (``budget``) and
concurrent HTTP clients (``load``). The router's rate limiter is set to 1,000,000 calls/s here
(``CENTRALMCP_ROUTER_RATE_PER_SECOND``) so that it does not dominate what is measured.

``--serve-router stdio|http`` is the subprocess the transport and load scenarios start: the
reference router over one in-process backend whose ``wait`` tool sleeps as long as it is told.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Callable, Optional

import anyio

from . import _compat, batch_tool, budget, engine, hosting, settings
from .host import HostHooks
from .hookspecs import hookimpl
from .models import CallContext, Outcome, ToolRef

RATE_ENV = "CENTRALMCP_ROUTER_RATE_PER_SECOND"
UNLIMITED_RATE = "1000000"
BATCH_TOOL = batch_tool.TOOL_NAME
SIZES = (1, 5, 10, 25)
CONCURRENCIES = (1, 4, 8)
TRANSPORT_CONCURRENCY = 8
LOAD_CLIENTS = (1, 8, 32)
ROW_BYTES = 100  # one generated row of a large result, as compact JSON


class BenchError(RuntimeError):
    """A run answered wrongly: its timing would mean nothing, so the benchmark stops."""


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


SCENARIOS = ("latency", "transport", "overhead", "budget", "load", "rate")


def make_plan(quick: bool, repeat: Optional[int], scenarios: Sequence[str]) -> Plan:
    if quick:
        return Plan(repeat or 1, 0.01, (1, 5), (40, 80), 0.002, 0.3, (1, 2), tuple(scenarios))
    return Plan(repeat or 5, 0.05, SIZES, (50, 100, 200, 400), 0.05, 3.0, LOAD_CLIENTS, tuple(scenarios))


# -- figures --------------------------------------------------------------------------


def summary(samples: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    values = [sample * scale for sample in samples]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round-by-round ratios: each pair was measured in the same round."""
    return [top / bottom for top, bottom in zip(numerators, denominators)]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile: a value that was actually observed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


Run = Callable[[], Awaitable[Any]]


async def rounds(variants: Mapping[str, Run], repeat: int, inner: Optional[Mapping[str, int]] = None) -> dict[str, list[float]]:
    """Seconds per run of each variant, ``repeat`` rounds, the variants interleaved in each round."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, run in variants.items():
            times = (inner or {}).get(name, 1)
            started = time.perf_counter()
            for _ in range(times):
                await run()
            samples[name].append((time.perf_counter() - started) / times)
    return samples


async def loops_for(run: Run, seconds: float) -> int:
    """How many runs make one sample of at least ``seconds`` (one warm-up run decides)."""
    started = time.perf_counter()
    await run()
    once = max(time.perf_counter() - started, 1e-7)
    return max(1, math.ceil(seconds / once))


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for a block and restore what was there."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def concurrency(value: int) -> AbstractContextManager[None]:
    return environment(**{settings.CONCURRENCY: str(value)})


# -- backends and checks --------------------------------------------------------------


async def wait(seconds: float = 0.0, tag: str = "") -> dict[str, Any]:
    """The benchmark's backend tool: sleeps ``seconds`` (none at 0) and echoes ``tag``."""
    if seconds > 0:
        await anyio.sleep(seconds)
    return {"tag": tag, "slept": seconds}


def backend_server() -> Any:
    server = _compat.new_server("bench-backend")
    _compat.add_tool(server, wait, name="wait", description="Sleep, then echo the tag.", annotations={"readOnlyHint": True})
    return server


def build_router() -> Any:
    from .router import Router

    with environment(**{RATE_ENV: UNLIMITED_RATE}):  # read once, when the router is built
        return Router({"bench": backend_server()})


def wait_calls(n: int, seconds: float, prefix: str = "e") -> list[dict[str, Any]]:
    return [{"name": "wait", "id": f"{prefix}{i}", "arguments": {"seconds": seconds, "tag": f"{prefix}{i}"}} for i in range(n)]


def misplaced(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(lost, reordered): entries without an ok answer, and answers not at their call's place."""
    results = list(response.get("results") or [])
    lost = max(0, len(calls) - len(results))
    reordered = 0
    for call, item in zip(calls, results):
        if item.get("status") != "ok":
            lost += 1
        elif item.get("id") != call["id"] or (item.get("result") or {}).get("tag") != call["arguments"]["tag"]:
            reordered += 1
    return lost, reordered


def check_batch(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> None:
    lost, reordered = misplaced(response, calls)
    if lost or reordered or not response.get("ok"):
        raise BenchError(f"a batch of {len(calls)} answered wrongly ({lost} lost, {reordered} reordered): {str(response)[:300]}")


async def mcp_batch(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await client.call_tool(BATCH_TOOL, {"calls": calls}, timeout=120)
    if answer.is_error or not isinstance(answer.structured, dict):
        raise BenchError(f"{BATCH_TOOL} failed: {answer.text[:300]}")
    return answer.structured


async def checked_batch(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> None:
    check_batch(await mcp_batch(client, calls), calls)


async def single_reads(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> None:
    """The same entries as ``invoke_read_tool`` round trips, one after the other."""
    for call in calls:
        answer = await client.call_tool("invoke_read_tool", {"name": call["name"], "arguments": call["arguments"]}, timeout=120)
        if answer.is_error or (answer.structured or {}).get("tag") != call["arguments"]["tag"]:
            raise BenchError(f"invoke_read_tool failed: {answer.text[:300]}")


# -- scenario 1: latency-bound backends -----------------------------------------------


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
        rows.append({
            "n": n,
            "mode": variant,
            "ideal_ms": ideal * 1000,
            "wall_ms": summary(times, 1000),
            "speedup_over_c1": summary(ratios(sequential, times)),
            "speedup_over_singles": summary(ratios(samples["singles"], times)),
            "efficiency": summary([ideal / time_ for time_ in times]),
        })
    return rows


# -- scenario 2: over a real transport ------------------------------------------------


def router_env() -> dict[str, str]:
    return {**os.environ, RATE_ENV: UNLIMITED_RATE, settings.CONCURRENCY: str(TRANSPORT_CONCURRENCY)}


def serve_command(transport: str, port: int = 0) -> list[str]:
    return [sys.executable, "-m", "centralmcp_batch.bench", "--serve-router", transport, "--port", str(port)]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def http_router() -> Any:
    """The router as a streamable HTTP subprocess on a free local port; its URL while open."""
    port = free_port()
    # The server's log goes to a file: SDK 1.x logs every client disconnect as an error.
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(serve_command("http", port), env=router_env(), stdout=subprocess.DEVNULL, stderr=log)
    try:
        await wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    except BaseException:
        log.seek(0)
        sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
        raise
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


async def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    with anyio.fail_after(seconds):
        while True:
            if process.poll() is not None:
                raise BenchError(f"the HTTP router exited with code {process.returncode} before listening")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


def stdio_params() -> Any:
    command = serve_command("stdio")
    return _compat.StdioServerParameters(command=command[0], args=command[1:], env=router_env())


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
        rows.append({
            "transport": transport,
            "n": len(calls),
            "batch_ms": summary(samples["batch"], 1000),
            "singles_ms": summary(samples["singles"], 1000),
            "speedup": summary(ratios(samples["singles"], samples["batch"])),
        })
    return rows


# -- scenario 3: the batch's own cost -------------------------------------------------


class BenchHost:
    """A host whose backends are plain functions, with nothing else in the way.

    The package's own (not ``centralmcp_batch.testing``, which needs pytest): ``centralmcp-batch
    bench`` runs from a plain install.
    """

    def __init__(self, handlers: Mapping[str, Callable[..., Any]]) -> None:
        self.handlers = dict(handlers)
        self.refs = {name: ToolRef(name, "inline", {"readOnlyHint": True}) for name in handlers}

    @hookimpl
    def centralmcp_find_tool(self, name: str) -> Optional[ToolRef]:
        return self.refs.get(name)

    @hookimpl
    def centralmcp_read_gate(self, tool: ToolRef) -> Optional[str]:
        return None if tool.read_only else f"Tool '{tool.name}' is not read-only."

    @hookimpl
    async def centralmcp_dispatch_read(self, tool: ToolRef, arguments: Mapping[str, Any], resume: Any, max_bytes: int, context: CallContext) -> Any:
        answer = self.handlers[tool.name](**arguments)
        return await answer if hasattr(answer, "__await__") else answer


def zero_host() -> BenchHost:
    return BenchHost({"wait": wait})


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
    per_entry = [(batch - plain) / n for batch, plain in zip(samples["batch"], samples["direct"])]
    return {
        "n": n,
        "direct_us": summary(samples["direct"], 1e6),
        "batch_us": summary(samples["batch"], 1e6),
        "overhead_us_per_entry": summary(per_entry, 1e6),
        "mcp_in_memory_us": summary(samples["mcp"], 1e6),
        "cpu_share": round((time.process_time() - cpu_started) / sum(sum(s) * inner[k] for k, s in samples.items()), 2),
    }


# -- scenario 4: the response budget --------------------------------------------------


def large_result(kb: int) -> dict[str, Any]:
    """About ``kb`` kilobytes of rows, as compact JSON."""
    rows = [{"id": i, "text": "x" * (ROW_BYTES - 23)} for i in range(kb * 1000 // ROW_BYTES)]
    return {"rows": rows}


def budget_host(results: Mapping[int, dict[str, Any]]) -> BenchHost:
    return BenchHost({"blob": lambda kb=0: results[kb]})


async def budget_scenario(plan: Plan) -> list[dict[str, Any]]:
    main_kb = 200 if 200 in plan.budget_kb else plan.budget_kb[-1]
    results = {kb: large_result(kb) for kb in plan.budget_kb}
    host = budget_host(results)
    hooks = HostHooks(hosting.plugin_manager(host))
    cases = [(n, main_kb) for n in plan.sizes] + [(plan.largest, kb) for kb in plan.budget_kb if kb != main_kb]
    return [await budget_row(plan, n, kb, hooks, host) for n, kb in cases]


async def budget_row(plan: Plan, n: int, kb: int, hooks: HostHooks, host: BenchHost) -> dict[str, Any]:
    calls = [{"name": "blob", "id": f"b{i}", "arguments": {"kb": kb}} for i in range(n)]
    result = host.handlers["blob"](kb=kb)
    whole = [engine.make_item(i, f"b{i}", "blob", "inline", Outcome("ok", result=result)) for i in range(n)]
    sizes = [budget.size(item) for item in whole]  # the batch sizes each item once, as it finishes
    limit = settings.BatchSettings().response_max_bytes
    fit_times: list[float] = []

    async def fit() -> None:
        fresh = engine.assemble(whole)  # fit shrinks in place: a fresh response each time
        started = time.perf_counter()
        budget.fit(fresh, limit, sizes)
        fit_times.append(time.perf_counter() - started)

    async def batch() -> None:
        await batch_tool.run(hooks, calls)

    await rounds({"batch": batch}, 1)  # warm-up, not kept
    samples = await rounds({"fit": fit, "batch": batch}, plan.repeat)
    return budget_figures(n, sizes, fit_times, samples["batch"], await batch_tool.run(hooks, calls))


def budget_figures(n: int, sizes: list[int], fit_times: list[float], batch_times: list[float], response: dict[str, Any]) -> dict[str, Any]:
    megabytes = sum(sizes) / 1e6
    return {
        "n": n,
        "result_kb": round(sizes[0] / 1000, 1),
        "input_mb": round(megabytes, 2),
        "fit_us": summary(fit_times, 1e6),
        "fit_us_per_entry": summary([seconds / n for seconds in fit_times], 1e6),
        "fit_us_per_mb": summary([seconds / megabytes for seconds in fit_times], 1e6),
        "batch_ms": summary(batch_times, 1000),
        "batch_ms_per_mb": summary([seconds / megabytes for seconds in batch_times], 1000),
        "bytes_returned": budget.size(response),
        "results_dropped": sum(1 for item in response["results"] if item.get("result_truncated")),
    }


# -- scenario 6: the rate-bound limit --------------------------------------------------


def default_limiter_router() -> Any:
    """The reference router at its default limiter (nothing in the environment overrides it)."""
    from .ratelimit.config import BURST_ENV, STORE_ENV
    from .router import Router

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
    return [{
        "n": len(calls),
        "rate_per_s": limiter.rate,
        "burst": limiter.burst,
        "ideal_ms": ideal * 1000,
        "wall_ms": summary(times, 1000),
        "efficiency": summary([ideal / seconds for seconds in times]) if ideal else "n <= burst",
    }]


# -- scenario 5: concurrent clients over streamable HTTP ------------------------------


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


# -- the router subprocess ------------------------------------------------------------


def serve_router(transport: str, port: int) -> None:
    from .router.serve import serve

    os.environ[RATE_ENV] = UNLIMITED_RATE  # the benchmark measures the batch, not the limiter
    quiet_logs()
    serve(build_router(), transport=transport, host="127.0.0.1", port=port)


def quiet_logs() -> None:
    """Warnings only: an INFO line per HTTP request (httpx, or httpx2 under SDK 2.x) would bury the tables."""
    for noisy in ("httpx", "httpx2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# -- the machine, the targets, the tables ---------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        model = platform.processor()
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "mcp": version("mcp"),
        "anyio": version("anyio"),
        "pluggy": version("pluggy"),
        "platform": platform.platform(),
    }


def load_average() -> Optional[list[float]]:
    return [round(value, 2) for value in os.getloadavg()] if hasattr(os, "getloadavg") else None


def find_row(rows: Sequence[Mapping[str, Any]], **wanted: Any) -> Optional[Mapping[str, Any]]:
    return next((row for row in rows if all(row.get(key) == value for key, value in wanted.items())), None)


def target(name: str, row: Optional[Mapping[str, Any]], key: str, threshold: float, at_least: bool) -> dict[str, Any]:
    if row is None:
        return {"target": name, "value": None, "threshold": threshold, "met": None}
    value = row[key]["median"]
    return {"target": name, "value": round(value, 3), "threshold": threshold, "met": value >= threshold if at_least else value < threshold}


def targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    c8 = find_row(report.get("latency_bound", []), n=25, mode="batch c=8")
    stdio = find_row(report.get("transports", []), transport="stdio", n=25)
    overhead = find_row(report.get("overhead", []), n=25)
    rate = find_row(report.get("rate_bound", []), n=25)
    return [
        target("L=50ms n=25 c=8: efficiency (ideal/measured) >= 0.9, i.e. within 1.11x of ideal", c8, "efficiency", 0.9, True),
        target("L=50ms n=25 c=8: speed-up over c=1 >= 5x", c8, "speedup_over_c1", 5.0, True),
        target("L=50ms n=25 c=8: speed-up over 25 single round trips >= 5x", c8, "speedup_over_singles", 5.0, True),
        target("stdio, 50 ms calls: one batch of 25 vs 25 single round trips >= 5x", stdio, "speedup", 5.0, True),
        target("batch overhead at n=25 < 100 us per entry", overhead, "overhead_us_per_entry", 100.0, False),
        target("default limiter, n=25: efficiency against (n - burst) / rate >= 0.9", rate, "efficiency", 0.9, True),
    ]


def cell(value: Any) -> str:
    if isinstance(value, dict) and "median" in value:
        return f"{fmt(value['median'])} ({fmt(value['min'])}–{fmt(value['max'])})"
    return fmt(value) if isinstance(value, float) else str(value)


def fmt(number: float) -> str:
    if abs(number) >= 100:
        return f"{number:.0f}"
    return f"{number:.2f}" if abs(number) >= 1 else f"{number:.3f}"


def table(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column, "")) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


TABLES = {
    "latency_bound": ("1. Latency-bound: backend calls wait L, in-process router over an in-memory MCP session", ["n", "mode", "ideal_ms", "wall_ms", "speedup_over_c1", "speedup_over_singles", "efficiency"]),
    "transports": ("2. Real transports: router subprocess, one batch vs single invoke_read_tool calls", ["transport", "n", "batch_ms", "singles_ms", "speedup"]),
    "overhead": ("3. Overhead: zero-latency backend, batch cost beyond the backend calls", ["n", "direct_us", "batch_us", "overhead_us_per_entry", "mcp_in_memory_us", "cpu_share"]),
    "budget": ("4. Budget: large results under the default 300,000-byte budget", ["n", "result_kb", "input_mb", "fit_us", "fit_us_per_entry", "fit_us_per_mb", "batch_ms", "batch_ms_per_mb", "bytes_returned", "results_dropped"]),
    "load": ("5. Load: concurrent clients over streamable HTTP, batches of 25 zero-latency entries", ["clients", "n", "batches_per_s", "entries_per_s", "p50_ms", "p99_ms", "batches", "entries", "lost_or_reordered"]),
    "rate_bound": ("6. Rate-bound: zero-latency entries against the reference router's default token bucket", ["n", "rate_per_s", "burst", "ideal_ms", "wall_ms", "efficiency"]),
}


def render(report: Mapping[str, Any]) -> str:
    parts = [f"Figures: median (min–max) of {report['config']['repeat']} rounds; times in ms or us as named.", ""]
    parts += [table(title, report[key], columns) + "\n" for key, (title, columns) in TABLES.items() if key in report]
    parts.append("### Targets\n")
    parts += [f"- {item['target']}: {item['value']} -> {verdict(item['met'])}" for item in report["targets"]]
    return "\n".join(parts)


def verdict(met: Optional[bool]) -> str:
    return "not measured in this run" if met is None else ("met" if met else "NOT met")


async def profile(path: str, batches: int = 400) -> None:
    """The hot path as pyinstrument sees it: batches of 25 zero-latency entries through the host hooks."""
    from pyinstrument import Profiler  # the ``bench`` extra

    host = zero_host()
    hooks = HostHooks(hosting.plugin_manager(host))
    calls = wait_calls(25, 0.0)
    profiler = Profiler(interval=0.0002, async_mode="disabled")
    with profiler:
        for _ in range(batches):
            check_batch(await batch_tool.run(hooks, calls), calls)
    with open(path, "w", encoding="utf-8") as out:
        out.write(profiler.output_text(unicode=True, color=False))


# -- running it -----------------------------------------------------------------------


async def run_plan(plan: Plan) -> dict[str, Any]:
    report: dict[str, Any] = {"config": {"repeat": plan.repeat, "latency_ms": plan.latency * 1000, "sizes": list(plan.sizes), "quick": plan.sample_seconds < 0.05}}
    report["config"].update({"transport_concurrency": TRANSPORT_CONCURRENCY, RATE_ENV: UNLIMITED_RATE})
    report["machine"] = machine()
    report["load_average_before"] = load_average()
    started = time.perf_counter()
    if "latency" in plan.scenarios:
        report["latency_bound"] = await latency_scenario(plan)
    if "overhead" in plan.scenarios:
        report["overhead"] = await overhead_scenario(plan)
    if "budget" in plan.scenarios:
        report["budget"] = await budget_scenario(plan)
    if "rate" in plan.scenarios:
        report["rate_bound"] = await rate_scenario(plan)
    if {"transport", "load"} & set(plan.scenarios):
        async with http_router() as url:
            if "transport" in plan.scenarios:
                report["transports"] = await transport_scenario(plan, url)
            if "load" in plan.scenarios:
                report["load"] = await load_scenario(plan, url)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_average_after"] = load_average()
    report["targets"] = targets(report)
    return report


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m centralmcp_batch.bench", description="Measure what a batch saves over single calls.")
    cli.add_argument("--quick", action="store_true", help="a tiny run that only shows the benchmark works")
    cli.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    cli.add_argument("--repeat", type=int, metavar="N", help="rounds per figure (default 5; 1 with --quick)")
    cli.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}")
    cli.add_argument("--profile", metavar="PATH", help="profile batches of 25 zero-latency entries with pyinstrument, write the report to PATH")
    cli.add_argument("--serve-router", choices=("stdio", "http"), help=argparse.SUPPRESS)
    cli.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return cli


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.serve_router:
        serve_router(args.serve_router, args.port)
        return 0
    if args.profile:
        anyio.run(profile, args.profile)
        return 0
    quiet_logs()
    chosen = tuple(name.strip() for name in args.scenarios.split(",") if name.strip())
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown or (args.repeat is not None and args.repeat < 1):
        parser().error(f"unknown scenarios {unknown}" if unknown else "--repeat must be at least 1")
    report = anyio.run(run_plan, make_plan(args.quick, args.repeat, chosen))
    print(render(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
