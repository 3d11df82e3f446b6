"""What a stdio backend started, stopped once its session ends: its processes do not outlive it.

The MCP SDK starts each stdio server in a process group of its own, but signals the group only
when the server itself outlives the SDK's grace period; SDK 1.x, when the session is cancelled,
kills the server alone. Either way a server that exits, or is
killed, leaves the processes it started running: an npx wrapper's node, a helper, a ``sleep`` in
a shell script.

The SDK does not tell the server's pid, and once the server has exited its pid tells nothing, so
the processes are found by a token put in the server's environment, which they inherit. Their
process groups (the server's, unless one made its own) are then stopped. Linux only (it reads
``/proc``); elsewhere nothing is found and only the SDK's own stopping applies. A process that
leaves both the group and the environment behind (a daemon) is out of reach, by its own design.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio

TOKEN_ENV = "CENTRALMCP_BATCH_BACKEND_TOKEN"
GRACE_SECONDS = 2.0  # between SIGTERM and SIGKILL, as the SDK's own escalation
POLL_SECONDS = 0.05


class BackendProcesses:
    """The processes one stdio server and its descendants run, told apart by a token in their environment."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex

    def env(self, env: dict[str, str] | None) -> dict[str, str]:
        """The server's environment (the SDK adds its defaults under it), with the token."""
        return {**(env or {}), TOKEN_ENV: self.token}

    async def stop(self) -> None:
        """SIGTERM to the groups of whatever is left, SIGKILL to what is still there after the grace period."""
        targets = {target for target in map(_kill_target, _carrying(self.token)) if target is not None}
        targets = {target for target in targets if _signal(target, signal.SIGTERM)}
        with anyio.move_on_after(GRACE_SECONDS):
            while targets := {target for target in targets if _signal(target, 0)}:
                await anyio.sleep(POLL_SECONDS)
        for target in targets:
            _signal(target, signal.SIGKILL)


# How to signal what is left of a server: its process group as a whole, or one process by itself.
KillTarget = tuple[Callable[[int, int], None], int]


def _kill_target(pid: int) -> KillTarget | None:
    """``pid``'s process group, or ``pid`` alone when it shares the router's own group.

    The router's group holds the router and perhaps the client that started it: a process that
    joined it (or an SDK that started the server without a group of its own) is stopped by itself.
    """
    try:
        group = os.getpgid(pid)
    except OSError:  # gone meanwhile
        return None
    return (os.kill, pid) if group == os.getpgrp() else (os.killpg, group)


def _signal(target: KillTarget, signum: int) -> bool:
    """False once the target is gone (or holds only processes this one may not signal)."""
    kill, ident = target
    try:
        kill(ident, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _carrying(token: str) -> list[int]:
    """The pids whose environment holds ``token``: a zombie's reads empty, another user's is refused."""
    wanted = f"{TOKEN_ENV}={token}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if wanted in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return found
