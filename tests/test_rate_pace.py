"""Routers on one bucket with other rates or bursts: each is told once, and earlier versions are unaffected.

Real parts: SQLite files shared by two connections and by two real processes, a real redis-server.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from centralmcp_batch.ratelimit import Pace, RateLimiter, gcra, open_store, redis_store
from centralmcp_batch.ratelimit.config import BURST_ENV, KEY_ENV, RATE

pytestmark = pytest.mark.anyio
LIMITER_LOG = "centralmcp_batch.ratelimit.limiter"
# Rates far above what the tests take: no token waits, so only the order of the reservations matters.
FAST, FASTER = (1000.0, 8), (2000.0, 4)


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'rate.sqlite3'}"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def key() -> str:
    return f"acct-{uuid.uuid4()}"  # a fresh bucket, also on a Redis shared with other runs


@contextlib.asynccontextmanager
async def limiters(url: str, key: str, *paces: tuple[float, int]) -> AsyncIterator[list[RateLimiter]]:
    """One limiter per pace, each on a store of its own (its own connection), as separate routers have."""
    made = [RateLimiter(open_store(url), rate, burst, key=key) for rate, burst in paces]
    try:
        yield made
    finally:
        for limiter in made:
            await limiter.close()


def told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LIMITER_LOG and "another router" in r.getMessage()]


async def test_two_routers_with_other_numbers_are_each_told_once_naming_both_and_what_to_set(
    store_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with limiters(store_url, key, FAST, FASTER) as (fast, faster):
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            for _ in range(50):  # taking turns: every reservation finds the other's pace
                await fast.acquire()
                await faster.acquire()
    lines = told(caplog)
    assert len(lines) == 2, lines
    by_fast, by_faster = sorted(lines, key=lambda line: "this one at 2000/s" in line)
    assert "at 2000/s with a burst of 4, this one at 1000/s with a burst of 8" in by_fast
    assert "at 1000/s with a burst of 8, this one at 2000/s with a burst of 4" in by_faster
    for line in lines:
        assert f"rate key {key!r} in {store_url}" in line
        assert all(env in line for env in (RATE.env, BURST_ENV, KEY_ENV))


async def test_a_third_pace_is_told_too_and_each_only_once(
    store_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with limiters(store_url, key, FAST, FASTER, (500.0, 8)) as (fast, faster, slow):
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            for other in (faster, slow):  # 20 turns with one, then 20 with the other
                for _ in range(20):
                    await fast.acquire()
                    await other.acquire()
    lines = told(caplog)
    assert len(lines) == 4, lines
    by_fast = [line for line in lines if "this one at 1000/s" in line]
    assert len(by_fast) == 2 and "at 2000/s with a burst of 4, this" in by_fast[0] and "at 500/s" in by_fast[1]


async def test_routers_with_the_same_numbers_are_not_told(
    store_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with limiters(store_url, key, FAST, FAST) as (first, second):
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            for _ in range(50):
                await first.acquire()
                await second.acquire()
    assert told(caplog) == []


async def test_the_pace_of_a_router_stopped_before_this_one_started_is_not_told(
    store_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A client restarted with other settings: its previous router's pace is in the store, nobody uses it.
    async with limiters(store_url, key, FAST) as (before,):
        for _ in range(5):
            await before.acquire()
    async with limiters(store_url, key, FASTER) as (after,):
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            for _ in range(20):
                await after.acquire()
    assert told(caplog) == []


async def test_the_memory_store_shares_nothing_and_finds_no_pace() -> None:
    reservation = await open_store("memory").reserve("k", 0.5, 2)
    assert reservation.waits == (0.0,) and reservation.other_pace is None


# -- routers in real processes -----------------------------------------------------------

ROUTER = """
import logging, sys, anyio
from centralmcp_batch.ratelimit import RateLimiter, open_store
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
url, key, rate, burst = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
async def main():
    limiter = RateLimiter(open_store(url), rate, burst, key=key)
    for line in sys.stdin:  # "take N": N tokens, then "done"
        for _ in range(int(line.split()[1])):
            await limiter.acquire()
        print("done", flush=True)
    await limiter.close()
anyio.run(main)
"""


@contextlib.contextmanager
def router_processes(url: str, key: str, *paces: tuple[float, int]) -> Iterator[list[subprocess.Popen[str]]]:
    pipe = subprocess.PIPE
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", ROUTER, url, key, str(rate), str(burst)],
            stdin=pipe,
            stdout=pipe,
            stderr=pipe,
            text=True,
        )
        for rate, burst in paces
    ]
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)


def take(process: subprocess.Popen[str], tokens: int) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(f"take {tokens}\n")
    process.stdin.flush()
    assert process.stdout.readline() == "done\n"


def our_log_after_exit(process: subprocess.Popen[str]) -> list[str]:
    assert process.stdin is not None and process.stderr is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    return [line for line in process.stderr.read().splitlines() if "centralmcp_batch" in line]  # ours alone


def test_two_router_processes_with_other_numbers_each_log_it_once(store_url: str, key: str) -> None:
    with router_processes(store_url, key, FAST, FASTER) as (fast, faster):
        for _ in range(10):  # turns of 30 tokens each, 300 tokens a process
            take(fast, 30)
            take(faster, 30)
        fast_lines, faster_lines = our_log_after_exit(fast), our_log_after_exit(faster)
    (fast_line,) = fast_lines
    (faster_line,) = faster_lines
    assert fast_line.startswith(f"WARNING {LIMITER_LOG}: rate key {key!r} in {store_url}: another router")
    assert "at 2000/s with a burst of 4, this one at 1000/s with a burst of 8" in fast_line
    assert "at 1000/s with a burst of 8, this one at 2000/s with a burst of 4" in faster_line


# -- stores written by the previous version ------------------------------------------------

# What a router of the previous version does for each token: its Redis script, word for word, and its
# SQLite transaction. It knows no pace: it neither leaves one nor reads one.
PREVIOUS_REDIS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local seen = tonumber(redis.call('GET', KEYS[2]))
if seen and now < seen then tat = tat - (seen - now) end
if tat < now then tat = now end
tat = tat + interval
local expiry = math.ceil((tat - now) * 1000) + 60000
redis.call('SET', KEYS[1], string.format('%.6f', tat), 'PX', expiry)
redis.call('SET', KEYS[2], string.format('%.6f', now), 'PX', expiry)
local wait = tat - burst * interval - now
if wait < 0 then wait = 0 end
return string.format('%.6f', wait)
"""


def previous_sqlite_reservation(path: str, key: str, interval: float, burst: int) -> float:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS gcra_buckets (key TEXT PRIMARY KEY, tat REAL NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS gcra_clock (key TEXT PRIMARY KEY, seen REAL NOT NULL)")
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT tat FROM gcra_buckets WHERE key = ?", (key,)).fetchone()
        seen = conn.execute("SELECT seen FROM gcra_clock WHERE key = ?", (key,)).fetchone()
        now = time.time()
        # The previous version's arithmetic, written out: the TAT moves back with a clock stepped back,
        # then one interval on from it or from now; the wait is to burst intervals before it.
        tat = (row[0] if row else 0.0) - gcra.stepped_back(seen[0] if seen else None, now)
        tat = max(tat, now) + interval
        wait = max(0.0, tat - burst * interval - now)
        conn.execute(
            "INSERT INTO gcra_buckets (key, tat) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET tat = excluded.tat",
            (key, tat),
        )
        conn.execute(
            "INSERT INTO gcra_clock (key, seen) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET seen = excluded.seen",
            (key, now),
        )
        conn.execute("COMMIT")
        return wait


async def reserve_as_the_previous_version(url: str, key: str, interval: float, burst: int) -> float:
    """One token taken as a router of the previous version takes it: the wait for its slot."""
    if url.startswith("sqlite:///"):
        return previous_sqlite_reservation(url[len("sqlite:///") :], key, interval, burst)
    from redis.asyncio import Redis

    raw = Redis.from_url(url)
    try:
        keys = [redis_store.KEY_PREFIX + key, redis_store.CLOCK_PREFIX + key]
        return float(await raw.eval(PREVIOUS_REDIS, 2, *keys, repr(interval), burst))
    finally:
        await raw.aclose()


async def test_a_bucket_shared_with_a_router_of_the_previous_version_keeps_both_pacing(
    store_url: str, key: str
) -> None:
    # The previous version at a token every 10 s, this one every 5 s (burst 1 each): every token pushes the
    # one timeline on by its taker's interval, so the waits of both grow by 15 s a turn (nothing sleeps; the
    # margin is for a slow machine). The previous version made the bucket (and the SQLite file, without this
    # version's table); it leaves no pace to find.
    previous = [await reserve_as_the_previous_version(store_url, key, 10.0, 1)]
    store = open_store(store_url)
    reservations = []
    try:
        for _ in range(3):
            reservations.append(await store.reserve(key, 5.0, 1))
            previous.append(await reserve_as_the_previous_version(store_url, key, 10.0, 1))
    finally:
        await store.close()
    assert [r.wait for r in reservations] == pytest.approx([10.0, 25.0, 40.0], abs=2.0)
    assert previous == pytest.approx([0.0, 15.0, 30.0, 45.0], abs=2.0)
    assert all(r.other_pace is None for r in reservations)


async def test_a_router_taking_turns_with_the_previous_version_tells_nothing(
    store_url: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with limiters(store_url, key, FAST) as (limiter,):
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            for _ in range(20):
                await limiter.acquire()
                await reserve_as_the_previous_version(store_url, key, 1e-6, 1000)
    assert told(caplog) == []


def test_a_pace_written_by_hand_in_redis_is_ignored() -> None:
    assert redis_store._pace(b"0.125 8") == Pace(0.125, 8)
    assert redis_store._pace(b"fast") is None and redis_store._pace("0.5 x") is None
