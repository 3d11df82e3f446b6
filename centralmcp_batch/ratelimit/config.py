"""Which store, which bucket, what rate: the limiter from the environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from ..settings import Setting
from .limiter import RateLimiter, Store
from .memory import MemoryStore
from .sqlite import SqliteStore

STORE_ENV = "CENTRALMCP_ROUTER_RATE_STORE"
KEY_ENV = "CENTRALMCP_ROUTER_RATE_KEY"
BURST_ENV = "CENTRALMCP_ROUTER_RATE_BURST"
RATE = Setting("CENTRALMCP_ROUTER_RATE_PER_SECOND", 8.0, 0.001, None, integer=False)
DEFAULT_KEY = "central"
STORE_FORMS = "memory, sqlite:///ABSOLUTE/PATH or redis://HOST:PORT/DB"


def cache_dir(environ: Mapping[str, str]) -> Path:
    """The user's cache directory, as each platform names it."""
    home = Path(environ.get("HOME") or Path.home())
    if sys.platform == "win32":
        return Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    if sys.platform == "darwin":
        return home / "Library" / "Caches"
    return Path(environ.get("XDG_CACHE_HOME") or home / ".cache")


def default_store_url(environ: Mapping[str, str]) -> str:
    return f"sqlite:///{cache_dir(environ) / 'centralmcp-batch' / 'rate.sqlite3'}"


def open_store(url: str) -> Store:
    """The store ``url`` names; a malformed one is an error naming the forms accepted."""
    scheme = urlsplit(url).scheme.lower()
    if url == "memory":
        return MemoryStore()
    if scheme == "sqlite" and url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") - 1 :])  # keep the leading slash: the path is absolute
        if not path.is_absolute() or path.name == "":
            raise ValueError(f"{STORE_ENV}={url!r}: the SQLite path must be absolute (sqlite:///ABSOLUTE/PATH)")
        return SqliteStore(path)
    if scheme in ("redis", "rediss") and urlsplit(url).hostname:
        from .redis_store import RedisStore

        return RedisStore(url)
    raise ValueError(f"{STORE_ENV}={url!r}: expected {STORE_FORMS}")


def burst(environ: Mapping[str, str], rate: float) -> int:
    return int(Setting(BURST_ENV, max(2, int(rate)), 1).read(environ))


def limiter_from_env(environ: Mapping[str, str] | None = None) -> RateLimiter:
    """The account-wide limiter the environment describes (read once, when a host starts)."""
    env = os.environ if environ is None else environ
    rate = RATE.read(env)
    url = env.get(STORE_ENV, "").strip() or default_store_url(env)
    return RateLimiter(open_store(url), rate, burst(env, rate), key=env.get(KEY_ENV, "").strip() or DEFAULT_KEY)
