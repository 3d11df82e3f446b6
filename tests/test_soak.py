"""Load and soak over streamable HTTP on 127.0.0.1: many clients, the limiter's rate, nothing lost.

The reference router serves streamable HTTP from uvicorn in this process, on a socket bound to
127.0.0.1, so the test can look inside it between rounds; the clients run in a process of their
own (``soak_clients.py``), so what is measured here is the router alone. It runs twice: stateless,
as ``serve`` serves, and with MCP sessions, the SDK's default for a host. Every round, ``CLIENTS``
clients at once each connect on their own, send two batches of 25 at once and close. Checked:

- every entry comes back ``ok``, in call order, carrying its own tag; the backend sees each tag
  of the round exactly once (nothing lost, duplicated or reordered);
- the router's limiter, shared by all clients, holds its configured rate within 10% in every
  round once its burst is spent, and no stretch of a second or more goes over 1.1 times the
  rate by more than the burst;
- from the warm-up round on, the router comes back to the same state after every round: its
  asyncio tasks, no open HTTP sessions, no limiter waiters, the same live objects of the router's
  and the plugin's classes, no more closed MCP sessions alive than one round made, and allocated
  memory blocks that do not grow with the rounds.

Default run: 8 rounds of 10 clients (4,000 entries, about 30 s). Bounded in count and time
either way; a longer soak sets the sizes::

    CENTRALMCP_BATCH_SOAK_ROUNDS=30 CENTRALMCP_BATCH_SOAK_CLIENTS=32 python -m pytest -q -m slow tests/test_soak.py
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from soak_clients import ENTRIES, tagged_calls

from centralmcp_batch import _compat
from centralmcp_batch.router import Router

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROUNDS = max(3, int(os.environ.get("CENTRALMCP_BATCH_SOAK_ROUNDS", "8")))
CLIENTS = max(1, int(os.environ.get("CENTRALMCP_BATCH_SOAK_CLIENTS", "10")))
BATCHES = 2  # per client and round, at once on the client's session
ENTRIES_PER_ROUND = CLIENTS * BATCHES * ENTRIES
CLIENTS_SCRIPT = Path(__file__).resolve().parent / "soak_clients.py"
RATE, BURST = 200.0, 20  # a third of what this machine serves here, so the limiter sets the pace
RATE_TOLERANCE = 0.10
# Keeping one small dict per entry adds 1,500 to 2,300 blocks a round of 500 entries, one closed
# session about 700. The bound sits above the noise: SDK 1.x keeps a few closed sessions alive
# for a while (never more than a round's, checked below) and lets them go later, which moves
# single samples by up to about 1,300 blocks. Hence 8 rounds: at mcp 1.28 and 1.30 the slope ranged
# from -604 to +454 over 5 rounds, and from -281 to +43 over 8. (Before the SDK's ended sessions and
# the backend's worker threads were left out, see forget_ended_sessions and Soak.echo, it once
# reached 1,024 over 5 rounds at mcp 1.28.)
BLOCK_GROWTH_PER_ROUND = 1_000
LOGGERS = ("mcp", "uvicorn", "starlette", "sse_starlette", "centralmcp_batch")
WATCHED_MODULES = ("mcp", "uvicorn", "starlette", "httpx", "httpcore", "centralmcp_batch", "anyio.streams")


@dataclass
class Soak:
    """What the backend saw in the current round, and the figures of the rounds before."""

    dispatched: list[tuple[float, str]] = field(default_factory=list)
    entries: int = 0
    round_rates: list[float] = field(default_factory=list)
    worst_excess: float = float("-inf")
    worst_lag: float = 0.0  # the longest the event loop was late to wake a sleeper during a round, in seconds
    in_round: bool = False  # between rounds the test itself holds the loop up (it collects and counts objects)
    samples: list[dict[str, Any]] = field(default_factory=list)

    # A coroutine, so the backend runs on the loop: a plain function would run in anyio's worker
    # threads, whose pool grows to what the busiest round needed and would count as the router's.
    async def echo(self, tag: str) -> dict[str, Any]:
        self.dispatched.append((time.monotonic(), tag))
        return {"tag": tag}

    def close_round(self, sent: Sequence[str]) -> None:
        """Check the round's dispatches and keep only figures, so the test's own memory stays flat."""
        tags = Counter(tag for _, tag in self.dispatched)
        assert sorted(tags) == sorted(sent) and max(tags.values()) == 1  # every entry dispatched, none twice
        times = [at for at, _ in self.dispatched]
        self.round_rates.append(paced_rate(times, BURST))
        self.worst_excess = max(self.worst_excess, most_over_rate(times, RATE * (1 + RATE_TOLERANCE)))
        self.entries += len(times)
        self.dispatched.clear()


class CountingHandler(logging.Handler):
    """Counts log records and keeps none: a kept record's traceback would keep its session alive."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.name}: {record.getMessage()}"] += 1


@contextmanager
def counted_logs(handler: CountingHandler) -> Iterator[None]:
    """Route the server's loggers to ``handler`` instead of pytest's capture, which keeps every record.

    SDK 1.x logs an error with its traceback for every HTTP session a client closes; held by
    the capture, those tracebacks would keep every closed session alive and look like a leak.
    """
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved = [(logger.propagate, logger.handlers[:]) for logger in loggers]
    for logger in loggers:
        logger.propagate, logger.handlers = False, [handler]
    try:
        yield
    finally:
        for logger, (propagate, handlers) in zip(loggers, saved, strict=True):
            logger.propagate, logger.handlers = propagate, handlers


def soak_router(soak: Soak) -> Router:
    backend = _compat.new_server("soak-backend")
    _compat.add_tool(backend, soak.echo, name="echo", description="Echo the tag.", annotations={"readOnlyHint": True})
    return Router({"soak": backend})


@contextmanager
def loopback_socket() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


# -- the clients ------------------------------------------------------------------------


class Clients:
    """The client process: one round per line sent, one JSON report per line back."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.replies = BufferedByteReceiveStream(process.stdout)

    async def run_round(self, round_no: int) -> list[dict[str, Any]]:
        await self.process.stdin.send(f"{round_no}\n".encode())
        line = await self.replies.receive_until(b"\n", 64 * 1024 * 1024)
        report = json.loads(line)
        assert report["round"] == round_no
        return report["batches"]


def check_round(round_no: int, reports: Sequence[dict[str, Any]]) -> list[str]:
    """Every batch ok, its results in call order with their own tags; the tags sent."""
    sent = []
    for report in reports:
        expected = [call["id"] for call in tagged_calls(round_no, report["client"], report["batch"])]
        assert report["ok"] and report["ids"] == expected and report["tags"] == expected, report
        sent.extend(expected)
    assert len(sent) == ENTRIES_PER_ROUND
    return sent


# -- the measurements -------------------------------------------------------------------


def paced_rate(times: Sequence[float], burst: int) -> float:
    """Calls a second once the saved-up burst is spent: each later call waited for its token."""
    paced = sorted(times)[burst:]
    return (len(paced) - 1) / (paced[-1] - paced[0])


def most_over_rate(times: Sequence[float], rate: float, window: float = 1.0) -> float:
    """The most calls beyond ``rate`` a second in any stretch of at least ``window`` seconds.

    For calls i < j that is ``(j - i + 1) - rate * (t_j - t_i)``; a running minimum over the
    calls at least ``window`` before j makes it one pass.
    """
    ordered = sorted(times)
    worst, lowest, start = float("-inf"), float("inf"), 0
    for j, t_j in enumerate(ordered):
        while start < j and ordered[start] <= t_j - window:
            lowest = min(lowest, start - rate * ordered[start])
            start += 1
        worst = max(worst, (j + 1 - rate * t_j) - lowest)
    return worst


def http_sessions(router: Router) -> int:
    # Both SDK lines keep open streamable HTTP sessions in this dict; 2.x clients that speak the
    # stateless protocol revision open none, 1.x clients one each.
    instances = router.server.session_manager._server_instances  # noqa: SLF001 - no public count in either SDK line
    return len(instances)


def forget_ended_sessions(router: Router) -> None:
    """Drop the sessions whose clients ended them (DELETE), as mcp 1.30 and 2.x after 2.0.0 do.

    mcp 1.28, 1.29 and 2.0.0 keep every ended session in the manager for good, terminated (about
    37 memory blocks each). ``serve`` runs stateless and never keeps a session; this test serves
    sessions to watch them end, and would otherwise measure that SDK leak as the router's.
    """
    manager = router.server.session_manager
    for session_id, transport in list(manager._server_instances.items()):  # noqa: SLF001 - see http_sessions
        if transport.is_terminated:
            del manager._server_instances[session_id]  # noqa: SLF001
            getattr(manager, "_session_owners", {}).pop(session_id, None)


def watched_objects() -> Counter[str]:
    """Live objects of every MCP, HTTP and router class, by class.

    The names are interned: a sample is kept for every round, and new strings for the same names
    each time would grow memory by themselves.
    """
    names = (sys.intern(f"{type(obj).__module__}.{type(obj).__qualname__}") for obj in gc.get_objects())
    return Counter(name for name in names if name.startswith(WATCHED_MODULES))


def settled(router: Router, warm_tasks: int | None) -> bool:
    forget_ended_sessions(router)
    return not http_sessions(router) and (warm_tasks is None or len(asyncio.all_tasks()) <= warm_tasks)


async def settled_sample(router: Router, warm_tasks: int | None) -> dict[str, Any]:
    """What the router holds once every client of a round has gone and the server has caught up.

    The warm-up round may leave tasks that live as long as the process (sse-starlette's shutdown
    watcher under SDK 1.x); later rounds must come back to the count the warm-up left.
    """
    with anyio.move_on_after(10):  # on time-out, sample anyway: the assertions show what stayed
        while not settled(router, warm_tasks):
            await anyio.sleep(0.05)
    await anyio.sleep(0.2)  # the last connections' tasks end right after their sessions
    gc.collect()
    return {
        "tasks": len(asyncio.all_tasks()),
        "http_sessions": http_sessions(router),
        "limiter_waiters": router.limiter._queue.statistics().tasks_waiting,  # noqa: SLF001 - the limiter's queue is its state
        "objects": watched_objects(),
        "blocks": sys.getallocatedblocks(),
    }


# -- the soak ---------------------------------------------------------------------------


# Served stateless as ``serve`` does, and with sessions, which hosts serving the SDK's default keep.
@pytest.mark.parametrize("stateless", [True, False], ids=["stateless", "sessions"])
async def test_many_http_clients_soak_the_router_and_nothing_is_lost_or_left_behind(
    stateless: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {"RATE_PER_SECOND": RATE, "RATE_BURST": BURST, "BATCH_CONCURRENCY": 8}.items():
        monkeypatch.setenv(f"CENTRALMCP_ROUTER_{name}", str(value))
    soak, logs = Soak(), CountingHandler()
    router = soak_router(soak)
    planned_seconds = ROUNDS * ENTRIES_PER_ROUND / RATE
    with loopback_socket() as sock, counted_logs(logs), anyio.fail_after(3 * planned_seconds + 60):
        host, port = sock.getsockname()
        app = _compat.http_app(router.server, stateless=stateless)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        async with anyio.create_task_group() as serving:
            serving.start_soon(server.serve, [sock])
            watching = anyio.CancelScope()
            serving.start_soon(watch_lag, soak, watching)
            while not server.started:
                await anyio.sleep(0.01)
            try:
                await soak_rounds(soak, router, f"http://{host}:{port}/mcp", tmp_path / "clients.log")
            finally:
                server.should_exit = True
                watching.cancel()
    check_soak(soak, stateless)
    assert not [line for line in logs.counts if line.startswith("centralmcp_batch")], logs.counts
    with capsys.disabled():
        print(f"\nsoak: {report(soak, logs)}")


async def watch_lag(soak: Soak, scope: anyio.CancelScope, every: float = 0.005) -> None:
    """Keep the longest the event loop overslept a short sleep in a round: how long it was held up."""
    with scope:
        while True:
            before, counts = anyio.current_time(), soak.in_round
            await anyio.sleep(every)
            if counts and soak.in_round:
                soak.worst_lag = max(soak.worst_lag, anyio.current_time() - before - every)


async def soak_rounds(soak: Soak, router: Router, url: str, client_log: Path) -> None:
    command = [sys.executable, str(CLIENTS_SCRIPT), url, str(CLIENTS), str(BATCHES)]
    with client_log.open("wb") as log:
        async with await anyio.open_process(command, stderr=log) as process:
            clients = Clients(process)
            for round_no in range(ROUNDS):
                soak.in_round = True
                try:
                    reports = await clients.run_round(round_no)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    pytest.fail(f"the client process ended: {client_log.read_text()[-2000:]}")
                finally:
                    soak.in_round = False
                soak.close_round(check_round(round_no, reports))
                soak.samples.append(await settled_sample(router, soak.samples[0]["tasks"] if soak.samples else None))
            await process.stdin.aclose()


def check_soak(soak: Soak, stateless: bool) -> None:
    assert soak.entries == ROUNDS * ENTRIES_PER_ROUND
    for rate in soak.round_rates:
        assert abs(rate - RATE) <= RATE_TOLERANCE * RATE, soak.round_rates
    # A burst beyond the rate, no more; but a loop held up for a while (other work on the machine) wakes
    # the callers whose slots passed meanwhile all at once, up to the rate times that lag.
    assert soak.worst_excess <= BURST + RATE * soak.worst_lag + 1, (soak.worst_excess, soak.worst_lag)
    warm, *later = soak.samples
    for sample in later:
        assert (sample["tasks"], sample["http_sessions"], sample["limiter_waiters"]) == (warm["tasks"], 0, 0)
        assert own_objects(sample) == own_objects(warm)  # the router and the plugin keep nothing per batch
        # at most about a round's closed MCP sessions linger: a leak would add a round's every round
        lingering = sample["objects"]["mcp.server.session.ServerSession"]
        assert lingering <= 1.5 * mcp_sessions_per_round(stateless), sample["objects"]
    assert block_growth_per_round(soak.samples) <= BLOCK_GROWTH_PER_ROUND, [sample["blocks"] for sample in soak.samples]


def mcp_sessions_per_round(stateless: bool) -> int:
    """One per client, or stateless one per request: initialize, its notification, the tool list, the batches."""
    return CLIENTS * (3 + BATCHES if stateless else 1)  # mcp 1.28 once kept 11 of 10; stateless up to 27 of 50


def own_objects(sample: dict[str, Any]) -> dict[str, int]:
    return {name: count for name, count in sample["objects"].items() if name.startswith("centralmcp_batch.")}


def block_growth_per_round(samples: Sequence[dict[str, Any]]) -> float:
    """The least-squares slope of allocated blocks over the rounds: one noisy sample cannot make it."""
    points = list(enumerate(sample["blocks"] for sample in samples))
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)


def report(soak: Soak, logs: CountingHandler) -> str:
    warm, last = soak.samples[0], soak.samples[-1]
    figures = {
        "sdk": _compat.SDK_VERSION,
        "rounds": ROUNDS,
        "clients_per_round": CLIENTS,
        "batches_per_client": BATCHES,
        "entries": soak.entries,
        "configured_rate": RATE,
        "round_rate_min_max": [round(min(soak.round_rates), 1), round(max(soak.round_rates), 1)],
        "most_calls_over_rate_plus_10pct_in_any_second": round(soak.worst_excess, 1),
        "longest_loop_lag_ms": round(soak.worst_lag * 1000, 1),
        "tasks_warm_last": [warm["tasks"], last["tasks"]],
        "watched_objects_warm_last": [sum(warm["objects"].values()), sum(last["objects"].values())],
        "blocks_growth_per_round": round(block_growth_per_round(soak.samples), 1),
        "server_log_warnings": sum(logs.counts.values()),
    }
    return json.dumps(figures)
