"""pytest plugin (``pytest11``): the fixtures over :mod:`centralmcp_batch.inline_host`, loaded when a test asks for one.

pytest loads every installed ``pytest11`` plugin at the start of every run, in every project that
shares the environment (CentralMCP's own test suite, once it has adopted the plugin). Importing the
kit brings the MCP SDK, pluggy and the reference router with it, about half a second, and an SDK that
cannot be imported would stop every run there; so this module imports only pytest, and each fixture
imports the kit when it is first used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .inline_host import InlineHost

# pytest rewrites the asserts of the modules a plugin's distribution lists in its metadata, which an
# editable install (a path file) may not list: named here, the kit's checks print the values they
# compared however the package was installed.
pytest.register_assert_rewrite("centralmcp_batch.testing")


@pytest.fixture
def centralmcp_host() -> InlineHost:
    """A fresh :class:`InlineHost` with ``echo``, ``slow``, ``rows`` (read) and ``delete_everything`` (write)."""
    from .inline_host import sample_host

    return sample_host()


@pytest.fixture
def centralmcp_server(centralmcp_host: InlineHost) -> Any:
    """An MCP server with ``centralmcp_host`` installed and the ``centralmcp`` plugins loaded."""
    from .inline_host import server_of

    return server_of(centralmcp_host)


@pytest.fixture
def centralmcp_call() -> Callable[..., Any]:
    """``await centralmcp_call(server, tool, arguments)``: the tool's answer over a real session."""
    from .inline_host import call

    return call
