"""The ``centralmcp`` entry point of this distribution: hook implementations only."""

from __future__ import annotations

import logging
from typing import Any

import pluggy

from . import batch_tool
from .hookspecs import hookimpl
from .host import HostHooks
from .settings import ROUTER_MODE, registers_in_minimal_mode, router_mode

log = logging.getLogger(__name__)


@hookimpl
def centralmcp_register_tools(server: Any, pluginmanager: pluggy.PluginManager) -> None:
    # The host's minimal mode publishes only find_tool, invoke_read_tool and invoke_tool,
    # unless the host adopted the batch explicitly (adapters.centralmcp.adopt).
    if router_mode() == "minimal" and not registers_in_minimal_mode():
        log.info(
            "%s=minimal: %s is not registered, as the host's minimal mode publishes only find_tool, "
            "invoke_read_tool and invoke_tool (adapters.centralmcp.adopt registers it anyway)",
            ROUTER_MODE,
            batch_tool.TOOL_NAME,
        )
        return
    batch_tool.register(server, HostHooks(pluginmanager))
