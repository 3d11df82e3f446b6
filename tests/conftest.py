import os

import pytest

pytest_plugins = ["redis_server"]  # the redis_server and redis_url fixtures

# The default rate store is a SQLite file in the user's cache directory, shared by every process
# on the machine. Tests must not share one budget across test runs and subprocesses by accident
# (slow and flaky): unless the environment names a store, every router this session builds,
# in this process or in a subprocess that inherits the environment, keeps its own bucket in
# memory. The tests of the shared stores name their store explicitly.
os.environ.setdefault("CENTRALMCP_ROUTER_RATE_STORE", "memory")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
