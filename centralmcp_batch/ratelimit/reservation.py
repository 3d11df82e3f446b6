"""What a store answers for one token: the wait for its slot, and another router's pace when it found one."""

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
    wait: float  # seconds until the token's slot
    # The pace the store held for the bucket when it was not this reservation's own: the pace of the last
    # router that reserved with other numbers (each reservation leaves its pace there when it differs).
    other_pace: Pace | None = None
