"""Benchmark of invoke_read_tool_batch: the batch against one call at a time and against the ideal, as ratios.

``python -m centralmcp_batch.bench [--quick] [--json PATH] [--repeat N]`` (or ``centralmcp-batch bench``).
Every figure is the median of ``--repeat`` runs (after one unmeasured warm-up) with min and max;
each comparison is measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio

from centralmcp_batch import _compat, batch_tool, budget, engine

LATENCY_ENV = "CENTRALMCP_BENCH_LATENCY_MS"
READ = {"readOnlyHint": True}
ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def bench_backend() -> Any:
    """A backend whose ``wait`` tool sleeps ``CENTRALMCP_BENCH_LATENCY_MS`` and echoes its argument."""
    seconds = float(os.environ.get(LATENCY_ENV, "0")) / 1000
    server = _compat.new_server("bench")

    async def wait(i: int = 0) -> dict[str, Any]:
        if seconds:
            await anyio.sleep(seconds)
        return {"i": i}

    _compat.add_tool(server, wait, name="wait", description="Wait the configured latency and echo i.", annotations=READ)
    return server


def _router(latency_ms: float) -> Any:
    os.environ["CENTRALMCP_ROUTER_RATE_PER_SECOND"] = "1000000"  # the limiter would dominate otherwise
    os.environ[LATENCY_ENV] = str(latency_ms)
    from centralmcp_batch.router import Router

    return Router({"bench": bench_backend()})


def _calls(n: int) -> list[dict[str, Any]]:
    return [{"name": "wait", "arguments": {"i": i}} for i in range(n)]


def _check(response: dict[str, Any], n: int) -> None:
    got = [item["result"]["i"] for item in response["results"] if item["status"] == "ok"]
    if got != list(range(n)):
        raise RuntimeError(f"lost or reordered entries: {got}")


def _stats(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


async def _timed(action: Callable[[], Awaitable[Any]], repeat: int) -> dict[str, float]:
    await action()  # warm-up, not measured
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await action()
        samples.append(time.perf_counter() - start)
    return _stats(samples)


async def latency_bound(sizes: list[int], latency_ms: float, repeat: int) -> list[dict[str, Any]]:
    router, rows = _router(latency_ms), []
    async with _compat.connect(router.server) as client:
        for n in sizes:
            async def singles(n: int = n) -> None:
                for i in range(n):
                    await client.call_tool("invoke_read_tool", {"name": "wait", "arguments": {"i": i}})

            rows.append({"n": n, "mode": "singles", "wall_s": await _timed(singles, repeat)})
            for c in (1, 4, 8):
                os.environ["CENTRALMCP_ROUTER_BATCH_CONCURRENCY"] = str(c)

                async def one_batch(n: int = n) -> None:
                    _check(await batch_tool.run(router.hooks, _calls(n)), n)

                wall = await _timed(one_batch, repeat)
                ideal = math.ceil(n / c) * latency_ms / 1000
                rows.append({"n": n, "mode": f"batch c={c}", "wall_s": wall, "ideal_s": ideal, "efficiency": ideal / wall["median"]})
    for row in rows:
        base = next(r for r in rows if r["n"] == row["n"] and r["mode"] == "batch c=1")
        row["speedup_vs_c1"] = base["wall_s"]["median"] / row["wall_s"]["median"]
    os.environ.pop("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", None)
    return rows


def _config(directory: str) -> str:
    path = Path(directory) / "bench.toml"
    path.write_text('[backends.bench]\nmodule = "centralmcp_batch.bench:bench_backend"\n')
    return str(path)


def _subprocess_env(latency_ms: float) -> dict[str, str]:
    return {**os.environ, LATENCY_ENV: str(latency_ms), "CENTRALMCP_ROUTER_RATE_PER_SECOND": "1000000",
            "CENTRALMCP_ROUTER_BATCH_CONCURRENCY": "8", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


async def _batch_vs_singles(client: _compat.ClientHandle, n: int, repeat: int) -> dict[str, Any]:
    async def one_batch() -> None:
        _check((await client.call_tool("invoke_read_tool_batch", {"calls": _calls(n)})).structured, n)

    async def singles() -> None:
        for i in range(n):
            await client.call_tool("invoke_read_tool", {"name": "wait", "arguments": {"i": i}})

    batch, single = await _timed(one_batch, repeat), await _timed(singles, repeat)
    return {"n": n, "batch_s": batch, "singles_s": single, "speedup": single["median"] / batch["median"]}


async def transports(sizes: list[int], latency_ms: float, repeat: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        args = ["-m", "centralmcp_batch", "serve", "--config", _config(directory)]
        params = _compat.StdioServerParameters(command=sys.executable, args=args, env=_subprocess_env(latency_ms), cwd=str(ROOT))
        with anyio.fail_after(120):
            async with _compat.connect(params) as client:
                rows += [{"transport": "stdio", **await _batch_vs_singles(client, n, repeat)} for n in sizes]
        async with _HttpRouter(args, latency_ms) as url:
            async with _compat.connect(url) as client:
                rows += [{"transport": "http", **await _batch_vs_singles(client, n, repeat)} for n in sizes]
    return rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _HttpRouter:
    """The router as a streamable HTTP subprocess on 127.0.0.1, stopped on exit."""

    def __init__(self, args: list[str], latency_ms: float) -> None:
        self.port = _free_port()
        self.command = [sys.executable, *args, "--transport", "http", "--port", str(self.port)]
        self.env = _subprocess_env(latency_ms)

    async def __aenter__(self) -> str:
        self.process = subprocess.Popen(self.command, env=self.env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with anyio.fail_after(30):
            while True:
                try:
                    await (await anyio.connect_tcp("127.0.0.1", self.port)).aclose()
                    return f"http://127.0.0.1:{self.port}/mcp"
                except OSError:
                    await anyio.sleep(0.1)

    async def __aexit__(self, *exc: Any) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


async def overhead(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    router, rows = _router(0), []
    backend = bench_backend()
    os.environ["CENTRALMCP_ROUTER_BATCH_CONCURRENCY"] = "8"
    for n in sizes:
        async def one_batch(n: int = n) -> None:
            _check(await batch_tool.run(router.hooks, _calls(n)), n)

        async def direct(n: int = n) -> None:
            for i in range(n):
                await _compat.call_server_tool(backend, "wait", {"i": i})

        batch, plain = await _timed(one_batch, repeat), await _timed(direct, repeat)
        per_entry = (batch["median"] - plain["median"]) / n * 1e6
        rows.append({"n": n, "batch_s": batch, "direct_s": plain, "overhead_us_per_entry": per_entry})
    os.environ.pop("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", None)
    return rows


def _big_response(n: int, result_bytes: int) -> tuple[dict[str, Any], list[int]]:
    items = [{"index": i, "id": f"c{i}", "tool": "wait", "server": "bench", "status": "ok", "result": {"data": "x" * result_bytes}} for i in range(n)]
    return engine.assemble(items), [budget.size(item) for item in items]


def _time_fit(n: int, result_bytes: int, repeat: int, limit: int = 300_000) -> dict[str, Any]:
    samples, returned = [], 0
    for _ in range(repeat):
        response, sizes = _big_response(n, result_bytes)
        start = time.perf_counter()
        budget.fit(response, limit, sizes)
        samples.append(time.perf_counter() - start)
        returned = budget.size(response)
    stats = _stats(samples)
    return {"n": n, "result_kb": result_bytes // 1000, "fit_s": stats, "bytes_returned": returned,
            "us_per_entry": stats["median"] / n * 1e6, "us_per_mb_in": stats["median"] / (n * result_bytes / 1e6) * 1e6}


def budget_rows(sizes: list[int], result_kbs: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = [_time_fit(n, 200_000, repeat) for n in sizes]
    return rows + [_time_fit(sizes[-1], kb * 1000, repeat) for kb in result_kbs if kb != 200]


async def load(clients_list: list[int], n: int, seconds: float, latency_ms: float) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        args = ["-m", "centralmcp_batch", "serve", "--config", _config(directory)]
        async with _HttpRouter(args, latency_ms) as url:
            for clients in clients_list:
                rows.append(await _load_once(url, clients, n, seconds))
    return rows


async def _load_once(url: str, clients: int, n: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    problems: list[str] = []
    deadline = time.perf_counter() + seconds

    async def client_loop() -> None:
        async with _compat.connect(url) as client:
            for _ in range(10_000):  # bounded in count as well as in time
                if time.perf_counter() >= deadline:
                    return
                start = time.perf_counter()
                response = (await client.call_tool("invoke_read_tool_batch", {"calls": _calls(n)})).structured
                latencies.append(time.perf_counter() - start)
                try:
                    _check(response, n)
                except RuntimeError as exc:
                    problems.append(str(exc))

    start = time.perf_counter()
    with anyio.fail_after(seconds + 60):
        async with anyio.create_task_group() as group:
            for _ in range(clients):
                group.start_soon(client_loop)
    elapsed = time.perf_counter() - start
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return {"clients": clients, "n": n, "batches": len(latencies), "batches_per_s": len(latencies) / elapsed,
            "entries_per_s": len(latencies) * n / elapsed, "p50_s": statistics.median(ordered), "p99_s": p99,
            "lost_or_reordered": len(problems)}


async def run_all(quick: bool, repeat: int) -> dict[str, Any]:
    sizes = [1, 5] if quick else [1, 5, 10, 25]
    latency = 10.0 if quick else 50.0
    return {
        "config": {"quick": quick, "repeat": repeat, "latency_ms": latency, "sizes": sizes},
        "latency_bound": await latency_bound(sizes, latency, repeat),
        "transports": await transports(sizes[-1:] if quick else [25], latency, repeat),
        "overhead": await overhead(sizes, repeat),
        "budget": budget_rows(sizes, [50, 200] if quick else [50, 100, 200, 400], repeat),
        "load": await load([1, 2] if quick else [1, 8, 32], sizes[-1] if quick else 25, 1.0 if quick else 5.0, latency),
    }


def _ms(stats: dict[str, float]) -> str:
    return f"{stats['median'] * 1e3:.1f} ms [{stats['min'] * 1e3:.1f}-{stats['max'] * 1e3:.1f}]"


def table(report: dict[str, Any]) -> str:
    lines = [f"latency L = {report['config']['latency_ms']} ms, repeat {report['config']['repeat']} (median [min-max])", "",
             "1. latency-bound (in process)", "| n | mode | wall | ideal | speed-up vs c=1 | efficiency |", "|---|---|---|---|---|---|"]
    for r in report["latency_bound"]:
        ideal = f"{r['ideal_s'] * 1e3:.0f} ms" if "ideal_s" in r else "-"
        eff = f"{r['efficiency']:.2f}" if "efficiency" in r else "-"
        lines.append(f"| {r['n']} | {r['mode']} | {_ms(r['wall_s'])} | {ideal} | {r['speedup_vs_c1']:.2f}x | {eff} |")
    lines += ["", "2. real transports (router subprocess, batch concurrency 8)", "| transport | n | one batch | n single calls | speed-up |", "|---|---|---|---|---|"]
    lines += [f"| {r['transport']} | {r['n']} | {_ms(r['batch_s'])} | {_ms(r['singles_s'])} | {r['speedup']:.1f}x |" for r in report["transports"]]
    lines += ["", "3. overhead (zero-latency tools)", "| n | batch | direct calls | overhead per entry |", "|---|---|---|---|"]
    lines += [f"| {r['n']} | {_ms(r['batch_s'])} | {_ms(r['direct_s'])} | {r['overhead_us_per_entry']:.0f} µs |" for r in report["overhead"]]
    lines += ["", "4. budget shrink (300 KB budget)", "| n | result | fit | bytes returned | µs/entry | µs/MB in |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['n']} | {r['result_kb']} KB | {_ms(r['fit_s'])} | {r['bytes_returned']} | {r['us_per_entry']:.1f} | {r['us_per_mb_in']:.1f} |" for r in report["budget"]]
    lines += ["", "5. load (streamable HTTP)", "| clients | n | batches | batches/s | entries/s | p50 | p99 | lost/reordered |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['clients']} | {r['n']} | {r['batches']} | {r['batches_per_s']:.1f} | {r['entries_per_s']:.0f} | {r['p50_s'] * 1e3:.0f} ms | {r['p99_s'] * 1e3:.0f} ms | {r['lost_or_reordered']} |" for r in report["load"]]
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="centralmcp-batch bench", description="Benchmark invoke_read_tool_batch.")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    for name in ("httpx", "httpx2"):  # one INFO line per request (2.x logs as httpx2) would bury the table
        logging.getLogger(name).setLevel(logging.WARNING)
    repeat = max(1, args.repeat or (2 if args.quick else 5))
    report = anyio.run(run_all, args.quick, repeat)
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
