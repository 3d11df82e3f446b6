"""Remote backends: one long-lived client session each, owned by a task that reconnects."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .. import _compat
from ..errors import sole_cause
from ..settings import BatchSettings
from .urls import hosts_only, register

log = logging.getLogger(__name__)
RECONNECT_DELAY = 0.5  # the first try after a session breaks or fails to open
MAX_RECONNECT_DELAY = 30.0  # the delay doubles while the backend stays down, up to this
# A session that ends sooner than this after opening (a backend that crashes once it has answered the
# handshake) counts as a failed open for the delay: such a backend is not restarted twice a second.
STABLE_SECONDS = 10.0
# How long a stdio backend's session may take to end as a client ends one when the router stops: the
# SDK closes the server's stdin, waits 2 s for it to exit, then SIGTERM and 2 s more before SIGKILL.
CLOSE_SECONDS = 10.0
# connect, initialize and list the tools within this; generous, as an npx server's first start downloads it
HANDSHAKE_SECONDS = 120.0
# After a failed call the router probes the session to tell a failed call from a lost session. The
# probe is part of the call, so it gets a share of the time the call has left (the rest is for the
# verdict, which must land before the call's time limit cancels it), and no more than a handshake.
PROBE_SHARE = 0.9
MAX_PROBE_SECONDS = HANDSHAKE_SECONDS
# A probe left less than this cannot tell a slow session from a lost one: its silence reopens nothing
# by itself, and the backend's own check (below) decides.
MIN_PROBE_SECONDS = 0.5
# A session that stops answering without closing (a stopped or stuck process, an HTTP server that
# accepts and never answers) fails no call outright: each is cut off by its time limit, and the probe
# after a failed call never runs. So a call cut off asks the backend's own task to check the session,
# with a probe that may wait as long as a call may (the configured call time limit), at least this
# (a backend busy for a moment is not lost) and at most a handshake.
MIN_CHECK_SECONDS = 2.0
# A backend that no longer knows the router's session (HTTP 404: it restarted, or ended the session) refuses
# every call in flight on it, and each is sent again on the next session. Closing the lost session would
# cut off the refusals still on their way, as failed calls, so it is closed once none is in flight, or
# after this long.
LOST_SESSION_GRACE = 1.0


@dataclass(frozen=True)
class StdioBackend:
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class HttpBackend:
    url: str

    def __post_init__(self) -> None:
        register(self.url)  # its password, token or path never reach a log line or an error whole


RemoteSpec = StdioBackend | HttpBackend


class ToolsChanged(Exception):
    """The backend changed the tool after the call was checked: the call was not sent."""


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
        self.reset()

    def reset(self) -> None:
        """Ready for a new ``run``, as before the first: a router connected again after it left starts each
        backend afresh, where the last run's closed session and its ``close()`` would have stayed."""
        self.client = None
        self.first_attempt = anyio.Event()
        self._broken = anyio.Event()
        self._check_wanted = anyio.Event()
        self.failures = 0  # opens failed in a row
        self.short_lived = 0  # sessions in a row that ended within STABLE_SECONDS of opening
        self._opened_at: float | None = None
        self._attempted = anyio.Event()  # set, and replaced, each time a session opens or fails to
        # the session the backend said it no longer knows, until the try to replace it has ended
        self._lost: _compat.ClientHandle | None = None
        self._closing = anyio.Event()
        self.stopped = anyio.Event()  # ``run`` has returned: no session is open, nor will one be
        # How many of the open session's changes of tools (``ClientHandle.tools_changes``) the catalog holds.
        self._covered = 0
        self._relisted = anyio.Event()  # set, and replaced, each time a new list is published or given up

    async def run(self) -> None:
        try:
            while not self._closing.is_set():
                try:
                    await self._session()
                except Exception as exc:  # a backend that will not start is reported, the rest serve on
                    self._failed(describe_failure(exc))
                if self._opened_at is None:  # it never opened
                    self._attempt_ended()
                self._count_short_lived()
                self.client = None
                self._relist_ended()  # no list is pending on a session that is gone: its waiters look again
                # A backend that said it lost the session is up: the calls it refused wait for the next one.
                delay = 0.0 if self._lost is not None else self.retry_delay()
                self._broken, self._check_wanted = anyio.Event(), anyio.Event()
                self.first_attempt.set()
                with anyio.move_on_after(delay):
                    await self._closing.wait()
        finally:
            self._attempt_ended()  # no session will open: the calls waiting for one hear it
            self.stopped.set()

    def close(self) -> None:
        """End the session as a client ends one, and open no other: ``run`` returns once it has ended.

        Cancelling ``run`` ends it too, but SDK 1.x then kills a stdio server at once; a session
        ended this way closes the server's stdin first, so a server that exits on it exits on its
        own, its buffers flushed, as on SDK 2.x.
        """
        self._closing.set()
        self._broken.set()

    def retry_delay(self) -> float:
        """RECONNECT_DELAY after a session that was open, doubling with each failed open up to MAX_RECONNECT_DELAY.

        Sessions that each ended soon after opening double it as failed opens do.
        """
        tries = max(self.failures, self.short_lived)
        return min(RECONNECT_DELAY * 2.0 ** max(0, tries - 1), MAX_RECONNECT_DELAY)

    def _count_short_lived(self) -> None:
        if self._opened_at is not None:
            lived = anyio.current_time() - self._opened_at
            self.short_lived = self.short_lived + 1 if lived < STABLE_SECONDS else 0
            self._opened_at = None

    def _failed(self, error: str) -> None:
        # Told once per outage, and again when the reason changes: a backend that stays down is
        # tried for as long as the router runs, which is no reason to repeat itself.
        level = logging.WARNING if self.failures == 0 or error != self.error else logging.DEBUG
        self.failures += 1
        self.error = error
        log.log(level, "backend %r is unavailable: %s", self.name, error)

    async def _session(self) -> None:
        """Open a session, publish its tools and hold it until it breaks.

        The handshake (connect, initialize, the tool list) has a time limit: a backend that never
        answers it, or an HTTP endpoint that swallows it, would otherwise hold this task forever,
        and the backend would never be tried again.
        """
        with anyio.CancelScope(deadline=anyio.current_time() + HANDSHAKE_SECONDS) as handshake:
            async with _compat.connect(_target(self.spec)) as client:
                covered = client.tools_changes
                tools = await client.list_tools()
                handshake.deadline = math.inf
                self._publish(tools, covered)
                if self.failures:
                    log.warning("backend %r is back after %d failed tries", self.name, self.failures)
                self.client, self.error, self.failures = client, None, 0
                self._opened_at = anyio.current_time()
                self.first_attempt.set()
                self._attempt_ended()
                await self._hold(client)
        if handshake.cancelled_caught:
            raise TimeoutError(f"no answer to the MCP handshake within {HANDSHAKE_SECONDS:g}s")

    async def _hold(self, client: _compat.ClientHandle) -> None:
        """Until the session breaks: it ends, a failed call finds it lost, or a check finds it silent."""
        async with anyio.create_task_group() as checks:
            checks.start_soon(self._check_when_asked, client)
            checks.start_soon(self._break_when_ended, client)
            checks.start_soon(self._relist_when_told, client)
            await self._broken.wait()
            checks.cancel_scope.cancel()
        if client is self._lost:
            with anyio.move_on_after(LOST_SESSION_GRACE):
                while client.calls_in_flight:
                    await anyio.sleep(0.01)

    def _publish(self, tools: list[_compat.ToolInfo], covered: int) -> None:
        """``tools`` are the backend's now, as of its session's ``covered`` changes: told to the catalog
        before any call can use them."""
        self.tools, self._covered = tools, covered
        if self.on_tools is not None:
            self.on_tools(self.name, tools)

    async def _relist_when_told(self, client: _compat.ClientHandle) -> None:
        """Each time the backend says its tools changed, read its list again and publish it.

        From the moment it is told until the new list is published, ``tools_pending`` is true: the
        router looks a tool up, and checks it again before the call is sent, only once it is over. A
        backend that does not list its tools within the check's time is reopened (a new session lists
        them first).
        """
        while True:
            await client.tools_changed.wait()
            covered = client.tools_changes  # a change told while the list is read is read again
            tools = await self._relisted_tools(client, check_seconds())
            if tools is None:
                self._break(client)
                return
            if client is self.client:
                log.info("backend %r changed its tools: it has %d now", self.name, len(tools))
                self._publish(tools, covered)
            self._relist_ended()

    async def _relisted_tools(self, client: _compat.ClientHandle, seconds: float) -> list[_compat.ToolInfo] | None:
        """The backend's tool list, read again; None (told in the log) when it fails or takes over ``seconds``."""
        with anyio.move_on_after(seconds):
            try:
                return await client.list_tools()
            except Exception as exc:  # a session that cannot list its tools is not trusted with calls
                why = describe_failure(exc)
                log.warning(
                    "backend %r said its tools changed but did not list them (%s); reopening it", self.name, why
                )
                return None
        log.warning(
            "backend %r said its tools changed but did not list them within %gs; reopening it", self.name, seconds
        )
        return None

    def _relist_ended(self) -> None:
        self._relisted.set()
        self._relisted = anyio.Event()

    def tools_pending(self) -> bool:
        """Whether the backend said its tools changed and the catalog does not hold its new list yet."""
        client = self.client
        return client is not None and client.tools_changes > self._covered

    async def tools_listed(self) -> None:
        """Return once the catalog holds the backend's tools as it had told them when this was called (a
        backend that keeps saying its tools changed holds a caller up for one more list at most), or once
        its session has ended (the next one lists its tools before it takes a call)."""
        client = self.client
        if client is None:
            return
        told = client.tools_changes
        while self.client is client and self._covered < told:
            await self._relisted.wait()

    def _attempt_ended(self) -> None:
        """Wake the calls waiting for a session: one is open (``client``), or the try failed (``error``)."""
        self._lost = None
        self._attempted.set()
        self._attempted = anyio.Event()

    def _break(self, client: _compat.ClientHandle) -> None:
        """Reopen ``client``'s session if it is still the open one: a late verdict on a replaced session
        (a probe that outlived it) says nothing of the session after it."""
        if client is self.client:
            self._broken.set()

    async def _break_when_ended(self, client: _compat.ClientHandle) -> None:
        # A stdio backend that exits while idle (a crash, an OOM kill) is reopened now, not after
        # the next call has failed on the dead session.
        await client.ended.wait()
        # told once for a backend that keeps ending its sessions as soon as they open
        level = logging.WARNING if self.short_lived == 0 else logging.DEBUG
        log.log(level, "backend %r closed its session; reopening it", self.name)
        self._break(client)

    async def _check_when_asked(self, client: _compat.ClientHandle) -> None:
        while True:
            await self._check_wanted.wait()
            seconds = check_seconds()
            if await _probe(client, seconds) is not True:
                log.warning(
                    "backend %r did not answer a probe within %gs after a call was cut off; reopening its session",
                    self.name,
                    seconds,
                )
                self._break(client)
                return
            log.debug("backend %r answered a probe after a call was cut off", self.name)
            # Only now: a call cut off while this probe waited was cut off before the session answered it.
            self._check_wanted = anyio.Event()

    def _check(self, client: _compat.ClientHandle) -> None:
        """Ask the backend's own task to probe ``client``; calls cut off together start one probe."""
        if client is self.client:  # a call on a session already replaced says nothing of the new one
            self._check_wanted.set()

    async def call(
        self, tool: str, arguments: Mapping[str, Any], unchanged: Callable[[], bool] | None = None
    ) -> _compat.Answer:
        """``tool``'s answer. ``unchanged``: whether the tool is still the one the call was checked against; it is
        asked, once no new tool list is pending, before the call is sent (``ToolsChanged`` when it is not)."""
        client = self._connected()
        try:
            if client is not self._lost:  # else it is being closed: sent on it now, the call would be refused
                try:
                    return await self._call(client, tool, arguments, unchanged)
                except _compat.SessionUnknown:
                    pass
            # The backend refused the call for its session (HTTP 404 to the call itself) before the call
            # reached any tool: nothing ran. Sent once more, on the session that replaces it, the call runs
            # once, as asked (only read-only tools come this far: the gate blocks the rest). It is still
            # this call, in its own time limit, with the rate token it was given.
            client = await self._reopened(client)
            if client is self._lost:  # another call was refused on it already: this one would be too
                return _refused_again()
            try:
                return await self._call(client, tool, arguments, unchanged)
            except _compat.SessionUnknown:
                # Not sent a third time, and no reopen: the session may serve other calls, and the
                # next call refused on it reopens it.
                return _refused_again()
        except anyio.get_cancelled_exc_class():
            # Cut off, by its time limit most often, or while it probed: the probe that decides runs
            # in the backend's task, as this call's own work may not outlive its cancellation.
            self._check(client)
            raise

    def _connected(self) -> _compat.ClientHandle:
        if self.client is None:
            raise self._not_connected()
        return self.client

    def _not_connected(self) -> ConnectionError:
        return ConnectionError(f"backend {self.name!r} is not connected ({self.error or 'connecting'})")

    async def _reopened(self, lost: _compat.ClientHandle) -> _compat.ClientHandle:
        """The session that replaces ``lost``, one the backend no longer knows; the calls refused on it share it."""
        if lost is self.client and self._lost is not lost:
            log.warning(
                "backend %r no longer knows the router's session (HTTP 404: it restarted, or ended the session); "
                "reopening it, and sending the calls it refused again",
                self.name,
            )
            self._lost = lost
            self._break(lost)
        while self.client is None or self.client is lost:
            if self._lost is None:  # no reopen under way: the try failed, or the router is stopping
                raise self._not_connected()
            await self._attempted.wait()
        return self.client

    async def _call(
        self,
        client: _compat.ClientHandle,
        tool: str,
        arguments: Mapping[str, Any],
        unchanged: Callable[[], bool] | None = None,
    ) -> _compat.Answer:
        """``tool``'s answer on ``client``; ``SessionUnknown`` (the backend's own verdict on the session) is raised."""
        if self.tools_pending():
            await self.tools_listed()
        if unchanged is not None and not unchanged():
            raise ToolsChanged(tool)
        try:
            return await client.call_tool(tool, arguments)
        except _compat.SessionUnknown:
            raise
        except Exception as exc:
            # A JSON-RPC error, or an answer the client refuses, fails this call alone: tearing the
            # session down for it would fail every other call in flight on it. Only a session that
            # no longer answers is reopened.
            answered = await _probe(client, probe_seconds())
            if answered is None:  # silent, with too little time to tell: the backend's check decides
                self._check(client)
            if answered is not False:
                return _failed_call(exc)
            self._break(client)  # the owning task reconnects for the next call
            raise ConnectionError(f"backend {self.name!r} went away: {type(exc).__name__}") from exc


def _refused_again() -> _compat.Answer:
    text = "the backend refused the call on a new session too: it does not know the router's MCP session (HTTP 404)"
    return _compat.Answer(is_error=True, text=text)


def probe_seconds() -> float:
    """How long the probe after a failed call may wait: PROBE_SHARE of what the call has left.

    What it has left is the time to the call's deadline (its call time limit, or the batch's if that
    passes first); a call made outside any (a host calling ``call`` itself) has the configured call
    time limit, ``CENTRALMCP_ROUTER_BATCH_CALL_TIMEOUT_SECONDS``.
    """
    deadline = anyio.current_effective_deadline()
    left = deadline - anyio.current_time() if deadline != math.inf else BatchSettings.from_env().call_timeout
    return max(0.0, min(left * PROBE_SHARE, MAX_PROBE_SECONDS))


def check_seconds() -> float:
    """How long the backend's check after a cut-off call waits: the configured call time limit, bounded."""
    return min(max(BatchSettings.from_env().call_timeout, MIN_CHECK_SECONDS), HANDSHAKE_SECONDS)


async def _probe(client: _compat.ClientHandle, seconds: float) -> bool | None:
    """True: the session answered within ``seconds``. False: it is closed, broken, or silent that long.

    None: silent, but ``seconds`` was under MIN_PROBE_SECONDS, too little to tell slow from lost.
    """
    with anyio.move_on_after(seconds):
        try:
            await client.probe()
        except Exception:  # the session is closed or broken: no waiting tells anything more
            return False
        return True
    return None if seconds < MIN_PROBE_SECONDS else False


@dataclass(frozen=True)
class ErrorResponse(_compat.Answer):
    """A call the backend answered with a JSON-RPC error, as an error answer that keeps the error's code
    (-32602, "Invalid params", tells the router the error is about the arguments)."""

    code: int | None = None


def _failed_call(exc: Exception) -> _compat.Answer:
    """A call the backend answered with a JSON-RPC error, whose answer was lost, or that the client refused, as an
    error answer."""
    message = _compat.error_response_text(exc)
    if message is not None:  # the backend's own words (or the SDK's), passed on (and retold) as a tool's error is
        code = getattr(getattr(exc, "error", None), "code", None)  # both SDK lines' ErrorData
        return ErrorResponse(is_error=True, text=hosts_only(message), code=code if isinstance(code, int) else None)
    if isinstance(exc, _compat.AnswerLost):  # SDK 1.x's; 2.x answers such a call with an error of its own
        return _compat.Answer(is_error=True, text=str(exc))
    # e.g. structured content that breaks the tool's output schema; the detail after the
    # colon quotes the answer, so only the head is kept
    head = str(exc).split(":", 1)[0] if isinstance(exc, RuntimeError) else ""
    why = f"{type(exc).__name__}: {hosts_only(head)}" if head else type(exc).__name__
    return _compat.Answer(is_error=True, text=f"the router's MCP client refused the backend's answer ({why})")


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` of why a backend could not be reached, as the log and the entries tell it.

    The SDK's clients fail inside task groups, so the exception that says what happened (refused,
    401, no handshake) comes wrapped in groups of one; a URL in its first line keeps its host only.
    """
    exc = sole_cause(exc)
    text = hosts_only(str(exc).split("\n", 1)[0])  # httpx adds a second line: a link to its docs
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
