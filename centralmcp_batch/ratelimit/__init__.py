"""One account-wide rate across every process: GCRA reservations in a memory, SQLite or Redis store."""

from .config import KEY_ENV, RATE, STORE_ENV, default_store_url, limiter_from_env, open_store
from .errors import StoreUnavailable
from .limiter import RateLimiter, Store
from .memory import MemoryStore
from .plugin import RateLimitPlugin
from .reservation import Pace, Reservation
from .sqlite import SqliteStore

__all__ = [
    "KEY_ENV",
    "RATE",
    "STORE_ENV",
    "MemoryStore",
    "Pace",
    "RateLimitPlugin",
    "RateLimiter",
    "Reservation",
    "SqliteStore",
    "Store",
    "StoreUnavailable",
    "default_store_url",
    "limiter_from_env",
    "open_store",
]
