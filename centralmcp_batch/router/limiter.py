"""An async token bucket: callers are served first come, first served."""

from __future__ import annotations

import time

import anyio


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; ``acquire`` waits for one."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._queue = anyio.Lock()  # anyio's Lock wakes waiters in arrival order: the FIFO

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    async def acquire(self) -> None:
        async with self._queue:
            self._refill()
            if self._tokens < 1:
                await anyio.sleep((1 - self._tokens) / self.rate)
                self._refill()
            self._tokens -= 1
