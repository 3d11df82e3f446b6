"""The machine-wide store: one SQLite file shared by every process that names it.

Each reservation is one ``BEGIN IMMEDIATE`` transaction (read the TAT, write the next), so
processes take the file's write lock in turn and the arithmetic is atomic across them. Time
is the wall clock, the one clock every process on the machine shares. It runs in a worker
thread so a busy file never stalls the event loop.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from pathlib import Path

import anyio

from . import gcra
from .errors import StoreUnavailable

SCHEMA = "CREATE TABLE IF NOT EXISTS gcra_buckets (key TEXT PRIMARY KEY, tat REAL NOT NULL)"
BUSY_SECONDS = 1.0  # a lock held longer than this is a fault, not contention


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


class SqliteStore:
    """Buckets in the SQLite file at ``path`` (created, with its directory, on first use)."""

    def __init__(self, path: Path, busy_seconds: float = BUSY_SECONDS) -> None:
        self.path, self.busy_seconds = path, busy_seconds
        self.url = f"sqlite:///{path}"
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one connection, used by one worker thread at a time

    async def reserve(self, key: str, interval: float, burst: int) -> float:
        return await anyio.to_thread.run_sync(self._reserve, key, interval, burst)

    def _reserve(self, key: str, interval: float, burst: int) -> float:
        with self._lock:
            try:
                return self._transaction(self._connection(), key, interval, burst)
            except (sqlite3.Error, OSError) as exc:
                self._drop_connection()  # reopen next time: the file may have been repaired or replaced
                reason = _what_is_wrong(exc, self.busy_seconds) if isinstance(exc, sqlite3.Error) else "unusable"
                raise StoreUnavailable(f"SQLite file {self.path} is {reason} ({type(exc).__name__}: {exc})") from exc

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
        return self._conn

    def _set_up(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_seconds, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait; writers queue on the lock
            conn.execute("PRAGMA synchronous=NORMAL")  # a bucket lost to a power cut costs one burst, no more
            conn.execute(SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    @staticmethod
    def _transaction(conn: sqlite3.Connection, key: str, interval: float, burst: int) -> float:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT tat FROM gcra_buckets WHERE key = ?", (key,)).fetchone()
            tat, wait = gcra.reserve(row[0] if row else 0.0, time.time(), interval, burst)  # time read under the lock
            conn.execute(
                "INSERT INTO gcra_buckets (key, tat) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET tat = excluded.tat",
                (key, tat),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return wait

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):  # a broken connection: nothing more to do with it
                self._conn.close()
            self._conn = None

    async def close(self) -> None:
        with self._lock:
            self._drop_connection()
