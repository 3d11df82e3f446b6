"""The calls a scenario makes, and the checks that stop the run when an answer is wrong."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import _compat
from .plan import BATCH_TOOL


class BenchError(RuntimeError):
    """A run answered wrongly: its timing would mean nothing, so the benchmark stops."""


def wait_calls(n: int, seconds: float, prefix: str = "e") -> list[dict[str, Any]]:
    return [
        {"name": "wait", "id": f"{prefix}{i}", "arguments": {"seconds": seconds, "tag": f"{prefix}{i}"}}
        for i in range(n)
    ]


def misplaced(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(lost, reordered): entries without an ok answer, and answers not at their call's place."""
    results = list(response.get("results") or [])
    lost = max(0, len(calls) - len(results))
    reordered = 0
    for call, item in zip(calls, results, strict=False):  # a short answer's missing entries are counted above
        if item.get("status") != "ok":
            lost += 1
        elif item.get("id") != call["id"] or (item.get("result") or {}).get("tag") != call["arguments"]["tag"]:
            reordered += 1
    return lost, reordered


def check_batch(response: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> None:
    lost, reordered = misplaced(response, calls)
    if lost or reordered or not response.get("ok"):
        raise BenchError(
            f"a batch of {len(calls)} answered wrongly ({lost} lost, {reordered} reordered): {str(response)[:300]}"
        )


async def mcp_batch(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await client.call_tool(BATCH_TOOL, {"calls": calls}, timeout=120)
    if answer.is_error or not isinstance(answer.structured, dict):
        raise BenchError(f"{BATCH_TOOL} failed: {answer.text[:300]}")
    return answer.structured


async def checked_batch(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> None:
    check_batch(await mcp_batch(client, calls), calls)


async def single_reads(client: _compat.ClientHandle, calls: list[dict[str, Any]]) -> None:
    """The same entries as ``invoke_read_tool`` round trips, one after the other."""
    for call in calls:
        arguments = {"name": call["name"], "arguments": call["arguments"]}
        answer = await client.call_tool("invoke_read_tool", arguments, timeout=120)
        if answer.is_error or (answer.structured or {}).get("tag") != call["arguments"]["tag"]:
            raise BenchError(f"invoke_read_tool failed: {answer.text[:300]}")
