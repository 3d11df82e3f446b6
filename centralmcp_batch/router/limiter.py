"""The reference router's limiter: the account-wide one, from the environment.

``TokenBucket`` is the same limiter over this process's memory, for a router (or a test) that
wants one process's bucket whatever the environment says.
"""

from __future__ import annotations

from ..ratelimit import MemoryStore, RateLimiter, limiter_from_env

__all__ = ["RateLimiter", "TokenBucket", "limiter_from_env"]


class TokenBucket(RateLimiter):
    """``rate`` tokens a second, at most ``burst`` at once, in this process only."""

    def __init__(self, rate: float, burst: int) -> None:
        super().__init__(MemoryStore(), rate, burst)
