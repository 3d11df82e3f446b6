"""Serving the router on stdio or streamable HTTP."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
from anyio.abc import TaskStatus

from .. import _compat
from .urls import hide_urls_in_logs

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# A client leaves its scheme's default port out of Host and Origin headers (a browser always does).
DEFAULT_PORTS = {"http": "80", "https": "443"}


@dataclass(frozen=True)
class HttpAccess:
    """Which Host and Origin headers the HTTP transport accepts besides localhost's (DNS-rebinding protection)."""

    hosts: Sequence[str] = ()
    origins: Sequence[str] = ()

    def host_patterns(self) -> list[str]:
        """A name without a port matches it on any port; ``name:port`` matches that port only.

        A Host header without a port names port 80 or 443, whichever the client's scheme uses (a
        router behind a TLS proxy cannot tell which), so ``name:80`` and ``name:443`` match it too.
        """
        patterns: list[str] = []
        for host in self.hosts:
            name, port = split_port(host)
            if port is None:
                patterns += [host, f"{host}:*"]
            else:
                patterns += [name, host] if port in DEFAULT_PORTS.values() else [host]
        return patterns

    def origin_patterns(self) -> list[str]:
        """``scheme://host`` and ``scheme://host:<its default port>`` are one origin: each matches both.

        ``:*`` (any port) includes the default port, which the Origin header leaves out.
        """
        patterns: list[str] = []
        for origin in self.origins:
            scheme, _, rest = origin.partition("://")
            scheme = scheme.lower()  # its default port is looked up by it
            name, port = split_port(rest)
            default = DEFAULT_PORTS.get(scheme)
            if default is not None and port in (None, default):
                patterns += [f"{scheme}://{name}", f"{scheme}://{name}:{default}"]
            else:
                patterns += [f"{scheme}://{name}", origin] if port == "*" else [origin]
        return patterns


def split_port(host: str) -> tuple[str, str | None]:
    """``("name", "8000")`` from ``name:8000``; ``("[::1]", None)`` from ``[::1]``, whose colons are inside brackets."""
    head, bracket, tail = host.rpartition("]")
    name, colon, port = tail.rpartition(":")
    if not colon:
        return host, None
    return head + bracket + name, port


# SIGHUP: the terminal or ssh session the router runs in closed. Its default, like SIGTERM's, kills the process
# at once, before the backends are stopped: the processes they started would be left running, re-parented to init.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


@dataclass(frozen=True)
class StdioProtocol:
    """The descriptors the MCP stdio protocol is read from and written to, the router's alone."""

    read_fd: int
    write_fd: int


def claim_stdio() -> StdioProtocol:
    """Keep the stdio protocol away from whatever else the process prints or reads, and return its descriptors.

    The protocol moves to private duplicates of fds 0 and 1 (not inherited by the processes the router
    starts); fd 0 then reads the null device and fd 1 writes to stderr. So an in-process backend that
    prints (``print``, ``sys.stdout``, a C extension writing to fd 1, a thread, a process it starts that
    inherits fd 1) prints to stderr, where its text cannot be glued onto a message, and nothing but the
    router reads the client's messages. Made before the backends are imported: a module may print as it
    is imported. What was already buffered in ``sys.stdout`` goes to the client first, as it would have.
    """
    sys.stdout.flush()
    protocol = StdioProtocol(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return protocol


def serve(
    router: Any,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    access: HttpAccess = HttpAccess(),
    protocol: StdioProtocol | None = None,
) -> int | None:
    """Run until the client leaves or SIGTERM / SIGINT / SIGHUP; returns the signal that stopped it, if one did.

    On stdio, the protocol has descriptors of its own (``protocol``, or ``claim_stdio``'s now), and every
    log line and print goes to stderr. Either way the backends are stopped (and their process groups with
    them) before this returns.
    """
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The router's own lines name a backend URL by its host only; so do those of the SDK and its HTTP client
    # (each request's whole URL at INFO, the endpoint at DEBUG), and tracebacks.
    hide_urls_in_logs()
    if transport == "stdio":
        return anyio.run(serve_stdio, router, protocol or claim_stdio())
    if transport == "http":
        return anyio.run(serve_http, router, host, port, access)
    raise ValueError(f"transport must be 'stdio' or 'http', not {transport!r}")


async def serve_stdio(router: Any, protocol: StdioProtocol | None = None) -> int | None:
    """Serve on stdio until stdin closes, the client that started the router exits, or a stop signal arrives.

    Python's default SIGTERM kills the process at once, before the backends are stopped, so a
    backend that does not exit when its stdin closes would outlive the router; a signal here
    instead stops every backend first. The router, not the server's lifespan, owns the sessions,
    so they close even though the server itself cannot finish (see ``_exit_now``).
    """
    stop = anyio.Event()
    stdin_closed = anyio.Event()
    async with anyio.create_task_group() as tasks:
        # watching before the backends start: a signal, or the client's exit, during start-up stops them too
        await tasks.start(watch_signals, lambda signum: stop.set(), *STOP_SIGNALS)
        tasks.start_soon(watch_parent, stop.set)
        async with router.connected(abandon=stop):
            if not stop.is_set():
                tasks.start_soon(_serve_until_eof, router.server, protocol, stdin_closed, stop)
            await stop.wait()  # not cancelled yet: a cancel here would leave this block before the exit below
        if not stdin_closed.is_set():
            _exit_now()  # the server's stdin reader is still blocked in its read
        tasks.cancel_scope.cancel()  # the client closed stdin: stop watching
    return None


async def _serve_until_eof(
    server: Any, protocol: StdioProtocol | None, stdin_closed: anyio.Event, stop: anyio.Event
) -> None:
    await _compat.run_stdio(server, None if protocol is None else (protocol.read_fd, protocol.write_fd))
    stdin_closed.set()
    stop.set()


def _exit_now() -> NoReturn:
    """Exit 0 now: the backends are stopped, and the server's stdin reader cannot be waited for.

    The SDK reads stdin in a worker thread, blocked in a read that neither a cancel nor a signal
    interrupts: the server would not finish, nor the interpreter exit, until the client closed
    the pipe. ``os._exit`` skips the interpreter's exit handlers, so they are run first: a host's
    buffers are flushed there (OpenTelemetry's tracer provider exports the spans it still holds,
    logging flushes its handlers). They wait for no thread, so the blocked reader does not hold
    them up; a signal while they run stops the process at once, as a second signal should.
    """
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a terminal that hung up (EIO), a stream closed
            stream.flush()
    os._exit(0)


async def watch_signals(
    on_signal: Callable[[int], None],
    *signals: signal.Signals,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_signal`` with each of ``signals`` that arrives, in place of Python's own handling of them."""
    with anyio.open_signal_receiver(*signals) as received:
        task_status.started()
        async for signum in received:
            log.info("stopping on %s", signal.Signals(signum).name)
            on_signal(signum)


# Once a second: an orphaned router stops within about a second, for one getppid call per second.
PARENT_CHECK_SECONDS = 1.0


async def watch_parent(on_gone: Callable[[], None], every: float = PARENT_CHECK_SECONDS) -> None:
    """Call ``on_gone`` once the process that started this one has exited.

    A stdio client's end is the pipe's closing, except when the client dies (a crash, SIGKILL) while
    another process still holds the write end of the router's stdin (a helper that inherited it): no
    end of file ever comes, and the parent's exit is the only sign left. POSIX gives an orphan a new
    parent (init, launchd, or a subreaper such as ``systemd --user``), so any change of the parent's
    pid is the sign, not a change to 1. Windows keeps reporting the dead parent's pid: nothing to watch.
    """
    if sys.platform == "win32":
        return
    parent = os.getppid()
    while os.getppid() == parent:
        await anyio.sleep(every)
    log.info("stopping: the client that started the router (pid %d) has exited", parent)
    on_gone()


# uvicorn's loggers, which it gives handlers of their own (and does not propagate) as its config is made.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


async def serve_http(router: Any, host: str, port: int, access: HttpAccess = HttpAccess()) -> int | None:
    import uvicorn

    if host not in LOOPBACK and not access.hosts:
        log.warning(
            "bound to %s, but only localhost Host headers are accepted: name the others with --allow-host", host
        )
    # Stateless: no MCP session lives here, so replicas behind a load balancer serve any request.
    hosts, origins = access.host_patterns(), access.origin_patterns()
    app = _compat.http_app(router.server, allowed_hosts=hosts, allowed_origins=origins, stateless=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    for name in UVICORN_LOGGERS:  # handlers of their own, which the root's filter never sees
        hide_urls_in_logs(logging.getLogger(name))
    server = uvicorn.Server(config)
    # uvicorn raises a signal again once it has stopped, and SIGTERM's default then kills the
    # process before the backends are stopped: the router watches the signals itself.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    stopped: list[int] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tasks:
        # watching before the backends start: a signal during start-up stops them too
        await tasks.start(watch_signals, lambda signum: _stop_uvicorn(server, stopped, stop, signum), *STOP_SIGNALS)
        async with router.connected(abandon=stop):  # one session per remote backend for all HTTP clients
            if not stop.is_set():
                await server.serve()
        tasks.cancel_scope.cancel()
    return stopped[0] if stopped else None


def _stop_uvicorn(server: Any, stopped: list[int], stop: anyio.Event, signum: int) -> None:
    """The first signal lets in-flight requests finish; a second stops without waiting for them."""
    server.force_exit = bool(stopped)
    server.should_exit = True
    stopped.append(signum)
    stop.set()
