"""What the plugin does per entry beyond the router's own loop, by the duty each part serves.

Run from a checkout::

    python benchmarks/own_work.py [--workload ok|failing] [--quick] [--json PATH]

One batch of 25 zero-latency entries, in process, after warm-up, is run by each of the three
variants of ``centralmcp_baseline.py`` (the router's own ``loop``, its ``built-in`` batch and the
adopted ``plugin``) under ``sys.settrace`` with opcode events: the Python bytecodes each executes,
which repeat from run to run where time does not. The plugin's bytecodes over the loop's are then
told by duty, from the function that ran them. Beside them, the three variants' time per entry,
untraced, measured in alternating rounds in the same run. It needs Python 3.11 or newer: a function's
duty is looked up by its qualified name, which code objects carry from 3.11 on.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import centralmcp_baseline as baseline  # noqa: E402 - after the path is set

from centralmcp_batch import bench  # noqa: E402

N = 25
HOST = "the router, its backend's SDK and the event loop"
UNASSIGNED = "unassigned: a function of the plugin this map does not name"

# The engine's functions by duty; any other module of the plugin has one duty of its own (MODULE_DUTIES).
ENTRY_CHECKS = "entry checks: each call's shape, its id, name and arguments, duplicate ids"
TIME_LIMITS = "each call's time limit and the batch's"
WORKER = "the workers: entries taken in order, each answer at its place"
ITEMS = "items in the batch's shape, each sized for the response budget"
OBSERVERS = "observers and progress reports"
RATE_LIMIT = "the account-wide rate limiter, installed in the adopted router (the loop draws its token too)"
READ = "the read: gate, rate token, dispatch and outcome, through the hooks"
FACADE = "the hooks' facade: each hook called as the host registered it"
ADAPTER = "the CentralMCP adapter: the router's catalog, gate, dispatch and bounding"
FIXED = "the batch's fixed cost: settings, observers, the response"
ENGINE_DUTIES = {
    ENTRY_CHECKS: (
        "check_batch parse_entries _with_arguments_measured parse_entry _parse_in_order _unknown_key_problem "
        "_name_problem is_utf8 _arguments_problem _encoding_problem duplicate_id ValidCall InvalidCall"
    ),
    TIME_LIMITS: (
        "Guards _in_own_scope _driven _waited _swallowed_cancel must_propagate _cancel_requested _cancel_requests "
        "call_timed_out _Run.report_deadline _in_group _drop_frames_below _awaiting"
    ),
    WORKER: (
        "run_batch WaitForecast _Run.__init__ _Run.run_all _Run.work_alone _Run.work_in_group _Run.entry_waits "
        "_Run.resumed _Run.ramp _Run.stop_ramp _Run.start_helpers _Run.work_as_helper _Run.work_through "
        "_Run.run_one _no_helper _group_task"
    ),
    ITEMS: (
        "make_item cut entry_share _envelope_size _all_valid_envelope_size _measure_envelope ok_keys_sizes "
        "_ok_keys_size ok_item_size failed_item_size _as_json_item _encodable item_size _unencodable_item "
        "nests_deeper assemble _Run.finish _item_of describe"
    ),
    OBSERVERS: "QuietObserver _Run.tell_progress _uncontended_lock _progress_message _tell_cancelled",
}
MODULE_DUTIES = {
    "budget": ITEMS,
    "pipeline": READ,
    "models": READ,
    "errors": READ,
    "host": FACADE,
    "adapters": ADAPTER,  # the CentralMCP glue and the Context its backends are handed
    "_compat": ADAPTER,
    "validation": ADAPTER,  # a backend's invalid-arguments error, retold without its values
    "worker_threads": ADAPTER,  # a sync backend tool's call in a worker thread
    "batch_tool": FIXED,
    "settings": FIXED,
    "otel": FIXED,
    "hosting": FIXED,
    "ratelimit": RATE_LIMIT,
}
# Functions outside those modules' duty: the account-wide limiter's gate, which the adapter installs in
# the router (the loop draws it too); the stand-in router reads a tool's hints through ``_compat``.
FUNCTION_DUTIES = {"SharedRateGate": RATE_LIMIT, "annotation_hint": HOST}
PLUGIN = "centralmcp_batch."


# Each engine function's or class's duty, by its name.
ENGINE_DUTY_OF = {name: duty for duty, names in ENGINE_DUTIES.items() for name in names.split()}


def engine_duty(qualname: str) -> str:
    """The duty of the engine's ``qualname``: its own, or its class's (``_Run.finish``, ``Guards.arm``)."""
    top = qualname.split(".<locals>")[0]
    return ENGINE_DUTY_OF.get(top) or ENGINE_DUTY_OF.get(top.split(".")[0], UNASSIGNED)


def duty_of(frame: types.FrameType) -> str:
    module, name = frame.f_globals.get("__name__", ""), frame.f_code.co_qualname
    if frame.f_code.co_filename == "<string>":  # generated code (a dataclass's __init__): told by the class it makes
        made = type(frame.f_locals.get("self"))
        module, name = made.__module__, made.__qualname__
    if not module.startswith(PLUGIN):
        return HOST
    module, top = module.removeprefix(PLUGIN), name.split(".<locals>")[0]
    if module == "engine":
        return engine_duty(top)
    owner = top.split(".")[0]  # a function, or the class of a method
    if owner in FUNCTION_DUTIES:
        return FUNCTION_DUTIES[owner]
    for prefix, duty in MODULE_DUTIES.items():
        if module == prefix or module.startswith(prefix + "."):
            return duty
    return UNASSIGNED


def traced(loop: asyncio.AbstractEventLoop, run: Callable[[], Any]) -> collections.Counter[str]:
    """Bytecodes ``run()`` executes on ``loop``, by duty."""
    counts: collections.Counter[str] = collections.Counter()

    def on_call(frame: types.FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        duty = duty_of(frame)

        def on_opcode(frame: types.FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[duty] += 1
            return on_opcode

        return on_opcode

    before = sys.gettrace()  # a coverage tool's, say: put back after
    sys.settrace(on_call)
    try:
        loop.run_until_complete(run())
    finally:
        sys.settrace(before)
    return counts


def measure(workload: str, warm_up: int, rounds: int, loops: int) -> dict[str, Any]:
    loop = asyncio.new_event_loop()  # run, never set as the thread's current loop: nothing is left behind
    try:
        routers = baseline.make_routers()
        calls, checks = (
            (baseline.calls_of(N), baseline.ANSWERED)
            if workload == "ok"
            else (baseline.failing_calls(N), baseline.FAILED)
        )
        variants = baseline.in_process_variants(routers, calls, checks)
        for run in variants.values():
            for _ in range(warm_up):
                loop.run_until_complete(run())
        counts = {name: traced(loop, run) for name, run in variants.items()}
        seconds = loop.run_until_complete(bench.rounds(variants, rounds, dict.fromkeys(variants, loops)))
        micros = {name: statistics.median(runs) / N * 1e6 for name, runs in seconds.items()}
    finally:
        loop.close()
    totals = {name: sum(by_duty.values()) / N for name, by_duty in counts.items()}
    over = counts["plugin"].copy()
    over.subtract(counts["loop"])
    duties = {duty: over[duty] / N for duty in sorted(over, key=lambda duty: -over[duty])}
    by_duty = {name: {duty: count / N for duty, count in counted.items()} for name, counted in counts.items()}
    return {
        "workload": workload,
        "bytecodes_per_entry": totals,
        "us_per_entry": micros,
        "plugin_over_loop": duties,
        "by_duty": by_duty,  # each variant's own bytecodes an entry, by duty
    }


def render(report: dict[str, Any]) -> str:
    totals, micros = report["bytecodes_per_entry"], report["us_per_entry"]
    lines = [
        f"### Per entry, {report['workload']} entries, batch of {N}, in process",
        "",
        "| | loop | built-in | plugin |",
        "|---|---|---|---|",
        "| bytecodes | " + " | ".join(f"{totals[name]:.0f}" for name in ("loop", "builtin", "plugin")) + " |",
        "| µs (median of alternating rounds) | "
        + " | ".join(f"{micros[name]:.1f}" for name in ("loop", "builtin", "plugin"))
        + " |",
        "",
        "### Bytecodes an entry by duty, and the plugin's over the loop's",
        "",
        "| duty | loop | built-in | plugin | plugin - loop |",
        "|---|---|---|---|---|",
    ]
    by_duty = report["by_duty"]
    for duty, count in report["plugin_over_loop"].items():
        each = " | ".join(f"{by_duty[name].get(duty, 0):.0f}" for name in ("loop", "builtin", "plugin"))
        lines.append(f"| {duty} | {each} | {count:+.0f} |")
    each = " | ".join(f"{totals[name]:.0f}" for name in ("loop", "builtin", "plugin"))
    lines.append(f"| all | {each} | {totals['plugin'] - totals['loop']:+.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    if sys.version_info < (3, 11):
        raise SystemExit("own_work.py needs Python 3.11 or newer (code objects' co_qualname)")
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--workload", choices=("ok", "failing"), default="ok")
    cli.add_argument("--quick", action="store_true", help="a few batches: only shows it works")
    cli.add_argument("--json", help="also write the figures here")
    args = cli.parse_args(argv)
    warm_up, rounds, loops = (5, 1, 2) if args.quick else (300, 7, 200)
    report = measure(args.workload, warm_up, rounds, loops)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
