"""The store across machines: one Redis, one atomic server-side script per reservation.

The script reads the clock with ``TIME`` on the server, so machines whose clocks disagree
still share one timeline; the caller only sleeps the wait it is told.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from . import gcra
from .errors import StoreUnavailable
from .reservation import Pace, Reservation

KEY_PREFIX = "centralmcp:rate:"
CLOCK_PREFIX = "centralmcp:rate-clock:"  # not under KEY_PREFIX: no bucket name can be a clock's
PACE_PREFIX = "centralmcp:rate-pace:"
HOLES_PREFIX = "centralmcp:rate-holes:"
TIMEOUT_SECONDS = 0.5  # a Redis slower than this is treated as down; the local bucket paces meanwhile
NO_LIMIT = 1e18  # ``within`` for a caller that waits as long as it takes (Lua has no infinity to parse)

# The state both scripts read, as ``gcra`` and the SQLite store keep it: KEYS[1] the bucket's TAT, KEYS[2] the
# server's clock at its last booking, KEYS[3] the holes ("P1 P2 ..."), each a key of its own, so that routers
# of earlier versions, which read only the TAT and the clock, share the bucket unchanged. A clock that reads
# earlier than the last booking was stepped back, and the TAT and holes move back with it. Numbers go back
# and forth as strings with six decimals (a Lua number comes back truncated to an integer). The keys expire
# once the TAT is long past.
_STATE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
local seen = tonumber(redis.call('GET', KEYS[2]))
local step = 0
if seen and now < seen then step = seen - now end
tat = tat - step
local holes = {}
for hole in string.gmatch(redis.call('GET', KEYS[3]) or '', '%S+') do
  local position = tonumber(hole) - step
  if position > now then table.insert(holes, position) end
end
"""
_WRITE = """
table.sort(holes)
while #holes > MAX_HOLES do table.remove(holes, 1) end
local expiry = math.ceil((math.max(tat, now) - now) * 1000) + 60000
redis.call('SET', KEYS[1], string.format('%.6f', tat), 'PX', expiry)
redis.call('SET', KEYS[2], string.format('%.6f', now), 'PX', expiry)
if #holes > 0 then
  local written = {}
  for i, position in ipairs(holes) do written[i] = string.format('%.6f', position) end
  redis.call('SET', KEYS[3], table.concat(written, ' '), 'PX', expiry)
else
  redis.call('DEL', KEYS[3])
end
"""
# Book up to ARGV[3] tokens whose slots come within ARGV[4] seconds (ARGV[2] the burst), as ``gcra.book``;
# KEYS[4] the pace it was last booked with, "INTERVAL BURST", set only when a booking's differs. Returns one
# string, "NEXT_WAIT;WAIT:POSITION:STARTS_BY ...;PACE FOUND" (one string: a reply of several costs redis-py's
# parser more than the script's whole work).
BOOK_SCRIPT = (
    _STATE
    + """
local burst, count, within = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local booked = {}
while #booked < count do
  local position = holes[1] or (math.max(tat, now) + interval)
  local wait = math.max(0, position - burst * interval - now)
  if wait > within then break end
  if holes[1] then table.remove(holes, 1) else tat = position end
  table.insert(booked, string.format('%.6f:%.6f:%.6f', wait, position, position - now))
end
local following = holes[1] or (math.max(tat, now) + interval)
local next_wait = math.max(0, following - burst * interval - now)
"""
    + _WRITE
    + """
local pace = ARGV[1] .. ' ' .. ARGV[2]
local found = redis.call('GET', KEYS[4])
if found ~= pace then redis.call('SET', KEYS[4], pace, 'PX', expiry) end
if found == pace then found = '' end
return string.format('%.6f', next_wait) .. ';' .. table.concat(booked, ' ') .. ';' .. (found or '')
"""
).replace("MAX_HOLES", str(gcra.MAX_HOLES))
# Give back the tokens at positions ARGV[2], ARGV[3], ... as ``gcra.give_back``: holes at the end of the
# timeline go back into the TAT.
GIVE_BACK_SCRIPT = (
    _STATE
    + """
for i = 2, #ARGV do
  local position = tonumber(ARGV[i]) - step
  if position > now then table.insert(holes, position) end
end
table.sort(holes)
while #holes > 0 and holes[#holes] >= tat - interval / 2 do
  table.remove(holes)
  tat = tat - interval
end
"""
    + _WRITE
    + "\nreturn 1\n"
).replace("MAX_HOLES", str(gcra.MAX_HOLES))


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
        self._book = self._redis.register_script(BOOK_SCRIPT)  # EVALSHA, reloaded after a restart
        self._give_back = self._redis.register_script(GIVE_BACK_SCRIPT)

    @staticmethod
    def _keys(key: str) -> list[str]:
        return [KEY_PREFIX + key, CLOCK_PREFIX + key, HOLES_PREFIX + key]

    async def reserve(
        self, key: str, interval: float, burst: int, count: int = 1, within: float = math.inf
    ) -> Reservation:
        answer = await self._run(
            self._book, [*self._keys(key), PACE_PREFIX + key], [repr(interval), burst, count, min(within, NO_LIMIT)]
        )
        next_wait, booked, found = answer.split(";")
        tokens = [tuple(map(float, token.split(":"))) for token in booked.split()]
        return Reservation(
            tuple(token[0] for token in tokens),
            tuple(token[1] for token in tokens),
            tuple(token[2] for token in tokens),
            float(next_wait),
            _pace(found) if found else None,
        )

    async def give_back(self, key: str, interval: float, positions: Sequence[float]) -> None:
        if positions:
            await self._run(self._give_back, self._keys(key), [repr(interval), *map(repr, positions)])

    async def _run(self, script: Any, keys: list[str], args: list[Any]) -> str:
        from redis.exceptions import RedisError

        try:
            answer = await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"Redis at {self.url} is unreachable ({type(exc).__name__}: {exc})") from exc
        return answer.decode() if isinstance(answer, bytes) else str(answer)

    async def close(self) -> None:
        await self._redis.aclose()
