"""A stdio backend that makes leaving nothing behind hard: for the process-lifecycle tests.

Run as a script (``python tests/backends/lingering.py NAME``), with ``LINGER_DIR`` in its
environment. It writes ``NAME.pid`` there: its own pid and, with ``LINGER_CHILD=1``, the pid of a
child it starts (a ``sleep`` that knows nothing of MCP). ``LINGER_IGNORE_TERM=1`` ignores SIGTERM;
``LINGER_STAY=1`` keeps running after the router closes its stdin; ``LINGER_START_SECONDS`` waits that
long after writing the pids before it answers (a slow start, as an npx server's first run). ``slow(seconds)``
is a read; each call adds a line to ``NAME.calls`` as it begins. Once its stdin closes it writes ``NAME.bye``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


def lingering_server(name: str) -> Any:
    server = _compat.new_server(name)

    async def slow(seconds: float = 0.0) -> dict[str, Any]:
        with Path(os.environ["LINGER_DIR"], f"{name}.calls").open("a") as calls:
            calls.write(f"{seconds}\n")  # the call is under way: a test may now stop the router
        await anyio.sleep(seconds)
        return {"pid": os.getpid(), "slept": seconds}

    _compat.add_tool(server, slow, name=f"{name}_slow", description="a read that takes its time", annotations=READ)
    return server


def main(name: str) -> None:
    pids = [os.getpid()]
    if os.environ.get("LINGER_CHILD") == "1":
        # off the MCP pipes, as a helper the server started for itself would be
        helper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        pids.append(helper.pid)
    if os.environ.get("LINGER_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    path = Path(os.environ["LINGER_DIR"], f"{name}.pid")
    path.with_suffix(".tmp").write_text(" ".join(map(str, pids)))
    path.with_suffix(".tmp").rename(path)  # whole, or not there
    time.sleep(float(os.environ.get("LINGER_START_SECONDS", "0")))
    anyio.run(_compat.run_stdio, lingering_server(name))
    Path(os.environ["LINGER_DIR"], f"{name}.bye").write_text("stdin closed")  # a server's last words, as it exits
    while os.environ.get("LINGER_STAY") == "1":  # stdin closed: a well-behaved server would exit now
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1])
