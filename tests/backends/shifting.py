"""A backend whose tools depend on a state file, to test the catalog after a restart or a change it tells.

Its tools are those of the state the file holds at start-up. ``down``: exits at once, as a backend that will
not start. ``v1``: ``flip`` and ``vanish`` are reads. ``v2``: ``flip`` is destructive, ``vanish`` is gone and
``fresh`` is new. ``whoami`` is always a read. With ``SHIFTING_LIVE=1`` in its environment, a call that finds
the file changed switches the tools to the new state's and tells the client (``notifications/tools/list_changed``)
before it answers, and ``storm(seconds)`` says the tools changed as fast as it can for that long. Run as a
script: over stdio, or with ``--http PORT`` as a stateful streamable HTTP server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from centralmcp_batch import _compat

READ = {"readOnlyHint": True, "destructiveHint": False}
DESTRUCTIVE = {"readOnlyHint": False, "destructiveHint": True}


def shifting_server(state: str, follow: Path | None = None) -> Any:
    """The backend in ``state``; with ``follow``, it switches to the state that file holds as a call finds it."""
    server = _compat.new_server("shifting")
    current = [state]

    async def follow_the_file(ctx: Any) -> None:
        now = follow.read_text().strip() if follow is not None else current[0]
        if now != current[0]:
            current[0] = now
            for name in _compat.tool_names(server):
                _compat.remove_tool(server, name)
            _publish(server, now, tools)
            await tell_tools_changed(ctx)
            # SDK 2.x writes a 2026-07-28 subscription's events from a task of its own: let it write this one
            # before the answer, as a server that tells its change first does
            await anyio.sleep(0.05)

    async def whoami(ctx: _compat.Context) -> dict[str, Any]:
        await follow_the_file(ctx)
        return {"pid": os.getpid(), "state": current[0]}

    async def flip(ctx: _compat.Context) -> dict[str, str]:
        await follow_the_file(ctx)
        return {"flipped": current[0]}

    async def vanish(ctx: _compat.Context) -> dict[str, str]:
        await follow_the_file(ctx)
        return {"here": current[0]}

    async def fresh(ctx: _compat.Context) -> dict[str, str]:
        await follow_the_file(ctx)
        return {"fresh": current[0]}

    async def storm(ctx: _compat.Context, seconds: float = 5.0) -> dict[str, int]:
        told = 0
        end = anyio.current_time() + seconds
        while anyio.current_time() < end:
            await tell_tools_changed(ctx)
            told += 1
            await anyio.sleep(0)
        return {"told": told}

    tools = [whoami, flip, vanish, fresh]
    _publish(server, state, tools)
    if follow is not None:  # a read that says the tools changed, again and again, for a while
        _compat.add_tool(server, storm, name="storm", description="notifications for a while", annotations=READ)
    return server


def _publish(server: Any, state: str, tools: list[Callable[..., Any]]) -> None:
    hints = {"whoami": READ, "flip": READ if state == "v1" else DESTRUCTIVE, "vanish": READ, "fresh": READ}
    names = ["whoami", "flip", "vanish" if state == "v1" else "fresh"]
    for fn in tools:
        if fn.__name__ in names:
            description = f"{fn.__name__} in the shifting backend"
            _compat.add_tool(server, fn, name=fn.__name__, description=description, annotations=hints[fn.__name__])


async def tell_tools_changed(ctx: Any) -> None:
    """Tell the client the tools changed: unasked on a session of an earlier protocol, and on SDK 2.x to the
    ``subscriptions/listen`` streams of a 2026-07-28 session (the only way such a session hears of it)."""
    await ctx.session.send_tool_list_changed()
    if _compat.SDK_2:
        await ctx.notify_tools_changed()


if __name__ == "__main__":
    state_file = Path(os.environ["SHIFTING_STATE"])
    first = state_file.read_text().strip()
    if first == "down":
        sys.exit(3)
    backend = shifting_server(first, state_file if os.environ.get("SHIFTING_LIVE") == "1" else None)
    if sys.argv[1:2] == ["--http"]:
        import uvicorn

        app = _compat.http_app(backend, stateless=False)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", lifespan="on")
    else:
        anyio.run(_compat.run_stdio, backend)
