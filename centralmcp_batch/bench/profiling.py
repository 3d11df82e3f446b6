"""``--profile``: the hot path under pyinstrument, which only this option needs (the ``bench`` extra)."""

from __future__ import annotations

from typing import Any

from .. import batch_tool, hosting
from ..host import HostHooks
from .backends import zero_host
from .calls import check_batch, wait_calls

MISSING = "--profile needs pyinstrument, which a plain install does not have: pip install 'centralmcp-batch[bench]'"


class ProfilerMissing(RuntimeError):
    """pyinstrument is not installed; the message says how to get it."""


def new_profiler() -> Any:
    try:
        # Not a dependency: imported here, only when --profile asks for it.
        from pyinstrument import Profiler  # type: ignore[import-not-found,unused-ignore]  # optional, may have no stubs
    except ImportError as missing:
        raise ProfilerMissing(MISSING) from missing
    return Profiler(interval=0.0002, async_mode="disabled")


async def profile(path: str, batches: int = 400) -> None:
    """The hot path as pyinstrument sees it: batches of 25 zero-latency entries through the host hooks."""
    profiler = new_profiler()
    hooks = HostHooks(hosting.plugin_manager(zero_host()))
    calls = wait_calls(25, 0.0)
    with profiler:
        for _ in range(batches):
            check_batch(await batch_tool.run(hooks, calls), calls)
    with open(path, "w", encoding="utf-8") as out:
        out.write(profiler.output_text(unicode=True, color=False))
