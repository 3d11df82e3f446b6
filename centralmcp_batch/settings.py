"""The batch's environment settings, read on every call so an operator's change applies at once.

An invalid or out-of-range value means the default: a typo must never widen a bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional

RESPONSE_MAX_BYTES = "CENTRALMCP_ROUTER_BATCH_RESPONSE_MAX_BYTES"
CONCURRENCY = "CENTRALMCP_ROUTER_BATCH_CONCURRENCY"
CALL_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS"
BATCH_TIMEOUT = "CENTRALMCP_ROUTER_BATCH_TIMEOUT_SECONDS"
ROUTER_MODE = "CENTRALMCP_ROUTER_MODE"


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default and the inclusive range it accepts."""

    env: str
    default: float
    minimum: float
    maximum: Optional[float] = None
    integer: bool = True

    def read(self, environ: Mapping[str, str]) -> float:
        raw = environ.get(self.env, "").strip()
        try:
            value = int(raw) if self.integer else float(raw)
        except ValueError:
            return self.default
        if not math.isfinite(value) or value < self.minimum:
            return self.default
        if self.maximum is not None and value > self.maximum:
            return self.default
        return value


SETTINGS = (
    Setting(RESPONSE_MAX_BYTES, 300_000, 1_024),
    Setting(CONCURRENCY, 4, 1, 25),
    Setting(CALL_TIMEOUT, 60.0, 0.001, 86_400, integer=False),
    Setting(BATCH_TIMEOUT, 300.0, 0.001, 86_400, integer=False),
)
_BY_ENV = {setting.env: setting for setting in SETTINGS}


@dataclass(frozen=True)
class BatchSettings:
    response_max_bytes: int = 300_000
    concurrency: int = 4
    call_timeout: float = 60.0
    batch_timeout: float = 300.0

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> BatchSettings:
        env = os.environ if environ is None else environ
        return cls(
            response_max_bytes=int(_BY_ENV[RESPONSE_MAX_BYTES].read(env)),
            concurrency=int(_BY_ENV[CONCURRENCY].read(env)),
            call_timeout=_BY_ENV[CALL_TIMEOUT].read(env),
            batch_timeout=_BY_ENV[BATCH_TIMEOUT].read(env),
        )


def router_mode(environ: Optional[Mapping[str, str]] = None) -> str:
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
