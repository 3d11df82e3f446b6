"""GCRA by reservation: the pure arithmetic every store runs atomically on its own state.

The state of a bucket is its theoretical arrival time (TAT), when the bucket would be empty again
if nobody else came, and its holes: the positions of tokens that were booked and then given back
unused. Each token booked has a position on the bucket's timeline, one interval after the one
before; its slot, when the call may start, is ``burst`` intervals before its position (never
before the booking). A token started between its slot and its position keeps the account within
``rate × window + burst`` calls in any window, whoever else books around it.

A booking takes the holes still ahead first, then pushes the TAT one interval per token, and
stops at the first token whose slot is further off than the caller will wait: nobody books past
their own time limit. Giving tokens back makes holes; holes at the end of the timeline go back
into the TAT, so once every caller has gone the bucket is as if they had never booked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Holes kept at most per bucket: a hole dropped is only a token's worth of rate lost, never a call too many.
MAX_HOLES = 1_000


@dataclass(frozen=True)
class Booked:
    """What one booking came to: the bucket's new state and the tokens booked, in order."""

    tat: float
    holes: tuple[float, ...]
    positions: tuple[float, ...]  # each token's position on the bucket's timeline (the store's clock)
    waits: tuple[float, ...]  # seconds from now until each token's slot
    next_wait: float  # seconds from now until the slot the next token would get


def book(
    tat: float, holes: Iterable[float], now: float, interval: float, burst: int, count: int, within: float
) -> Booked:
    """Book up to ``count`` tokens whose slots come within ``within`` seconds of ``now``."""
    ahead = sorted(hole for hole in holes if hole > now)  # a hole whose position has passed is lost
    positions: list[float] = []
    waits: list[float] = []
    while len(positions) < count:
        position = ahead[0] if ahead else max(tat, now) + interval
        wait = max(0.0, position - burst * interval - now)
        if wait > within:
            break
        if ahead:
            ahead.pop(0)
        else:
            tat = position
        positions.append(position)
        waits.append(wait)
    following = ahead[0] if ahead else max(tat, now) + interval
    next_wait = max(0.0, following - burst * interval - now)
    return Booked(tat, tuple(ahead), tuple(positions), tuple(waits), next_wait)


def give_back(tat: float, holes: Iterable[float], now: float, interval: float, positions: Iterable[float]) -> Booked:
    """The bucket once the tokens at ``positions`` are given back unused (only those still ahead count)."""
    kept = sorted({hole for hole in (*holes, *positions) if hole > now})
    # The last token on the timeline is at the TAT: while it is a hole, the TAT steps back over it.
    # Positions are compared within half an interval: a store may keep them rounded.
    while kept and kept[-1] >= tat - interval / 2:
        kept.pop()
        tat -= interval
    return Booked(tat, tuple(kept[-MAX_HOLES:]), (), (), 0.0)


def stepped_back(seen: float | None, now: float) -> float:
    """How far a wall clock that reads ``now`` was stepped back since the bucket's last booking read ``seen``.

    A clock stepped back (NTP after a resume, an RTC kept in local time) would leave the TAT that far in
    the future, and every caller waiting that long: the stores move the TAT and the holes back by this
    much, so the slots still queued keep their distance from now. A clock that went forward needs
    nothing: the TAT is simply past.
    """
    return 0.0 if seen is None or now >= seen else seen - now
