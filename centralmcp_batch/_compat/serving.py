"""Running a server: over stdio, and as a streamable HTTP app that checks Host and Origin."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import anyio

from .sdk import SDK_2


async def run_stdio(server: Any, protocol_fds: tuple[int, int] | None = None) -> None:
    """Serve ``server`` over stdio: fds 0 and 1, or the ``(read, write)`` descriptors of ``protocol_fds``.

    Given its own descriptors, the transport reads and writes only them, whatever fds 0 and 1 and
    ``sys.stdout`` point at meanwhile (see ``router.serve.claim_stdio``). Both SDK lines' ``stdio_server``
    take the streams; the server then runs as their own ``run_stdio_async`` runs it.
    """
    if protocol_fds is None:
        await server.run_stdio_async()
        return
    from mcp.server.stdio import stdio_server

    read_fd, write_fd = protocol_fds
    # Never closed, as the SDKs never close sys.stdin: a worker thread may still be blocked reading it as the
    # process exits, holding the buffer's lock. closefd=False: the descriptors stay the caller's.
    reading = open(read_fd, "rb", closefd=False)  # noqa: SIM115 - see above
    writing = open(write_fd, "wb", closefd=False)  # noqa: SIM115 - see above
    stdin = anyio.wrap_file(io.TextIOWrapper(reading, encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(io.TextIOWrapper(writing, encoding="utf-8"))
    lowlevel = server._lowlevel_server if SDK_2 else server._mcp_server  # noqa: SLF001 - what run_stdio_async runs
    async with stdio_server(stdin, stdout) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


# What both SDK lines allow by default on a loopback address: DNS-rebinding protection on.
LOCAL_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCAL_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def transport_security(allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()) -> Any:
    """DNS-rebinding protection that accepts localhost and, besides, exactly the hosts and origins given.

    The SDKs compare ``allowed_hosts`` with the whole Host header, port included, and read a
    trailing ``:*`` as any port; the caller passes the patterns it means. They compare in the
    case given: the patterns are put in lower case here, as ``http_app`` puts the headers.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = list(dict.fromkeys(lower_ascii(host) for host in [*LOCAL_HOSTS, *allowed_hosts]))
    origins = list(dict.fromkeys(lower_ascii(origin) for origin in [*LOCAL_ORIGINS, *allowed_origins]))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


# Only A-Z: Unicode's lower() maps some other letters to ASCII ones (the Kelvin sign to k).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lower_ascii(text: str) -> str:
    return text.translate(_ASCII_LOWER)


def http_app(
    server: Any,
    *,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    stateless: bool = False,
    event_store: Any = None,
) -> Any:
    """The streamable HTTP ASGI app of ``server``, served at ``/mcp``, checking Host and Origin.

    ``stateless``: no session lives in the process, so any replica can answer any request.
    ``event_store``: the SDK's ``EventStore`` that keeps each stream's events, so that a client whose
    stream broke can resume it (its SSE events carry ids).
    """
    security = transport_security(allowed_hosts, allowed_origins)
    if SDK_2:
        return _host_and_origin_in_lower_case(
            server.streamable_http_app(transport_security=security, stateless_http=stateless, event_store=event_store)
        )
    server.settings.transport_security = security  # 1.x reads it from the settings made at construction
    server.settings.stateless_http = stateless
    if event_store is not None:  # 1.x takes it only at construction, where the caller gave none
        server._event_store = event_store  # noqa: SLF001 - the attribute streamable_http_app reads
    return _host_and_origin_in_lower_case(server.streamable_http_app())


_CASELESS_HEADERS = (b"host", b"origin")


def _host_and_origin_in_lower_case(app: Any) -> Any:
    """``app`` seeing the Host and Origin headers in lower case, as the SDK's check compares them.

    Host names and schemes are case-insensitive (RFC 3986), and what else these two headers hold,
    a port, has no case. ``bytes.lower()`` changes A-Z only.
    """

    async def lowered(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = [(key, value.lower() if key in _CASELESS_HEADERS else value) for key, value in scope["headers"]]
            scope = {**scope, "headers": headers}
        await app(scope, receive, send)

    return lowered
