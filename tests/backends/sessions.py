"""A stateful streamable HTTP backend: it keeps each client's MCP session in memory, so a restart loses them.

Run as a script (``python tests/backends/sessions.py PORT``). It speaks only the protocol versions that
open a session, as SDK 1.x servers and most others do: a request of the sessionless 2026 protocol is
refused, so an SDK 2.x client falls back to a session with it too. In its environment:
``SESSIONS_SEEN`` names a file to which each JSON-RPC method received is appended (and ``resume`` for each
request to resume a stream), and ``SESSIONS_CALLS`` one to which each call of ``whoami`` appends its tag as
it runs (the calls that reached the tool), and each call of another tool its name. ``hang`` never answers:
its cancellation never reaches it. ``relay`` closes the stream its answer would come on, then answers (with
an event store, on the stream the client resumes); ``hang_resumed`` closes it, then never answers.
``SESSIONS_REFUSE_CALLS=1`` answers every ``tools/call`` as the SDK answers a session it does not know
(HTTP 404), ``SESSIONS_FAIL_CALLS=1`` answers each with HTTP 500 and no body, ``SESSIONS_SLOW_INITIALIZE=N``
answers each ``initialize`` N seconds late, and
``SESSIONS_DEAF_TO_CANCELS=1`` accepts each ``notifications/cancelled`` and drops it, as a server whose worker
is stuck would never act on it (an SDK 1.x server answers a request it is told to cancel even while its tool
is stuck; 2.x ends the answer's stream only once the tool has ended). ``SESSIONS_EVENT_STORE=1`` keeps every
stream's events in memory (``EventLog``), so the SSE events of an answer carry ids and a client whose answer's
stream broke can ask for the rest (``Last-Event-ID``). ``SESSIONS_REFUSE_RESUMES=1`` answers each such request
HTTP 404, as an instance behind a load balancer that does not hold the session would.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
# What both SDK lines' session managers answer a request for a session they do not hold.
UNKNOWN_SESSION = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Session not found"}}
SESSIONLESS = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Unsupported protocol"}}


def sessions_server() -> Any:
    server = _compat.new_server("sessions")

    def whoami(tag: str = "") -> dict[str, Any]:
        _append("SESSIONS_CALLS", tag)
        return {"pid": os.getpid(), "tag": tag}

    async def pause(seconds: float) -> dict[str, Any]:
        _append("SESSIONS_CALLS", "pause")
        await anyio.sleep(seconds)
        return {"paused": seconds}

    async def hang() -> dict[str, Any]:
        _append("SESSIONS_CALLS", "hang")
        await _stuck()
        return {}

    async def relay(ctx: _compat.Context) -> dict[str, Any]:
        _append("SESSIONS_CALLS", "relay")
        await ctx.close_sse_stream()  # the client resumes the stream for the answer (with an event store)
        await anyio.sleep(0.2)
        return {"relayed": True}

    async def hang_resumed(ctx: _compat.Context) -> dict[str, Any]:
        _append("SESSIONS_CALLS", "hang_resumed")
        await ctx.close_sse_stream()
        await _stuck()
        return {}

    _compat.add_tool(server, whoami, name="whoami", description="which process answers", annotations=READ)
    _compat.add_tool(server, relay, name="relay", description="answers on a stream resumed", annotations=READ)
    _compat.add_tool(server, hang_resumed, name="hang_resumed", description="never answers", annotations=READ)
    _compat.add_tool(server, pause, name="pause", description="answers after a while", annotations=READ)
    _compat.add_tool(server, hang, name="hang", description="never answers", annotations=READ)
    return server


class EventLog(EventStore):
    """Each stream's events, in memory and in order, by an id that counts them (the process's own, as the
    SDK's example store keeps them; nothing is ever dropped: the backend lives for one test)."""

    def __init__(self) -> None:
        self._streams: dict[str, list[tuple[str, Any]]] = {}
        self._stream_of: dict[str, str] = {}

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(len(self._stream_of) + 1)
        self._streams.setdefault(stream_id, []).append((event_id, message))
        self._stream_of[event_id] = stream_id
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream_id = self._stream_of.get(last_event_id)
        if stream_id is None:
            return None
        events = self._streams[stream_id]
        after = [event_id for event_id, _ in events].index(last_event_id) + 1
        for event_id, message in events[after:]:
            if message is not None:  # a priming event carries no message
                await send_callback(EventMessage(message, event_id))
        return stream_id


async def _stuck() -> None:
    with anyio.CancelScope(shield=True):  # a stuck worker: the server's cancellation does not reach it
        await anyio.sleep_forever()


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with Path(path).open("a") as seen:
            seen.write(f"{line}\n")


def observed(app: Any) -> Any:
    """``app``, telling each method it receives and, as the environment asks, refusing or delaying some."""

    async def served(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            if scope["type"] == "http" and b"last-event-id" in dict(scope["headers"]):
                _append("SESSIONS_SEEN", "resume")  # a client asking for the rest of a stream that broke
                if os.environ.get("SESSIONS_REFUSE_RESUMES"):
                    await _answer(send, 404, UNKNOWN_SESSION)
                    return
            await app(scope, receive, send)
            return
        body, receive = await _read(receive)
        headers = dict(scope["headers"])
        method = _method(body)
        _append("SESSIONS_SEEN", method or "-")
        if headers.get(b"mcp-protocol-version", b"") > b"2026":  # the sessionless protocol: not spoken here
            await _answer(send, 400, SESSIONLESS)
        elif method == "tools/call" and b"mcp-session-id" in headers and os.environ.get("SESSIONS_REFUSE_CALLS"):
            await _answer(send, 404, UNKNOWN_SESSION)
        elif method == "tools/call" and os.environ.get("SESSIONS_FAIL_CALLS"):
            await _answer(send, 500, None)
        elif method == "notifications/cancelled" and os.environ.get("SESSIONS_DEAF_TO_CANCELS"):
            await _answer(send, 202, None)
        else:
            if method == "initialize":
                await anyio.sleep(float(os.environ.get("SESSIONS_SLOW_INITIALIZE", "0")))
            await app(scope, receive, send)

    return served


async def _read(receive: Any) -> tuple[bytes, Any]:
    """The request's body, and a ``receive`` that gives it to the app again, then waits as the server's does."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    given = False

    async def replay() -> Any:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


def _method(body: bytes) -> str | None:
    try:
        method = json.loads(body).get("method")
    except (ValueError, AttributeError):  # not JSON, or not one JSON-RPC object
        return None
    return method if isinstance(method, str) else None


async def _answer(send: Any, status: int, message: dict[str, Any] | None) -> None:
    body = b"" if message is None else json.dumps(message).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    import uvicorn

    events = EventLog() if os.environ.get("SESSIONS_EVENT_STORE") else None
    app = observed(_compat.http_app(sessions_server(), stateless=False, event_store=events))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
