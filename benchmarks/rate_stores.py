"""The account-wide limiter's stores, measured: what a batch pays for its store, the cost of one token, and
the rate several processes hold.

    python benchmarks/rate_stores.py [--rounds 15] [--tokens 3000] [--rate 200] [--seconds 3]

Batch: a batch of 25 zero-latency reads over an in-memory MCP session, on each store, against the
same on the memory store (issue 35's target: at most 1.3x), on two hosts: the reference router and
CentralMCP's router (the stand-in in ``tests/standins``, the plugin adopted). The burst is so large
that no token waits, so what differs is the store's round trips. In each of ``--rounds``
rounds every variant runs one sample (as many batches as fill about 50 ms), one after the other, and
the ratio to memory is taken within the round.
Cost: ``RateLimiter.acquire`` as above, one token at a time, so what is timed is the reservation
alone (the store round trip, and for SQLite the worker thread). Rate: 3 and 8 processes, started
together once all are up, each with 4 tasks taking tokens as fast as the limiter allows from one
bucket, for about ``--seconds``; the rate is counted from the wall-clock stamps of every token once
the burst is spent.
Redis is a redis-server this script starts on a free loopback port (skipped when none is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from importlib.metadata import version
from pathlib import Path

import anyio
import standin  # puts the backend and the stand-ins on sys.path, so it comes first

from centralmcp_batch import _compat, bench
from centralmcp_batch.adapters.centralmcp import adopt
from centralmcp_batch.ratelimit import RateLimiter, open_store
from centralmcp_batch.router import Router

BURST = 5
TASKS_PER_PROCESS = 4
# A burst no run reaches: no token waits, and what differs between stores is their round trips. The rate's interval
# (1 ms) is longer than a zero-latency call takes to start: a call that starts after its token's position on the
# timeline books again, one round trip of its own, so at 1,000,000/s (1 µs apart) every call of a batch would.
NO_WAIT = (1000.0, 10**9)
HOSTS = ("reference router", "CentralMCP (stand-in)")
STORE_COST_LIMIT = 1.3  # issue 35: a batch on a shared store takes at most 1.3x its time on the memory store


def no_wait_limiter(url: str) -> RateLimiter:
    return RateLimiter(open_store(url), *NO_WAIT, key=f"bench-{uuid.uuid4()}")


def host_server(host: str, store: str, limiter: RateLimiter) -> object:
    """The MCP server of ``host`` whose batch takes its tokens from ``limiter``."""
    if host == HOSTS[0]:
        return Router({"bench": bench.backend_server()}, limiter=limiter).server
    router = standin.load_router("minimal", f"stores_{store}")
    adopt(router, rate_limiter=limiter)
    return router.mcp


async def batch_costs(stores: Mapping[str, str], rounds: int) -> list[dict[str, object]]:
    """A batch of 25 zero-latency reads on each host and store, against the same host on memory."""
    calls = bench.wait_calls(25, 0.0)
    variants: dict[str, bench.Run] = {}
    limiters: list[RateLimiter] = []
    async with AsyncExitStack() as stack:
        for host in HOSTS:
            for store, url in stores.items():
                limiters.append(no_wait_limiter(url))
                client = await stack.enter_async_context(_compat.connect(host_server(host, store, limiters[-1])))

                async def run(client: _compat.ClientHandle = client) -> None:
                    await bench.checked_batch(client, calls)

                variants[f"{host}|{store}"] = run
        inner = {name: await bench.loops_for(run, 0.05) for name, run in variants.items()}
        await bench.rounds(variants, 1, inner)  # warm-up, not kept
        samples = await bench.rounds(variants, rounds, inner)
    for limiter in limiters:
        await limiter.close()
    return [
        {
            "host": host,
            "store": store,
            "batch_ms": bench.summary(samples[f"{host}|{store}"], 1000),
            "over_memory": bench.summary(bench.ratios(samples[f"{host}|{store}"], samples[f"{host}|memory"])),
        }
        for host in HOSTS
        for store in stores
    ]


def store_cost_targets(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    found = []
    for row in rows:
        if row["store"] != "memory":
            name = f"{row['host']}: a batch of 25 on {row['store']} <= {STORE_COST_LIMIT}x on memory"
            found.append(bench.target(name, row, "over_memory", STORE_COST_LIMIT, at_least=False))
    return found


async def token_costs(url: str, tokens: int) -> list[float]:
    limiter = RateLimiter(open_store(url), 1e9, 10**9, key=f"bench-{uuid.uuid4()}")
    costs = []
    try:
        for _ in range(tokens):
            started = time.perf_counter()
            await limiter.acquire()
            costs.append((time.perf_counter() - started) * 1e6)
    finally:
        await limiter.close()
    return costs


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def worker(url: str, key: str, rate: float, count: int) -> None:
    """One process: ``count`` tokens over 4 tasks; prints their stamps as one JSON line."""
    limiter = RateLimiter(open_store(url), rate, BURST, key=key)
    stamps: list[float] = []

    async def take(share: int) -> None:
        for _ in range(share):
            await limiter.acquire()
            stamps.append(time.time())

    print("ready", flush=True)
    sys.stdin.readline()  # every process starts at once: none runs alone while the others are still starting
    async with anyio.create_task_group() as tasks:
        for n in range(TASKS_PER_PROCESS):
            tasks.start_soon(take, count // TASKS_PER_PROCESS + (n < count % TASKS_PER_PROCESS))
    await limiter.close()
    print(json.dumps(stamps))


def held_rate(url: str, processes: int, rate: float, seconds: float) -> float:
    key, count = f"bench-{uuid.uuid4()}", int(rate * seconds / processes)
    command = [sys.executable, __file__, "--worker", url, key, str(rate), str(count)]
    pipe = subprocess.PIPE
    children = [subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) for _ in range(processes)]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    stamps: list[float] = sorted(stamp for child in children for stamp in json.loads(child.communicate()[0]))
    paced = stamps[BURST:]
    return (len(paced) - 1) / (paced[-1] - paced[0])


@contextmanager
def redis_server() -> Iterator[str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as workdir:
        command = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            server.terminate()
            server.wait(timeout=10)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, key, rate, count = sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
        anyio.run(worker, url, key, rate, count)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the batch table (default 15)")
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    bench.quiet_logs()
    machine = f"python {platform.python_version()}, mcp {version('mcp')}, sqlite {sqlite3.sqlite_version}"
    print(f"{machine}, cpus {os.cpu_count()}, load average {bench.load_average()}")
    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        stores: dict[str, str | None] = {
            "memory": "memory",
            "sqlite": f"sqlite:///{Path(tmp) / 'rate.sqlite3'}",
            "redis": redis_url,
        }
        running = {name: url for name, url in stores.items() if url is not None}
        print_batch_costs(anyio.run(batch_costs, running, args.rounds), args.rounds)
        print("### One token at a time, and the rate processes hold together\n")
        print("| store | token p50 µs | token p99 µs | 3 processes: rate held | 8 processes: rate held |")
        print("|---|---|---|---|---|")
        for name, store_url in stores.items():
            if store_url is None:
                print(f"| {name} | (redis-server not installed) | | | |")
                continue
            costs = anyio.run(token_costs, store_url, args.tokens)
            shared = [held_rate(store_url, n, args.rate, args.seconds) for n in (3, 8)] if name != "memory" else []
            rates = [f"{r:.1f}/s ({r / args.rate:.3f}×)" for r in shared] or ["per process only", "per process only"]
            print(
                f"| {name} | {statistics.median(costs):.0f} | {percentile(costs, 0.99):.0f} | {rates[0]} | {rates[1]} |"
            )
    print(f"configured rate {args.rate:g}/s, burst {BURST}, {TASKS_PER_PROCESS} tasks per process")
    print(f"load average after: {bench.load_average()}")


def print_batch_costs(rows: list[dict[str, object]], rounds: int) -> None:
    title = f"A batch of 25 zero-latency reads over an in-memory MCP session, by store (median (min–max) of {rounds})"
    print(bench.table(title, rows, ["host", "store", "batch_ms", "over_memory"]) + "\n")
    print("### Targets\n")
    for item in store_cost_targets(rows):
        print(f"- {item['target']}: {item['value']} -> {bench.verdict(item['met'])}")
    print()


if __name__ == "__main__":
    main()
