"""A client session that records what the server sends besides its answers: the progress
notifications of each call and every other notification (log messages above all).

``_compat.connect`` gives a client neither a log callback nor a notification handler; the tests of
what reaches a client need both, on both SDK lines, in memory and over stdio.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from centralmcp_batch import _compat
from centralmcp_batch._compat.results import read_result


@dataclass
class Heard:
    """What the server sent a client, in order."""

    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)
    progress_notifications: int = 0  # with any token: the callback above hears the call's own token only
    logs: list[Any] = field(default_factory=list)  # the data of each notifications/message
    other: list[str] = field(default_factory=list)  # the type of every other notification
    asked: list[str] = field(default_factory=list)  # the message of each elicitation
    answer: dict[str, Any] | None = None  # what the client answers an elicitation (None: it declines)

    async def on_elicit(self, context: Any, params: Any) -> Any:
        self.asked.append(params.message)
        types = importlib.import_module("mcp_types" if _compat.SDK_2 else "mcp.types")
        if self.answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=self.answer)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    async def on_log(self, params: Any) -> None:
        self.logs.append(params.data)

    async def on_message(self, message: Any) -> None:
        kind = type(getattr(message, "root", message)).__name__
        if kind == "ProgressNotification":
            self.progress_notifications += 1
        elif kind != "LoggingMessageNotification" and not isinstance(message, Exception):
            self.other.append(kind)


@dataclass
class Recorder:
    session: Any
    heard: Heard

    async def call(self, name: str, arguments: dict[str, Any]) -> _compat.Answer:
        result = await self.session.call_tool(name, arguments, progress_callback=self.heard.on_progress)
        return read_result(result)


@asynccontextmanager
async def recording(
    target: Any, errlog: TextIO | None = None, answer: dict[str, Any] | None = None
) -> AsyncIterator[Recorder]:
    """A session to ``target`` (a server object, in memory, or StdioServerParameters) that records.

    A stdio server's stderr goes to ``errlog`` (the router's log, for the test to read); an
    elicitation is answered ``answer``.
    """
    heard = Heard(answer=answer)
    callbacks = {"logging_callback": heard.on_log, "message_handler": heard.on_message}
    callbacks["elicitation_callback"] = heard.on_elicit
    if _compat.SDK_2:
        from mcp import Client
        from mcp.client.stdio import stdio_client

        server = (
            stdio_client(target, errlog=errlog or sys.stderr)
            if isinstance(target, _compat.StdioServerParameters)
            else target
        )
        async with Client(server, mode="legacy", **callbacks) as client:
            yield Recorder(client, heard)
        return
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.shared.memory import create_connected_server_and_client_session

    if not isinstance(target, _compat.StdioServerParameters):
        async with create_connected_server_and_client_session(target._mcp_server, **callbacks) as session:
            yield Recorder(session, heard)
        return
    async with (
        stdio_client(target, errlog=errlog or sys.stderr) as (read, write),
        ClientSession(read, write, **callbacks) as session,
    ):
        await session.initialize()
        yield Recorder(session, heard)
