"""A stdio backend on the SDK's low-level ``Server`` with a hand-written input schema (``python lowlevel.py``).

Its argument errors are jsonschema's, which quote the value (``'VALUE' is not of type 'integer'``):

- ``lowlevel_read`` answers them as an ``isError`` result, ``Input validation error: MESSAGE``. SDK 1.x's
  ``Server`` checks the input schema itself and answers so; SDK 2.x's checks nothing, and the handler
  answers the same way.
- ``lowlevel_rpc`` answers them as a JSON-RPC error, -32602 "Invalid params", with the message.
- ``lowlevel_lookup`` takes any arguments and fails in words no validator uses, quoting its ``site``:
  ``no site 'VALUE' in this region``.
"""

from __future__ import annotations

from typing import Any

import anyio
import jsonschema

from centralmcp_batch import _compat

INVALID_PARAMS = -32602
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "serial": {"type": "string"},
        "count": {"type": "integer", "minimum": 0},
        "mode": {"enum": ["fast", "full"]},
        "tags": {"type": "array", "items": {"type": "integer"}},
        "filters": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["serial"],
    "additionalProperties": False,
}
LOOKUP_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"site": {"type": "string"}}}
READ = {"readOnlyHint": True}
TOOLS = {"lowlevel_read": SCHEMA, "lowlevel_rpc": SCHEMA, "lowlevel_lookup": LOOKUP_SCHEMA}


def answer(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "lowlevel_lookup":
        raise LookupError(f"no site {arguments.get('site')!r} in this region")
    return {"serial_length": len(arguments["serial"]), "ok": True}  # never a value back: the tests look for one


def schema_message(name: str, arguments: dict[str, Any]) -> str | None:
    try:
        jsonschema.validate(arguments, TOOLS[name])
    except jsonschema.ValidationError as exc:
        return str(exc.message)
    return None


if _compat.SDK_2:
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

    def tools() -> list[Any]:
        hints = types.ToolAnnotations(read_only_hint=True)
        return [types.Tool(name=name, input_schema=schema, annotations=hints) for name, schema in TOOLS.items()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools())

    async def call_tool(ctx: Any, params: Any) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        message = schema_message(name, arguments)
        if message is not None and name == "lowlevel_rpc":
            raise MCPError(code=INVALID_PARAMS, message=f"Invalid params: {message}")
        if message is not None:  # what SDK 1.x's Server answers on its own
            text = f"Input validation error: {message}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        try:
            return types.CallToolResult(content=[], structured_content=answer(name, arguments))
        except LookupError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)

    def lowlevel_server() -> Any:
        return Server("lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)

else:  # pragma: no cover - the SDK 1.x leg
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import McpError

    def lowlevel_server() -> Any:
        server = Server("lowlevel")

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            hints = types.ToolAnnotations(readOnlyHint=True)
            return [types.Tool(name=name, inputSchema=schema, annotations=hints) for name, schema in TOOLS.items()]

        @server.call_tool()  # checks the input schema itself: "Input validation error: MESSAGE"
        async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return answer(name, arguments)

        checked = server.request_handlers[types.CallToolRequest]

        async def call_or_refuse(request: types.CallToolRequest) -> Any:
            # The decorator answers every failure as a result; a JSON-RPC error needs a handler of its own.
            message = schema_message(request.params.name, dict(request.params.arguments or {}))
            if request.params.name == "lowlevel_rpc" and message is not None:
                raise McpError(types.ErrorData(code=INVALID_PARAMS, message=f"Invalid params: {message}"))
            return await checked(request)

        server.request_handlers[types.CallToolRequest] = call_or_refuse
        return server


async def main() -> None:
    server = lowlevel_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
