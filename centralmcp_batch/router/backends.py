"""Remote backends: one long-lived client session each, owned by a task that reconnects."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import _compat

log = logging.getLogger(__name__)
RECONNECT_DELAY = 0.5


@dataclass(frozen=True)
class StdioBackend:
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class HttpBackend:
    url: str


RemoteSpec = StdioBackend | HttpBackend


def is_remote(backend: Any) -> bool:
    return isinstance(backend, (StdioBackend, HttpBackend))


def _target(spec: RemoteSpec) -> Any:
    if isinstance(spec, HttpBackend):
        return spec.url
    return _compat.StdioServerParameters(
        command=spec.command, args=list(spec.args), env=dict(spec.env) if spec.env else None
    )


@dataclass
class RemoteBackend:
    """The session to one remote backend; ``run`` keeps it open and opens it again when it breaks."""

    name: str
    spec: RemoteSpec
    client: _compat.ClientHandle | None = None
    error: str | None = None
    tools: list[_compat.ToolInfo] = field(default_factory=list)
    # told the tool list of every (re)connect, before any call can use the new session
    on_tools: Callable[[str, list[_compat.ToolInfo]], None] | None = None

    def __post_init__(self) -> None:
        self.first_attempt = anyio.Event()
        self._broken = anyio.Event()

    async def run(self) -> None:
        while True:
            try:
                async with _compat.connect(_target(self.spec)) as client:
                    self.tools = await client.list_tools()
                    if self.on_tools is not None:
                        self.on_tools(self.name, self.tools)
                    self.client, self.error = client, None
                    self.first_attempt.set()
                    await self._broken.wait()
            except Exception as exc:  # a backend that will not start is reported, the rest serve on
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("backend %r is unavailable: %s", self.name, self.error)
            self.client = None
            self._broken = anyio.Event()
            self.first_attempt.set()
            await anyio.sleep(RECONNECT_DELAY)

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> _compat.Answer:
        client = self.client
        if client is None:
            raise ConnectionError(f"backend {self.name!r} is not connected ({self.error or 'connecting'})")
        try:
            return await client.call_tool(tool, arguments)
        except Exception as exc:  # a tool's own failure is an answer, so a raise is the session failing
            self._broken.set()  # the owning task reconnects for the next call
            raise ConnectionError(f"backend {self.name!r} went away: {type(exc).__name__}") from exc
