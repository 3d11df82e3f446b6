"""centralmcp-batch: ``invoke_read_tool_batch`` for MCP tool routers, as a pluggy plugin."""

from importlib.metadata import PackageNotFoundError, version

from .errors import HostContractError, InvalidCursor, ManifestError, PluginError
from .models import CallContext, RateBooking, ToolRef

try:
    __version__ = version("centralmcp-batch")
except PackageNotFoundError:  # pragma: no cover - running from a checkout that is not installed
    __version__ = "0+unknown"

__all__ = [
    "CallContext",
    "HostContractError",
    "InvalidCursor",
    "ManifestError",
    "PluginError",
    "RateBooking",
    "ToolRef",
    "__version__",
]
