"""The benchmark: what one batch saves over single calls, in wall time, measured side by side.

``python -m centralmcp_batch.bench [--quick] [--json PATH] [--repeat N]`` prints markdown tables
and writes the same figures as JSON. Every figure is the median of ``--repeat`` rounds with their
min and max; within a round the variants being compared run one after the other, so a ratio is
always taken between runs that shared the machine's state at that moment.

Scenarios: latency-bound backends (``latency``), the router over stdio and streamable HTTP
(``transport``), the batch's own cost (``overhead``), the response budget (``budget``), concurrent
HTTP clients (``load``) and the default limiter's rate (``rate``). Elsewhere the router's
limiter is lifted (``plan.LIFTED_LIMIT``: a burst no run reaches, in the router's memory) so that it does
not dominate what is measured.

The modules, one job each: ``plan`` (how big a run is), ``stats`` (rounds and their figures),
``backends`` and ``calls`` (what is called, and the checks on the answers), ``router_process``
(the router subprocess), ``scenarios`` (one module per scenario), ``runner`` (a whole run),
``targets`` and ``render`` (the markdown), ``chart`` and ``plot`` (``--plots``, SVG), ``profiling``
(``--profile``) and ``cli`` (the options).
This module only re-exports the names other code uses, ``benchmarks/centralmcp_baseline.py`` among it.
"""

from .backends import BenchHost, backend_server, build_router, wait, zero_host
from .calls import BenchError, check_batch, checked_batch, mcp_batch, misplaced, single_reads, wait_calls
from .cli import main, parser
from .environ import concurrency, environment, quiet_logs
from .machine import load_average, machine
from .plan import RATE_ENV, SCENARIOS, UNLIMITED_BURST, UNLIMITED_RATE, Plan, lifted_limiter, make_plan
from .plot import write_plots
from .render import TABLES, cell, fmt, render, table, verdict
from .router_process import (
    free_port,
    http_router,
    http_server,
    serve_command,
    serve_router,
    stdio_params,
    wait_for_port,
)
from .runner import run_plan
from .stats import Run, loops_for, percentile, ratios, rounds, summary
from .targets import find_row, target, targets

__all__ = [
    "RATE_ENV",
    "SCENARIOS",
    "TABLES",
    "UNLIMITED_BURST",
    "UNLIMITED_RATE",
    "BenchError",
    "BenchHost",
    "Plan",
    "Run",
    "backend_server",
    "build_router",
    "cell",
    "check_batch",
    "checked_batch",
    "concurrency",
    "environment",
    "find_row",
    "fmt",
    "free_port",
    "http_router",
    "http_server",
    "lifted_limiter",
    "load_average",
    "loops_for",
    "machine",
    "main",
    "make_plan",
    "mcp_batch",
    "misplaced",
    "parser",
    "percentile",
    "quiet_logs",
    "ratios",
    "render",
    "rounds",
    "run_plan",
    "serve_command",
    "serve_router",
    "single_reads",
    "stdio_params",
    "summary",
    "table",
    "target",
    "targets",
    "verdict",
    "wait",
    "wait_calls",
    "wait_for_port",
    "write_plots",
    "zero_host",
]
