"""The account-wide limiter: reservations in a shared store, a local bucket while it is down.

A store that fails (unreachable, locked, corrupt, unwritable) never stops a call: this
process paces itself with a local bucket at the configured rate, logs the outage once, tries
the store again every ``retry_seconds`` and logs when it has rejoined.

The local bucket sees every slot this process hands out, shared or not, so one process keeps
the configured rate and burst on its own across both switches.

Routers that share a bucket space its one timeline each by its own rate and burst; one that finds
another's numbers in the store says so once (the store tells it as it reserves: no extra round trip).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Protocol

import anyio
import anyio.lowlevel

from ..models import RateBooking
from .memory import MemoryStore
from .reservation import Pace, Reservation

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
STORE_TIMEOUT_SECONDS = 2.0  # a reservation that takes longer counts as an outage


class Store(Protocol):
    url: str

    async def reserve(self, key: str, interval: float, burst: int, count: int = 1, within: float = ...) -> Reservation:
        """Book up to ``count`` tokens whose slots come within ``within`` seconds, in one round trip."""

    async def give_back(self, key: str, interval: float, positions: Sequence[float]) -> None:
        """Give back unused the tokens booked at ``positions``, in one round trip."""

    async def close(self) -> None: ...


class RateLimiter:
    """``rate`` tokens a second, ``burst`` at most at once, for every process sharing ``store`` and ``key``."""

    def __init__(
        self, store: Store, rate: float, burst: int, key: str = "central", retry_seconds: float = RETRY_SECONDS
    ) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError(f"a rate limiter needs rate > 0 and burst >= 1, not rate={rate!r}, burst={burst!r}")
        self.store, self.rate, self.burst, self.key = store, rate, burst, key
        self.interval = 1.0 / rate
        self.retry_seconds = retry_seconds
        self._local = MemoryStore()  # this process's own slots, on the monotonic clock its waits use
        # A memory store can neither block nor fail, so it needs no queue, time limit or fallback:
        # its booking is one step of the event loop, atomic and in call order by itself.
        self._instant = store if isinstance(store, MemoryStore) else None
        self._queue = anyio.Lock()  # this process's bookings in arrival order (anyio's Lock is FIFO)
        self._outage_since: float | None = None
        self._next_try = 0.0
        self._joined = False  # a booking of this limiter has landed in the store
        self._paces_told: set[Pace] = set()

    @property
    def in_outage(self) -> bool:
        return self._outage_since is not None

    async def acquire(self, within: float = math.inf) -> bool:
        """Book one token and wait for its slot; False, at once, when its slot is further off than ``within``.

        Cancelled while it waits, the token is given back.
        """
        booking = await self.reserve(1, within)
        if not booking.waits:
            return False
        try:
            await anyio.sleep(booking.waits[0])
        except BaseException:
            await _give_back_while_cancelled(booking, [0])
            raise
        return True

    async def reserve(self, count: int, within: float = math.inf) -> RateBooking:
        """Book up to ``count`` tokens whose slots come within ``within`` seconds, in one store round trip.

        Waits for nothing but the store. The waits count from when this returns: the caller sleeps each
        token's wait and gives back the tokens it does not use (``RateBooking.give_back``). A booking whose
        caller is cancelled during the round trip is given back whole: it may have landed in the store.
        """
        if self._instant is not None:
            return self._booking(self._instant.reserve_now(self.key, self.interval, self.burst, count, within))
        async with self._queue:
            with anyio.CancelScope(shield=True):  # bounded by the store's time limit
                booking = await self._reserve_shared(count, within)
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            await _give_back_while_cancelled(booking, range(len(booking.waits)))
            raise
        return booking

    async def _reserve_shared(self, count: int, within: float) -> RateBooking:
        asked = time.monotonic()
        shared = await self._reserve_in_store(count, within)
        # Under the store, this process's slots are a part of the account's, so its own bucket never
        # holds one back (bar a round trip's jitter); it only remembers them. A fresh local bucket at
        # an outage would grant a burst on top of the slots already reserved in the store, and a store
        # that rejoins, drained meanwhile, would grant again the time already granted locally.
        if shared is None:
            return self._booking(self._local.reserve_now(self.key, self.interval, self.burst, count, within))
        # The waits count from when the store read its clock: told from now, less the time since. On this
        # machine's wall clock (SQLite) that is known; on another's (Redis) it is at most the round trip, and
        # counted from the ask: a slow answer (this process's loop held meanwhile) never puts a slot later
        # than the store did, where its call would crowd whoever booked after it.
        if shared.read_at is not None:
            shared = shared.since(max(0.0, time.time() - shared.read_at))
        else:
            shared = shared.since(time.monotonic() - asked)
        now = time.monotonic()
        local = [
            self._local.reserve_now(self.key, self.interval, self.burst, not_before=now + wait) for wait in shared.waits
        ]
        return self._booking(shared, local)

    async def _reserve_in_store(self, count: int, within: float) -> Reservation | None:
        """The store's booking; None while it is down (the local bucket paces)."""
        if self._outage_since is not None and time.monotonic() < self._next_try:
            return None
        try:
            with anyio.fail_after(STORE_TIMEOUT_SECONDS):
                reservation = await self.store.reserve(self.key, self.interval, self.burst, count, within)
        except Exception as exc:  # noqa: BLE001 - any failure of the store: pace locally, never fail the call
            self._store_failed(exc)
            return None
        self._store_answered()
        # Each booking leaves its pace in the store when it differs, so another pace found after this
        # limiter's first booking was left since by a router that shares the timeline now. The one found
        # by the first is not told: it may be a stopped router's (this client's, before its settings changed).
        if reservation.other_pace is not None and self._joined:
            self._tell_other_pace(reservation.other_pace)
        self._joined = True
        return reservation

    def _booking(self, booked: Reservation, local: Sequence[Reservation] = ()) -> RateBooking:
        """``booked`` as the hook contract tells it; ``local``: each token's mirror in this process's bucket."""
        if local:  # booked in the store and mirrored here, where a slot may come later (a round trip's jitter)
            waits = tuple(max(wait, mirror.wait) for wait, mirror in zip(booked.waits, local, strict=True))
            shared, mine = booked.positions, tuple(mirror.positions[0] for mirror in local)
        else:  # booked in this process alone: the memory store, or the local bucket while the store is down
            waits, shared, mine = booked.waits, (), booked.positions

        async def give_back(positions: Sequence[int]) -> None:
            chosen = [position for position in positions if 0 <= position < len(waits)]
            await self._give_back([shared[i] for i in chosen] if shared else [], [mine[i] for i in chosen])

        return RateBooking(waits, booked.starts_by, booked.next_wait, give_back)

    async def _give_back(self, shared: Sequence[float], local: Sequence[float]) -> None:
        if self._instant is not None:
            self._instant.give_back_now(self.key, self.interval, local)
            return
        self._local.give_back_now(self.key, self.interval, local)
        if not shared:
            return
        try:
            with anyio.fail_after(STORE_TIMEOUT_SECONDS):
                await self.store.give_back(self.key, self.interval, shared)
        except Exception:  # noqa: BLE001 - tokens not given back are only rate lost until their slots pass
            log.debug("rate store %s: tokens could not be given back", self.store.url, exc_info=True)

    def _tell_other_pace(self, other: Pace) -> None:
        if other in self._paces_told:
            return
        self._paces_told.add(other)
        log.warning(
            "rate key %r in %s: another router reserves on it at %g/s with a burst of %d, this one at %g/s with a "
            "burst of %d; each spaces the shared timeline by its own numbers, so the account gets a mix of both. "
            "Set the same CENTRALMCP_ROUTER_RATE_PER_SECOND and CENTRALMCP_ROUTER_RATE_BURST for every router on "
            "this key, or give this one a CENTRALMCP_ROUTER_RATE_KEY of its own",
            self.key,
            self.store.url,
            other.rate,
            other.burst,
            self.rate,
            self.burst,
        )

    def _store_failed(self, exc: Exception) -> None:
        self._next_try = time.monotonic() + self.retry_seconds
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            # The time limit's TimeoutError has no message of its own
            timed_out = f"no answer within {STORE_TIMEOUT_SECONDS:g} s" if isinstance(exc, TimeoutError) else ""
            reason = str(exc) or timed_out or type(exc).__name__
            log.warning(
                "rate store %s failed: %s; pacing this process locally at %g/s, retrying every %g s",
                self.store.url,
                reason,
                self.rate,
                self.retry_seconds,
            )

    def _store_answered(self) -> None:
        if self._outage_since is not None:
            log.warning(
                "rate store %s is back after %.1f s; the rate is shared again",
                self.store.url,
                time.monotonic() - self._outage_since,
            )
            self._outage_since = None

    async def close(self) -> None:
        await self.store.close()


async def _give_back_while_cancelled(booking: RateBooking, positions: Sequence[int]) -> None:
    """Give back booked slots for a caller being cancelled: shielded, and within the store's time limit."""
    assert booking.give_back is not None  # this limiter's bookings can always be given back
    with anyio.CancelScope(shield=True), anyio.move_on_after(STORE_TIMEOUT_SECONDS):
        await booking.give_back(positions)
