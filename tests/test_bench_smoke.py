"""The benchmark runs end to end at a tiny size: every scenario, real answers, the JSON and the tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from centralmcp_batch import bench
from centralmcp_batch.bench.targets import LATENCY_EFFICIENCY

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
    assert all(
        row["wall_ms"]["min"] >= row["ideal_ms"] * 0.99 for row in report["latency_bound"]
    )  # nothing beats sleeping
    assert {row["transport"] for row in report["transports"]} == {"stdio", "streamable HTTP"}
    assert all(
        row["batch_us"]["median"] > row["direct_us"]["median"] for row in report["overhead"]
    )  # same calls, plus the batch
    assert all(row["bytes_returned"] <= 300_000 for row in report["budget"])
    assert any(row["results_dropped"] > 0 for row in report["budget"])  # the quick plan goes over the budget once
    assert all(row["batches"] > 0 and row["lost_or_reordered"] == 0 for row in report["load"])
    assert [target["met"] for target in report["targets"]] == [None] * 7  # the targets are the full plan's
    assert report["machine"]["nproc"] >= 1 and report["machine"]["mcp"]


ROOT = Path(__file__).resolve().parents[1]
BLOCK_PYTEST = "import sys; sys.modules['pytest'] = None; sys.modules['_pytest'] = None"  # import pytest now fails


def test_bench_runs_where_pytest_cannot_be_imported(tmp_path: Path) -> None:
    # A plain `pip install .` has no pytest: `centralmcp-batch bench` must not need it.
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--scenarios", "overhead,rate", "--json", str(out)]
    script = f"{BLOCK_PYTEST}; from centralmcp_batch import cli; raise SystemExit(cli.main({argv!r}))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["overhead"] and report["rate_bound"][0]["ideal_ms"] == 250.0  # (10 - 8 burst) / 8 per second
    assert report["rate_bound"][0]["wall_ms"]["min"] >= 250.0 * 0.99  # nothing beats the token bucket


@pytest.mark.slow
def test_centralmcp_baseline_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "baseline.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "centralmcp_baseline.py"), "--quick", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]  # a lost or misplaced answer stops it with BaselineError
    report = json.loads(out.read_text())
    assert all(report[key] for key in ("in_process", "mcp", "schema", "memory", "http", "records", "failures"))
    for workload in ("records", "failures"):  # each entry failed as its tool should, or the run stopped
        assert [row["where"] for row in report[workload]] == ["in process", "MCP session"]
    assert {row["n"] for row in report["in_process"]} == {1, 25}
    assert [row["case"] for row in report["mcp"]] == [
        "n=25: plugin (memory store) vs the built-in batch",
        "n=25: plugin (SQLite store, the default) vs the built-in batch",
        "n=1: plugin batch vs one invoke_read_tool",
    ]
    expected = {(name, n) for name in ("plugin", "builtin") for n in (1, 25)}
    assert {(row["schema"], row["n"]) for row in report["schema"]} == expected
    rates = [(row["plugin_entries_per_s"]["median"], row["baseline_entries_per_s"]["median"]) for row in report["http"]]
    assert rates and all(plugin > 0 and baseline > 0 for plugin, baseline in rates)
    # Every figure measured: the memory target held to its limit, the zero-latency ones recorded.
    assert all(item["value"] is not None for item in report["targets"])
    assert [item["threshold"] for item in report["targets"]] == [1.2] + [None] * (len(report["targets"]) - 1)
    assert done.stdout.count("\n### ") == 8 and done.stdout.count(" -> recorded") == len(report["targets"]) - 1


@pytest.mark.anyio
async def test_a_sample_is_sized_by_a_run_after_the_first() -> None:
    # A first run that pays a one-time cost (an MCP client listing the tools) must not shrink every sample.
    runs: list[float] = []

    async def first_slow() -> None:
        await anyio.sleep(0.5 if not runs else 0.001)
        runs.append(1.0)

    loops = await bench.loops_for(first_slow, 0.25)
    # Sized by a 1 ms run (up to 250; a loaded machine oversleeps, by 20 ms with two suites running, so
    # the margin is wide: 2 or more while it takes under 125 ms), not by the 500 ms one (1).
    assert len(runs) == 2 and loops >= 2


def figure(median: float) -> dict[str, float]:
    return {"median": median, "min": median, "max": median}


def test_the_latency_targets_are_held_at_n_25_and_at_n_5_of_a_full_run() -> None:
    rows = [
        {"n": n, "mode": "batch c=8", "efficiency": figure(efficiency), "speedup_over_c1": figure(6.1)}
        for n, efficiency in ((5, 0.95), (25, 0.92))
    ]
    rows[1]["speedup_over_singles"] = figure(6.2)
    found = {item["target"]: item for item in bench.targets({"config": {"quick": False}, "latency_bound": rows})}
    efficiency = f"c=8: efficiency (ideal/measured) >= {LATENCY_EFFICIENCY}"
    assert (found[f"L=50ms n=25 {efficiency}"]["met"], found[f"L=50ms n=5 {efficiency}"]["met"]) == (False, True)
    # A quick run's reads are shorter than the targets' 50 ms: none of its rows is held to them.
    quick = bench.targets({"config": {"quick": True}, "latency_bound": rows})
    assert [item["met"] for item in quick if item["target"].startswith("L=50ms")] == [None] * 4
