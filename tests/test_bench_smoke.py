"""The benchmark runs end to end at a tiny size: every scenario, real answers, the JSON and the tables."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
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
    assert [target["met"] for target in report["targets"]] == [None] * 6  # n = 25 is not part of a quick run
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
    # A batch of 1 is set against one invoke_read_tool and against the floor: a tool that answers a
    # fixed batch answer under the same output schema, whose answer was checked like every other.
    cases = [row["case"] for row in report["mcp"]]
    assert cases == [
        "n=25: plugin vs the built-in batch",
        "n=1: plugin batch vs one invoke_read_tool",
        "n=1: a fixed batch answer vs one invoke_read_tool",
        "n=1: plugin batch vs a fixed batch answer",
    ]
    expected = {(name, n) for name in ("plugin", "old", "builtin") for n in (1, 25)}
    assert {(row["schema"], row["n"]) for row in report["schema"]} == expected
    rates = [(row["plugin_entries_per_s"]["median"], row["baseline_entries_per_s"]["median"]) for row in report["http"]]
    assert rates and all(plugin > 0 and baseline > 0 for plugin, baseline in rates)
    assert [target["met"] is not None for target in report["targets"]] == [True] * 11
    floor = next(row for row in report["mcp"] if row["case"] == cases[2])["plugin_over_baseline"]["median"]
    floors = {item["target"]: item["floor"] for item in report["targets"] if "floor" in item}
    # the batch-of-1 target, and it alone, shows the schema's floor
    assert floors == {"n=1: plugin batch <= 1.1x one invoke_read_tool": round(floor, 3)}
    assert done.stdout.count("\n### ") == 8


def load_baseline(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/centralmcp_baseline.py`` as a module; the entries it puts on ``sys.path`` go with the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("centralmcp_baseline", ROOT / "benchmarks" / "centralmcp_baseline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def figure(median: float) -> dict[str, float]:
    return {"median": median, "min": median, "max": median}


def test_the_baseline_floor_goes_to_the_batch_of_one_target_in_any_order(monkeypatch: pytest.MonkeyPatch) -> None:
    baseline = load_baseline(monkeypatch)
    mcp: list[dict[str, Any]] = [
        {**baseline.BATCH_OF_25, "plugin_over_baseline": figure(0.9)},
        {**baseline.BATCH_OF_ONE, "plugin_over_baseline": figure(1.05)},
        {**baseline.SCHEMA_FLOOR, "plugin_over_baseline": figure(1.02)},
    ]
    batch_of_one = next(goal[0] for goal in baseline.GOALS if goal[2] == baseline.BATCH_OF_ONE)
    for order in (baseline.GOALS, baseline.GOALS[::-1]):  # a new target, or one moved, must not move the floor
        monkeypatch.setattr(baseline, "GOALS", order)
        floors = {item["target"]: item["floor"] for item in baseline.targets({"mcp": mcp}) if "floor" in item}
        assert floors == {batch_of_one: 1.02}


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
