"""The demo's MCP session: start the router, run find_tool, one batch, then the same reads one at a time."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from ... import _compat
from ...errors import sole_cause
from ...ratelimit.config import RATE, burst
from ...router.serve import watch_signals
from ...settings import ROUTER_MODE, router_mode
from .. import CommandFailed
from .render import ProgressLine, summary, table
from .script import DemoCall, batch_problems, demo_calls, same_data

TIMEOUT_SECONDS = 120.0
ROUTER_TOOLS = frozenset({"find_tool", "invoke_read_tool", "invoke_read_tool_batch"})

Say = Callable[[str], None]


INTERRUPTED = 130  # the shells' exit status for a command ended by SIGINT


def run() -> int:
    """Run the demo on stdout: 0 when everything behaved as described, else ``CommandFailed`` naming what did not.

    Ctrl-C (SIGINT) stops it with one line and status 130: the router subprocess is stopped first.
    """
    interrupted: list[bool] = []
    try:
        problems = anyio.run(_run_demo_in_time, _print_line, interrupted)
    except TimeoutError:
        raise CommandFailed(f"the demo did not finish within {TIMEOUT_SECONDS:.0f} s") from None
    except Exception as exc:
        if not interrupted:  # whatever the session made of its cancellation (SDK 1.x: a broken stream) is no failure
            raise CommandFailed(f"the demo failed: {_describe(exc)}") from exc
        problems = []
    if interrupted:
        print("centralmcp-batch: demo interrupted", file=sys.stderr)
        return INTERRUPTED
    if problems:
        raise CommandFailed("the demo ran, but not as expected:\n  " + "\n  ".join(problems))
    return 0


async def _run_demo_in_time(say: Say, interrupted: list[bool]) -> list[str]:
    """Python's own SIGINT handling raises KeyboardInterrupt through the session: a traceback, not a line."""
    problems: list[str] = []
    with anyio.fail_after(TIMEOUT_SECONDS):
        async with anyio.create_task_group() as tasks:

            def interrupt(signum: int) -> None:
                interrupted.append(True)
                tasks.cancel_scope.cancel()

            await tasks.start(watch_signals, interrupt, signal.SIGINT)
            problems = await run_demo(say)
            tasks.cancel_scope.cancel()
    return problems


def _describe(exc: BaseException) -> str:
    exc = sole_cause(exc)
    return f"{type(exc).__name__}: {exc}"


def _print_line(text: str = "") -> None:
    print(text, flush=True)


def router_command() -> _compat.StdioServerParameters:
    """The demo router as a stdio subprocess of this very interpreter."""
    args = ["-m", "centralmcp_batch", "serve", "--demo", "--log-level", "warning"]
    # The SDK hands a subprocess only a few variables unless told; the demo's settings must reach it.
    return _compat.StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))


async def run_demo(say: Say) -> list[str]:
    """Run the demo, narrating through ``say``; the list of what did not go as expected."""
    command = router_command()
    say(f"Starting the router: {Path(command.command).name} {' '.join(command.args)}  (stdio subprocess)")
    async with _compat.connect(command) as client:
        tools = [tool.name for tool in await client.list_tools()]
        say(f"It publishes {len(tools)} tools: {', '.join(tools)}")
        missing = ROUTER_TOOLS - set(tools)
        if missing:
            return [f"the router does not publish {sorted(missing)}{_minimal_mode_hint()}"]
        await _show_find_tool(client, say)
        calls = demo_calls()
        response, batch_seconds = await _run_batch(client, calls, say)
        problems = batch_problems(response, calls)
        reads = [call for call in calls if call.expected == "ok"]
        await _let_the_bucket_refill(say)
        sequential_seconds, mismatches = await _run_sequential(client, reads, response, say)
    say("")
    ratio = sequential_seconds / batch_seconds if batch_seconds > 0 else float("inf")
    say(f"{'One batch, 1 round trip:':34}{batch_seconds:6.2f} s")
    say(f"{f'Same reads, {len(reads)} round trips:':34}{sequential_seconds:6.2f} s")
    say(f"{'Ratio sequential / batch:':34}{ratio:6.1f}x")
    return problems + mismatches


# The longest the demo waits for the rate limiter's bucket to refill before the single reads.
MAX_REFILL_WAIT_SECONDS = 5.0


async def _let_the_bucket_refill(say: Say) -> None:
    """Wait until the router's rate limiter has its burst again, so the single reads start as the batch did.

    The batch drew a token for each read; the single reads right after it would wait for the bucket to refill
    (8 calls a second by default) and the ratio would tell the limiter, not the round trips. The router is this
    process's child, on the same environment, so its rate and burst are read here as it reads them.
    """
    rate = RATE.read(os.environ)
    wait = min(burst(os.environ, rate) / rate, MAX_REFILL_WAIT_SECONDS)
    if wait >= 0.01:
        say("")
        say(f"(waiting {wait:.1f} s for the rate limiter's bucket to refill: the single reads start as the batch did)")
        await anyio.sleep(wait)


def _minimal_mode_hint() -> str:
    if router_mode() != "minimal":
        return ""
    return f" ({ROUTER_MODE}=minimal is set: in that mode the plugin registers no batch tool; unset it)"


async def _show_find_tool(client: _compat.ClientHandle, say: Say) -> None:
    query = "device health"
    answer = await client.call_tool("find_tool", {"query": query, "top_k": 3})
    say("")
    say(f"find_tool(query={query!r}, top_k=3):")
    hits = _find_hits(answer.payload)
    rows = [
        [hit.get("name"), hit.get("server"), hit.get("capability"), hit.get("recommended_dispatcher")] for hit in hits
    ]
    say(table(["tool", "server", "capability", "dispatcher"], rows))


def _find_hits(payload: Any) -> list[dict[str, Any]]:
    """find_tool's hits, whether the router answers a list or an object holding one."""
    if isinstance(payload, dict):
        payload = next((value for value in payload.values() if isinstance(value, list)), [])
    return [hit for hit in payload if isinstance(hit, dict)] if isinstance(payload, list) else []


async def _run_batch(client: _compat.ClientHandle, calls: list[DemoCall], say: Say) -> tuple[dict[str, Any], float]:
    say("")
    say(f"invoke_read_tool_batch with {len(calls)} calls (reads, a write, an unknown tool):")
    progress = ProgressLine(say)
    started = time.perf_counter()
    arguments = {"calls": [call.entry() for call in calls]}
    answer = await client.call_tool("invoke_read_tool_batch", arguments, progress=progress)
    seconds = time.perf_counter() - started
    progress.finish()
    if answer.is_error or not isinstance(answer.payload, dict):
        raise RuntimeError(f"the batch tool answered an error: {answer.text[:300]}")
    response = answer.payload
    rows = [
        [item["index"], item["id"], item["tool"], item.get("server") or "-", item["status"], summary(item)]
        for item in response.get("results", [])
    ]
    say(table(["#", "id", "tool", "server", "status", "result"], rows))
    counts = response.get("counts", {})
    succeeded = f"{counts.get('succeeded')}/{counts.get('total')}"
    say(f"ok={response.get('ok')}  succeeded={succeeded}  failed_ids={response.get('failed_ids')}")
    return response, seconds


async def _run_sequential(
    client: _compat.ClientHandle, reads: list[DemoCall], response: dict[str, Any], say: Say
) -> tuple[float, list[str]]:
    say("")
    say(f"The same {len(reads)} reads, one invoke_read_tool round trip at a time:")
    batch_results = {item.get("id"): item.get("result") for item in response.get("results", [])}
    rows, total, mismatches = [], 0.0, []
    for call in reads:
        started = time.perf_counter()
        answer = await client.call_tool("invoke_read_tool", {"name": call.name, "arguments": dict(call.arguments)})
        seconds = time.perf_counter() - started
        total += seconds
        same = same_data(answer.payload, batch_results.get(call.id))
        status = (
            "error" if answer.is_error or (isinstance(answer.payload, dict) and "error" in answer.payload) else "ok"
        )
        if status != "ok":
            mismatches.append(f"invoke_read_tool {call.name} failed: {answer.text[:200]}")
        rows.append([call.id, call.name, status, f"{seconds:.3f}", "yes" if same else "no"])
    say(table(["id", "tool", "status", "seconds", "same as batch"], rows))
    return total, mismatches
