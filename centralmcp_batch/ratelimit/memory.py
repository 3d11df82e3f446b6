"""The in-process store: one process's buckets, and the local fallback of the shared stores."""

from __future__ import annotations

import time

from . import gcra
from .reservation import Reservation


class MemoryStore:
    """Buckets in this process only, on the monotonic clock."""

    url = "memory"

    def __init__(self) -> None:
        self._tats: dict[str, float] = {}

    async def reserve(self, key: str, interval: float, burst: int) -> Reservation:
        return Reservation(self.reserve_now(key, interval, burst))  # no other process shares it, nor its pace

    def reserve_now(self, key: str, interval: float, burst: int, not_before: float = 0.0) -> float:
        """The same reservation without awaiting: nothing here can block or fail.

        ``not_before`` (on the monotonic clock) is the earliest the slot may be, when another
        bucket has already put it later than now: the token counts from then, as if it came then.
        """
        now = time.monotonic()
        arrival = max(now, not_before)
        self._tats[key], wait = gcra.reserve(self._tats.get(key, 0.0), arrival, interval, burst)
        return arrival - now + wait

    async def close(self) -> None:
        self._tats.clear()
