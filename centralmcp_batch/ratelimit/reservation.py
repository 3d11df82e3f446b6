"""What a store answers for a booking: each token's wait and position, and another router's pace when it found one."""

from __future__ import annotations

from typing import NamedTuple


class Pace(NamedTuple):
    """The numbers a router spaces a bucket's timeline by: seconds between tokens, and tokens at once."""

    interval: float
    burst: int

    @property
    def rate(self) -> float:
        return 1.0 / self.interval


class Reservation(NamedTuple):
    waits: tuple[float, ...]  # seconds until each booked token's slot, in order (fewer than asked: the rest too late)
    positions: tuple[float, ...]  # each token's position on the store's clock: what giving it back names
    starts_by: tuple[float, ...]  # seconds until each token's position, by which its call must have started
    next_wait: float  # seconds until the slot the next token would get
    # The pace the store held for the bucket when it was not this reservation's own: the pace of the last
    # router that reserved with other numbers (each reservation leaves its pace there when it differs).
    other_pace: Pace | None = None
    # When the store read its clock, where that clock is this process's wall clock (``time.time()``: the
    # SQLite store); None where it is not (a Redis server's).
    read_at: float | None = None

    def since(self, elapsed: float) -> Reservation:
        """The same booking told ``elapsed`` seconds after the store read its clock."""
        return self._replace(
            waits=tuple(max(0.0, wait - elapsed) for wait in self.waits),
            starts_by=tuple(deadline - elapsed for deadline in self.starts_by),
            next_wait=max(0.0, self.next_wait - elapsed),
        )

    @property
    def wait(self) -> float:
        """The first token's wait (a booking of one)."""
        return self.waits[0] if self.waits else self.next_wait
