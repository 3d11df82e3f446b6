"""The conformance kit, run against the kit's own sample host."""

import pytest

from centralmcp_batch.testing import HostConformance, sample_host


class TestSampleHostConforms(HostConformance):
    read_tool = "echo"
    write_tool = "delete_everything"
    read_arguments = {"q": "x"}

    @pytest.fixture
    def host_plugins(self) -> list[object]:
        return [sample_host()]
