"""A client process for the rate's cancellation test: ``python rate_clients.py STORE RATE BURST PLAN``.

PLAN is JSON: a list of batches, each ``[calls, seconds each call takes, seconds until the client cancels
it]``. The batches run one after another through the plugin's own stack (the facade, the pipeline, the
engine and the account-wide limiter on STORE); each backend call appends the wall-clock time it started
to stdout, one per line. The test judges the times of every process together; this process only reports.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from centralmcp_batch import _compat, batch_tool, hosting
from centralmcp_batch.host import HostHooks
from centralmcp_batch.inline_host import InlineHost
from centralmcp_batch.ratelimit import RateLimiter, RateLimitPlugin, open_store


async def main(store: str, rate: float, burst: int, plan: list[list[float]]) -> None:
    host = InlineHost()

    async def read(n: int, seconds: float) -> dict[str, int]:
        print(f"{time.time():.6f}", flush=True)
        await anyio.sleep(seconds)
        return {"n": n}

    host.add("read", read)
    limiter = RateLimiter(open_store(store), rate, burst)
    pm = hosting.install(_compat.new_server("rate-client"), host, RateLimitPlugin(limiter))
    hooks = HostHooks(pm)
    for calls, seconds, cancel_after in plan:
        entries = [{"name": "read", "arguments": {"n": n, "seconds": seconds}} for n in range(int(calls))]
        with anyio.move_on_after(cancel_after):
            await batch_tool.run(hooks, entries)
    await limiter.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))
