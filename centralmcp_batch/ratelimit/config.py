"""Which store, which bucket, what rate: the limiter from the environment."""

from __future__ import annotations

import logging
import math
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from urllib.parse import urlsplit

from ..settings import Setting, report_once
from .limiter import RateLimiter, Store
from .memory import MemoryStore
from .redis_store import without_password
from .sqlite import SqliteStore

log = logging.getLogger(__name__)

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


def cache_dir(
    environ: Mapping[str, str], platform: str | None = None, recorded: Callable[[str], PurePath | None] | None = None
) -> PurePath:
    """The cache directory of the account this process runs as, the same for all its processes.

    It is found where the system records the account (``recorded``, by default ``recorded_dir``): the
    home in the password database on Linux and macOS, the local application data folder the shell
    keeps for the account on Windows. Not from the environment, which each MCP client passes its own
    way (the Python SDK's stdio client passes HOME, LOGNAME, PATH, SHELL, TERM and USER alone), so
    that no client's choice of variables gives its routers a bucket of their own. ``environ`` is read
    only where the system records nothing (a container run under a user id it has no entry for).
    """
    platform = platform or sys.platform
    flavour = path_flavour(platform)
    known = (recorded or recorded_dir)(platform)
    if platform == "win32":
        local = known or absolute_or_none(environ.get("LOCALAPPDATA"), flavour)
        return local or unrecorded_home(environ, flavour) / "AppData" / "Local"
    home = known or unrecorded_home(environ, flavour)
    return home / "Library" / "Caches" if platform == "darwin" else home / ".cache"


def recorded_dir(platform: str) -> PurePath | None:
    """Where the system records this account's own directory: its local application data folder on
    Windows, its home elsewhere; None where it records none."""
    return _windows_local_app_data() if platform == "win32" else _password_database_home()


def _password_database_home() -> PurePath | None:
    """The home of the account this process runs as (its real user id), from the password database."""
    try:
        import pwd
    except ImportError:  # Windows
        return None
    try:
        entry = pwd.getpwuid(os.getuid())
    except KeyError:  # a user id with no entry, as a container may run a process under
        return None
    return absolute_or_none(entry.pw_dir, PurePosixPath)


# FOLDERID_LocalAppData, the known folder %LOCALAPPDATA% names.
LOCAL_APP_DATA = uuid.UUID("F1B32785-6FBA-4FCF-9D55-7B8E7F157091")


def _windows_local_app_data() -> PurePath | None:
    """The account's local application data folder as the Windows shell keeps it for the account
    (SHGetKnownFolderPath), not as the process's environment names it; None off Windows."""
    try:
        import ctypes

        windll = getattr(ctypes, "windll")  # noqa: B009 - Windows only: typeshed declares it for Windows alone
    except (ImportError, AttributeError):
        return None
    folder_id = (ctypes.c_byte * 16).from_buffer_copy(LOCAL_APP_DATA.bytes_le)
    found = ctypes.c_wchar_p()
    if windll.shell32.SHGetKnownFolderPath(ctypes.byref(folder_id), 0, None, ctypes.byref(found)) != 0:
        return None
    try:
        return absolute_or_none(found.value, PureWindowsPath)
    finally:
        windll.ole32.CoTaskMemFree(found)


def absolute_or_none(raw: str | None, flavour: type[PurePath]) -> PurePath | None:
    path = flavour(raw or "")
    return path if path.is_absolute() else None


def unrecorded_home(environ: Mapping[str, str], flavour: type[PurePath]) -> PurePath:
    """HOME, for an account the system has no record of: said at start-up, as another process of the
    same account with another HOME would use another file.

    A relative or empty HOME is an error: resolved against each process's working directory (or
    read as the root), it would give each router a file of its own, and a bucket of its own.
    """
    raw = environ.get("HOME", "")
    home = absolute_or_none(raw, flavour)
    if home is None:
        raise ValueError(
            f"HOME={raw!r} is not an absolute path and the system has no record of this account's home, so the "
            f"default {STORE_ENV} (a SQLite file in the user cache dir) has no place: set HOME to an absolute "
            f"path, or set {STORE_ENV}"
        )
    log.warning(
        "the system has no record of this account's home, so the default %s is under HOME=%s; a process of this "
        "account with another HOME would use another file: set %s to share one for certain",
        STORE_ENV,
        home,
        STORE_ENV,
    )
    return home


def default_store_url(
    environ: Mapping[str, str], platform: str | None = None, recorded: Callable[[str], PurePath | None] | None = None
) -> str:
    """The store every process of this account uses when none is named: a SQLite file in its cache dir."""
    return f"{SQLITE_PREFIX}{cache_dir(environ, platform, recorded) / 'centralmcp-batch' / 'rate.sqlite3'}"


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
