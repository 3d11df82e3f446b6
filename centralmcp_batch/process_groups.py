"""What a stdio backend started, stopped once its session ends: its processes do not outlive it.

The MCP SDK starts each stdio server in a process group of its own, but signals the group only
when the server itself outlives the SDK's grace period; SDK 1.x, when the session is cancelled
(as the router's always are), kills the server alone. Either way a server that exits, or is
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
        groups = {group for group in map(_group_of, _carrying(self.token)) if group is not None}
        groups = {group for group in groups if _signal_group(group, signal.SIGTERM)}
        with anyio.move_on_after(GRACE_SECONDS):
            while groups := {group for group in groups if _signal_group(group, 0)}:
                await anyio.sleep(POLL_SECONDS)
        for group in groups:
            _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, signum: int) -> bool:
    """False once the group is gone (or holds only processes this one may not signal)."""
    try:
        os.killpg(group, signum)
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


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
