"""The conformance kit, run against the kit's own sample host and the reference router."""

import math
from collections.abc import Sequence

import pytest

from centralmcp_batch.models import RateBooking
from centralmcp_batch.ratelimit import RateLimitPlugin
from centralmcp_batch.router import Router, demo
from centralmcp_batch.router.limiter import TokenBucket
from centralmcp_batch.testing import HostConformance, InlineHost, sample_host


class TestSampleHostConforms(HostConformance):
    # rows answers ~2.5 kB in full, so the max_bytes check has something to bound and the pages carry cursors.
    read_tool = "rows"
    write_tool = "delete_everything"
    read_arguments = {"count": 100}
    read_server = "inline"

    @pytest.fixture
    def host_plugins(self) -> list[object]:
        return [sample_host()]

    def tokens_drawn(self, host_plugins: list[object]) -> int:
        (host,) = host_plugins
        assert isinstance(host, InlineHost)
        return len(host.tokens)  # it records each token its hook draws

    def next_cursor(self, result: object) -> str | None:
        # The kit skips its cursor checks for an answer without a cursor: here that is a failure.
        cursor = super().next_cursor(result)
        assert cursor is not None, f"the sample host's clipped rows carry no next_cursor: {result}"
        return cursor


class CountingBucket(TokenBucket):
    """The router's limiter, at a rate the kit never waits for, counting the tokens it hands out."""

    def __init__(self) -> None:
        super().__init__(rate=1000, burst=1000)
        self.drawn = 0

    async def reserve(self, count: int, within: float = math.inf) -> RateBooking:
        booking = await super().reserve(count, within)
        self.drawn += len(booking.waits)
        return booking

    async def _give_back(self, shared: Sequence[float], local: Sequence[float]) -> None:
        self.drawn -= len(local)  # a token given back unused was not drawn
        await super()._give_back(shared, local)


class TestReferenceRouterConforms(HostConformance):
    # list_clients answers ~27 kB unbounded, so the kit's max_bytes check has something to bound.
    read_tool = "list_clients"
    write_tool = "delete_site"
    read_arguments: dict[str, str] = {}
    read_server = "inventory"

    @pytest.fixture
    def host_plugins(self, monkeypatch: pytest.MonkeyPatch) -> list[object]:
        monkeypatch.setenv(demo.LATENCY_ENV, "0")
        plugins = Router(demo.demo_backends(), name="centralmcp-demo", limiter=CountingBucket()).plugin_manager
        # The router's own hooks and limiter: what it registered, not what entry points brought.
        brought = {id(plugin) for plugin, _dist in plugins.list_plugin_distinfo()}
        return [plugin for plugin in plugins.get_plugins() if id(plugin) not in brought]

    def tokens_drawn(self, host_plugins: list[object]) -> int:
        (limiter,) = [plugin.limiter for plugin in host_plugins if isinstance(plugin, RateLimitPlugin)]
        assert isinstance(limiter, CountingBucket)
        return limiter.drawn
