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
