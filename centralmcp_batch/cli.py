"""The ``centralmcp-batch`` command: ``serve``, ``demo`` and ``plugins``.

``serve`` runs the reference router (over a TOML config or the embedded demo catalog) on
stdio or streamable HTTP. ``demo`` starts that router as a real subprocess, talks to it with
a real MCP client and shows a batch next to the same reads made one round trip at a time.
``plugins`` lists the installed ``centralmcp`` plugins and whether this host satisfies them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Optional

import anyio

if sys.version_info < (3, 11):  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup

from . import __version__, _compat, hosting
from .hookspecs import PROJECT

PROG = "centralmcp-batch"
DEFAULT_CONFIG = "router.toml"
DEMO_TIMEOUT_SECONDS = 120.0

log = logging.getLogger(__name__)


# -- arguments ------------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: give a number from 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: give a number from 1 to 65535")
    return port


ALLOWED_HOSTS_ENV = "CENTRALMCP_ROUTER_ALLOWED_HOSTS"
ALLOWED_ORIGINS_ENV = "CENTRALMCP_ROUTER_ALLOWED_ORIGINS"


def _allowed_host(text: str) -> str:
    host = text.strip()
    if not host or any(mark in host for mark in " /*,"):
        hint = "give a Host header value such as mcp.example.com or mcp.example.com:8000"
        raise argparse.ArgumentTypeError(f"invalid host {text!r}: {hint}")
    return host


def _allowed_origin(text: str) -> str:
    origin = text.strip()
    scheme, _, rest = origin.partition("://")
    if scheme not in ("http", "https") or not rest or any(mark in rest for mark in " /*,"):
        hint = "give scheme://host[:port], such as https://app.example.com"
        raise argparse.ArgumentTypeError(f"invalid origin {text!r}: {hint}")
    return origin


def _from_env(name: str, check: Callable[[str], str]) -> list[str]:
    """A comma-separated list from the environment; a bad entry is an error naming the variable."""
    values = [part for part in os.environ.get(name, "").split(",") if part.strip()]
    try:
        return [check(value) for value in values]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="invoke_read_tool_batch for MCP tool routers.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__} (mcp {_compat.SDK_VERSION})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser("serve", help="run the router over the backends of a TOML config, or the demo catalog")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--config", metavar="PATH", help=f"the router's TOML config (default: ./{DEFAULT_CONFIG})")
    source.add_argument("--demo", action="store_true", help="serve the embedded demo catalog instead of a config")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP at /mcp")
    serve.add_argument("--host", help="HTTP only: the address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="HTTP only: the port to bind (default 8000)")
    also = "repeatable; also {}, comma-separated"
    serve.add_argument(
        "--allow-host", action="append", type=_allowed_host, default=[], metavar="HOST",
        help=f"HTTP only: accept this Host header besides localhost ({also.format(ALLOWED_HOSTS_ENV)})",
    )
    serve.add_argument(
        "--allow-origin", action="append", type=_allowed_origin, default=[], metavar="ORIGIN",
        help=f"HTTP only: accept this Origin header besides localhost ({also.format(ALLOWED_ORIGINS_ENV)})",
    )
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", help="stderr log level (default info)")
    serve.set_defaults(parser=serve)

    commands.add_parser("demo", help="start the demo router as a subprocess and run a batch against it over stdio")

    plugins = commands.add_parser("plugins", help="list the installed centralmcp plugins and whether this host satisfies them")
    plugins.add_argument("--config", metavar="PATH", help="check against the router of this TOML config (default: the demo router)")
    plugins.add_argument("--json", action="store_true", help="print machine-readable JSON")
    plugins.set_defaults(parser=plugins)

    bench = commands.add_parser("bench", help="measure the batch against one call at a time and the ideal (see --help)", add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments of python -m centralmcp_batch.bench")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["bench"]:  # the benchmark parses its own options, which argparse would claim
        from . import bench

        return bench.main(words[1:])
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command == "serve":
        return _serve(args.parser, args)
    if args.command == "demo":
        return _demo()
    return _plugins(args.parser, args)


def _config_path(parser: argparse.ArgumentParser, given: Optional[str]) -> Path:
    path = Path(given or DEFAULT_CONFIG)
    if not path.is_file():
        hint = "" if given else " (give --config PATH, or --demo for the embedded demo catalog)"
        parser.error(f"router config {str(path)!r} does not exist{hint}")
    return path


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 1


# -- serve ----------------------------------------------------------------------------


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .router.serve import HttpAccess, serve

    http_only = (args.host, args.port, args.allow_host or None, args.allow_origin or None)
    if args.transport == "stdio" and any(option is not None for option in http_only):
        parser.error("--host, --port, --allow-host and --allow-origin apply to --transport http only")
    try:
        hosts = args.allow_host + _from_env(ALLOWED_HOSTS_ENV, _allowed_host)
        origins = args.allow_origin + _from_env(ALLOWED_ORIGINS_ENV, _allowed_origin)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    access = HttpAccess(hosts, origins)
    config = None if args.demo else _config_path(parser, args.config)
    # Before any server is made: on stdio, stdout is the protocol, so every log goes to stderr.
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        router = _load_router(config)
    except Exception as exc:
        return _fail(f"cannot start the router: {type(exc).__name__}: {exc}")
    host, port = args.host or "127.0.0.1", args.port or 8000
    if args.transport == "http":
        log.info("serving %s on http://%s:%d/mcp", "the demo catalog" if config is None else config, host, port)
    try:
        serve(router, transport=args.transport, host=host, port=port, access=access)
    except KeyboardInterrupt:
        pass
    return 0


def _load_router(config: Optional[Path]) -> Any:
    """The router over ``config``, or the demo router when there is none."""
    if config is None:
        from .router.demo import demo_router

        return demo_router()
    from .router.config import load_router

    return load_router(config)


# -- plugins --------------------------------------------------------------------------


def _plugins(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    config = None if args.config is None else _config_path(parser, args.config)
    try:
        reports = _plugin_reports(_load_router(config))
    except Exception as exc:
        return _fail(f"cannot check the plugins: {type(exc).__name__}: {exc}")
    if args.json:
        print(json.dumps([_report_json(report) for report in reports], indent=2))
    else:
        print(_reports_text(reports))
    return 0 if all(report.satisfied for report in reports) else 1


def _plugin_reports(router: Any) -> list[hosting.PluginReport]:
    """Every installed plugin, checked against the host hooks that ``router`` registers."""
    pm = hosting.plugin_manager(*_host_plugins(router.plugin_manager))
    pm.load_setuptools_entrypoints(PROJECT)
    return hosting.plugin_reports(pm)


def _host_plugins(pm: Any) -> list[object]:
    # The host's own implementations are everything registered that no entry point brought.
    discovered = {id(plugin) for plugin, _dist in pm.list_plugin_distinfo()}
    return [plugin for plugin in pm.get_plugins() if id(plugin) not in discovered]


def _distribution_version(name: Optional[str]) -> Optional[str]:
    try:
        return None if name is None else version(name)
    except PackageNotFoundError:
        return None


def _report_json(report: hosting.PluginReport) -> dict[str, Any]:
    found = report.manifest
    return {
        "name": report.name,
        "distribution": report.distribution,
        "version": _distribution_version(report.distribution),
        "satisfied": report.satisfied,
        "missing": list(report.missing),
        "manifest": None
        if found is None
        else {
            "source": found.source,
            "entry_point": found.entry_point,
            "tools": [dict(tool) for tool in found.tools],
            "implements": list(found.implements),
            "requires": list(found.requires),
            "optional": list(found.optional),
            "settings": [dict(setting) for setting in found.settings],
        },
    }


def _reports_text(reports: list[hosting.PluginReport]) -> str:
    if not reports:
        return f"no {PROJECT!r} plugins are installed"
    return "\n\n".join(_report_text(report) for report in reports)


def _report_text(report: hosting.PluginReport) -> str:
    verdict = "satisfied" if report.satisfied else "NOT satisfied: missing " + ", ".join(report.missing)
    dist = report.distribution or "?"
    lines = [f"{report.name}  ({dist} {_distribution_version(report.distribution) or ''})".replace(" )", ")") + f"  {verdict}"]
    found = report.manifest
    if found is None:
        lines.append("  no plugin.toml: its host requirements are not checked")
        return "\n".join(lines)
    tools = ", ".join(f"{tool['name']} ({tool['capability']})" for tool in found.tools) or "-"
    lines += [
        f"  entry point: {found.entry_point}",
        f"  manifest:    {found.source}",
        f"  tools:       {tools}",
        f"  implements:  {', '.join(found.implements) or '-'}",
        f"  requires:    {', '.join(found.requires) or '-'}",
        f"  optional:    {', '.join(found.optional) or '-'}",
    ]
    lines += [f"  setting:     {setting.get('env')} (default {setting.get('default')})" for setting in found.settings]
    return "\n".join(lines)


# -- demo -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoCall:
    id: str
    name: str
    arguments: Mapping[str, Any]
    expected: str  # the status the batch must give it

    def entry(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


def demo_calls() -> list[DemoCall]:
    """The demo's mixed batch: reads, one write the gate must block, one unknown tool."""
    from .router.demo import DemoNetwork

    network = DemoNetwork()
    site = network.sites[0]["site_id"]
    access_point = next(device for device in network.devices if device["kind"] == "access_point")["serial"]
    return [
        DemoCall("sites", "list_sites", {}, "ok"),
        DemoCall("site-health", "get_site_health", {"site_id": site}, "ok"),
        DemoCall("aps", "list_devices", {"site_id": site, "kind": "access_point"}, "ok"),
        DemoCall("device", "get_device", {"serial": access_point}, "ok"),
        DemoCall("health", "get_device_health", {"serial": access_point}, "ok"),
        DemoCall("critical", "list_alerts", {"severity": "critical"}, "ok"),
        DemoCall("clients", "list_clients", {}, "ok"),
        DemoCall("reboot", "reboot_device", {"serial": access_point}, "blocked"),
        DemoCall("vlans", "list_vlans", {"site_id": site}, "unknown_tool"),
    ]


def _demo() -> int:
    try:
        problems = anyio.run(_run_demo_in_time, _print_line)
    except TimeoutError:
        return _fail(f"the demo did not finish within {DEMO_TIMEOUT_SECONDS:.0f} s")
    except Exception as exc:
        return _fail(f"the demo failed: {_describe(exc)}")
    if problems:
        return _fail("the demo ran, but not as expected:\n  " + "\n  ".join(problems))
    return 0


async def _run_demo_in_time(say: Callable[[str], None]) -> list[str]:
    with anyio.fail_after(DEMO_TIMEOUT_SECONDS):
        return await run_demo(say)


def _describe(exc: BaseException) -> str:
    # anyio task groups wrap the real cause; show the innermost one.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _print_line(text: str = "") -> None:
    print(text, flush=True)


def router_command() -> _compat.StdioServerParameters:
    """The demo router as a stdio subprocess of this very interpreter."""
    args = ["-m", "centralmcp_batch", "serve", "--demo", "--log-level", "warning"]
    # The SDK hands a subprocess only a few variables unless told; the demo's settings must reach it.
    return _compat.StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))


async def run_demo(say: Callable[[str], None]) -> list[str]:
    """Run the demo, narrating through ``say``; the list of what did not go as expected."""
    command = router_command()
    say(f"Starting the router: {Path(command.command).name} {' '.join(command.args)}  (stdio subprocess)")
    async with _compat.connect(command) as client:
        tools = [tool.name for tool in await client.list_tools()]
        say(f"It publishes {len(tools)} tools: {', '.join(tools)}")
        missing = {"find_tool", "invoke_read_tool", "invoke_read_tool_batch"} - set(tools)
        if missing:
            return [f"the router does not publish {sorted(missing)}"]
        await _show_find_tool(client, say)
        calls = demo_calls()
        response, batch_seconds = await _run_batch(client, calls, say)
        problems = _batch_problems(response, calls)
        reads = [call for call in calls if call.expected == "ok"]
        sequential_seconds, mismatches = await _run_sequential(client, reads, response, say)
    say("")
    ratio = sequential_seconds / batch_seconds if batch_seconds > 0 else float("inf")
    say(f"{'One batch, 1 round trip:':34}{batch_seconds:6.2f} s")
    say(f"{f'Same reads, {len(reads)} round trips:':34}{sequential_seconds:6.2f} s")
    say(f"{'Ratio sequential / batch:':34}{ratio:6.1f}x")
    return problems + mismatches


async def _show_find_tool(client: _compat.ClientHandle, say: Callable[[str], None]) -> None:
    query = "device health"
    answer = await client.call_tool("find_tool", {"query": query, "top_k": 3})
    say("")
    say(f"find_tool(query={query!r}, top_k=3):")
    rows = [[hit.get("name"), hit.get("server"), hit.get("capability"), hit.get("recommended_dispatcher")] for hit in _find_hits(answer.payload)]
    say(_table(["tool", "server", "capability", "dispatcher"], rows))


def _find_hits(payload: Any) -> list[dict[str, Any]]:
    """find_tool's hits, whether the router answers a list or an object holding one."""
    if isinstance(payload, dict):
        payload = next((value for value in payload.values() if isinstance(value, list)), [])
    return [hit for hit in payload if isinstance(hit, dict)] if isinstance(payload, list) else []


async def _run_batch(client: _compat.ClientHandle, calls: list[DemoCall], say: Callable[[str], None]) -> tuple[dict[str, Any], float]:
    say("")
    say(f"invoke_read_tool_batch with {len(calls)} calls (reads, a write, an unknown tool):")
    progress = _ProgressLine(say)
    started = time.perf_counter()
    answer = await client.call_tool("invoke_read_tool_batch", {"calls": [call.entry() for call in calls]}, progress=progress)
    seconds = time.perf_counter() - started
    progress.finish()
    if answer.is_error or not isinstance(answer.payload, dict):
        raise RuntimeError(f"the batch tool answered an error: {answer.text[:300]}")
    response = answer.payload
    rows = [[item["index"], item["id"], item["tool"], item.get("server") or "-", item["status"], _summary(item)] for item in response.get("results", [])]
    say(_table(["#", "id", "tool", "server", "status", "result"], rows))
    counts = response.get("counts", {})
    say(f"ok={response.get('ok')}  succeeded={counts.get('succeeded')}/{counts.get('total')}  failed_ids={response.get('failed_ids')}")
    return response, seconds


class _ProgressLine:
    """Shows the batch's progress notifications as they arrive: one redrawn line on a terminal."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say, self.shown = say, False
        self.redraw = sys.stdout.isatty()

    async def __call__(self, progress: float, total: Optional[float], message: Optional[str]) -> None:
        text = f"  progress {progress:g}/{total:g}" if total else f"  progress {progress:g}"
        text += f"  {message}" if message else ""
        if self.redraw:
            sys.stdout.write("\r\033[K" + text)
            sys.stdout.flush()
        else:
            self.say(text)
        self.shown = True

    def finish(self) -> None:
        if self.redraw and self.shown:
            sys.stdout.write("\n")


def _batch_problems(response: dict[str, Any], calls: list[DemoCall]) -> list[str]:
    statuses = {item.get("id"): item.get("status") for item in response.get("results", [])}
    problems = [f"call {call.id!r} ({call.name}) was {statuses.get(call.id)!r}, expected {call.expected!r}" for call in calls if statuses.get(call.id) != call.expected]
    clients = next((item for item in response.get("results", []) if item.get("id") == "clients"), {})
    if clients.get("status") == "ok" and "next_cursor" not in json.dumps(clients.get("result")):
        problems.append("list_clients came back whole: the router did not clip it to a page with a next_cursor")
    return problems


async def _run_sequential(
    client: _compat.ClientHandle, reads: list[DemoCall], response: dict[str, Any], say: Callable[[str], None]
) -> tuple[float, list[str]]:
    say("")
    say(f"The same {len(reads)} reads, one invoke_read_tool round trip at a time:")
    batch_results = {item.get("id"): item.get("result") for item in response.get("results", [])}
    rows, total, mismatches = [], 0.0, []
    for call in reads:
        started = time.perf_counter()
        answer = await client.call_tool("invoke_read_tool", {"name": call.name, "arguments": dict(call.arguments)})
        seconds = time.perf_counter() - started
        total += seconds
        same = _data(answer.payload) == _data(batch_results.get(call.id))
        status = "error" if answer.is_error or (isinstance(answer.payload, dict) and "error" in answer.payload) else "ok"
        if status != "ok":
            mismatches.append(f"invoke_read_tool {call.name} failed: {answer.text[:200]}")
        rows.append([call.id, call.name, status, f"{seconds:.3f}", "yes" if same else "no"])
    say(_table(["id", "tool", "status", "seconds", "same as batch"], rows))
    return total, mismatches


def _data(result: Any) -> Any:
    """A result without its bounding markers and cursor, which depend on the byte budget of the call."""
    if not isinstance(result, dict):
        return result
    return {key: value for key, value in result.items() if not key.startswith("_") and key != "next_cursor"}


def _summary(item: Mapping[str, Any], width: int = 64) -> str:
    """A short, readable gist of one batch item: list sizes and a cursor, fields, or the error."""
    if item.get("status") != "ok":
        return _cut(str(item.get("error", "")), width)
    result = item.get("result")
    if not isinstance(result, dict):
        return _cut(json.dumps(result, separators=(",", ":")), width)
    lists = [(key, value) for key, value in result.items() if isinstance(value, list)]
    if lists:
        key, value = lists[0]
        text = f"{len(value)} of {result['total']} {key}" if "total" in result else f"{len(value)} {key}"
        return _cut(text + (" + next_cursor" if result.get("next_cursor") else ""), width)
    fields = (f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in result.items())
    return _cut(" ".join(fields), width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with aligned columns."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max([len(header)] + [len(row[column]) for row in cells]) for column, header in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  " + "  ".join(value.ljust(width) for value, width in zip(values, widths)).rstrip()

    rule = "  " + "  ".join("-" * width for width in widths)
    return "\n".join([line(headers), rule] + [line(row) for row in cells])
