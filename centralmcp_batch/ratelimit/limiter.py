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
import time
from typing import Protocol

import anyio

from .memory import MemoryStore
from .reservation import Pace, Reservation

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
STORE_TIMEOUT_SECONDS = 2.0  # a reservation that takes longer counts as an outage


class Store(Protocol):
    url: str

    async def reserve(self, key: str, interval: float, burst: int) -> Reservation: ...

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
        # its reservation is one step of the event loop, atomic and in call order by itself.
        self._instant = store if isinstance(store, MemoryStore) else None
        self._queue = anyio.Lock()  # this process's reservations in arrival order (anyio's Lock is FIFO)
        self._outage_since: float | None = None
        self._next_try = 0.0
        self._joined = False  # a reservation of this limiter has landed in the store
        self._paces_told: set[Pace] = set()

    @property
    def in_outage(self) -> bool:
        return self._outage_since is not None

    async def acquire(self) -> None:
        """Reserve the next slot, then wait for it (outside the queue, so others reserve meanwhile)."""
        if self._instant is not None:
            wait = self._instant.reserve_now(self.key, self.interval, self.burst)
        else:
            async with self._queue:
                wait = await self._reserve()
        if wait > 0:
            await anyio.sleep(wait)

    async def _reserve(self) -> float:
        # Under the store, this process's slots are a part of the account's, so its own bucket never
        # holds one back (bar a round trip's jitter); it only remembers them. A fresh local bucket at
        # an outage would grant a burst on top of the slots already reserved in the store, and a store
        # that rejoins, drained meanwhile, would grant again the time already granted locally.
        shared_wait = await self._reserve_in_store()
        return self._local.reserve_now(self.key, self.interval, self.burst, not_before=time.monotonic() + shared_wait)

    async def _reserve_in_store(self) -> float:
        """Seconds until the store's slot for the next token; 0 while it is down (the local bucket paces)."""
        if self._outage_since is not None and time.monotonic() < self._next_try:
            return 0.0
        try:
            with anyio.fail_after(STORE_TIMEOUT_SECONDS):
                reservation = await self.store.reserve(self.key, self.interval, self.burst)
        except Exception as exc:  # noqa: BLE001 - any failure of the store: pace locally, never fail the call
            self._store_failed(exc)
            return 0.0
        self._store_answered()
        # Each reservation leaves its pace in the store when it differs, so another pace found after this
        # limiter's first reservation was left since by a router that shares the timeline now. The one found
        # by the first is not told: it may be a stopped router's (this client's, before its settings changed).
        if reservation.other_pace is not None and self._joined:
            self._tell_other_pace(reservation.other_pace)
        self._joined = True
        return reservation.wait

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
