"""A stand-in for a stdio backend built on the MCP TypeScript SDK, whose arguments zod checks.

Bare JSON-RPC, as ``tests/backends/hostile.py``. What it models (facts about the TypeScript SDK's
``McpServer`` with zod 3, written here, not its code): a call whose arguments the tool's zod schema
refuses is answered ``MCP error -32602: Input validation error: Invalid arguments for tool NAME: ISSUES``,
where ISSUES is zod's issue list as indented JSON. Each issue has a ``message``, and some have a
``received`` that quotes the value: ``Invalid enum value. Expected 'fast' | 'full', received 'VALUE'``,
``Unrecognized key(s) in object: 'KEY'``. Newer SDK versions answer that as an ``isError`` result
(``ts_read``), older ones throw it as a JSON-RPC error, -32602 (``ts_read_rpc``). ``ts_lookup`` fails in
words no validator uses, quoting its argument: ``Error: device "VALUE" not found``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SCHEMA = {
    "type": "object",
    "properties": {
        "serial": {"type": "string"},
        "mode": {"type": "string", "enum": ["fast", "full"]},
        "count": {"type": "number"},
    },
    "required": ["serial"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
LOOKUP_SCHEMA = {"type": "object", "properties": {"device": {"type": "string"}}}
READ = {"readOnlyHint": True}
TOOLS = {"ts_read": SCHEMA, "ts_read_rpc": SCHEMA, "ts_lookup": LOOKUP_SCHEMA}
JSON_TYPES = {"string": str, "number": (int, float)}


def zod_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "number", float: "number", list: "array", dict: "object"}.get(type(value), "unknown")


def issues(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if "serial" not in arguments:
        found.append(
            {
                "code": "invalid_type",
                "expected": "string",
                "received": "undefined",
                "path": ["serial"],
                "message": "Required",
            }
        )
    for name, value in arguments.items():
        if name not in SCHEMA["properties"]:
            continue
        wanted = "string" if name in ("serial", "mode") else "number"
        if zod_type(value) != wanted:
            message = f"Expected {wanted}, received {zod_type(value)}"
            found.append(
                {
                    "code": "invalid_type",
                    "expected": wanted,
                    "received": zod_type(value),
                    "path": [name],
                    "message": message,
                }
            )
        elif name == "mode" and value not in ("fast", "full"):
            message = f"Invalid enum value. Expected 'fast' | 'full', received '{value}'"
            found.append(
                {
                    "received": value,
                    "code": "invalid_enum_value",
                    "options": ["fast", "full"],
                    "path": [name],
                    "message": message,
                }
            )
    unknown = [name for name in arguments if name not in SCHEMA["properties"]]
    if unknown:
        listed = ", ".join(f"'{name}'" for name in unknown)
        found.append(
            {
                "code": "unrecognized_keys",
                "keys": unknown,
                "path": [],
                "message": f"Unrecognized key(s) in object: {listed}",
            }
        )
    return found


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def answer_call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "ts_lookup":
        send({"id": request_id, "result": text_result(f'Error: device "{arguments.get("device")}" not found')})
        return
    found = issues(arguments)
    if not found:
        send({"id": request_id, "result": {"content": [{"type": "text", "text": json.dumps({"ok": True})}]}})
        return
    message = (
        f"MCP error -32602: Input validation error: Invalid arguments for tool {name}: {json.dumps(found, indent=2)}"
    )
    if name == "ts_read_rpc":
        send({"id": request_id, "error": {"code": -32602, "message": message}})
    else:
        send({"id": request_id, "result": text_result(message)})


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "typescript-standin", "version": "0"}
            send(
                {
                    "id": request_id,
                    "result": {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info},
                }
            )
        elif method == "tools/list":
            tools = [{"name": name, "inputSchema": schema, "annotations": READ} for name, schema in TOOLS.items()]
            send({"id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            answer_call(request_id, message["params"]["name"], message["params"].get("arguments") or {})
        elif method == "ping":
            send({"id": request_id, "result": {}})
        elif request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
