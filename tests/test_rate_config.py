"""The limiter's configuration: where the SQLite store lives on each platform, and the burst.

The path parsing takes the platform's path flavour, so the Windows rules are held on any machine.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

import pytest

from centralmcp_batch.ratelimit import SqliteStore, limiter_from_env
from centralmcp_batch.ratelimit.config import (
    BURST_ENV,
    STORE_ENV,
    cache_dir,
    default_store_url,
    path_flavour,
    sqlite_path,
)

SETTINGS_LOG = "centralmcp_batch.settings"


# -- a SQLite URL -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavour", "url", "expected"),
    [
        (PurePosixPath, "sqlite:////home/me/.cache/rate.sqlite3", "/home/me/.cache/rate.sqlite3"),
        (PureWindowsPath, r"sqlite:///C:\Users\me\Local\rate.sqlite3", r"C:\Users\me\Local\rate.sqlite3"),
        (PureWindowsPath, "sqlite:///C:/Users/me/rate.sqlite3", r"C:\Users\me\rate.sqlite3"),
        (PureWindowsPath, r"sqlite:///\\server\share\rate.sqlite3", r"\\server\share\rate.sqlite3"),
    ],
)
def test_an_absolute_path_after_three_slashes_is_the_file(flavour: type[PurePath], url: str, expected: str) -> None:
    assert sqlite_path(url, flavour) == flavour(expected)


@pytest.mark.parametrize(
    ("flavour", "url"),
    [
        (PurePosixPath, "sqlite:///rate.sqlite3"),
        (PurePosixPath, "sqlite:///./data/rate.sqlite3"),
        (PurePosixPath, "sqlite:///home/me/rate.sqlite3"),  # SQLAlchemy's relative form: /home/me takes four
        (PurePosixPath, "sqlite:///C:/Users/me/rate.sqlite3"),  # a Windows path is relative on POSIX
        (PurePosixPath, "sqlite:///"),
        (PurePosixPath, "sqlite:////"),  # the root names no file
        (PureWindowsPath, "sqlite:////home/me/rate.sqlite3"),  # no drive
        (PureWindowsPath, "sqlite:///rate.sqlite3"),
        (PureWindowsPath, "sqlite:///C:rate.sqlite3"),  # relative to drive C's working directory
        (PureWindowsPath, "sqlite:///C:/"),
    ],
)
def test_a_relative_path_is_refused_saying_what_was_given_and_what_is_expected(
    flavour: type[PurePath], url: str
) -> None:
    written = url.removeprefix("sqlite:///")
    expected_form = r"sqlite:///C:\cache\rate.sqlite3" if flavour is PureWindowsPath else "sqlite:////var/cache/"
    with pytest.raises(ValueError) as refused:
        sqlite_path(url, flavour)
    message = str(refused.value)
    assert message.startswith(f"{STORE_ENV}={url!r}: the SQLite path must be absolute")
    assert repr(written) in message and expected_form in message


def test_a_relative_store_stops_the_limiter_at_start_up() -> None:
    with pytest.raises(ValueError, match="must be absolute"):
        limiter_from_env({STORE_ENV: "sqlite:///rate.sqlite3"})


def test_an_absolute_store_on_this_machine_opens_that_file(tmp_path: Path) -> None:
    limiter = limiter_from_env({STORE_ENV: f"sqlite:///{tmp_path / 'rate.sqlite3'}"})
    assert isinstance(limiter.store, SqliteStore) and limiter.store.path == tmp_path / "rate.sqlite3"


# -- the default store ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "environ", "cache"),
    [
        ("linux", {"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/me"}, "/x/cache"),
        ("linux", {"HOME": "/home/me"}, "/home/me/.cache"),
        ("linux", {"XDG_CACHE_HOME": "", "HOME": "/home/me"}, "/home/me/.cache"),
        ("linux", {"XDG_CACHE_HOME": "cache", "HOME": "/home/me"}, "/home/me/.cache"),  # relative: ignored (XDG)
        ("darwin", {"XDG_CACHE_HOME": "/x/cache", "HOME": "/Users/me"}, "/Users/me/Library/Caches"),
        ("win32", {"LOCALAPPDATA": r"C:\Users\me\AppData\Local"}, r"C:\Users\me\AppData\Local"),
        ("win32", {"LOCALAPPDATA": "Local", "HOME": "C:/Users/me"}, r"C:\Users\me\AppData\Local"),
    ],
)
def test_the_default_store_url_round_trips_through_the_parser_on_each_platform(
    platform: str, environ: dict[str, str], cache: str
) -> None:
    flavour = path_flavour(platform)
    assert cache_dir(environ, platform) == flavour(cache)
    url = default_store_url(environ, platform)
    assert sqlite_path(url, flavour) == flavour(cache) / "centralmcp-batch" / "rate.sqlite3"


@pytest.mark.parametrize(
    ("platform", "home"), [("linux", ""), ("linux", "me"), ("linux", "."), ("darwin", "Users/me"), ("win32", "/c/me")]
)
def test_no_default_store_is_built_from_a_relative_or_empty_home(platform: str, home: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"HOME={home!r} is not an absolute path")):
        default_store_url({"HOME": home, "XDG_CACHE_HOME": "cache"}, platform)


def test_a_store_that_is_named_needs_no_home() -> None:
    assert limiter_from_env({"HOME": "", STORE_ENV: "memory"}).store.url == "memory"


# -- the burst --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", 1),
        ("1.0", 1),
        ("1e0", 1),
        (" 3 ", 3),
        ("2.5", 2),  # rounded down, never up to the default
        ("0", 1),
        ("0.5", 1),
        ("four", 10),
        ("nan", 10),
        ("", 10),
    ],
)
def test_the_burst_is_a_whole_number_of_tokens(raw: str, expected: int) -> None:
    environ = {STORE_ENV: "memory", "CENTRALMCP_ROUTER_RATE_PER_SECOND": "10", BURST_ENV: raw}
    assert limiter_from_env(environ).burst == expected


def test_a_burst_rounded_down_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    environ = {STORE_ENV: "memory", BURST_ENV: "3.75"}
    with caplog.at_level(logging.WARNING, logger=SETTINGS_LOG):
        bursts = [limiter_from_env(environ).burst for _ in range(3)]
        limiter_from_env({STORE_ENV: "memory", BURST_ENV: "4.0"})  # whole: nothing to say
    assert bursts == [3, 3, 3]
    assert [record.getMessage() for record in caplog.records if BURST_ENV in record.getMessage()] == [
        f"{BURST_ENV}='3.75' is not a whole number; using 3, rounded down"
    ]
