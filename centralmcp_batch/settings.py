"""The batch's environment settings, read on every call so an operator's change applies at once.

A number out of range clamps to the nearest bound (logged once per variable and value), so a
value just past a bound never jumps to the much wider default. Only a value that is not a
number at all (or NaN) means the default, logged once too: a typo must not pass unseen.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

RESPONSE_MAX_BYTES = "CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES"
CONCURRENCY = "CENTRALMCP_ROUTER_BATCH_CONCURRENCY"
CALL_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS"
BATCH_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS"
SHARE_READS = "CENTRALMCP_ROUTER_BATCH_SHARE_IDENTICAL_READS"
ROUTER_MODE = "CENTRALMCP_ROUTER_MODE"

log = logging.getLogger(__name__)
# (variable, raw value) pairs already reported: settings are read on every call, the log says it once.
_REPORTED: set[tuple[str, str]] = set()


# What int() takes as a whole number: a sign, then digits in groups an underscore may join.
_WHOLE_NUMBER = re.compile(r"[+-]?\d+(?:_\d+)*")


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default and the inclusive range it accepts."""

    env: str
    default: float
    minimum: float
    maximum: float | None = None
    integer: bool = True

    def read(self, environ: Mapping[str, str]) -> float:
        raw = environ.get(self.env, "").strip()
        try:
            value = self.number(raw)
        except ValueError:
            return self.default_for(raw)
        clamped = self.clamp(value)
        if clamped is None:
            return self.default_for(raw)
        if clamped != value:
            report_once(self.env, raw, f"{self.env}={shown(raw)} is out of range; using {clamped:g}, the nearest bound")
        return clamped

    def number(self, raw: str) -> float:
        """``raw`` as this setting's kind of number; raises ValueError for anything else."""
        if not self.integer:
            return float(raw)
        try:
            return int(raw)
        except ValueError:
            # int() refuses a whole number of more than 4,300 digits (CPython's guard); it is beyond every bound
            if _WHOLE_NUMBER.fullmatch(raw):
                return -math.inf if raw.startswith("-") else math.inf
            raise

    def default_for(self, raw: str) -> float:
        """The default, in place of ``raw``, which is no number this setting can hold (told once unless unset)."""
        if raw:
            kind = "a whole number" if self.integer else "a finite number"
            report_once(self.env, raw, f"{self.env}={shown(raw)} is not {kind}; using the default, {self.default:g}")
        return self.default

    def clamp(self, value: float) -> float | None:
        """``value`` within the range, or None when no bound can hold it (NaN, or infinity with no maximum)."""
        if math.isnan(value):
            return None
        value = max(self.minimum, value)
        if self.maximum is not None:
            value = min(self.maximum, value)
        return value if math.isfinite(value) else None


def shown(raw: str, most: int = 40) -> str:
    """``raw`` as a log line shows it: quoted, and cut, with its length, when it is longer than ``most``."""
    return repr(raw) if len(raw) <= most else f"{raw[:most]!r}... ({len(raw)} characters)"


def report_once(env: str, raw: str, message: str) -> None:
    """Log ``message`` once per variable and value (a setting may be read on every call)."""
    if (env, raw) not in _REPORTED:
        _REPORTED.add((env, raw))
        log.warning(message)


SETTINGS = (
    Setting(RESPONSE_MAX_BYTES, 300_000, 1_024),
    Setting(CONCURRENCY, 4, 1, 25),
    Setting(CALL_TIMEOUT, 60.0, 0.001, 86_400, integer=False),
    Setting(BATCH_TIMEOUT, 300.0, 0.001, 86_400, integer=False),
    Setting(SHARE_READS, 1, 0, 1),
)
_BY_ENV = {setting.env: setting for setting in SETTINGS}


@dataclass(frozen=True)
class BatchSettings:
    response_max_bytes: int = 300_000
    concurrency: int = 4
    call_timeout: float = 60.0
    batch_timeout: float = 300.0
    share_identical_reads: bool = True  # identical reads of one batch share one backend call (0 turns it off)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BatchSettings:
        """The settings the environment holds now (read on every batch, so a change applies to the next)."""
        env = os.environ if environ is None else environ
        raw = tuple(env.get(setting.env) for setting in SETTINGS)
        known = _PARSED.get(raw)  # the same raw values parse the same: a tenth of a batch of 1's own cost
        if known is None:
            known = cls(
                response_max_bytes=int(_BY_ENV[RESPONSE_MAX_BYTES].read(env)),
                concurrency=int(_BY_ENV[CONCURRENCY].read(env)),
                call_timeout=_BY_ENV[CALL_TIMEOUT].read(env),
                batch_timeout=_BY_ENV[BATCH_TIMEOUT].read(env),
                share_identical_reads=bool(_BY_ENV[SHARE_READS].read(env)),
            )
            if len(_PARSED) >= 64:  # an environment that keeps changing keeps only its latest values
                _PARSED.clear()
            _PARSED[raw] = known
        return known


# Raw values of SETTINGS -> what they parse to.
_PARSED: dict[tuple[str | None, ...], BatchSettings] = {}


def router_mode(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get(ROUTER_MODE, "").strip().lower()


_ADOPTED = ContextVar("centralmcp_batch_adopted", default=False)


@contextmanager
def adopted_explicitly() -> Iterator[None]:
    """Within: a host asked for the batch by name, so minimal mode does not hold it back."""
    token = _ADOPTED.set(True)
    try:
        yield
    finally:
        _ADOPTED.reset(token)


def registers_in_minimal_mode() -> bool:
    return _ADOPTED.get()
