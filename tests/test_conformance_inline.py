"""The conformance kit, run against the kit's own sample host and the reference router."""

import pytest

from centralmcp_batch.router import demo
from centralmcp_batch.testing import HostConformance, sample_host


class TestSampleHostConforms(HostConformance):
    read_tool = "echo"
    write_tool = "delete_everything"
    read_arguments = {"q": "x"}

    @pytest.fixture
    def host_plugins(self) -> list[object]:
        return [sample_host()]


class TestReferenceRouterConforms(HostConformance):
    # list_clients answers ~27 kB unbounded, so the kit's max_bytes check has something to bound.
    read_tool = "list_clients"
    write_tool = "delete_site"
    read_arguments: dict[str, str] = {}

    @pytest.fixture
    def host_plugins(self, monkeypatch: pytest.MonkeyPatch) -> list[object]:
        monkeypatch.setenv(demo.LATENCY_ENV, "0")
        monkeypatch.setenv("CENTRALMCP_ROUTER_RATE_PER_SECOND", "1000")
        plugins = demo.demo_router().plugin_manager
        # The router's own hooks and limiter: what it registered, not what entry points brought.
        brought = {id(plugin) for plugin, _dist in plugins.list_plugin_distinfo()}
        return [plugin for plugin in plugins.get_plugins() if id(plugin) not in brought]
