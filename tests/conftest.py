import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from centralmcp_batch.settings import SHARE_READS

pytest_plugins = ["redis_server", "pytester"]  # redis_server, redis_url; pytester runs the kit on broken hosts

# The router.toml files the tests load in process name the suite's backends by module path
# (tests.backends.tickets). Pytest puts only tests/ on sys.path, so on a non-editable install
# `tests` is not importable. Appended, not prepended: the package under test still comes from
# site-packages, not from the checkout beside it (what the sdist check relies on).
sys.path.append(str(Path(__file__).resolve().parents[1]))

# The default rate store is a SQLite file in the user's cache directory, shared by every process
# on the machine. Tests must not share one budget across test runs and subprocesses by accident
# (slow and flaky): unless the environment names a store, every router this session builds,
# in this process or in a subprocess that inherits the environment, keeps its own bucket in
# memory. The tests of the shared stores name their store explicitly.
os.environ.setdefault("CENTRALMCP_ROUTER_RATE_STORE", "memory")

# Workers a core for `-n auto` (pyproject's addopts): most tests wait on subprocesses, sleeps and
# time limits rather than compute, so two a core keep the cores busy without crowding them.
WORKERS_PER_CORE = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core, or ``PYTEST_XDIST_AUTO_NUM_WORKERS`` where it is set."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip()
    if chosen.isdigit():
        return int(chosen)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return WORKERS_PER_CORE * cores


@pytest.fixture(autouse=True)
def _slow_tier_one_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The slow tier's tests run one at a time, whatever worker has each: its load runs measure the router alone.

    A lock on a file in the session's base directory, which holds each xdist worker's own: xdist's
    grouping (--dist loadgroup) groups nothing under pytest 9, which ignores the node id it rewrites.
    """
    if request.node.get_closest_marker("slow") is None or sys.platform == "win32":
        yield
        return
    import fcntl

    base = tmp_path_factory.getbasetemp()
    session = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with (session / "slow-tier.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _sqlite_stores_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every SQLite connection a SqliteStore opened in the test is closed at its end.

    Tests make stores they never close; from Python 3.13 on, each connection the garbage collector
    finds open is a ResourceWarning, which fails whichever later test the collection happens in.
    """
    from centralmcp_batch.ratelimit.sqlite import SqliteStore

    opened: list[sqlite3.Connection] = []
    set_up = SqliteStore._set_up

    def tracked(store: SqliteStore) -> sqlite3.Connection:
        conn = set_up(store)
        opened.append(conn)
        return conn

    monkeypatch.setattr(SqliteStore, "_set_up", tracked)
    yield
    for conn in opened:
        conn.close()


@pytest.fixture
def each_entry_its_own_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Identical entries each call their backend: for tests that send the same read several times to count
    or hold its calls, where sharing would make them one."""
    monkeypatch.setenv(SHARE_READS, "0")
