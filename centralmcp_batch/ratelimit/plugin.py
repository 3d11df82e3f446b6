"""The limiter as a host plugin: ``hosting.install(server, host_hooks, RateLimitPlugin.from_env())``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..hookspecs import hookimpl
from ..models import RateBooking, ToolRef
from .config import limiter_from_env
from .limiter import RateLimiter


class RateLimitPlugin:
    """One token of the account-wide bucket per backend call, a batch's booked in one round trip."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RateLimitPlugin:
        return cls(limiter_from_env(environ))

    @hookimpl
    async def centralmcp_reserve_rate_tokens(self, tools: Sequence[ToolRef], within: float) -> RateBooking:
        return await self.limiter.reserve(len(tools), within)

    @hookimpl
    async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
        # For a caller of the hook that books one call at a time: the batch books through the hook above.
        await self.limiter.acquire()
