"""Continuation cursors: HMAC-signed, bound to the tool and its canonical arguments, expiring."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidCursor

MAX_CURSOR_CHARS = 512


def canonical_arguments(arguments: Mapping[str, Any]) -> bytes:
    """Arguments as the cursor binds them: nulls dropped, keys sorted, compact."""
    kept = {key: value for key, value in arguments.items() if value is not None}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str).encode()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorSigner:
    """Issues and verifies cursors; replicas sharing ``key`` accept each other's cursors."""

    def __init__(self, key: bytes | None, ttl_seconds: int) -> None:
        self.key = key or secrets.token_bytes(32)
        self.ttl = ttl_seconds

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest()[:16])

    def issue(self, tool: str, arguments: Mapping[str, Any], offset: int) -> str:
        claims = {
            "t": _digest(tool.encode()),
            "a": _digest(canonical_arguments(arguments)),
            "o": offset,
            "e": int(time.time()) + self.ttl,
        }
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{body}.{self._sign(body)}"

    def verify(self, tool: str, arguments: Mapping[str, Any], cursor: str) -> int:
        """The offset the cursor resumes at; InvalidCursor (never echoing the cursor) otherwise."""
        if len(cursor) > MAX_CURSOR_CHARS:
            raise InvalidCursor(f"cursor is longer than {MAX_CURSOR_CHARS} characters")
        body, _, signature = cursor.partition(".")
        # Issued cursors are ASCII, and compare_digest raises TypeError on any other str.
        if not cursor.isascii() or not body or not signature or not hmac.compare_digest(signature, self._sign(body)):
            raise InvalidCursor("cursor is malformed or its signature does not match")
        claims = json.loads(_unb64(body))
        if claims.get("t") != _digest(tool.encode()):
            raise InvalidCursor("cursor was issued for another tool")
        if claims.get("a") != _digest(canonical_arguments(arguments)):
            raise InvalidCursor("cursor was issued for other arguments")
        if claims.get("e", 0) < time.time():
            raise InvalidCursor("cursor has expired: repeat the call without it")
        return int(claims["o"])
