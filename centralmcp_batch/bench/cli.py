"""``python -m centralmcp_batch.bench`` and ``centralmcp-batch bench``: the options, and what each one runs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from .environ import quiet_logs
from .plan import SCENARIOS, make_plan
from .plot import write_plots
from .profiling import ProfilerMissing, profile
from .render import render
from .router_process import serve_router
from .runner import run_plan

PROG = "python -m centralmcp_batch.bench"


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The options; ``prog`` is how the usage line names the command (``centralmcp-batch bench`` from the CLI)."""
    cli = argparse.ArgumentParser(prog=prog, description="Measure what a batch saves over single calls.")
    cli.add_argument("--quick", action="store_true", help="a tiny run that only shows the benchmark works")
    cli.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    cli.add_argument("--repeat", type=int, metavar="N", help="rounds per figure (default 5; 1 with --quick)")
    cli.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}"
    )
    cli.add_argument(
        "--plots",
        metavar="DIR",
        help="also draw SVG plots of the latency and load scenarios' figures into DIR",
    )
    cli.add_argument(
        "--profile",
        metavar="PATH",
        help="profile batches of 25 zero-latency entries with pyinstrument, write the report to PATH",
    )
    cli.add_argument("--serve-router", choices=("stdio", "http"), help=argparse.SUPPRESS)
    cli.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return cli


def chosen_scenarios(args: argparse.Namespace, prog: str = PROG) -> tuple[str, ...]:
    """The scenarios asked for, in the order given; a wrong name or --repeat exits with a usage error."""
    chosen = tuple(name.strip() for name in args.scenarios.split(",") if name.strip())
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown or (args.repeat is not None and args.repeat < 1):
        parser(prog).error(f"unknown scenarios {unknown}" if unknown else "--repeat must be at least 1")
    return chosen


def run_profile(path: str) -> int:
    try:
        anyio.run(profile, path)
    except ProfilerMissing as missing:
        print(f"centralmcp-batch bench: {missing}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = parser(prog).parse_args(argv)
    if args.serve_router:
        serve_router(args.serve_router, args.port)
        return 0
    if args.profile:
        return run_profile(args.profile)
    quiet_logs()
    report = anyio.run(run_plan, make_plan(args.quick, args.repeat, chosen_scenarios(args, prog)))
    print(render(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
    if args.plots:
        report_plots(report, args.plots)
    return 0


def report_plots(report: dict[str, Any], directory: str) -> None:
    # On stderr: stdout is the markdown report, which is often redirected into a file as it is.
    written = write_plots(report, directory)
    if written:
        print("plots: " + ", ".join(str(path) for path in written), file=sys.stderr)
    else:
        print("plots: none drawn; --plots draws the latency and load scenarios, and neither ran", file=sys.stderr)
