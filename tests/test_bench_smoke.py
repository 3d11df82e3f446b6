"""The benchmark runs end to end at a tiny size: every scenario, real answers, the JSON and the tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from centralmcp_batch import bench

SCENARIO_KEYS = ("latency_bound", "transports", "overhead", "budget", "load", "rate_bound")


@pytest.mark.slow
def test_quick_bench_writes_every_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    # A wrong answer anywhere (lost, reordered, failed entries) stops the run with BenchError.
    assert bench.main(["--quick", "--repeat", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert all(report[key] for key in SCENARIO_KEYS)
    assert printed.count("\n### ") == len(SCENARIO_KEYS) + 1  # a table per scenario, then the targets
    assert {row["mode"] for row in report["latency_bound"]} == {"singles", "batch c=1", "batch c=4", "batch c=8"}
    assert all(row["wall_ms"]["min"] >= row["ideal_ms"] * 0.99 for row in report["latency_bound"])  # nothing beats sleeping
    assert {row["transport"] for row in report["transports"]} == {"stdio", "streamable HTTP"}
    assert all(row["batch_us"]["median"] > row["direct_us"]["median"] for row in report["overhead"])  # same calls, plus the batch
    assert all(row["bytes_returned"] <= 300_000 for row in report["budget"])
    assert any(row["results_dropped"] > 0 for row in report["budget"])  # the quick plan goes over the budget once
    assert all(row["batches"] > 0 and row["lost_or_reordered"] == 0 for row in report["load"])
    assert [target["met"] for target in report["targets"]] == [None] * 6  # n = 25 is not part of a quick run
    assert report["machine"]["nproc"] >= 1 and report["machine"]["mcp"]
