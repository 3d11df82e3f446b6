"""The limiter across outages: one process's rate over both switches, a store that hangs, a file deleted.

Real parts: a real redis-server stopped and started under a running process, a SQLite file
locked by another real process for longer than the store's time limit, a cache directory
deleted while two stores use the file in it.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis_server import RedisServer

from centralmcp_batch.ratelimit import RateLimiter, SqliteStore, StoreUnavailable, open_store
from centralmcp_batch.ratelimit import sqlite as sqlite_store
from centralmcp_batch.ratelimit.limiter import STORE_TIMEOUT_SECONDS
from centralmcp_batch.ratelimit.reservation import Reservation

pytestmark = pytest.mark.anyio
LIMITER_LOG = "centralmcp_batch.ratelimit.limiter"
SQLITE_LOG = "centralmcp_batch.ratelimit.sqlite"


# -- one process keeps its rate across both switches ------------------------------------

RATE, BURST, TASKS = 20.0, 5, 30  # 30 tasks keep this process's slots 1.5 s ahead of the clock


def most_in_any_window(stamps: list[float], window: float) -> int:
    stamps = sorted(stamps)
    return max(bisect.bisect_left(stamps, start + window) - i for i, start in enumerate(stamps))


def count_between(stamps: list[float], start: float, end: float) -> int:
    return sum(1 for stamp in stamps if start <= stamp < end)


async def test_one_process_keeps_its_rate_when_redis_stops_and_when_it_is_back(redis_server: RedisServer) -> None:
    # Every switch used to start from an empty bucket: the local one knew nothing of the slots
    # already reserved in Redis, and Redis back knew nothing of those granted locally; each
    # switch then ran at twice the rate for as long as the backlog (1.5 s here).
    limiter = RateLimiter(open_store(redis_server.url), RATE, BURST, key=f"acct-{uuid.uuid4()}", retry_seconds=0.2)
    stamps: list[float] = []

    async def take_until(end: float) -> None:
        while time.monotonic() < end:
            await limiter.acquire()
            stamps.append(time.monotonic())

    started = time.monotonic()
    try:
        async with anyio.create_task_group() as tasks:
            for _ in range(TASKS):
                tasks.start_soon(take_until, started + 7)
            await anyio.sleep(2.5)
            await anyio.to_thread.run_sync(redis_server.stop)  # in a thread: the waits go on meanwhile
            stopped = time.monotonic()
            await anyio.sleep(2.5)
            was_in_outage = limiter.in_outage
            await anyio.to_thread.run_sync(redis_server.start)
            restarted = time.monotonic()
    finally:
        await limiter.close()
    assert was_in_outage and not limiter.in_outage  # both switches happened
    # Each phase was paced, neither stalled (a wide margin below the rate) ...
    for start, end in ((started + 1, stopped), (stopped, restarted), (restarted + 0.5, started + 7)):
        assert count_between(stamps, start, end) >= 0.6 * RATE * (end - start), (start - started, end - started)
    # ... and no second holds more than the rate and one burst (the bug gave about 45; a margin of 5).
    assert most_in_any_window(stamps, 1.0) <= RATE + BURST + 5, most_in_any_window(stamps, 1.0)


async def test_a_redis_password_reaches_no_log_record_or_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The outage and recovery warnings named the store by its URL, password and all, in every router's log.
    password = f"pw-{uuid.uuid4().hex}"
    server = RedisServer(tmp_path, password=password)
    server.start()
    in_query = f"redis://127.0.0.1:{server.port}/0?password={password}"  # redis-py's other way to give it
    limiters = [
        RateLimiter(open_store(url), 100.0, 5, key=f"acct-{uuid.uuid4()}", retry_seconds=0.05)
        for url in (server.url, in_query)
    ]
    outages = []
    try:
        with caplog.at_level(logging.DEBUG):
            for limiter in limiters:
                await limiter.acquire()
            outages.append([limiter.in_outage for limiter in limiters])  # the password let them in
            await anyio.to_thread.run_sync(server.stop)
            for limiter in limiters:
                await limiter.acquire()
            outages.append([limiter.in_outage for limiter in limiters])
            await anyio.to_thread.run_sync(server.start)
            await anyio.sleep(0.1)  # past the retry time
            for limiter in limiters:
                await limiter.acquire()
            outages.append([limiter.in_outage for limiter in limiters])
    finally:
        for limiter in limiters:
            await limiter.close()
        server.stop()
    assert outages == [[False, False], [True, True], [False, False]]
    lines = [record.getMessage() for record in caplog.records if record.name == LIMITER_LOG]
    assert len(lines) == 4, lines  # each store's outage and its end
    assert f"rate store redis://:***@127.0.0.1:{server.port}/0 failed" in lines[0]
    assert f"rate store redis://127.0.0.1:{server.port}/0?password=***" in lines[1]
    everything = [record.getMessage() for record in caplog.records]
    assert not [line for line in everything if password in line]
    with pytest.raises(ValueError, match=re.escape("'redis://:***@/0': expected")) as refused:
        open_store(f"redis://:{password}@/0")  # no host: refused, and the password is not repeated
    assert password not in str(refused.value)


# -- a store that hangs -----------------------------------------------------------------

HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""
WITHIN = STORE_TIMEOUT_SECONDS + 1.0  # the store's time limit, and a wide margin


async def test_a_reservation_slower_than_the_time_limit_is_an_outage_and_every_call_completes_in_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A real hang: another process holds the file's lock for 6 s and this store's busy limit (30 s)
    # tells SQLite to wait that out, so the reservation sits in its worker thread past the limit.
    path = tmp_path / "rate.db"
    limiter = RateLimiter(SqliteStore(path, busy_seconds=30), 50.0, 5, retry_seconds=0.5)
    await limiter.acquire()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "6"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        took: list[float] = []

        async def timed_acquire() -> None:
            started = time.monotonic()
            await limiter.acquire()
            took.append(time.monotonic() - started)

        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            async with anyio.create_task_group() as tasks:
                for _ in range(5):
                    tasks.start_soon(timed_acquire)
        assert len(took) == 5 and max(took) <= WITHIN and limiter.in_outage
        (line,) = [r.getMessage() for r in caplog.records if r.name == LIMITER_LOG]
        assert f"failed: no answer within {STORE_TIMEOUT_SECONDS:g} s" in line

        await anyio.sleep(0.6)  # a retry is due: it hangs behind the first reservation, which still waits
        await timed_acquire()
        assert took[-1] <= WITHIN and limiter.in_outage

        await anyio.sleep(0.6)  # another retry, and its caller is cancelled while it hangs
        started = time.monotonic()
        with anyio.move_on_after(0.3) as scope:
            await limiter.acquire()
        assert scope.cancelled_caught and time.monotonic() - started < 1.5
    finally:
        assert holder.wait(timeout=30) == 0
    with anyio.fail_after(10):  # the lock is free again: the store answers and is shared again
        while limiter.in_outage:
            await anyio.sleep(0.1)
            await limiter.acquire()
    await limiter.close()


async def test_a_thread_stuck_in_the_store_fails_the_next_reservations_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hung file system (a frozen disk, a dead network share) needs root to make for real; here the
    # reservation's worker blocks on an event instead, where the file system would block it.
    store = SqliteStore(tmp_path / "rate.db", busy_seconds=0.5)
    limiter = RateLimiter(store, 100.0, 5, retry_seconds=0.2)
    await limiter.acquire()
    file_system_back, refusals = threading.Event(), []
    book, reserve = store._book, store.reserve

    def hung(conn: sqlite3.Connection, key: str, *args: Any) -> Reservation:
        file_system_back.wait(timeout=30)
        return book(conn, key, *args)

    async def counted(key: str, *args: Any) -> Reservation:
        try:
            return await reserve(key, *args)
        except StoreUnavailable as exc:
            refusals.append(str(exc))
            raise

    monkeypatch.setattr(store, "_book", hung)
    monkeypatch.setattr(store, "reserve", counted)
    try:
        started = time.monotonic()
        await limiter.acquire()  # waits out the time limit once ...
        assert limiter.in_outage and time.monotonic() - started <= WITHIN
        took, started = [], time.monotonic()
        while time.monotonic() - started < 2:  # ... and the retries meanwhile (every 0.2 s) fail at once
            before = time.monotonic()
            await limiter.acquire()
            took.append(time.monotonic() - before)
        assert len(refusals) >= 3 and all("still held by an earlier reservation" in r for r in refusals)
        # At once: a retry queued behind the hung one would wait out the store's time limit (2 s); half of
        # it is the margin a loaded machine needs (0.31 s was seen for "at once" with two suites running)
        assert max(took) < STORE_TIMEOUT_SECONDS / 2 and limiter.in_outage
    finally:
        file_system_back.set()
    with anyio.fail_after(10):
        while limiter.in_outage:
            await anyio.sleep(0.1)
            await limiter.acquire()
    await limiter.close()


# -- a file deleted under running processes ---------------------------------------------


def seconds_ahead(path: Path) -> float:
    """How far the bucket's TAT in the file at ``path`` runs ahead of the wall clock."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (tat,) = conn.execute("SELECT tat FROM gcra_buckets WHERE key = 'k'").fetchone()
    return float(tat) - time.time()


async def test_a_deleted_cache_dir_is_made_again_and_shared_by_old_and_new_processes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Interval 10 s, burst 1: each reservation pushes the TAT 10 s on, so the file shows how many
    # reservations landed in it: one store left on the deleted file would add none.
    cache = tmp_path / "cache"
    path = cache / "centralmcp-batch" / "rate.sqlite3"
    old, new = SqliteStore(path), SqliteStore(path)
    with caplog.at_level(logging.WARNING, SQLITE_LOG):
        await old.reserve("k", 10.0, 1)
        shutil.rmtree(cache)  # a cache cleaner, while the old process runs
        await new.reserve("k", 10.0, 1)  # a process started since: it makes a new file
        await anyio.sleep(sqlite_store.CHECK_SECONDS + 0.1)
        await old.reserve("k", 10.0, 1)  # the old one finds the file replaced and opens it
        assert seconds_ahead(path) > 15
        await old.reserve("k", 10.0, 1)  # checked again within the second: no second line
        assert seconds_ahead(path) > 25

        shutil.rmtree(cache)
        await anyio.sleep(sqlite_store.CHECK_SECONDS + 0.1)
        await old.reserve("k", 10.0, 1)  # the file is missing: made again, a fresh bucket
        await new.reserve("k", 10.0, 1)  # the other store finds it replaced
        assert seconds_ahead(path) > 15
    lines = [r.getMessage() for r in caplog.records if r.name == SQLITE_LOG]
    assert len(lines) == 3 and all(f"rate store file {path} was deleted or replaced" in line for line in lines)
    await old.close()
    await new.close()
