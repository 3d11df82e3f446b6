"""The OpenTelemetry observer plugin, under the SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hostile_hosts import HostileHost
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from centralmcp_batch import ToolRef, _compat, hosting, otel
from centralmcp_batch.hookspecs import hookimpl
from centralmcp_batch.host import HostHooks
from centralmcp_batch.testing import InlineHost, call, sample_host

pytestmark = pytest.mark.anyio

SECRET_ARGUMENT = "s3cret-argument-value"
# Set once the engine and the pipeline call the two newer observer hooks; until then the tests
# that need them say so instead of passing for the wrong reason.


class Telemetry:
    """A BatchTelemetry over its own SDK providers, and what they collected."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.plugin = otel.BatchTelemetry(tracer_provider, MeterProvider(metric_readers=[self.reader]))

    def finished(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.name == name]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for entry in scope.metrics
            if entry.name == metric
            for point in entry.data.data_points
        ]
        return found


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


def paged_cursor(host: InlineHost) -> str:
    """A cursor ``host`` issued for the ``paged`` entry of ``mixed_calls``: it verifies, so that entry is ok."""
    return host.cursors.issue("echo", {"q": SECRET_ARGUMENT}, 7)


def mixed_calls(host: InlineHost) -> list[Any]:
    return [
        {"name": "echo", "id": "plain", "arguments": {"token": SECRET_ARGUMENT}},
        {"name": "echo", "id": "paged", "arguments": {"q": SECRET_ARGUMENT}, "cursor": paged_cursor(host)},
        {"name": "delete_everything", "id": "write", "arguments": {"why": SECRET_ARGUMENT}},
        {"name": "no_such_tool", "id": "unknown"},
        {"name": "echo", "id": "bad", "arguments": [SECRET_ARGUMENT]},
    ]


def raising_host() -> InlineHost:
    host = sample_host()

    def broken(**arguments: Any) -> None:
        raise RuntimeError("backend down")

    host.add("broken", broken)
    return host


async def run_over_mcp(host: InlineHost, telemetry: Telemetry, calls: list[Any]) -> dict[str, Any]:
    server = _compat.new_server("otel-test")
    hosting.install(server, host, telemetry.plugin)
    answer = await call(server, "invoke_read_tool_batch", {"calls": calls})
    assert not answer.is_error, answer.text
    return answer.structured


def every_text(span: ReadableSpan) -> str:
    """Everything a span would export, as one string to search."""
    parts = [span.name, json.dumps(dict(span.attributes or {}), default=str), str(span.status.description)]
    parts += [event.name + json.dumps(dict(event.attributes or {}), default=str) for event in span.events]
    return "\n".join(parts)


async def test_an_entry_span_per_entry_with_tool_server_status_and_duration(telemetry: Telemetry) -> None:
    host = raising_host()
    calls = [*mixed_calls(host), {"name": "broken", "id": "raises"}]
    response = await run_over_mcp(host, telemetry, calls)
    entries = sorted(telemetry.finished(otel.ENTRY_SPAN), key=lambda span: span.attributes["centralmcp.index"])
    assert [span.attributes["centralmcp.status"] for span in entries] == [
        item["status"] for item in response["results"]
    ]
    assert [span.attributes["centralmcp.status"] for span in entries] == [
        "ok", "ok", "blocked", "unknown_tool", "invalid_call", "error",
    ]  # fmt: skip
    # a name the catalog did not resolve (unknown, or an invalid entry's) is the client's text: not recorded
    assert [span.attributes.get("centralmcp.tool") for span in entries] == [
        "echo", "echo", "delete_everything", None, None, "broken",
    ]  # fmt: skip
    assert [span.attributes.get("centralmcp.server") for span in entries] == [
        "inline",
        "inline",
        "inline",
        None,
        None,
        "inline",
    ]
    for span in entries:
        assert span.end_time >= span.start_time
        assert span.attributes["centralmcp.seconds"] >= 0
    assert [span.status.status_code for span in entries][-1] is StatusCode.ERROR
    assert {span.status.status_code for span in entries[:-1]} == {StatusCode.UNSET}
    (batch,) = telemetry.finished(otel.BATCH_SPAN)
    assert batch.attributes["centralmcp.batch.total"] == 6
    assert batch.attributes["centralmcp.batch.succeeded"] == 2 and batch.attributes["centralmcp.batch.failed"] == 4
    assert batch.attributes["centralmcp.batch.ok"] is False and batch.attributes["centralmcp.batch.truncated"] is False


async def test_no_argument_value_cursor_id_or_error_text_reaches_a_span(telemetry: Telemetry) -> None:
    host = raising_host()
    calls = [*mixed_calls(host), {"name": "broken", "id": "raises"}]
    await run_over_mcp(host, telemetry, calls)
    spans = telemetry.finished(otel.BATCH_SPAN) + telemetry.finished(otel.ENTRY_SPAN)
    assert len(spans) == len(calls) + 1
    for span in spans:
        exported = every_text(span)
        for leak in (SECRET_ARGUMENT, calls[1]["cursor"], "plain", "paged", "backend down", "not read-only"):
            assert leak not in exported, (leak, span.name)


async def test_a_name_the_catalog_did_not_resolve_reaches_no_span_or_metric(telemetry: Telemetry) -> None:
    # A client that pastes a token where a tool name goes: a single read of that name answers
    # unknown_tool and records nothing; the batch's telemetry must not export it either.
    host = sample_host()
    pasted = f"cmcp_{SECRET_ARGUMENT}"
    calls = [
        {"name": pasted, "id": "unknown"},
        {"name": pasted, "id": "invalid", "arguments": [1]},
        {"name": f"{pasted}\u00e9", "id": "not-ascii"},
        {"name": "echo", "id": "known"},
    ]
    response = await run_over_mcp(host, telemetry, calls)
    assert [item["status"] for item in response["results"]] == ["unknown_tool", "invalid_call", "unknown_tool", "ok"]
    spans = telemetry.finished(otel.BATCH_SPAN) + telemetry.finished(otel.ENTRY_SPAN)
    assert len(spans) == len(calls) + 1
    assert all(SECRET_ARGUMENT not in every_text(span) for span in spans)
    assert SECRET_ARGUMENT not in telemetry.reader.get_metrics_data().to_json()
    tools = {span.attributes["centralmcp.index"]: span.attributes.get("centralmcp.tool") for span in spans[1:]}
    assert tools == {0: None, 1: None, 2: None, 3: "echo"}


async def test_metrics_count_entries_by_status_and_time_them(telemetry: Telemetry) -> None:
    host = sample_host()
    await run_over_mcp(host, telemetry, mixed_calls(host))
    await run_over_mcp(sample_host(), telemetry, [{"name": "echo"}, {"name": "echo", "id": "x"}])
    by_status = {
        (point.attributes["centralmcp.status"], point.attributes.get("centralmcp.server")): point.value
        for point in telemetry.points("centralmcp.batch.entries")
    }
    assert by_status == {
        ("ok", "inline"): 4,
        ("blocked", "inline"): 1,
        ("unknown_tool", None): 1,
        ("invalid_call", None): 1,
    }
    durations = telemetry.points("centralmcp.batch.entry.duration")
    assert sum(point.count for point in durations) == 7
    assert all(point.min >= 0 for point in durations)
    batches = {
        point.attributes["centralmcp.batch.ok"]: point.count for point in telemetry.points("centralmcp.batch.duration")
    }
    assert batches == {False: 1, True: 1}


async def test_rate_token_waits_are_a_histogram_by_server(telemetry: Telemetry) -> None:
    pm = hosting.plugin_manager(telemetry.plugin)
    hooks = HostHooks(pm)
    await hooks.rate_token_waited(ToolRef("echo", "inline"), 0.25)
    await hooks.rate_token_waited(ToolRef("echo", "inline"), 0.5)
    await hooks.rate_token_waited(ToolRef("orphan", None), 0.0)
    points = {
        point.attributes.get("centralmcp.server"): point for point in telemetry.points("centralmcp.rate_token.wait")
    }
    assert points["inline"].count == 2 and points["inline"].sum == pytest.approx(0.75)
    assert points[None].count == 1


async def test_concurrent_entries_are_children_of_their_own_batch(telemetry: Telemetry) -> None:
    """Two batches at once, each with entries finishing in tasks of their own, as the engine runs them."""
    hooks = HostHooks(hosting.plugin_manager(telemetry.plugin))

    async def one_batch(label: str, entries: int) -> None:
        await hooks.batch_started(entries)

        async def entry(index: int) -> None:
            await anyio.sleep(0.01 * (entries - index))  # finish in reverse order
            await hooks.batch_item_completed({"index": index, "tool": label, "server": "s", "status": "ok"}, 0.01)

        async with anyio.create_task_group() as tasks:
            for index in range(entries):
                tasks.start_soon(entry, index)
        await hooks.batch_completed({"ok": True, "counts": {"total": entries, "succeeded": entries, "failed": 0}}, 0.05)

    async with anyio.create_task_group() as batches:
        batches.start_soon(one_batch, "a", 3)
        batches.start_soon(one_batch, "b", 4)
    await one_batch("c", 2)  # a later batch in the same task starts afresh
    roots = {span.attributes["centralmcp.batch.total"]: span for span in telemetry.finished(otel.BATCH_SPAN)}
    assert sorted(roots) == [2, 3, 4]
    for label, total in (("a", 3), ("b", 4), ("c", 2)):
        children = [span for span in telemetry.finished(otel.ENTRY_SPAN) if span.attributes["centralmcp.tool"] == label]
        assert len(children) == total
        assert {span.parent.span_id for span in children} == {roots[total].context.span_id}
        assert {span.context.trace_id for span in children} == {roots[total].context.trace_id}
    assert len({span.context.trace_id for span in roots.values()}) == 3


async def test_entry_spans_are_children_of_the_batch_span_over_mcp(telemetry: Telemetry) -> None:
    host = sample_host()
    calls = mixed_calls(host)
    await run_over_mcp(host, telemetry, calls)
    (batch,) = telemetry.finished(otel.BATCH_SPAN)
    entries = telemetry.finished(otel.ENTRY_SPAN)
    assert len(entries) == len(calls)
    assert {span.parent.span_id for span in entries if span.parent} == {batch.context.span_id}
    assert all(batch.start_time <= span.start_time and span.end_time <= batch.end_time for span in entries)


async def test_the_wait_for_a_slow_limiter_is_measured_over_mcp(telemetry: Telemetry) -> None:
    class SlowLimiter:
        @hookimpl
        async def centralmcp_acquire_rate_token(self, tool: ToolRef) -> None:
            await anyio.sleep(0.05)

    server = _compat.new_server("otel-test")
    host = sample_host()
    hosting.install(server, host, SlowLimiter(), telemetry.plugin)
    answer = await call(server, "invoke_read_tool_batch", {"calls": [*mixed_calls(host), {"name": "echo"}]})
    assert not answer.is_error
    (point,) = telemetry.points("centralmcp.rate_token.wait")
    assert point.count == 3  # the three entries that reached the backend; refusals draw no token
    assert point.min >= 0.04


def run_script(source: str) -> Any:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_entry_point_plugin_uses_the_global_providers() -> None:
    """A host configures OpenTelemetry the usual way; the installed entry point does the rest."""
    found = run_script(
        """
        import json, anyio
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        spans, reader, provider = InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

        from centralmcp_batch import _compat, hosting, otel
        from centralmcp_batch.testing import call, sample_host

        async def main():
            server = _compat.new_server("global")
            pm = hosting.install(server, sample_host())
            answer = await call(server, "invoke_read_tool_batch", {"calls": [{"name": "echo"}, {"name": "nope"}]})
            names = sorted(span.name for span in spans.get_finished_spans() if span.name.startswith(otel.BATCH_SPAN))
            metric_names = sorted(
                m.name for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics for m in s.metrics
            )
            print(json.dumps({"plugin": pm.is_registered(otel), "spans": names, "metrics": metric_names,
                              "ok": answer.structured["counts"]}))

        anyio.run(main)
        """
    )
    assert found["plugin"] is True
    assert found["spans"] == sorted([otel.BATCH_SPAN, otel.ENTRY_SPAN, otel.ENTRY_SPAN])
    assert {"centralmcp.batch.entries", "centralmcp.batch.entry.duration", "centralmcp.batch.duration"} <= set(
        found["metrics"]
    )
    assert found["ok"] == {"total": 2, "succeeded": 1, "failed": 1}


def test_with_no_provider_configured_nothing_is_built_and_a_provider_set_later_is_used() -> None:
    """Most hosts have opentelemetry-api (SDK 2.x depends on it) and no exporter: spans for nobody cost an entry."""
    found = run_script(
        """
        import json, anyio
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from centralmcp_batch import _compat, hosting, otel
        from centralmcp_batch.testing import call, sample_host

        started = []
        class CountingTracer:  # the plugin's own tracer, counted: no span may be begun for nobody
            def __init__(self, tracer):
                self.tracer = tracer
            def start_span(self, *args, **kwargs):
                started.append(args[0])
                return self.tracer.start_span(*args, **kwargs)
        otel._global.tracer = CountingTracer(otel._global.tracer)

        async def main():
            server = _compat.new_server("late")
            hosting.install(server, sample_host())
            calls = {"calls": [{"name": "echo"}, {"name": "nope"}]}
            before = (await call(server, "invoke_read_tool_batch", calls)).structured["counts"]
            begun_before = list(started)
            spans, reader, provider = InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(spans))
            trace.set_tracer_provider(provider)
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            await call(server, "invoke_read_tool_batch", calls)
            entries = [
                point.value for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics
                for m in s.metrics if m.name == "centralmcp.batch.entries" for point in m.data.data_points
            ]
            print(json.dumps({"before": before, "begun_before": begun_before,
                              "spans": sorted(span.name for span in spans.get_finished_spans()
                                              if span.name.startswith(otel.BATCH_SPAN)),
                              "entries": sum(entries)}))

        anyio.run(main)
        """
    )
    assert found["before"] == {"total": 2, "succeeded": 1, "failed": 1}  # the batch itself is untouched
    assert found["begun_before"] == []
    assert found["spans"] == sorted([otel.BATCH_SPAN, otel.ENTRY_SPAN, otel.ENTRY_SPAN])
    assert found["entries"] == 2  # the second batch's two entries, counted once the provider is set


def test_with_nothing_configured_a_batch_opts_out_and_with_its_own_providers_it_listens() -> None:
    if otel.UNSET_METER_PROVIDER is None:
        pytest.skip("this opentelemetry-api names no unset meter provider: it always records")
    idle = otel.BatchTelemetry()  # over the global providers, which the tests leave unset
    assert idle.centralmcp_batch_started(3) is False  # hears nothing more of this batch: no call per entry
    own = Telemetry()
    assert own.plugin.centralmcp_batch_started(3) is None
    own.plugin.centralmcp_batch_completed({"ok": True, "counts": {}}, 0.01)
    assert [span.name for span in own.spans.get_finished_spans()] == [otel.BATCH_SPAN]


def test_without_opentelemetry_the_module_imports_and_implements_nothing() -> None:
    # SDK 2.x itself depends on opentelemetry-api, so only the plugin's own import is cut off here.
    found = run_script(
        """
        import json, sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        from centralmcp_batch import hosting, otel

        pm = hosting.plugin_manager(otel)
        implemented = [name for name in dir(pm.hook) if name.startswith("centralmcp_")
                       and any(impl.plugin is otel for impl in getattr(pm.hook, name).get_hookimpls())]
        report = {"available": otel.AVAILABLE, "registered": pm.is_registered(otel), "implemented": implemented}
        print(json.dumps(report))
        """
    )
    assert found == {"available": False, "registered": True, "implemented": []}


@pytest.fixture(autouse=True)
def _no_global_provider_is_left_behind() -> Iterator[None]:
    # The tests above use their own providers; the process-wide ones must stay the API's defaults,
    # or every later test's batches would be recorded (and kept) somewhere.
    from opentelemetry import trace

    before = type(trace.get_tracer_provider())
    yield
    assert type(trace.get_tracer_provider()) is before


@pytest.mark.usefixtures("each_entry_its_own_call")
async def test_a_batch_the_client_cancels_ends_its_span_as_an_error_over_mcp(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CENTRALMCP_ROUTER_BATCH_CONCURRENCY", "1")
    host = HostileHost()
    server = _compat.new_server("otel-cancel")
    hosting.install(server, host, telemetry.plugin)
    async with _compat.connect(server) as client:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                calls = [{"name": "succeed"}, {"name": "hang"}, {"name": "succeed"}]
                tasks.start_soon(client.call_tool, "invoke_read_tool_batch", {"calls": calls})
                while host.running == 0:
                    await anyio.sleep(0.01)
                tasks.cancel_scope.cancel()
            while not telemetry.finished(otel.BATCH_SPAN):  # the server hears the cancel a moment later
                await anyio.sleep(0.01)
    (batch,) = telemetry.finished(otel.BATCH_SPAN)
    assert batch.status.status_code is StatusCode.ERROR and batch.status.description == "cancelled"
    # what docs/guides/opentelemetry.md says a cancelled batch's span carries, and nothing more
    assert dict(batch.attributes) == {"centralmcp.batch.total": 3, "centralmcp.batch.cancelled": True}
    (entry,) = telemetry.finished(otel.ENTRY_SPAN)  # the one that finished before the cancel
    assert entry.attributes["centralmcp.index"] == 0 and entry.parent.span_id == batch.context.span_id
    (duration,) = telemetry.points("centralmcp.batch.duration")
    assert dict(duration.attributes) == {"centralmcp.batch.ok": False, "centralmcp.batch.cancelled": True}
