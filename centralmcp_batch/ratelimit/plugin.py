"""The limiter as a host plugin: ``hosting.install(server, host_hooks, RateLimitPlugin.from_env())``."""

from __future__ import annotations

from collections.abc import Mapping

from ..hookspecs import hookimpl
from ..models import ToolRef
from .config import limiter_from_env
from .limiter import RateLimiter


class RateLimitPlugin:
    """One token of the account-wide bucket per backend call."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RateLimitPlugin:
        return cls(limiter_from_env(environ))

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        await self.limiter.acquire()
