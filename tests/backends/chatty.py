"""An in-process backend (``module = "tests.backends.chatty:chatty_server"``) that prints to stdout every way a
library does, without a newline, as a progress bar's ``\\r`` does: as it is imported, and as each call runs.

Each call of ``crunch`` prints through ``print`` (flushed), writes to fd 1 itself (as a C extension would),
prints from a thread it starts, and runs a process that inherits fd 1 and writes to it; it also reads stdin to
its end, itself and in a process that inherits it, and answers how much it read. Every text holds
``CHATTY``, so a test can find where it went.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}

print("\rCHATTY loading 1/2", end="", flush=True)


def chatty_server() -> Any:
    server = _compat.new_server("chatty")

    def crunch(steps: int = 3) -> dict[str, Any]:
        for step in range(steps):
            print(f"\rCHATTY print {step + 1}/{steps}", end="", flush=True)
        os.write(1, b"\rCHATTY fd 1")
        printer = threading.Thread(target=lambda: print("\rCHATTY thread", end="", flush=True))
        printer.start()
        printer.join()
        subprocess.run([sys.executable, "-c", "import sys; sys.stdout.write('\\rCHATTY child')"], check=True)
        # reading stdin, in process and in a child that inherits it, must not take the client's messages
        child_read = subprocess.run(
            [sys.executable, "-c", "import sys; print(len(sys.stdin.read()))"], stdout=subprocess.PIPE
        )
        return {"steps": steps, "stdin": len(sys.stdin.read()) + int(child_read.stdout)}

    _compat.add_tool(server, crunch, name="crunch", description="crunches, printing its progress", annotations=READ)
    return server
