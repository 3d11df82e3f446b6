"""The store across machines: one Redis, one atomic server-side script per reservation.

The script reads the clock with ``TIME`` on the server, so machines whose clocks disagree
still share one timeline; the caller only sleeps the wait it is told.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .errors import StoreUnavailable
from .reservation import Pace, Reservation

KEY_PREFIX = "centralmcp:rate:"
CLOCK_PREFIX = "centralmcp:rate-clock:"  # not under KEY_PREFIX: no bucket name can be a clock's
PACE_PREFIX = "centralmcp:rate-pace:"
TIMEOUT_SECONDS = 0.5  # a Redis slower than this is treated as down; the local bucket paces meanwhile

# KEYS[1] the bucket's TAT, KEYS[2] the server's clock at its last reservation (a key of its own, so that
# routers of earlier versions share the bucket unchanged), KEYS[3] the pace it was last reserved with,
# "INTERVAL BURST", set only when a reservation's differs (a key of its own too); ARGV[1] the interval,
# ARGV[2] the burst. A clock that reads earlier than the last reservation was stepped back, and the TAT
# moves back with it, as ``gcra.rebase`` does. Returns the wait as a string (a Lua number would come back
# truncated to an integer), followed by the pace found when it was another's: one string, as a reply of
# two costs redis-py's parser more than the script's whole extra work. The keys expire once the TAT is long past.
RESERVE_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local pace = ARGV[1] .. ' ' .. ARGV[2]
local found = redis.call('GET', KEYS[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local seen = tonumber(redis.call('GET', KEYS[2]))
if seen and now < seen then tat = tat - (seen - now) end
if tat < now then tat = now end
tat = tat + interval
local expiry = math.ceil((tat - now) * 1000) + 60000
redis.call('SET', KEYS[1], string.format('%.6f', tat), 'PX', expiry)
redis.call('SET', KEYS[2], string.format('%.6f', now), 'PX', expiry)
if found ~= pace then redis.call('SET', KEYS[3], pace, 'PX', expiry) end
local wait = tat - burst * interval - now
if wait < 0 then wait = 0 end
if found and found ~= pace then return string.format('%.6f', wait) .. ' ' .. found end
return string.format('%.6f', wait)
"""


def without_password(url: str) -> str:
    """``url`` as logs and errors show it: a password in it (``redis://:PASSWORD@HOST``, or redis-py's
    ``?password=PASSWORD``) as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not even a URL (an unclosed IPv6 bracket): only its scheme is shown
        return url.split("://", 1)[0] + "://***"
    if parts.password is None and "password=" not in parts.query.lower():
        return url  # nothing to hide; a rebuilt URL would drop an empty host's slashes (redis:///0 as redis:/0)
    if parts.password is not None:
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}")
    if "password=" in parts.query.lower():
        query = [(key, "***" if key.lower() == "password" else value) for key, value in parse_qsl(parts.query, True)]
        parts = parts._replace(query=urlencode(query, safe="*"))
    return parts.geturl()


def _client(url: str) -> Any:
    try:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry  # the asyncio client's own: redis 8 warns at a sync one
        from redis.backoff import NoBackoff
    except ImportError:
        raise ValueError(
            f"the rate store {without_password(url)!r} needs the redis extra: pip install 'centralmcp-batch[redis]'"
        ) from None
    # No retries of its own: a failed call falls back at once and the limiter decides when to try again.
    return Redis.from_url(
        url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS, retry=Retry(NoBackoff(), 0)
    )


def _pace(written: bytes | str) -> Pace | None:
    """The pace "INTERVAL BURST" as the script keeps it; None for anything else (a key written by hand)."""
    try:
        interval, burst = written.split()
        return Pace(float(interval), int(burst))
    except ValueError:
        return None


class RedisStore:
    """Buckets in the Redis at ``url`` (``redis://HOST:PORT/DB``), keyed ``centralmcp:rate:KEY``."""

    def __init__(self, url: str) -> None:
        self.url = without_password(url)  # what logs and errors name: the password stays in the client only
        self._redis = _client(url)
        self._script = self._redis.register_script(RESERVE_SCRIPT)  # EVALSHA, reloaded after a restart

    async def reserve(self, key: str, interval: float, burst: int) -> Reservation:
        from redis.exceptions import RedisError

        try:
            answer = await self._script(
                keys=[KEY_PREFIX + key, CLOCK_PREFIX + key, PACE_PREFIX + key], args=[repr(interval), burst]
            )
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis at {self.url} is unreachable ({type(exc).__name__}: {exc})") from exc
        wait, *found = answer.split(maxsplit=1)
        return Reservation(float(wait), _pace(found[0]) if found else None)

    async def close(self) -> None:
        await self._redis.aclose()
