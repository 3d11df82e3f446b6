"""The ``centralmcp-batch`` command: its arguments, their checks, and the dispatch to a subcommand.

``serve`` runs the reference router (over a TOML config or the embedded demo catalog) on
stdio or streamable HTTP. ``demo`` starts that router as a real subprocess, talks to it with
a real MCP client and shows a batch next to the same reads made one round trip at a time.
``plugins`` lists the installed ``centralmcp`` plugins and whether this host satisfies them.
``bench`` measures the batch. Each one's body is a module of ``commands`` (``bench`` is its own);
this module turns the command line into plain values for it, and a ``CommandFailed`` into exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__, _compat
from .commands import CommandFailed

PROG = "centralmcp-batch"
DEFAULT_CONFIG = "router.toml"


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


# What a Host header's or an Origin's host can be: a DNS name (IDNs in their xn-- form, as clients
# send them), an IPv4 address, or an IPv6 address in brackets. Anything else would never match.
HOST_NAME = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


def _allowed_host(text: str) -> str:
    from .router.serve import split_port

    host = text.strip()
    hint = "give a Host header value such as mcp.example.com or mcp.example.com:8000"
    if any(mark in host for mark in "/?#@"):
        raise argparse.ArgumentTypeError(f"invalid host {text!r}: no scheme, path, query or user; {hint}")
    name, port = split_port(host)
    return _host_and_port(name, port, any_port=False, error=lambda why: f"invalid host {text!r}: {why}; {hint}")


def _allowed_origin(text: str) -> str:
    from .router.serve import split_port

    origin = text.strip()
    hint = "give scheme://host[:port] (:* for any port), such as https://app.example.com"
    scheme, _, rest = origin.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise argparse.ArgumentTypeError(f"invalid origin {text!r}: the scheme must be http or https; {hint}")
    if any(mark in rest for mark in "/?#"):
        raise argparse.ArgumentTypeError(f"invalid origin {text!r}: an origin has no path, query or fragment; {hint}")
    name, port = split_port(rest)
    # `:*` is any port of that one name, as the SDKs read it; a `*` anywhere else would be a wildcard host
    authority = _host_and_port(name, port, any_port=True, error=lambda why: f"invalid origin {text!r}: {why}; {hint}")
    return f"{scheme}://{authority}"


def _host_and_port(name: str, port: str | None, *, any_port: bool, error: Callable[[str], str]) -> str:
    """``name[:port]`` as a client writes it (the SDKs compare strings: ``:0443`` would never match)."""
    if not name:
        raise argparse.ArgumentTypeError(error("the host name is missing"))
    if not HOST_NAME.fullmatch(name):
        why = "a host name has only letters, digits, '.', '-' and '_', or is an IPv6 address in brackets"
        raise argparse.ArgumentTypeError(error(why))
    if port is None or (any_port and port == "*"):
        return name if port is None else f"{name}:{port}"
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        ports = "a number from 1 to 65535" + (" or *" if any_port else "")
        raise argparse.ArgumentTypeError(error(f"the port must be {ports}"))
    return f"{name}:{int(port)}"


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
    serve.add_argument(
        "--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or streamable HTTP at /mcp"
    )
    serve.add_argument("--host", help="HTTP only: the address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="HTTP only: the port to bind (default 8000)")
    also = "repeatable; also {}, comma-separated"
    serve.add_argument(
        "--allow-host",
        action="append",
        type=_allowed_host,
        default=[],
        metavar="HOST",
        help=f"HTTP only: accept this Host header besides localhost ({also.format(ALLOWED_HOSTS_ENV)})",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        type=_allowed_origin,
        default=[],
        metavar="ORIGIN",
        help=f"HTTP only: accept this Origin header besides localhost ({also.format(ALLOWED_ORIGINS_ENV)})",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="stderr log level (default info)",
    )
    serve.set_defaults(parser=serve)

    commands.add_parser("demo", help="start the demo router as a subprocess and run a batch against it over stdio")

    plugins = commands.add_parser(
        "plugins", help="list the installed centralmcp plugins and whether this host satisfies them"
    )
    plugins.add_argument(
        "--config", metavar="PATH", help="check against the router of this TOML config (default: the demo router)"
    )
    plugins.add_argument("--json", action="store_true", help="print machine-readable JSON")
    plugins.set_defaults(parser=plugins)

    bench = commands.add_parser(
        "bench", help="measure the batch against one call at a time and the ideal (see --help)", add_help=False
    )
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments of python -m centralmcp_batch.bench")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["bench"]:  # the benchmark parses its own options, which argparse would claim
        from . import bench

        return bench.main(words[1:], prog=f"{PROG} bench")
    parser = build_parser()
    args = parser.parse_args(words)
    try:
        return _dispatch(args)
    except CommandFailed as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """Exit 1 quietly: the reader of stdout went away (``plugins --json | head``), as with any shell tool.

    Python would print the BrokenPipeError's traceback, and another one as it flushed stdout at exit:
    stdout is pointed at the null device, so the final flush has somewhere to go.
    """
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return 1


def _dispatch(args: argparse.Namespace) -> int:
    # Each command module is imported only when chosen: `--version` and argument errors stay quick.
    if args.command == "serve":
        return _serve(args.parser, args)
    if args.command == "demo":
        from .commands import demo

        return demo.run()
    from .commands import plugins

    return plugins.run(None if args.config is None else _config_path(args.parser, args.config), args.json)


def _config_path(parser: argparse.ArgumentParser, given: str | None) -> Path:
    path = Path(given or DEFAULT_CONFIG)
    if not path.is_file():
        hint = "" if given else " (give --config PATH, or --demo for the embedded demo catalog)"
        parser.error(f"router config {str(path)!r} does not exist{hint}")
    return path


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .commands import serve
    from .router.serve import HttpAccess

    http_only = (args.host, args.port, args.allow_host or None, args.allow_origin or None)
    if args.transport == "stdio" and any(option is not None for option in http_only):
        parser.error("--host, --port, --allow-host and --allow-origin apply to --transport http only")
    hosts, origins = list(args.allow_host), list(args.allow_origin)
    if args.transport == "http":  # HTTP's variables: a stdio router, which has no Host header, never reads them
        try:
            hosts += _from_env(ALLOWED_HOSTS_ENV, _allowed_host)
            origins += _from_env(ALLOWED_ORIGINS_ENV, _allowed_origin)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    config = None if args.demo else _config_path(parser, args.config)
    host, port = args.host or "127.0.0.1", args.port or 8000
    return serve.run(config, args.transport, host, port, HttpAccess(hosts, origins), args.log_level)
