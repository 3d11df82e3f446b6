"""Which store, which bucket, what rate: the limiter from the environment."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from urllib.parse import urlsplit

from ..settings import Setting, report_once
from .limiter import RateLimiter, Store
from .memory import MemoryStore
from .redis_store import without_password
from .sqlite import SqliteStore

STORE_ENV = "CENTRALMCP_ROUTER_RATE_STORE"
KEY_ENV = "CENTRALMCP_ROUTER_RATE_KEY"
BURST_ENV = "CENTRALMCP_ROUTER_RATE_BURST"
RATE = Setting("CENTRALMCP_ROUTER_RATE_PER_SECOND", 8.0, 0.001, None, integer=False)
DEFAULT_KEY = "central"
STORE_FORMS = "memory, sqlite:///ABSOLUTE/PATH or redis://HOST:PORT/DB"
SQLITE_PREFIX = "sqlite:///"


def path_flavour(platform: str) -> type[PurePath]:
    """How ``platform`` writes a path: Windows with a drive and either slash, the others from one root."""
    return PureWindowsPath if platform == "win32" else PurePosixPath


def cache_dir(environ: Mapping[str, str], platform: str | None = None) -> PurePath:
    """The user's cache directory, as each platform names it (``platform`` defaults to this one)."""
    platform = platform or sys.platform
    flavour = path_flavour(platform)
    if platform == "win32":
        local = absolute_or_none(environ.get("LOCALAPPDATA"), flavour)
        return local or home_dir(environ, flavour) / "AppData" / "Local"
    if platform == "darwin":
        return home_dir(environ, flavour) / "Library" / "Caches"
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and is to be ignored.
    return absolute_or_none(environ.get("XDG_CACHE_HOME"), flavour) or home_dir(environ, flavour) / ".cache"


def absolute_or_none(raw: str | None, flavour: type[PurePath]) -> PurePath | None:
    path = flavour(raw or "")
    return path if path.is_absolute() else None


def home_dir(environ: Mapping[str, str], flavour: type[PurePath]) -> PurePath:
    """HOME, or the account's home when HOME is unset.

    A relative or empty HOME is an error: resolved against each process's working directory (or
    read as the root), it would give each router a file of its own, and a bucket of its own.
    """
    raw = environ["HOME"] if "HOME" in environ else str(Path.home())
    home = absolute_or_none(raw, flavour)
    if home is None:
        raise ValueError(
            f"HOME={raw!r} is not an absolute path, so the default {STORE_ENV} (a SQLite file in the "
            f"user cache dir) has no place: set HOME to an absolute path, or set {STORE_ENV}"
        )
    return home


def default_store_url(environ: Mapping[str, str], platform: str | None = None) -> str:
    return f"{SQLITE_PREFIX}{cache_dir(environ, platform) / 'centralmcp-batch' / 'rate.sqlite3'}"


def sqlite_path(url: str, flavour: type[PurePath]) -> PurePath:
    """The file a ``sqlite:///PATH`` URL names, PATH written as ``flavour`` writes an absolute path.

    As in SQLAlchemy, everything after the third slash is the path: an absolute POSIX path shows a
    fourth slash (sqlite:////home/me/rate.sqlite3), a Windows one its drive (sqlite:///C:/rate.sqlite3).
    A relative path is refused: each process would resolve it against its own working directory, so
    routers started from different directories would not share a bucket.
    """
    written = url[len(SQLITE_PREFIX) :]
    path = flavour(written)
    if not path.is_absolute() or path.name == "":
        example = flavour("C:/cache/rate.sqlite3" if flavour is PureWindowsPath else "/var/cache/rate.sqlite3")
        raise ValueError(
            f"{STORE_ENV}={url!r}: the SQLite path must be absolute and name a file, and {written!r} does not; "
            f"everything after {SQLITE_PREFIX} is the path, so the file {example} is {SQLITE_PREFIX}{example}"
        )
    return path


def open_store(url: str) -> Store:
    """The store ``url`` names; a malformed one is an error naming the forms accepted."""
    scheme = urlsplit(url).scheme.lower()
    if url == "memory":
        return MemoryStore()
    if scheme == "sqlite" and url.startswith(SQLITE_PREFIX):
        return SqliteStore(Path(sqlite_path(url, path_flavour(sys.platform))))
    if scheme in ("redis", "rediss") and urlsplit(url).hostname:
        from .redis_store import RedisStore

        return RedisStore(url)
    raise ValueError(f"{STORE_ENV}={without_password(url)!r}: expected {STORE_FORMS}")


def burst(environ: Mapping[str, str], rate: float) -> int:
    """The burst, a count of tokens: a number that is not whole is rounded down (logged once).

    Down, not to the default: the default may be several times the burst asked for.
    """
    value = Setting(BURST_ENV, max(2, int(rate)), 1, integer=False).read(environ)
    whole = math.floor(value)
    if whole != value:
        raw = environ.get(BURST_ENV, "").strip()
        report_once(BURST_ENV, raw, f"{BURST_ENV}={raw!r} is not a whole number; using {whole}, rounded down")
    return whole


def limiter_from_env(environ: Mapping[str, str] | None = None) -> RateLimiter:
    """The account-wide limiter the environment describes (read once, when a host starts)."""
    env = os.environ if environ is None else environ
    rate = RATE.read(env)
    url = env.get(STORE_ENV, "").strip() or default_store_url(env)
    return RateLimiter(open_store(url), rate, burst(env, rate), key=env.get(KEY_ENV, "").strip() or DEFAULT_KEY)
