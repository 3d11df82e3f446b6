"""Every difference between MCP SDK 1.x (``FastMCP``) and 2.x (``MCPServer``), in one place.

Nothing else in the package branches on the SDK version: servers are made, tools are added,
backends are called and client results are read through these names. By job:

- ``sdk``: the SDK line installed, and the names both lines have under different paths;
- ``results``: a tool's description and a tool's answer, read the same way from either line;
- ``server``: making servers, adding and reading their tools, structured answers, progress;
- ``client``: the backend client (``connect``, ``ClientHandle``) and, on 1.x over HTTP, lost answers;
- ``serving``: running a server over stdio, and the streamable HTTP app with its Host and Origin checks.
"""

from .client import AnswerLost, ClientHandle, SessionClosed, SessionUnknown, connect, error_response_text
from .results import Answer, ToolInfo, annotation_hint, annotations_dict
from .sdk import SDK_2, SDK_MAJOR, SDK_VERSION, Context, Server, StdioServerParameters, ToolAnnotations, ToolError
from .server import (
    add_tool,
    answer_dicts_with_compact_json,
    argument_errors,
    call_manager_tool,
    call_server_tool,
    has_tool,
    is_server,
    new_server,
    progress_may_be_heard,
    publish_output_schema,
    put_tool,
    refusing_duplicate_tools,
    remove_tool,
    server_tools,
    tool_function,
    tool_names,
)
from .serving import http_app, run_stdio

__all__ = [
    "SDK_2",
    "SDK_MAJOR",
    "SDK_VERSION",
    "Answer",
    "AnswerLost",
    "ClientHandle",
    "Context",
    "Server",
    "SessionClosed",
    "SessionUnknown",
    "StdioServerParameters",
    "ToolAnnotations",
    "ToolError",
    "ToolInfo",
    "add_tool",
    "annotation_hint",
    "annotations_dict",
    "answer_dicts_with_compact_json",
    "argument_errors",
    "call_manager_tool",
    "call_server_tool",
    "connect",
    "error_response_text",
    "has_tool",
    "http_app",
    "is_server",
    "new_server",
    "progress_may_be_heard",
    "publish_output_schema",
    "put_tool",
    "refusing_duplicate_tools",
    "remove_tool",
    "run_stdio",
    "server_tools",
    "tool_function",
    "tool_names",
]
