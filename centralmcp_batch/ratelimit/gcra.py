"""GCRA by reservation: the pure arithmetic every store runs atomically on its own state.

The state of a bucket is one number, its theoretical arrival time (TAT): when the bucket
would be empty again if nobody else came. A reservation pushes it one interval further and
says how long the caller waits for its slot, so callers queue in the order their reservations
land, with no polling and one store round trip per token.
"""

from __future__ import annotations


def reserve(tat: float, now: float, interval: float, burst: int) -> tuple[float, float]:
    """(the new TAT, seconds until this token's slot) for a bucket whose TAT is ``tat``.

    ``burst`` tokens may be taken at once after an idle spell; after that one every ``interval``.
    """
    new_tat = max(tat, now) + interval
    return new_tat, max(0.0, new_tat - burst * interval - now)


def rebase(tat: float, seen: float | None, now: float) -> float:
    """``tat`` on a wall clock that reads ``now`` where the bucket's last reservation read ``seen``.

    A clock stepped back (NTP after a resume, an RTC kept in local time) would leave the TAT that far in
    the future, and every caller waiting that long; it moves back with the clock, so the slots still
    queued keep their distance from now. A clock that went forward needs nothing: the TAT is simply past.
    """
    if seen is None or now >= seen:
        return tat
    return tat - (seen - now)
