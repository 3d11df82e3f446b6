"""The account's rate under batches that clients cancel at random, across processes sharing one store.

Whatever the clients do, backend calls in any window never exceed ``rate × window + burst``, and once
every client has gone, a new read starts within one interval: a cancelled batch gives back the slots
it has not reached, so nobody inherits its booking.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from centralmcp_batch.ratelimit import RateLimiter, open_store

pytestmark = pytest.mark.slow

RATE, BURST = 20.0, 4
INTERVAL = 1.0 / RATE
CLIENT = Path(__file__).with_name("rate_clients.py")
# A call starts a moment after the engine let it go (the pipeline and the handler run first), and two calls'
# moments differ: a window of the recorded starts may hold the calls of a window this much longer.
JITTER = 0.01

batches = st.lists(
    st.tuples(
        st.integers(1, 25),  # calls
        st.sampled_from([0.0, 0.02, 0.2]),  # seconds each call takes
        st.floats(0.0, 1.5),  # seconds until the client cancels
    ),
    min_size=1,
    max_size=3,
)


def run_clients(store: str, plans: list[list[Any]]) -> list[float]:
    """Start one process per plan at once; every backend call's start, in order."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(CLIENT), store, str(RATE), str(BURST), json.dumps(plan)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for plan in plans
    ]
    starts: list[float] = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        starts += [float(line) for line in out.split()]
    return sorted(starts)


def most_in_a_window(starts: list[float], window: float) -> int:
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def next_read_wait(store: str) -> float:
    limiter = RateLimiter(open_store(store), RATE, BURST)
    try:
        booking = await limiter.reserve(1)
        return booking.waits[0]
    finally:
        await limiter.close()


def check(store: str, plans: list[list[Any]]) -> None:
    starts = run_clients(store, plans)
    for window in (0.0, INTERVAL, 0.5, 1.0, 3.0):
        assert most_in_a_window(starts, window) <= RATE * (window + JITTER) + BURST, (window, starts)
    assert anyio.run(next_read_wait, store) <= INTERVAL + JITTER


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plans=st.lists(batches, min_size=2, max_size=3))
def test_cancelled_batches_across_processes_keep_the_rate_and_leave_nothing_booked_on_sqlite(
    tmp_path: Path, plans: list[list[Any]]
) -> None:
    check(f"sqlite:///{tmp_path / f'rate-{abs(hash(str(plans)))}.sqlite3'}", plans)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plans=st.lists(batches, min_size=2, max_size=3))
def test_cancelled_batches_across_processes_keep_the_rate_and_leave_nothing_booked_on_redis(
    redis_url: str, plans: list[list[Any]]
) -> None:
    from redis import Redis

    Redis.from_url(redis_url).flushdb()  # each example starts with an empty bucket
    check(redis_url, plans)


def test_twenty_cancelled_batches_do_not_delay_another_routers_next_read(tmp_path: Path) -> None:
    # The case: a client that sends batches of 25 and cancels each at once booked the account's
    # rate ahead of everyone (about 20 s after 20 batches), and the booking outlived the routers.
    store = f"sqlite:///{tmp_path / 'rate.sqlite3'}"
    run_clients(store, [[[25, 0.0, 0.0] for _ in range(20)]])
    assert anyio.run(next_read_wait, store) <= INTERVAL + JITTER
