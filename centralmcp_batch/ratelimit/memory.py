"""The in-process store: one process's buckets, and the local fallback of the shared stores."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from . import gcra
from .reservation import Reservation


class MemoryStore:
    """Buckets in this process only, on the monotonic clock."""

    url = "memory"

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, tuple[float, ...]]] = {}  # key -> (TAT, holes)

    async def reserve(
        self, key: str, interval: float, burst: int, count: int = 1, within: float = math.inf
    ) -> Reservation:
        return self.reserve_now(key, interval, burst, count, within)  # no other process shares it, nor its pace

    def reserve_now(
        self,
        key: str,
        interval: float,
        burst: int,
        count: int = 1,
        within: float = math.inf,
        not_before: float = 0.0,
    ) -> Reservation:
        """The same booking without awaiting: nothing here can block or fail.

        ``not_before`` (on the monotonic clock) is the earliest the slots may be, when another
        bucket has already put them later than now: the tokens count from then, as if they came then.
        """
        now = time.monotonic()
        arrival = max(now, not_before)
        tat, holes = self._buckets.get(key, (0.0, ()))
        booked = gcra.book(tat, holes, arrival, interval, burst, count, within - (arrival - now))
        self._buckets[key] = (booked.tat, booked.holes)
        late = arrival - now
        return Reservation(
            tuple(late + wait for wait in booked.waits),
            booked.positions,
            tuple(position - now for position in booked.positions),
            late + booked.next_wait,
        )

    async def give_back(self, key: str, interval: float, positions: Sequence[float]) -> None:
        self.give_back_now(key, interval, positions)

    def give_back_now(self, key: str, interval: float, positions: Sequence[float]) -> None:
        if key in self._buckets and positions:
            tat, holes = self._buckets[key]
            left = gcra.give_back(tat, holes, time.monotonic(), interval, positions)
            self._buckets[key] = (left.tat, left.holes)

    async def close(self) -> None:
        self._buckets.clear()
