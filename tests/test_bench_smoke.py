"""The benchmark runs end to end at a tiny size and writes every scenario as numbers."""

from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Any, Iterator

import pytest

from centralmcp_batch import bench

SCENARIOS = ("latency", "transport", "overhead", "budget", "load")


def sections(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair anywhere in the report."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner
            yield from sections(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from sections(inner)


def has_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Number):
        return True
    if isinstance(value, dict):
        return any(has_number(inner) for inner in value.values())
    return isinstance(value, list) and any(has_number(inner) for inner in value)


@pytest.mark.slow
def test_quick_bench_writes_every_scenario_with_numbers(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--repeat", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    pairs = list(sections(report))
    for scenario in SCENARIOS:
        rows = [value for key, value in pairs if scenario in key.lower() and isinstance(value, list) and value]
        assert rows, f"no rows for scenario {scenario!r}"
        assert all(has_number(row) for row in rows[0]), (scenario, rows[0])
    losses = [value for key, value in pairs if key in ("lost", "reordered", "lost_or_reordered")]
    assert losses and all(value == 0 for value in losses)
