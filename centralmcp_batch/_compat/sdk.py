"""The MCP SDK line installed, and the names both lines give the same thing under different paths."""

from __future__ import annotations

from importlib.metadata import version

SDK_VERSION = version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])
# A plain name, so mypy can take it as a constant (always_true in pyproject.toml): mypy checks
# the 2.x branches, and the 1.x branches are held by the SDK 1.x leg of the test suite.
SDK_2 = SDK_MAJOR >= 2

if SDK_2:
    from mcp import StdioServerParameters
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.shared.exceptions import MCPError as ErrorResponse
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
else:  # pragma: no cover - exercised by the SDK 1.x leg of CI
    from mcp import StdioServerParameters
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError
    from mcp.shared.exceptions import McpError as ErrorResponse
    from mcp.types import CallToolResult, TextContent, ToolAnnotations

__all__ = [
    "SDK_2",
    "SDK_MAJOR",
    "SDK_VERSION",
    "CallToolResult",
    "Context",
    "ErrorResponse",
    "Server",
    "StdioServerParameters",
    "TextContent",
    "ToolAnnotations",
    "ToolError",
]
