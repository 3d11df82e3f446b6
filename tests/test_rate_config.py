"""The limiter's configuration: where the SQLite store lives on each platform, and the burst.

The path parsing takes the platform's path flavour, so the Windows rules are held on any machine.
"""

from __future__ import annotations

import logging
import os
import re
import sys
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


def recorded_as(path: str | None):  # type: ignore[no-untyped-def]
    """A system that records the account's own directory as ``path`` (None: no record of it)."""
    return lambda platform: None if path is None else path_flavour(platform)(path)


IGNORED = {"XDG_CACHE_HOME": "/x/cache", "HOME": "/elsewhere", "LOCALAPPDATA": r"D:\elsewhere"}


@pytest.mark.parametrize(
    ("platform", "recorded", "environ", "cache"),
    [
        # What the system records for the account decides, whatever the environment says.
        ("linux", "/home/me", IGNORED, "/home/me/.cache"),
        ("linux", "/home/me", {}, "/home/me/.cache"),
        ("darwin", "/Users/me", IGNORED, "/Users/me/Library/Caches"),
        ("win32", r"C:\Users\me\AppData\Local", IGNORED, r"C:\Users\me\AppData\Local"),
        # No record of the account (a container's user id with no entry): the environment, said at start-up.
        ("linux", None, {"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/me"}, "/home/me/.cache"),
        ("darwin", None, {"HOME": "/Users/me"}, "/Users/me/Library/Caches"),
        ("win32", None, {"LOCALAPPDATA": r"C:\Users\me\AppData\Local"}, r"C:\Users\me\AppData\Local"),
        ("win32", None, {"LOCALAPPDATA": "Local", "HOME": "C:/Users/me"}, r"C:\Users\me\AppData\Local"),
    ],
)
def test_the_default_store_is_in_the_cache_dir_the_system_records_for_the_account(
    platform: str, recorded: str | None, environ: dict[str, str], cache: str
) -> None:
    flavour = path_flavour(platform)
    assert cache_dir(environ, platform, recorded_as(recorded)) == flavour(cache)
    url = default_store_url(environ, platform, recorded_as(recorded))
    assert sqlite_path(url, flavour) == flavour(cache) / "centralmcp-batch" / "rate.sqlite3"


def test_a_default_from_the_environment_is_said_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="centralmcp_batch.ratelimit.config"):
        default_store_url({"HOME": "/home/me"}, "linux", recorded_as(None))
        default_store_url({"HOME": "/home/me"}, "linux", recorded_as("/home/me"))  # recorded: nothing to say
    assert [r.getMessage() for r in caplog.records] == [
        f"the system has no record of this account's home, so the default {STORE_ENV} is under HOME=/home/me; a "
        f"process of this account with another HOME would use another file: set {STORE_ENV} to share one for certain"
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="the password database is POSIX's")
def test_on_this_machine_the_default_is_the_accounts_whatever_the_environment() -> None:
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir
    expected = f"sqlite:///{home}/.cache/centralmcp-batch/rate.sqlite3"
    if sys.platform == "darwin":
        expected = f"sqlite:///{home}/Library/Caches/centralmcp-batch/rate.sqlite3"
    for environ in ({}, {"HOME": "/elsewhere"}, {"XDG_CACHE_HOME": "/x/cache"}, {"HOME": "relative"}):
        assert default_store_url(environ) == expected


@pytest.mark.parametrize(
    ("platform", "home"), [("linux", ""), ("linux", "me"), ("linux", "."), ("darwin", "Users/me"), ("win32", "/c/me")]
)
def test_with_no_record_no_default_store_is_built_from_a_relative_or_empty_home(platform: str, home: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"HOME={home!r} is not an absolute path")):
        default_store_url({"HOME": home, "XDG_CACHE_HOME": "cache"}, platform, recorded_as(None))


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
