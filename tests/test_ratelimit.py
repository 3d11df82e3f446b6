"""The account-wide limiter: GCRA arithmetic, each store, and every fault the issue names.

Real parts: SQLite files shared by real processes, a real redis-server stopped and started.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from redis_server import RedisServer

from centralmcp_batch.ratelimit import (
    MemoryStore,
    RateLimiter,
    SqliteStore,
    default_store_url,
    gcra,
    limiter_from_env,
    open_store,
)
from centralmcp_batch.ratelimit import sqlite as sqlite_store
from centralmcp_batch.ratelimit.errors import StoreUnavailable

pytestmark = pytest.mark.anyio
LIMITER_LOG = "centralmcp_batch.ratelimit.limiter"


# -- the arithmetic ---------------------------------------------------------------------


def test_gcra_gives_the_burst_at_once_then_one_slot_per_interval() -> None:
    booked = gcra.book(0.0, (), 100.0, 0.5, 3, count=6, within=60)
    assert booked.waits == (0.0, 0.0, 0.0, 0.5, 1.0, 1.5)
    assert booked.positions == (100.5, 101.0, 101.5, 102.0, 102.5, 103.0) and booked.next_wait == 2.0
    one_by_one = [gcra.book(0.0, (), 100.0, 0.5, 3, count=1, within=60)]
    for _ in range(5):
        one_by_one.append(gcra.book(one_by_one[-1].tat, (), 100.0, 0.5, 3, count=1, within=60))
    assert [b.waits[0] for b in one_by_one] == list(booked.waits)  # one booking of six is six of one
    later = gcra.book(booked.tat, (), 1000.0, 0.5, 3, count=1, within=60)
    assert later.waits == (0.0,) and later.tat == 1000.5  # a long idle spell: the burst is back, no more


def test_a_booking_stops_at_the_first_slot_past_what_the_caller_will_wait() -> None:
    booked = gcra.book(0.0, (), 100.0, 0.5, 3, count=10, within=1.2)
    assert booked.waits == (0.0, 0.0, 0.0, 0.5, 1.0)  # the sixth would wait 1.5 s: not booked, nor the rest
    assert booked.next_wait == 1.5 and booked.tat == 102.5  # nothing was taken for the calls left out
    assert gcra.book(booked.tat, (), 100.0, 0.5, 3, count=1, within=1.2).waits == ()


def test_tokens_given_back_at_the_end_of_the_timeline_go_back_into_it() -> None:
    booked = gcra.book(0.0, (), 100.0, 0.5, 3, count=6, within=60)
    left = gcra.give_back(booked.tat, booked.holes, 100.0, 0.5, booked.positions[2:])
    assert left.tat == pytest.approx(101.0) and left.holes == ()  # as if only the first two were ever booked
    # the next caller gets the slots the given-back tokens had
    assert gcra.book(left.tat, left.holes, 100.0, 0.5, 3, count=4, within=60).waits == booked.waits[2:]


def test_tokens_given_back_before_others_are_holes_the_next_booking_takes_first() -> None:
    first = gcra.book(0.0, (), 100.0, 0.5, 1, count=4, within=60)  # slots at 0, 0.5, 1.0, 1.5 s
    second = gcra.book(first.tat, first.holes, 100.0, 0.5, 1, count=2, within=60)  # at 2.0 and 2.5 s
    left = gcra.give_back(second.tat, second.holes, 100.2, 0.5, first.positions[2:])  # the first's last two
    assert left.tat == second.tat and left.holes == first.positions[2:]
    third = gcra.book(left.tat, left.holes, 100.2, 0.5, 1, count=3, within=60)
    # the holes first, at their own slots, then after the second's: no slot is handed out twice
    assert third.positions == (*first.positions[2:], second.tat + 0.5)
    assert third.waits == pytest.approx((0.8, 1.3, 2.8)) and third.holes == ()
    # once the second gives its tokens back too, the holes and its tokens all go: the bucket is where the
    # first's reached tokens left it
    gone = gcra.give_back(second.tat, left.holes, 100.2, 0.5, second.positions)
    assert gone.tat == pytest.approx(first.positions[1]) and gone.holes == ()


def test_a_hole_whose_position_has_passed_is_dropped() -> None:
    first = gcra.book(0.0, (), 100.0, 0.5, 1, count=3, within=60)
    second = gcra.book(first.tat, (), 100.0, 0.5, 1, count=1, within=60)
    left = gcra.give_back(second.tat, (), 100.0, 0.5, first.positions[:2])
    assert left.holes == first.positions[:2]
    later = gcra.book(left.tat, left.holes, 100.75, 0.5, 1, count=1, within=60)
    assert later.positions == (first.positions[1],) and later.holes == ()  # 100.5 had passed: dropped


# -- the configuration ------------------------------------------------------------------


def test_the_default_store_is_a_sqlite_file_in_the_users_cache_dir(tmp_path: Path) -> None:
    url = default_store_url({"XDG_CACHE_HOME": "/x/cache"}, "linux", lambda platform: PurePosixPath(tmp_path))
    assert url == f"sqlite:///{tmp_path}/.cache/centralmcp-batch/rate.sqlite3"
    limiter = limiter_from_env({"CENTRALMCP_ROUTER_RATE_PER_SECOND": "5"})  # made, not opened: no file yet
    assert isinstance(limiter.store, SqliteStore) and limiter.store.url == default_store_url({})
    assert (limiter.rate, limiter.burst, limiter.key) == (5.0, 5, "central")


@pytest.mark.parametrize(
    "url", ["sqlite://relative/path", "sqlite:///", "redis://", "memcached://x", "Memory", "/tmp/rate.db"]
)
def test_a_malformed_store_is_a_start_up_error_naming_the_forms(url: str) -> None:
    with pytest.raises(ValueError, match="CENTRALMCP_ROUTER_RATE_STORE=.*(expected memory, sqlite|must be absolute)"):
        open_store(url)


@pytest.mark.parametrize("url", ["redis://", "redis:///0", "rediss://?db=0", "memcached://x", "Memory"])
def test_a_malformed_store_is_quoted_as_it_was_given(url: str) -> None:
    """Only a password is hidden: the rest of the value is the operator's own, character for character."""
    with pytest.raises(ValueError) as refused:
        open_store(url)
    assert f"CENTRALMCP_ROUTER_RATE_STORE={url!r}:" in str(refused.value)


def test_the_key_and_the_rate_come_from_the_environment() -> None:
    env = {
        "CENTRALMCP_ROUTER_RATE_STORE": "memory",
        "CENTRALMCP_ROUTER_RATE_KEY": "acct-2",
        "CENTRALMCP_ROUTER_RATE_PER_SECOND": "10",
        "CENTRALMCP_ROUTER_RATE_BURST": "3",
    }
    limiter = limiter_from_env(env)
    assert isinstance(limiter.store, MemoryStore) and (limiter.rate, limiter.burst, limiter.key) == (10.0, 3, "acct-2")


# -- pacing in one process --------------------------------------------------------------


async def take_all(limiter: RateLimiter, count: int) -> tuple[list[int], float]:
    order: list[int] = []

    async def take(n: int) -> None:
        await limiter.acquire()
        order.append(n)

    started = time.monotonic()
    async with anyio.create_task_group() as tasks:
        for n in range(count):
            tasks.start_soon(take, n)
            await anyio.lowlevel.checkpoint()  # arrive in order
    return order, time.monotonic() - started


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_callers_are_served_in_arrival_order_at_the_rate(store: str, tmp_path: Path) -> None:
    # Slots 40 ms apart: a caller held up between its booking and its sleep (a loaded machine's time slice)
    # must not wake after the next one's slot. 10 tokens beyond the burst at 25/s: 0.4 s; the upper bound is wide.
    limiter = RateLimiter(MemoryStore() if store == "memory" else SqliteStore(tmp_path / "rate.db"), 25.0, 5)
    order, elapsed = await take_all(limiter, 15)
    assert order == list(range(15))
    assert 0.40 * 0.9 <= elapsed <= 0.40 * 4


async def test_two_keys_in_one_store_are_two_budgets(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rate.db")
    waits_a = [(await store.reserve("a", 1.0, 1)).wait for _ in range(3)]
    waits_b = [(await store.reserve("b", 1.0, 1)).wait for _ in range(3)]
    assert waits_a[0] == waits_b[0] == 0.0 and waits_a[2] > 1.5 and waits_b[2] > 1.5


# -- SQLite: atomic across real processes -----------------------------------------------

RESERVER = """
import sys, anyio
from pathlib import Path, PurePosixPath
from centralmcp_batch.ratelimit import SqliteStore
store = SqliteStore(Path(sys.argv[1]), busy_seconds=30)  # a test of atomicity, not of the busy limit
async def main():
    for _ in range(int(sys.argv[2])):
        await store.reserve("k", 1.0, 1)
anyio.run(main)
"""


def test_reservations_from_several_processes_are_never_lost(tmp_path: Path) -> None:
    # Interval 1 s: the TAT runs far ahead of the clock, so it must end exactly one second per reservation
    # past the first one's; an update lost to a race would leave it short.
    path = tmp_path / "rate.db"
    started = time.time()
    processes = [subprocess.Popen([sys.executable, "-c", RESERVER, str(path), "150"]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in processes] == [0] * 4
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (tat,) = conn.execute("SELECT tat FROM gcra_buckets WHERE key = 'k'").fetchone()
    assert started + 600 <= tat <= time.time() + 600


class SteppedClock:
    """The wall clock the SQLite store reads, set ahead of the real one by hand; its monotonic clock is the real one."""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def time(self) -> float:
        return time.time() + self.ahead

    def monotonic(self) -> float:
        return time.monotonic()


def shortened_by_at_most(took: float, waits: list[float], expected: list[float]) -> bool:
    """Each wait is counted from its own reservation: the ``took`` seconds spent over them shorten it by that at most.

    With ``pytest.approx(abs=0.05)`` a loaded machine failed these (0.24 s for 0.3 s, two suites running)."""
    return all(want - took - 0.01 <= wait <= want + 0.01 for wait, want in zip(waits, expected, strict=True))


async def test_a_wall_clock_stepped_back_keeps_the_queue_and_adds_no_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Routers that ran while the clock was an hour ahead (NTP steps it back after a resume, or a clock read
    # from an RTC kept in local time) left the bucket's TAT an hour in the future: every router using the
    # file, restarted ones too, then waited an hour for each token.
    clock = SteppedClock(ahead=3600.0)
    monkeypatch.setattr(sqlite_store, "time", clock)
    path = tmp_path / "rate.db"
    ahead = SqliteStore(path)
    began = time.monotonic()
    before = [(await ahead.reserve("k", 0.1, 2)).wait for _ in range(3)]
    await ahead.close()
    clock.ahead = 0.0  # stepped back; a router started now, on the same file
    store = SqliteStore(path)
    after = [(await store.reserve("k", 0.1, 2)).wait for _ in range(2)]
    took = time.monotonic() - began
    await store.close()
    assert shortened_by_at_most(took, before, [0.0, 0.0, 0.1])
    # The three slots taken just before still count, a tenth of a second each, not an hour
    assert shortened_by_at_most(took, after, [0.2, 0.3]), after


# -- faults: every call completes, one log line per outage, rejoin ----------------------


async def take_during(limiter: RateLimiter, count: int) -> float:
    started = time.monotonic()
    for _ in range(count):
        await limiter.acquire()
    return time.monotonic() - started


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LIMITER_LOG]


async def test_a_corrupt_sqlite_file_falls_back_with_a_clear_line_and_rejoins_when_repaired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rate.db"
    path.write_bytes(b"this is not a database" * 100)
    limiter = RateLimiter(SqliteStore(path), 100.0, 5, retry_seconds=0.2)
    with caplog.at_level(logging.WARNING, LIMITER_LOG):
        elapsed = await take_during(limiter, 25)
        assert limiter.in_outage and elapsed >= 0.20 * 0.9  # paced locally: 20 beyond the burst at 100/s
        (line,) = outage_lines(caplog)  # once, not per call
        assert f"SQLite file {path} is corrupt" in line and "pacing this process locally at 100/s" in line
        path.unlink()
        await anyio.sleep(0.25)
        await limiter.acquire()
    assert not limiter.in_outage and "is back after" in outage_lines(caplog)[-1]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM gcra_buckets").fetchone() == (1,)


async def test_a_locked_sqlite_file_falls_back_and_rejoins_when_released(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rate.db"
    limiter = RateLimiter(SqliteStore(path, busy_seconds=0.05), 100.0, 5, retry_seconds=0.2)
    await limiter.acquire()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's writer that never lets go
    with caplog.at_level(logging.WARNING, LIMITER_LOG):
        await take_during(limiter, 10)
        assert limiter.in_outage and "is locked by another process" in outage_lines(caplog)[0]
        holder.execute("ROLLBACK")
        holder.close()
        await anyio.sleep(0.25)
        await limiter.acquire()
    assert not limiter.in_outage and len(outage_lines(caplog)) == 2


async def test_a_new_file_whose_set_up_sqlite_answers_locked_at_once_is_set_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Processes creating one file at once can deadlock on its locks; SQLite then answers "locked" at
    # once, without its busy wait (seen here: 1 process in 180 starting together on a fresh file).
    store = SqliteStore(tmp_path / "rate.db", busy_seconds=5)
    set_up, refused = store._set_up, []

    def deadlocked_twice() -> sqlite3.Connection:
        if len(refused) < 2:
            refused.append("locked")
            raise sqlite3.OperationalError("database is locked")
        return set_up()

    monkeypatch.setattr(store, "_set_up", deadlocked_twice)
    assert (await store.reserve("k", 1.0, 1)).wait == 0.0 and refused == ["locked", "locked"]


async def test_a_lock_held_past_the_busy_limit_still_fails_once_the_limit_is_spent(tmp_path: Path) -> None:
    path = tmp_path / "rate.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the file is new: its set-up waits on this lock, then gives up
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"locked by another process for over 0\.2 s"):
        await SqliteStore(path, busy_seconds=0.2).reserve("k", 1.0, 1)
    assert time.monotonic() - started < 3  # the busy limit once, not once per try
    holder.execute("ROLLBACK")
    holder.close()


async def test_an_unwritable_sqlite_path_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "rate.db"  # its directory is a file: it can never be created, even by root
    limiter = RateLimiter(SqliteStore(path), 200.0, 2)
    with caplog.at_level(logging.WARNING, LIMITER_LOG):
        await take_during(limiter, 6)
    (line,) = outage_lines(caplog)
    assert f"SQLite file {path} is unusable" in line and limiter.in_outage


# -- Redis ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("error")  # the client is made as redis-py wants it: no warning at the sync Retry
async def test_redis_reservations_share_one_bucket_and_use_the_servers_clock(redis_url: str) -> None:
    first, second = open_store(redis_url), open_store(redis_url)
    key = f"acct-{uuid.uuid4()}"
    began = time.monotonic()
    try:
        waits = [(await store.reserve(key, 0.5, 2)).wait for store in (first, second, first, second)]
    finally:
        await first.close()
        await second.close()
    took = time.monotonic() - began  # each wait is counted from its own reservation: a busy machine shortens it
    assert waits[:2] == [0.0, 0.0] and 0.5 - took <= waits[2] <= 0.5 and 1.0 - took <= waits[3] <= 1.0


async def test_a_redis_clock_stepped_back_keeps_the_queue_and_adds_no_wait(redis_url: str) -> None:
    # What routers leave in Redis while its server's clock runs an hour ahead: three slots taken at a tenth of
    # a second each, the last reservation read an hour from the clock it reads now it has been stepped back.
    from redis.asyncio import Redis

    from centralmcp_batch.ratelimit import redis_store

    key = f"acct-{uuid.uuid4()}"
    raw = Redis.from_url(redis_url)
    began = time.monotonic()
    seconds, micros = await raw.time()
    ahead = seconds + micros / 1e6 + 3600.0
    await raw.set(redis_store.KEY_PREFIX + key, f"{ahead + 0.3:.6f}", px=120_000)
    await raw.set(redis_store.CLOCK_PREFIX + key, f"{ahead:.6f}", px=120_000)
    store = open_store(redis_url)
    try:
        waits = [(await store.reserve(key, 0.1, 2)).wait for _ in range(2)]
        took = time.monotonic() - began
        tat = float(await raw.get(redis_store.KEY_PREFIX + key))  # still the TAT alone, as earlier versions read it
    finally:
        await store.close()
        await raw.aclose()
    # The three slots still count, a tenth of a second each, not an hour
    assert shortened_by_at_most(took, waits, [0.2, 0.3]), waits
    assert tat == pytest.approx(seconds + micros / 1e6 + 0.5, abs=1.0)


async def test_redis_stopped_and_restarted_mid_run(redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    limiter = RateLimiter(open_store(redis_server.url), 200.0, 5, retry_seconds=0.2)
    try:
        with caplog.at_level(logging.WARNING, LIMITER_LOG):
            await take_during(limiter, 10)
            assert not limiter.in_outage
            redis_server.stop()
            elapsed = await take_during(limiter, 45)  # every call completes, paced locally
            assert limiter.in_outage and elapsed >= 40 / 200 * 0.9
            redis_server.start()
            await anyio.sleep(0.25)
            await take_during(limiter, 10)
            assert not limiter.in_outage
        lines = outage_lines(caplog)
        assert (
            len(lines) == 2
            and f"Redis at {redis_server.url} is unreachable" in lines[0]
            and "is back after" in lines[1]
        )
    finally:
        await limiter.close()


# -- a booking's waits, told when it is answered -------------------------------------------------


class LateAnswers:
    """A store whose answer comes ``late`` seconds after it booked (a round trip, a loop held meanwhile), on
    another machine's clock (``read_at`` None) or on this one's (the SQLite store's wall clock)."""

    def __init__(self, store: Any, late: float) -> None:
        self.store, self.late, self.url = store, late, "late"
        self.booked: list[int] = []
        self.given_back: list[float] = []

    async def reserve(self, key: str, interval: float, burst: int, count: int = 1, within: float = 1e9) -> Any:
        booked = await self.store.reserve(key, interval, burst, count, within)
        self.booked.append(len(booked.waits))
        await anyio.sleep(self.late)
        return booked

    async def give_back(self, key: str, interval: float, positions: Any) -> None:
        self.given_back += list(positions)
        await self.store.give_back(key, interval, positions)

    async def close(self) -> None:
        await self.store.close()


@pytest.mark.parametrize("clock", ["this machine's", "another machine's"])
async def test_a_late_answer_does_not_put_the_slots_later_than_the_store_did(tmp_path: Path, clock: str) -> None:
    sqlite = SqliteStore(tmp_path / "rate.sqlite3")
    store: Any = LateAnswers(sqlite, 0.3)
    if clock == "another machine's":  # no reading of the store's clock to go by: counted from the ask
        store.store = MemoryStore()
    limiter = RateLimiter(store, rate=10.0, burst=1)
    booking = await limiter.reserve(4)
    # The store put the slots 0, 0.1, 0.2 and 0.3 s after it booked, each good until 0.1 s after its slot;
    # 0.3 s of those have passed by the answer. Counted from the answer, the first two are past their time
    # (the batch books those again), and no slot is later than the store put it.
    assert booking.starts_by == pytest.approx([-0.2, -0.1, 0.0, 0.1], abs=0.03)
    assert all(wait <= store_wait + 0.03 for wait, store_wait in zip(booking.waits, [0.0, 0.1, 0.2, 0.3], strict=True))
    await limiter.close()


async def test_a_booking_whose_caller_is_cancelled_during_the_round_trip_is_given_back(tmp_path: Path) -> None:
    store = LateAnswers(SqliteStore(tmp_path / "rate.sqlite3"), 0.3)
    limiter = RateLimiter(store, rate=10.0, burst=1)
    with anyio.move_on_after(0.1):
        await limiter.reserve(5)
    assert store.booked == [5] and len(store.given_back) == 5  # it landed in the store, and went back whole
    after = await limiter.reserve(1)
    assert after.waits == pytest.approx([0.0], abs=0.05)  # the bucket is as if the cancelled booking never was
    await limiter.close()
