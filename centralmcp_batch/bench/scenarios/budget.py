"""Scenario 4, the response budget: batches of large results, and what shrinking them to fit costs."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ... import batch_tool, budget, hosting, items, settings
from ...host import HostHooks
from ...models import Outcome
from ..backends import BenchHost
from ..plan import Plan
from ..stats import rounds, summary

ROW_BYTES = 100  # one generated row of a large result, as compact JSON


def large_result(kb: int) -> dict[str, Any]:
    """About ``kb`` kilobytes of rows, as compact JSON."""
    rows = [{"id": i, "text": "x" * (ROW_BYTES - 23)} for i in range(kb * 1000 // ROW_BYTES)]
    return {"rows": rows}


def budget_host(results: Mapping[int, dict[str, Any]]) -> BenchHost:
    return BenchHost({"blob": lambda kb=0: results[kb]})


async def budget_scenario(plan: Plan) -> list[dict[str, Any]]:
    main_kb = 200 if 200 in plan.budget_kb else plan.budget_kb[-1]
    results = {kb: large_result(kb) for kb in plan.budget_kb}
    host = budget_host(results)
    hooks = HostHooks(hosting.plugin_manager(host))
    cases = [(n, main_kb) for n in plan.sizes] + [(plan.largest, kb) for kb in plan.budget_kb if kb != main_kb]
    return [await budget_row(plan, n, kb, hooks, host) for n, kb in cases]


async def budget_row(plan: Plan, n: int, kb: int, hooks: HostHooks, host: BenchHost) -> dict[str, Any]:
    calls = [{"name": "blob", "id": f"b{i}", "arguments": {"kb": kb}} for i in range(n)]
    result = host.handlers["blob"](kb=kb)
    whole = [items.make_item(i, f"b{i}", "blob", "inline", Outcome("ok", result=result)) for i in range(n)]
    sizes = [budget.size(item) for item in whole]  # the batch sizes each item once, as it finishes
    limit = settings.BatchSettings().response_max_bytes
    fit_times: list[float] = []

    async def fit() -> None:
        fresh = items.assemble(whole)  # fit shrinks in place: a fresh response each time
        started = time.perf_counter()
        budget.fit(fresh, limit, sizes)
        fit_times.append(time.perf_counter() - started)

    async def batch() -> None:
        await batch_tool.run(hooks, calls)

    await rounds({"batch": batch}, 1)  # warm-up, not kept
    samples = await rounds({"fit": fit, "batch": batch}, plan.repeat)
    return budget_figures(n, sizes, fit_times, samples["batch"], await batch_tool.run(hooks, calls))


def budget_figures(
    n: int, sizes: list[int], fit_times: list[float], batch_times: list[float], response: dict[str, Any]
) -> dict[str, Any]:
    megabytes = sum(sizes) / 1e6
    return {
        "n": n,
        "result_kb": round(sizes[0] / 1000, 1),
        "input_mb": round(megabytes, 2),
        "fit_us": summary(fit_times, 1e6),
        "fit_us_per_entry": summary([seconds / n for seconds in fit_times], 1e6),
        "fit_us_per_mb": summary([seconds / megabytes for seconds in fit_times], 1e6),
        "batch_ms": summary(batch_times, 1000),
        "batch_ms_per_mb": summary([seconds / megabytes for seconds in batch_times], 1000),
        "bytes_returned": budget.size(response),
        "results_dropped": sum(1 for item in response["results"] if item.get("result_truncated")),
    }
