"""The machine-wide store: one SQLite file shared by every process that names it.

Each booking, of one token or a whole batch's, is one ``BEGIN IMMEDIATE`` transaction (read the
bucket, write it back), and so is giving tokens back: processes take the file's write lock in turn
and the arithmetic is atomic across them. Time
is the wall clock, the one clock every process on the machine shares; the time of each bucket's last
reservation is kept beside it, so a clock stepped back moves the TAT back with it. It runs in a worker
thread so a busy file never stalls the event loop, and one that hangs (a frozen or unreachable
file system) is left behind when the limiter's time is up.

The file may be deleted or replaced while routers run (a cache cleaner, or a user repairing a
corrupt file): at most once a second the store checks that its path still names the file it
has open, and opens the path again if not, so every process shares one bucket again.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..worker_threads import run_sync_abandonable
from . import gcra
from .errors import StoreUnavailable
from .reservation import Pace, Reservation

SCHEMA = "CREATE TABLE IF NOT EXISTS gcra_buckets (key TEXT PRIMARY KEY, tat REAL NOT NULL)"
# When each bucket last reserved, by the wall clock. A table of its own, not a column, so that files and
# routers of earlier versions work on unchanged: they never read it, and it is created where missing.
CLOCK_SCHEMA = "CREATE TABLE IF NOT EXISTS gcra_clock (key TEXT PRIMARY KEY, seen REAL NOT NULL)"
# The pace (interval, burst) each bucket was last reserved with, written only when a reservation's differs:
# a table of its own for the same reason. Routers of earlier versions leave no pace, so none is found for them.
PACE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS gcra_pace (key TEXT PRIMARY KEY, interval REAL NOT NULL, burst INTEGER NOT NULL)"
)
# The positions of tokens given back unused, "P1 P2 ...": a table of its own, for the same reason.
HOLES_SCHEMA = "CREATE TABLE IF NOT EXISTS gcra_holes (key TEXT PRIMARY KEY, holes TEXT NOT NULL)"
# A bucket's whole state in one read (NULL for what is missing): fewer statements than one per table.
STATE = (
    "SELECT b.tat, c.seen, p.interval, p.burst, h.holes FROM (SELECT ? AS key) AS k"
    " LEFT JOIN gcra_buckets AS b USING (key) LEFT JOIN gcra_clock AS c USING (key)"
    " LEFT JOIN gcra_pace AS p USING (key) LEFT JOIN gcra_holes AS h USING (key)"
)
BUSY_SECONDS = 1.0  # a lock held longer than this is a fault, not contention
CHECK_SECONDS = 1.0  # how often the path is checked against the file that is open

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def _is_locked(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _what_is_wrong(exc: sqlite3.Error, busy_seconds: float) -> str:
    text = str(exc).lower()
    if _is_locked(exc):
        return f"locked by another process for over {busy_seconds:g} s"
    if "not a database" in text or "malformed" in text:
        return "corrupt (not a SQLite database)"
    if "readonly" in text or "unable to open" in text or "read-only" in text:
        return "not writable"
    return "unusable"


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class SqliteStore:
    """Buckets in the SQLite file at ``path`` (created, with its directory, on first use)."""

    def __init__(self, path: Path, busy_seconds: float = BUSY_SECONDS) -> None:
        self.path, self.busy_seconds = path, busy_seconds
        self.url = f"sqlite:///{path}"
        self._conn: sqlite3.Connection | None = None
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the connection has open
        self._next_check = 0.0
        self._lock = threading.Lock()  # one connection, used by one worker thread at a time
        self._held_since: float | None = None  # when the lock was taken, on the monotonic clock

    async def reserve(
        self, key: str, interval: float, burst: int, count: int = 1, within: float = math.inf
    ) -> Reservation:
        # Abandoned on cancel: a thread stuck in a hung file system must not hold its caller (and
        # the limiter's time limit) hostage; it finishes, or not, on its own.
        return await run_sync_abandonable(self._in_transaction, self._book, key, interval, burst, count, within)

    async def give_back(self, key: str, interval: float, positions: Sequence[float]) -> None:
        await run_sync_abandonable(self._in_transaction, self._give_back, key, interval, positions)

    def _in_transaction(self, step: Callable[..., _T], key: str, *args: Any) -> _T:
        """``step(conn, key, *args)`` in one write transaction on the file: the file's lock orders the processes."""
        with self._connection_lock():
            try:
                self._reopen_if_moved()
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    answer = step(conn, key, *args)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return answer
            except (sqlite3.Error, OSError) as exc:
                self._drop_connection()  # reopen next time: the file may have been repaired or replaced
                reason = _what_is_wrong(exc, self.busy_seconds) if isinstance(exc, sqlite3.Error) else "unusable"
                raise StoreUnavailable(f"SQLite file {self.path} is {reason} ({type(exc).__name__}: {exc})") from exc

    @contextlib.contextmanager
    def _connection_lock(self) -> Iterator[None]:
        # A holder past the busy limit is a thread left behind in a hung file system: waiting for it
        # would stall every retry of the limiter, so that is an outage at once (at the limit at most).
        held_since = self._held_since
        patience = self.busy_seconds if held_since is None else held_since + self.busy_seconds - time.monotonic()
        if not self._lock.acquire(timeout=max(0.0, patience)):
            raise StoreUnavailable(
                f"SQLite file {self.path} is still held by an earlier reservation after {self.busy_seconds:g} s"
                " (a hung file system?)"
            )
        self._held_since = time.monotonic()
        try:
            yield
        finally:
            self._held_since = None
            self._lock.release()

    def _reopen_if_moved(self) -> None:
        if self._conn is None or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + CHECK_SECONDS
        if _file_id(self.path) != self._file_id:
            # Left open, the old file would be this process's own bucket from now on, silently.
            log.warning("rate store file %s was deleted or replaced; opening it again to share its bucket", self.path)
            self._drop_connection()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            give_up = time.monotonic() + self.busy_seconds
            while True:
                try:
                    self._conn = self._set_up()
                    break
                except sqlite3.Error as exc:
                    # Processes setting up a new file at once can deadlock on its locks (each holds one the
                    # other waits for), and SQLite then answers "locked" at once, without its busy wait:
                    # the setup is tried again, within the same busy limit as a held lock.
                    if not _is_locked(exc) or time.monotonic() >= give_up:
                        raise
                    time.sleep(random.uniform(0.005, 0.025))
            self._file_id = _file_id(self.path)
            self._next_check = time.monotonic() + CHECK_SECONDS
        return self._conn

    def _set_up(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_seconds, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait; writers queue on the lock
            conn.execute("PRAGMA synchronous=NORMAL")  # a bucket lost to a power cut costs one burst, no more
            conn.execute(SCHEMA)
            conn.execute(CLOCK_SCHEMA)
            conn.execute(PACE_SCHEMA)
            conn.execute(HOLES_SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    @staticmethod
    def _state(conn: sqlite3.Connection, key: str) -> tuple[float, tuple[float, ...], float, float, Pace | None]:
        """The bucket's TAT and holes, moved back with a clock stepped back; the time now; how far the clock
        was stepped back; the pace found."""
        tat, seen, found_interval, found_burst, holes = conn.execute(STATE, (key,)).fetchone()
        found = None if found_interval is None else Pace(found_interval, found_burst)
        now = time.time()  # read under the lock, so the processes' readings are in order
        step = gcra.stepped_back(seen, now)
        kept = tuple(float(hole) - step for hole in (holes or "").split())
        return (tat or 0.0) - step, kept, now, step, found

    @staticmethod
    def _write(conn: sqlite3.Connection, key: str, now: float, tat: float, holes: tuple[float, ...]) -> None:
        conn.execute(
            "INSERT INTO gcra_buckets (key, tat) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET tat = excluded.tat",
            (key, tat),
        )
        conn.execute(
            "INSERT INTO gcra_clock (key, seen) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET seen = excluded.seen",
            (key, now),
        )
        if holes:
            conn.execute(
                "INSERT INTO gcra_holes (key, holes) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET holes = excluded.holes",
                (key, " ".join(map(repr, holes))),
            )
        else:
            conn.execute("DELETE FROM gcra_holes WHERE key = ?", (key,))

    def _book(
        self, conn: sqlite3.Connection, key: str, interval: float, burst: int, count: int, within: float
    ) -> Reservation:
        tat, holes, now, _, found = self._state(conn, key)
        booked = gcra.book(tat, holes, now, interval, burst, count, within)
        self._write(conn, key, now, booked.tat, booked.holes)
        pace = Pace(interval, burst)
        if found != pace:
            conn.execute(
                "INSERT INTO gcra_pace (key, interval, burst) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE "
                "SET interval = excluded.interval, burst = excluded.burst",
                (key, interval, burst),
            )
        starts_by = tuple(position - now for position in booked.positions)
        other = None if found is None or found == pace else found
        return Reservation(booked.waits, booked.positions, starts_by, booked.next_wait, other, read_at=now)

    def _give_back(self, conn: sqlite3.Connection, key: str, interval: float, positions: Sequence[float]) -> None:
        tat, holes, now, step, _ = self._state(conn, key)
        left = gcra.give_back(tat, holes, now, interval, [position - step for position in positions])
        self._write(conn, key, now, left.tat, left.holes)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):  # a broken connection: nothing more to do with it
                self._conn.close()
            self._conn = None

    async def close(self) -> None:
        await run_sync_abandonable(self._close)

    def _close(self) -> None:
        with contextlib.suppress(StoreUnavailable), self._connection_lock():
            self._drop_connection()  # unless a thread stuck in a hung file system has it: it goes with the process
