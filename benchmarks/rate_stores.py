"""The account-wide limiter's stores, measured: the cost of one token, and the rate several processes hold.

    python benchmarks/rate_stores.py [--tokens 3000] [--rate 200] [--seconds 3]

Cost: ``RateLimiter.acquire`` with a rate and burst so high that no token waits, so what is timed
is the reservation alone (the store round trip, and for SQLite the worker thread). Rate: 3 and 8
processes, started together once all are up, each with 4 tasks taking tokens as fast as the limiter
allows from one bucket, for about ``--seconds``; the rate is counted from the wall-clock stamps of
every token once the burst is spent.
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
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import anyio

from centralmcp_batch.ratelimit import RateLimiter, open_store

BURST = 5
TASKS_PER_PROCESS = 4


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
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    machine = f"python {platform.python_version()}, mcp {version('mcp')}, sqlite {sqlite3.sqlite_version}"
    print(f"{machine}, cpus {os.cpu_count()}")  # the SDK only for the record: the limiter does not touch it
    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        stores: dict[str, str | None] = {
            "memory": "memory",
            "sqlite": f"sqlite:///{Path(tmp) / 'rate.sqlite3'}",
            "redis": redis_url,
        }
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


if __name__ == "__main__":
    main()
