"""``benchmarks/account_rate.py``: its earliest-schedule arithmetic, and a quick run end to end (no timing asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def account_rate(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark as a module; the paths it puts on ``sys.path`` go with the test."""
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS), *sys.path])
    spec = importlib.util.spec_from_file_location("account_rate", BENCHMARKS / "account_rate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_schedule_is_the_rate_after_the_burst_plus_one_read(account_rate: ModuleType) -> None:
    schedule = account_rate.earliest_schedule
    # 10/s, burst 5, reads of 200 ms, 4 at a time: token i at (i - 4) / 10 s once the burst is spent.
    assert schedule(25, 0.2, 4, [(10.0, 5)]) == pytest.approx(2.2)  # the 25th token at 2.0 s
    assert schedule(8, 0.2, 4, [(10.0, 5)]) == pytest.approx(0.5)
    assert schedule(10, 0.2, 4, [(10.0, 5)]) == pytest.approx(0.7)
    assert schedule(5, 0.2, 4, [(10.0, 5)]) == pytest.approx(0.4)  # within the burst: two rounds of 4 and 1


def test_the_schedule_waits_for_the_call_c_places_before(account_rate: ModuleType) -> None:
    schedule = account_rate.earliest_schedule
    assert schedule(25, 0.2, 1, [(10.0, 5)]) == pytest.approx(5.0)  # one at a time: the rate never binds
    assert schedule(8, 0.2, 1, [(10.0, 5)]) == pytest.approx(1.6)
    assert schedule(25, 0.05, 8, [(1e9, 1)]) == pytest.approx(0.2)  # no rate to speak of: ceil(25 / 8) reads
    assert schedule(5, 0.05, 8, [(1e9, 1)]) == pytest.approx(0.05)
    # Both bind in turn: 3 at once (burst 3), then one every 0.5 s, each read 1 s, 2 at a time.
    # starts 0, 0, max(1.0 (the end of call 0), 0.5), max(1.0, 1.0), max(2.0, 1.5), ...
    assert schedule(5, 1.0, 2, [(2.0, 3)]) == pytest.approx(2.0 + 1.0)
    assert schedule(0, 0.2, 4, [(10.0, 5)]) == 0.0


def test_each_limit_on_the_path_holds_a_token_back(account_rate: ModuleType) -> None:
    schedule = account_rate.earliest_schedule
    # The real router run as a script: the account's 10/s with a burst of 5, and its own bucket, 8/s with 8.
    both = [(10.0, 5), (8.0, 8)]
    assert schedule(25, 0.2, 4, both) == pytest.approx((25 - 8) / 8 + 0.2)  # its own bucket binds last
    assert schedule(8, 0.2, 4, both) == pytest.approx(0.5)  # the account's binds first
    assert schedule(25, 0.2, 4, both) == pytest.approx(max(schedule(25, 0.2, 4, [limit]) for limit in both))


def test_a_workload_repeats_its_distinct_reads(account_rate: ModuleType) -> None:
    shared = account_rate.SHARED.calls(0.2)
    assert len(shared) == 25 and len({call["id"] for call in shared}) == 25
    assert len({call["arguments"]["tag"] for call in shared}) == 8
    assert [workload.distinct for workload in account_rate.WORKLOADS] == [25, 8, 10]


@pytest.mark.anyio
async def test_a_quick_run_checks_every_answer_and_counts_backend_calls(account_rate: ModuleType) -> None:
    # Every answer is checked as it comes (a lost, misplaced or failed entry stops the run with BenchError).
    report = await account_rate.run_plan(account_rate.make_plan(quick=True, repeat=1, store="memory"))
    rows = {(row["workload"], row["variant"]): row for row in report["batches"]}
    assert len(rows) == 6
    for workload in account_rate.WORKLOADS:
        builtin, plugin = rows[(workload.label, "built-in")], rows[(workload.label, "plugin")]
        assert builtin["backend_calls"] == workload.reads  # the built-in reads every repeat again
        assert plugin["backend_calls"] == plugin["tokens"] == workload.distinct  # the plugin reads each once
        assert builtin["concurrency"] == 1 and builtin["schedule_s"] == pytest.approx(
            account_rate.earliest_schedule(workload.distinct, 0.02, 1, [(100.0, 5)]), abs=1e-3
        )
        # A schedule is the earliest possible: a run never beats it (a wide margin for the timer).
        assert builtin["of_schedule"]["max"] <= 1.05 and plugin["of_schedule"]["max"] <= 1.05
    assert [target["met"] is not None for target in report["targets"]] == [True]
    printed = account_rate.render(report)
    assert "### Targets" in printed and account_rate.TARGET in printed
