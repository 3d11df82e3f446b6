"""Calls abandoned on cancel leave no worker thread behind, at any anyio version allowed.

Sync backend tools and the SQLite rate store run in anyio's worker threads, abandoned when their
caller is cancelled (a batch's time limit, a client's cancel). anyio before 4.16 never puts a worker
back on its idle list when the call was cancelled before the worker began it: the thread waits for
work that never comes, holding that call's arguments, for as long as the event loop runs.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from centralmcp_batch.worker_threads import run_sync_abandonable

pytestmark = pytest.mark.anyio

ROUNDS, CALLS = 8, 30


def answer(value: int) -> int:
    return value


def answer_in_a_while(value: int) -> int:
    time.sleep(0.001)  # the workers stay busy a moment, so the next calls queue for new ones
    return value


async def cancel_as_they_queue(calls: int) -> None:
    """Start ``calls`` calls at once and cancel them half a millisecond later: some queued, not begun."""
    async with anyio.create_task_group() as tasks:
        for n in range(calls):
            tasks.start_soon(run_sync_abandonable, answer_in_a_while, n)
        await anyio.sleep(0.0005)
        tasks.cancel_scope.cancel()


async def test_calls_cancelled_before_a_worker_began_them_leave_no_thread_behind() -> None:
    counts = []
    for _ in range(ROUNDS):
        await cancel_as_they_queue(CALLS)
        await anyio.sleep(0.05)  # the cut-off calls end in their threads, which go back to anyio's idle list
        counts.append(threading.active_count())
    # The first round starts the workers anyio keeps for reuse; later rounds must reuse them. A thread
    # kept for every call cancelled before it began adds up round after round.
    assert counts[-1] <= counts[0] + 2, counts


async def test_a_cancelled_caller_stops_waiting_while_its_call_runs_on() -> None:
    started, release = threading.Event(), threading.Event()

    def blocked() -> str:
        started.set()
        release.wait(10)
        return "late"

    with anyio.move_on_after(0.2) as waited:
        await run_sync_abandonable(blocked)
    try:
        assert waited.cancelled_caught and started.is_set()  # abandoned after its start, not waited for
    finally:
        release.set()
    assert await run_sync_abandonable(answer, 7) == 7


# SystemExit too: raised out of a task of its own, asyncio would let it stop the event loop.
@pytest.mark.parametrize("error", [LookupError, SystemExit])
async def test_the_caller_gets_the_call_s_exception(error: type[BaseException]) -> None:
    def fails() -> None:
        raise error("from the thread")

    with pytest.raises(error, match="from the thread"):
        await run_sync_abandonable(fails)
    assert await run_sync_abandonable(answer, 1) == 1  # the loop runs on
