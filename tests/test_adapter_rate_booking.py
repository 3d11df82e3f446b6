"""An adopted CentralMCP router books a batch's account-wide tokens at once, and awaits its own gate per call.

The batch books on the limiter ``adopt`` put in the router's dispatch rate gate, in one round trip of
a real SQLite store; each backend call then awaits the gate the router installed behind it (its
per-process bucket) alone. So one account-wide token per backend call (none for a refused entry,
one for identical reads), one store round trip per batch, a rate report that says when the bucket
is next free, and a cancelled batch that gives back the slots it did not reach. The router's single
reads and ``invoke_tool`` draw as before: one token, one round trip, per call. Over real sessions,
on both SDK lines.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from standins import monitoring_backend
from test_adapter_centralmcp import TESTS, Tokens, load_router, write_adopted_router

from centralmcp_batch import _compat
from centralmcp_batch.adapters import centralmcp
from centralmcp_batch.ratelimit import RateLimiter, SqliteStore, open_store
from centralmcp_batch.ratelimit import sqlite as sqlite_store
from centralmcp_batch.ratelimit.limiter import Store
from centralmcp_batch.ratelimit.reservation import Reservation
from centralmcp_batch.settings import BATCH_TIMEOUT
from centralmcp_batch.testing import HostConformance

pytestmark = pytest.mark.anyio


class CountedStore:
    """A real store (SQLite or Redis) that counts its round trips and the tokens they booked and gave back."""

    def __init__(self, store: Store) -> None:
        self.store, self.url = store, store.url
        self.bookings: list[int] = []  # tokens booked, one number per round trip
        self.give_backs: list[int] = []  # tokens given back, one number per round trip

    async def reserve(
        self, key: str, interval: float, burst: int, count: int = 1, within: float = math.inf
    ) -> Reservation:
        reservation = await self.store.reserve(key, interval, burst, count, within)
        self.bookings.append(len(reservation.waits))
        return reservation

    async def give_back(self, key: str, interval: float, positions: Sequence[float]) -> None:
        await self.store.give_back(key, interval, positions)
        self.give_backs.append(len(positions))

    async def close(self) -> None:
        await self.store.close()

    @property
    def round_trips(self) -> int:
        return len(self.bookings) + len(self.give_backs)

    @property
    def tokens(self) -> int:
        return sum(self.bookings) - sum(self.give_backs)


def bucket_tat(path: Path) -> float:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (tat,) = conn.execute("SELECT tat FROM gcra_buckets").fetchone()
    return float(tat)


def adopted_router(
    monkeypatch: pytest.MonkeyPatch, store: Store, interval: float, burst: int, mode: str = "minimal"
) -> tuple[ModuleType, CountedStore, Tokens]:
    """A router as it serves: adopted over ``store``, then its start-up's own gate installed behind it."""
    router = load_router(monkeypatch, mode)
    counted = CountedStore(store)
    centralmcp.adopt(router, rate_limiter=RateLimiter(counted, 1 / interval, burst))
    own = Tokens()
    router.set_dispatch_rate_gate(own)  # as the router's start-up does, after adopt
    return router, counted, own


@contextlib.asynccontextmanager
async def session(router: ModuleType) -> AsyncIterator[_compat.ClientHandle]:
    async with _compat.connect(router.mcp) as client:
        yield client


def backend_calls() -> int:
    return len(monitoring_backend.calls)


def device(serial: str) -> dict[str, Any]:
    return {"name": "get_device", "arguments": {"serial": serial}}


LONG = 100.0  # seconds between slots: the bucket's TAT counts the tokens; a burst of 50 covers every call


@pytest.mark.parametrize(("mode", "kind"), [("minimal", "sqlite"), ("default", "sqlite"), ("default", "redis")])
async def test_a_batch_books_its_tokens_in_one_round_trip_and_awaits_the_routers_own_gate_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, mode: str, kind: str
) -> None:
    path = tmp_path / "rate.sqlite3"
    inner = SqliteStore(path) if kind == "sqlite" else open_store(request.getfixturevalue("redis_url"))
    router, store, own = adopted_router(monkeypatch, inner, LONG, 50, mode)
    calls = [device("a"), device("b"), device("c"), device("d"), device("a"), device("a"), {"name": "list_sites"}]
    calls += [{"name": "reboot_device", "arguments": {"serial": "x"}}, {"name": "nope"}, {"name": 7}]
    started = time.time()
    async with session(router) as client:
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
    await store.close()
    statuses = [item["status"] for item in response["results"]]
    assert statuses == ["ok"] * 7 + ["blocked", "unknown_tool", "invalid_call"]
    assert response["shared_calls"] == [[0, 4, 5]]
    # 5 backend calls (a, b, c, d and list_sites): 5 account-wide tokens, booked in one round trip,
    # and the router's own gate awaited once for each
    assert backend_calls() == 5
    assert (store.bookings, store.give_backs) == ([5], [])
    if kind == "sqlite":  # the bucket itself, read apart from the store's answers
        assert round((bucket_tat(path) - started) / LONG) == 5
    assert own.count == 5
    # the report says when the bucket is next free (at once: the burst covers them all), where a token drawn
    # per call could not say
    assert (response["rate"]["tokens"], response["rate"]["next_free_seconds"]) == (5, 0.0)


async def test_single_reads_and_invoke_tool_still_draw_one_token_in_one_round_trip_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rate.sqlite3"
    router, store, own = adopted_router(monkeypatch, SqliteStore(path), LONG, 50)
    started = time.time()
    async with session(router) as client:
        for serial in ("a", "a"):
            await client.call_tool("invoke_read_tool", device(serial))
        await client.call_tool("invoke_tool", {"name": "reboot_device", "arguments": {"serial": "x"}})
        await client.call_tool("invoke_read_tool", {"name": "reboot_device", "arguments": {"serial": "x"}})
    # The two reads (identical: single reads are never shared) and the write; the refused read draws nothing
    assert (store.bookings, store.give_backs) == ([1, 1, 1], [])
    assert round((bucket_tat(path) - started) / LONG) == 3
    assert own.count == 3


async def test_a_batch_the_rate_cannot_finish_in_time_answers_the_rest_at_once_and_books_nothing_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slots half a second apart, two at once, a batch time limit of 0.75 s: slots at 0, 0 and 0.5 s
    # start in time; the next two (1.0 and 1.5 s) could not, and are answered as the batch is booked.
    interval, limit = 0.5, 0.75
    monkeypatch.setenv(BATCH_TIMEOUT, str(limit))
    router, store, own = adopted_router(monkeypatch, SqliteStore(tmp_path / "rate.sqlite3"), interval, 2)
    told: list[tuple[float, str | None, float]] = []

    def progress(done: float, total: float | None, message: str | None) -> None:
        told.append((done, message, time.perf_counter()))

    async with session(router) as client:
        started = time.perf_counter()
        calls = [device(f"s{i}") for i in range(5)]
        answer = await client.call_tool("invoke_read_tool_batch", {"calls": calls}, progress=progress)
    response = answer.structured
    assert [item["status"] for item in response["results"]] == ["ok"] * 3 + ["error"] * 2
    for item in response["results"][3:]:
        assert item["error"].startswith("not dispatched: the account's rate would let this call start in ")
        assert item["error"].endswith(f"at the soonest, after the batch time limit of {limit:g}s")
    assert (store.bookings, store.give_backs) == ([3], [])
    assert backend_calls() == own.count == response["rate"]["tokens"] == 3
    rate = response["rate"]
    assert 0.3 <= rate["waited_seconds"] <= limit  # the third call waited for its slot, about 0.5 s
    assert 0.0 < rate["next_free_seconds"] <= 2 * interval  # the next slot, 1.0 s after the booking
    # The two the rate refused were told at once, before the third call's slot came
    refused_at = [at for _, message, at in told if message and "error" in message]
    assert len(refused_at) == 2 and all(at - started < 0.4 for at in refused_at)
    assert any(message and message.startswith("waiting for the account's rate") for _, message, _ in told)


class HeldGate(Tokens):
    """The router's own gate, holding the first call that reaches it until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = anyio.Event()

    async def __call__(self) -> None:
        await super().__call__()
        self.reached.set()
        await anyio.sleep_forever()


async def test_a_batch_the_client_cancels_gives_back_the_slots_it_did_not_reach_in_one_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One slot at a time, half a second apart: six calls book slots up to 2.5 s ahead. The first takes
    # its slot and is held at the router's own gate; the client cancels; the other five go back.
    interval = 0.5
    router, store, _ = adopted_router(monkeypatch, SqliteStore(tmp_path / "rate.sqlite3"), interval, 1)
    held = HeldGate()
    router.set_dispatch_rate_gate(held)
    async with session(router) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client.call_tool, "invoke_read_tool_batch", {"calls": [device(f"s{i}") for i in range(6)]})
            with anyio.fail_after(5):
                await held.reached.wait()
            tasks.cancel_scope.cancel()
        with anyio.fail_after(5):
            while not store.give_backs:
                await anyio.sleep(0.01)
    assert (store.bookings, store.give_backs) == ([6], [5])
    assert held.count == 1 and backend_calls() == 0
    # Nobody inherits the cancelled batch's booking: the next read starts within one interval
    limiter = RateLimiter(SqliteStore(tmp_path / "rate.sqlite3"), 1 / interval, 1)
    booking = await limiter.reserve(1)
    await limiter.close()
    assert booking.waits[0] <= interval  # about 2.5 s had the five slots not been given back


async def test_a_gate_set_by_hand_past_the_adapter_is_drawn_whole_per_call_and_nothing_is_booked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The router's own tests set its _dispatch_rate_gate directly: that gate is then the only one, and a
    # batch awaits it once per backend call, as the router's single reads do, with no booking.
    router, store, _ = adopted_router(monkeypatch, SqliteStore(tmp_path / "rate.sqlite3"), LONG, 50)
    by_hand = Tokens()
    monkeypatch.setattr(router, "_dispatch_rate_gate", by_hand)
    async with session(router) as client:
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": [device("a"), device("b")]})).structured
    assert response["ok"] is True and by_hand.count == 2
    assert store.round_trips == 0 and response["rate"]["next_free_seconds"] is None


async def test_a_router_adopted_twice_and_with_no_gate_of_its_own_still_books_once_a_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Embedded without its start-up (no gate of its own behind the shared one), and adopted a second time:
    # the batch books once, on the one account-wide limiter, and has nothing else to await.
    router = load_router(monkeypatch, "minimal")
    store = CountedStore(SqliteStore(tmp_path / "rate.sqlite3"))
    centralmcp.adopt(router, rate_limiter=RateLimiter(store, 1 / LONG, 50))
    centralmcp.adopt(router)
    async with session(router) as client:
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": [device("a"), device("b")]})).structured
    assert response["ok"] is True and backend_calls() == 2
    assert (store.bookings, store.give_backs) == ([2], [])


# -- real router processes sharing one SQLite file --------------------------------------------------------

# Every write of the bucket's row, logged by triggers the routers never see: each store round trip (a booking
# or a giving back, one transaction) writes it once.
TRACE = """
CREATE TABLE trips (n INTEGER PRIMARY KEY AUTOINCREMENT, old_tat REAL, new_tat REAL, at REAL);
CREATE TRIGGER trip_insert AFTER INSERT ON gcra_buckets BEGIN
  INSERT INTO trips (old_tat, new_tat, at) VALUES (NULL, new.tat, (julianday('now') - 2440587.5) * 86400.0);
END;
CREATE TRIGGER trip_update AFTER UPDATE ON gcra_buckets BEGIN
  INSERT INTO trips (old_tat, new_tat, at) VALUES (old.tat, new.tat, (julianday('now') - 2440587.5) * 86400.0);
END;
"""


def traced_file(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA journal_mode=WAL")
        for schema in (sqlite_store.SCHEMA, sqlite_store.CLOCK_SCHEMA, sqlite_store.PACE_SCHEMA):
            conn.execute(schema)
        conn.executescript(TRACE)
    return path


def tokens_per_trip(path: Path, interval: float) -> list[int]:
    """The tokens each store round trip booked, in order (a trip that gave tokens back counts them negative)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT old_tat, new_tat, at FROM trips ORDER BY n").fetchall()
    return [
        round((new - max(old or 0.0, at)) / interval) if new > (old or 0.0) else -round((old - new) / interval)
        for old, new, at in rows
    ]


def most_in_a_window(stamps: list[float], window: float) -> int:
    ordered = sorted(stamps)
    return max(sum(1 for later in ordered[i:] if later < start + window + 0.01) for i, start in enumerate(ordered))


@pytest.mark.slow
async def test_router_processes_sharing_a_file_book_a_batch_in_one_round_trip_and_keep_the_accounts_rate(
    tmp_path: Path,
) -> None:
    # Two stand-in routers run as scripts with the documented adoption, their start-up installing their own
    # bucket behind the shared one, as CentralMCP's __main__ does; each sends a batch of 10 and a single read.
    rate, burst, per_batch = 20.0, 4, 10
    script = write_adopted_router(
        tmp_path / "tool_router.py", "install_router_middlewares(install_router_rate_gate(1000.0))"
    )
    path = traced_file(tmp_path / "rate.sqlite3")
    env = {
        "PYTHONPATH": str(TESTS),
        "CENTRALMCP_ROUTER_MODE": "default",
        "CENTRALMCP_ROUTER_RATE_STORE": f"sqlite:///{path}",
        "CENTRALMCP_ROUTER_RATE_PER_SECOND": str(rate),
        "CENTRALMCP_ROUTER_RATE_BURST": str(burst),
    }
    params = _compat.StdioServerParameters(command=sys.executable, args=[str(script)], env=env)
    stamps: list[float] = []

    async def reads_of(client: _compat.ClientHandle, router: int) -> None:
        calls = [{"name": "get_device_clock", "arguments": {"serial": f"r{router}-{i}"}} for i in range(per_batch)]
        response = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
        assert response["ok"] is True and response["rate"]["tokens"] == per_batch
        assert response["rate"]["next_free_seconds"] is not None
        stamps.extend(item["result"]["at"] for item in response["results"])
        single = await client.call_tool("invoke_read_tool", {"name": "get_device_clock", "arguments": {"serial": "s"}})
        stamps.append(single.payload["at"])

    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(_compat.connect(params)) for _ in range(2)]
        async with anyio.create_task_group() as tasks:
            for router, client in enumerate(clients):
                tasks.start_soon(reads_of, client, router)
    # A batch's 10 tokens in one round trip, a single read's one in its own: 4 round trips for 22 calls
    assert sorted(tokens_per_trip(path, 1 / rate)) == [1, 1, per_batch, per_batch]
    assert len(stamps) == 2 * (per_batch + 1)
    for window in (0.25, 0.5, 1.0):  # the account's rate holds across both processes
        assert most_in_a_window(stamps, window) <= rate * window + burst


class TestAdoptedCentralMCPRouterConforms(HostConformance):
    """The kit on a router as it serves: adopted over a SQLite bucket, its own gate behind the shared one."""

    read_tool = "list_devices"
    write_tool = "reboot_device"
    read_arguments = {"site_id": "hq"}
    read_server = "aruba-monitoring"

    @pytest.fixture
    def host_plugins(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[object]:
        router, _, _ = adopted_router(monkeypatch, SqliteStore(tmp_path / "rate.sqlite3"), LONG, 50, "default")
        return centralmcp.host_plugins(router)

    def tokens_drawn(self, host_plugins: list[object]) -> int:
        # What the account-wide bucket handed out: booked, less what was given back
        hooks = host_plugins[0]
        assert isinstance(hooks, centralmcp.CentralMCPHooks)
        store = hooks.router._dispatch_rate_gate.limiter.store
        assert isinstance(store, CountedStore)
        return store.tokens
