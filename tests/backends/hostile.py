"""A stdio MCP backend written as bare JSON-RPC, so it can answer what no SDK server would.

No MCP SDK here: each tool's answer is the exact ``tools/call`` result (or JSON-RPC error) below,
and a few tools first send the client requests or notifications of their own. ``HOSTILE_PAGES``
splits ``tools/list`` into that many pages (``nextCursor``); ``HOSTILE_EXTRA`` adds that many
plain read tools ``extra_0``, ``extra_1``, ... at the end of the list. ``HOSTILE_SLOW_PROBE`` makes it
answer the first ``ping`` or ``tools/list`` after a JSON-RPC error that many seconds late, all else
waiting behind it: the router's probe of the session after a failed call. ``silent`` is a tool never
answered (the rest still is), and does the same to the next probe; ``freeze`` stops the process answering
anything, for good, as a stuck server does. ``HOSTILE_SEEN`` names a file to append each method received to.
``HOSTILE_QUIT_AFTER_LIST`` exits once it has answered the tool list: a backend that crashes on every start.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

READ = {"readOnlyHint": True}
OBJECT = {"type": "object", "properties": {}}
PNG = "iVBORw0KGgo="  # the first bytes of a PNG, base64


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# name -> the tools/call result (or {"rpc_error": ...} for a JSON-RPC error response)
ANSWERS: dict[str, dict[str, Any]] = {
    "plain": {"content": [text('{"ok": 1}')]},
    "image_only": {"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]},
    "audio_only": {"content": [{"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}]},
    "embedded": {"content": [{"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}}]},
    "link": {"content": [{"type": "resource_link", "uri": "file:///b.txt", "name": "b"}]},
    "text_and_image": {"content": [text('{"n": 1}'), {"type": "image", "data": PNG, "mimeType": "image/png"}]},
    "two_texts": {"content": [text('{"a": 1}'), text('{"b": 2}')]},
    "empty": {"content": []},
    "error_text": {"content": [text("the device said no")], "isError": True},
    "error_structured": {"content": [], "structuredContent": {"reason": "quota"}, "isError": True},
    "disagree": {"content": [text('{"a": 2}')], "structuredContent": {"a": 1}},
    "not_json": {"content": [text("plain words, not JSON")]},
    # NaN and the infinities as Python's json writes them (no JSON has them): structured, and as the text alone
    "nan_structured": {"content": [text("{}")], "structuredContent": {"ratio": math.nan, "rows": [math.inf, 1]}},
    "nan_text": {"content": [text('{"ratio": NaN, "low": -Infinity, "rows": [NaN, 2]}')]},
    "nan_alone": {"content": [text("NaN")]},
    "surrogate": {"content": [text('{"s": "\\ud800 lone"}')]},
    "schema_mismatch": {"content": [text('{"count": "many"}')], "structuredContent": {"count": "many"}},
    "schema_missing": {"content": [text('{"count": 3}')]},
    "malformed": {"content": "not a list"},
    "rpc_error": {"rpc_error": {"code": -32603, "message": "no such thing here"}},
    # JSON-RPC's "Invalid params": about the arguments, whatever its words
    "rpc_invalid_params": {"rpc_error": {"code": -32602, "message": "no such thing here"}},
    "invoke_read_tool_batch": {"content": [text('{"who": "backend"}')]},
    "find_tool": {"content": [text('{"who": "backend find_tool"}')]},
}
OUTPUT_SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
# tools that first ask the client something (a request) or tell it something (notifications)
ASKS = {
    "sampling": ("sampling/createMessage", {"messages": [], "maxTokens": 5}),
    "elicit": ("elicitation/create", {"message": "ok?", "requestedSchema": {"type": "object", "properties": {}}}),
    "roots": ("roots/list", {}),
}
TELLS = "chatty"


def tools() -> list[dict[str, Any]]:
    listed = [{"name": name, "inputSchema": OBJECT, "annotations": READ} for name in [*ANSWERS, *ASKS, TELLS]]
    for tool in listed:
        if tool["name"].startswith("schema_"):
            tool["outputSchema"] = OUTPUT_SCHEMA
    listed.append({"name": "whoami", "inputSchema": OBJECT, "annotations": READ})
    listed.append({"name": "big", "inputSchema": OBJECT, "annotations": READ})
    listed += [{"name": name, "inputSchema": OBJECT, "annotations": READ} for name in ("silent", "freeze")]
    listed.append({"name": "string_hint", "inputSchema": OBJECT, "annotations": {"readOnlyHint": "true"}})
    listed.append({"name": "x" * 10_000, "inputSchema": OBJECT, "annotations": READ})
    listed.append({"name": "odd name/with:chars é", "inputSchema": OBJECT, "annotations": READ})
    listed += [{"name": f"extra_{i}", "inputSchema": OBJECT, "annotations": READ} for i in range(EXTRA)]
    return listed


EXTRA = int(os.environ.get("HOSTILE_EXTRA", "0"))
PAGES = max(1, int(os.environ.get("HOSTILE_PAGES", "1")))
SLOW_PROBE = float(os.environ.get("HOSTILE_SLOW_PROBE", "0"))
PROBES = ("ping", "tools/list")
SEEN = os.environ.get("HOSTILE_SEEN")
QUIT_AFTER_LIST = bool(os.environ.get("HOSTILE_QUIT_AFTER_LIST"))


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def list_page(params: dict[str, Any] | None) -> dict[str, Any]:
    listed = tools()
    size = -(-len(listed) // PAGES)
    start = int((params or {}).get("cursor") or 0)
    page: dict[str, Any] = {"tools": listed[start : start + size]}
    if start + size < len(listed):
        page["nextCursor"] = str(start + size)
    return page


def answer_call(request_id: Any, params: dict[str, Any]) -> bool:
    """Answer one tools/call; True when the answer is a JSON-RPC error."""
    name = params["name"]
    if name == "big":
        size = int(params.get("arguments", {}).get("size", 1_000_000))
        send({"id": request_id, "result": {"content": [text(json.dumps({"blob": "y" * size}))]}})
    elif name == TELLS:
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            send({"method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
        send({"method": "notifications/message", "params": {"level": "error", "data": "backend log line"}})
        send({"method": "notifications/tools/list_changed"})
        send({"id": request_id, "result": {"content": [text('{"told": true}')]}})
    elif name == "whoami":
        send({"id": request_id, "result": {"content": [text(json.dumps({"pid": os.getpid()}))]}})
    elif name in ANSWERS and "rpc_error" in ANSWERS[name]:
        send({"id": request_id, "error": ANSWERS[name]["rpc_error"]})
        return True
    elif name in ANSWERS:
        send({"id": request_id, "result": ANSWERS[name]})
    elif any(tool["name"] == name for tool in tools()):
        send({"id": request_id, "result": {"content": [text(json.dumps({"name_length": len(name)}))]}})
    else:
        send({"id": request_id, "error": {"code": -32602, "message": f"Unknown tool: {name[:50]}"}})
        return True
    return False


def main() -> None:
    mute = os.environ.get("HOSTILE_MUTE")
    if mute and os.path.exists(mute):
        for _ in sys.stdin:  # a handshake that is never answered
            pass
        return
    asked: dict[str, Any] = {}  # our request id -> the tools/call id waiting for its answer
    probe_due = False  # a call was answered with an error: the next probe is answered SLOW_PROBE late
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if SEEN and method:
            with open(SEEN, "a") as seen:
                seen.write(method + "\n")
        if method in PROBES and probe_due:
            time.sleep(SLOW_PROBE)
            probe_due = False
        if method is None:  # the client's answer to one of our requests
            waiting = asked.pop(str(request_id), None)
            if waiting is not None:
                outcome = "error" if "error" in message else "result"
                send({"id": waiting, "result": {"content": [text(json.dumps({"client_answered": outcome}))]}})
        elif method == "initialize":
            version = message["params"].get("protocolVersion", "2025-06-18")
            info = {"name": "hostile", "version": "0"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            send({"id": request_id, "result": result})
        elif method == "tools/list":
            send({"id": request_id, "result": list_page(message.get("params"))})
            if QUIT_AFTER_LIST:
                return
        elif method == "tools/call" and message["params"]["name"] in ASKS:
            ask_method, ask_params = ASKS[message["params"]["name"]]
            asked[f"ask-{request_id}"] = request_id
            send({"id": f"ask-{request_id}", "method": ask_method, "params": ask_params})
        elif method == "tools/call" and message["params"]["name"] == "silent":
            probe_due = SLOW_PROBE > 0
        elif method == "tools/call" and message["params"]["name"] == "freeze":
            time.sleep(3600)
        elif method == "tools/call":
            failed = answer_call(request_id, message["params"])
            probe_due = probe_due or (failed and SLOW_PROBE > 0)
        elif method == "ping":
            send({"id": request_id, "result": {}})
        elif request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
