"""On stdio, what an in-process backend prints never reaches the protocol's stream.

A real ``serve`` process over a ``module`` backend (``backends/chatty.py``) that prints without a newline as it
is imported and as each call runs (``print``, fd 1 itself, a thread, a process that inherits fd 1), driven by a
real MCP client, on both SDK lines. On SDK 1.x such text was glued onto the next message, the answer was lost
and the client waited for ever; on 2.x what was printed before the server started reached the client too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from centralmcp_batch import _compat

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]


def serve_chatty(tmp_path: Path) -> tuple[_compat.StdioServerParameters, Path]:
    """``serve`` over the chatty backend; its stderr in a file (the client reads only its stdout)."""
    config, log = tmp_path / "router.toml", tmp_path / "stderr"
    config.write_text('[backends.chatty]\nmodule = "tests.backends.chatty:chatty_server"\n')
    command = [sys.executable, "-m", "centralmcp_batch", "serve", "--config", str(config), "--log-level", "warning"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    params = _compat.StdioServerParameters(command="sh", args=["-c", f'exec "$@" 2>>"{log}"', "sh", *command], env=env)
    return params, log


async def test_a_module_backend_that_prints_leaves_every_answer_whole(tmp_path: Path) -> None:
    params, log = serve_chatty(tmp_path)
    with anyio.fail_after(60):  # the answer lost, the client waited for ever
        async with _compat.connect(params) as client:
            calls = [{"name": "crunch", "arguments": {"steps": n}} for n in (1, 2, 3)]
            batch = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
            single = (await client.call_tool("invoke_read_tool", {"name": "crunch"})).structured
            again = (await client.call_tool("invoke_read_tool_batch", {"calls": calls})).structured
    for response in (batch, again):
        assert [item["status"] for item in response["results"]] == ["ok", "ok", "ok"], response
        # stdin read to its end, in process and in a child: nothing (it never held the client's messages)
        assert [item["result"] for item in response["results"]] == [{"steps": n, "stdin": 0} for n in (1, 2, 3)]
    assert single == {"steps": 3, "stdin": 0}
    printed = log.read_text()  # every way of printing landed on stderr, none was lost
    for text in ("CHATTY loading", "CHATTY print 3/3", "CHATTY fd 1", "CHATTY thread", "CHATTY child"):
        assert text in printed, printed
