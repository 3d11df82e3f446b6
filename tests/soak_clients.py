"""The soak's clients, in a process of their own: ``python soak_clients.py URL CLIENTS BATCHES``.

For each round number read from stdin, CLIENTS clients at once each open their own streamable
HTTP session to URL, send BATCHES batches of 25 tagged entries on it at once and close (at once,
so the router's limiter always has callers waiting and no client waits for another's batch);
then one JSON line on stdout says what came back: per batch, whether it was ok and the ids and
tags of its results in the order received. The test judges them; this process only reports.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from centralmcp_batch import _compat

ENTRIES = 25


def tagged_calls(round_no: int, client_no: int, batch_no: int) -> list[dict[str, Any]]:
    prefix = f"r{round_no}c{client_no}b{batch_no}e"
    return [{"name": "echo", "id": f"{prefix}{i}", "arguments": {"tag": f"{prefix}{i}"}} for i in range(ENTRIES)]


async def one_client(url: str, round_no: int, client_no: int, batches: int) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = [{} for _ in range(batches)]

    async def run(client: _compat.ClientHandle, batch_no: int) -> None:
        reports[batch_no] = await one_batch(client, round_no, client_no, batch_no)

    async with _compat.connect(url) as client, anyio.create_task_group() as tasks:
        for batch_no in range(batches):
            tasks.start_soon(run, client, batch_no)
    return reports


async def one_batch(client: _compat.ClientHandle, round_no: int, client_no: int, batch_no: int) -> dict[str, Any]:
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": tagged_calls(round_no, client_no, batch_no)})
    response = answer.structured or {}
    results = response.get("results", [])
    return {
        "client": client_no,
        "batch": batch_no,
        "ok": not answer.is_error and response.get("ok") is True,
        "ids": [item.get("id") for item in results],
        "tags": [(item.get("result") or {}).get("tag") for item in results],
        "error": answer.text[:300] if answer.is_error else None,
    }


async def one_round(url: str, round_no: int, clients: int, batches: int) -> list[dict[str, Any]]:
    reports: list[list[dict[str, Any]]] = [[] for _ in range(clients)]

    async def run(client_no: int) -> None:
        reports[client_no] = await one_client(url, round_no, client_no, batches)

    async with anyio.create_task_group() as tasks:
        for client_no in range(clients):
            tasks.start_soon(run, client_no)
    return [report for client_reports in reports for report in client_reports]


async def main(url: str, clients: int, batches: int) -> None:
    for line in sys.stdin:
        round_no = int(line)
        reports = await one_round(url, round_no, clients, batches)
        print(json.dumps({"round": round_no, "batches": reports}), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
