"""Timing rounds and the figures made from them: median, min and max, round-by-round ratios."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

Run = Callable[[], Awaitable[Any]]


def summary(samples: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    values = [sample * scale for sample in samples]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round-by-round ratios: each pair was measured in the same round."""
    return [top / bottom for top, bottom in zip(numerators, denominators, strict=True)]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile: a value that was actually observed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


async def rounds(
    variants: Mapping[str, Run], repeat: int, inner: Mapping[str, int] | None = None
) -> dict[str, list[float]]:
    """Seconds per run of each variant, ``repeat`` rounds, the variants interleaved in each round."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, run in variants.items():
            times = (inner or {}).get(name, 1)
            started = time.perf_counter()
            for _ in range(times):
                await run()
            samples[name].append((time.perf_counter() - started) / times)
    return samples


async def loops_for(run: Run, seconds: float) -> int:
    """How many runs make one sample of at least ``seconds``, as a run after a first one takes.

    A variant's first run may pay what no other run does: an MCP client lists the server's tools on
    its first call, to learn their output schemas (25 ms against a batch's 1 ms). Timed, it gave the
    variant samples of two runs, each led by the slower run that follows another variant's sample.
    """
    await run()
    started = time.perf_counter()
    await run()
    once = max(time.perf_counter() - started, 1e-7)
    return max(1, math.ceil(seconds / once))
