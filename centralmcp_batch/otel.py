"""OpenTelemetry for batches: the ``otel`` entry point of this distribution (``centralmcp-batch[otel]``).

Spans and metrics go to the global tracer and meter providers, so a host configures its exporters
the usual OpenTelemetry way. The entry point is declared whether or not the extra is installed
(entry points are static): without ``opentelemetry`` this module defines no hook implementation
and so does nothing.

What is recorded: tool and server names, statuses, counts and durations. Never an argument value,
a cursor, a call id, an error text or a tool name the catalog did not resolve, since any of those
may carry what the client sent.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .hookspecs import hookimpl
from .models import ToolRef

# What the API hands out until a host sets a meter provider (it names no public class for it);
# None on an API version without it: nothing is told apart then, and everything is recorded.
UNSET_METER_PROVIDER: type | None = None

try:
    from opentelemetry import metrics, trace
except ImportError:  # the otel extra is not installed: no hooks, nothing recorded
    AVAILABLE = False
else:
    AVAILABLE = True
    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:
        pass
    else:
        UNSET_METER_PROVIDER = _ProxyMeterProvider

SCOPE = "centralmcp_batch"
BATCH_SPAN = "invoke_read_tool_batch"
ENTRY_SPAN = "invoke_read_tool_batch entry"


@dataclass
class _BatchTrace:
    span: Any  # trace.Span, typed loosely so the module imports without opentelemetry
    parent: Any  # the Context whose current span is the batch span


def _tool_attributes(tool: str | None, server: str | None) -> dict[str, str]:
    """The tool and its server, only as the catalog resolved them (an item's server says it did).

    An unknown name, or one an invalid entry never sent to the catalog, is text the client typed (a
    token pasted into ``name`` would be exported as it is), and a single read records none of it.
    """
    if server is None:  # attribute values cannot be None either
        return {}
    attributes = {"centralmcp.server": server}
    if tool is not None:
        attributes["centralmcp.tool"] = tool
    return attributes


def _nothing_configured() -> bool:
    """True while no global provider is set: the API's placeholders would drop every span and point.

    SDK 2.x brings opentelemetry-api with it, so most hosts have the plugin and no exporter; for
    them, building a batch's spans and points for nothing was a sixth of an entry's own cost.
    Asked as each batch starts (and on each call outside a batch), so a provider a host sets
    later is used from its next batch on.
    """
    if UNSET_METER_PROVIDER is None:
        return False
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider) and isinstance(
        metrics.get_meter_provider(), UNSET_METER_PROVIDER
    )


def _seconds_ago_ns(seconds: float) -> int:
    return time.time_ns() - max(0, int(seconds * 1e9))


class BatchTelemetry:
    """The observer hooks as spans and metrics; the module registers one over the global providers.

    A host or a test may register its own instance with explicit providers.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.global_providers = tracer_provider is None and meter_provider is None
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.entries = meter.create_counter(
            "centralmcp.batch.entries", unit="{entry}", description="Batch entries finished, by status and server"
        )
        self.entry_duration = meter.create_histogram(
            "centralmcp.batch.entry.duration", unit="s", description="How long one batch entry took"
        )
        self.batch_duration = meter.create_histogram(
            "centralmcp.batch.duration", unit="s", description="How long one whole batch took"
        )
        self.rate_wait = meter.create_histogram(
            "centralmcp.rate_token.wait", unit="s", description="Time a backend call waited for its rate tokens"
        )
        # Per instance: two telemetry plugins on one host must not end each other's spans. The
        # variable holds a one-slot list that the batch's end empties: an entry's task context (or
        # an SDK object that keeps a finished task) may outlive the batch, its span must not.
        self._current: ContextVar[list[_BatchTrace | None] | None] = ContextVar(
            f"centralmcp_batch_otel_{id(self)}", default=None
        )

    def _idle(self) -> bool:
        return self.global_providers and _nothing_configured()

    def _batch(self) -> _BatchTrace | None:
        slot = self._current.get()
        return None if slot is None else slot[0]

    def _skips(self) -> bool:
        """Whether a call's points and span would go nowhere: outside a batch, nothing is configured.

        Within a batch the question is asked once, as it starts (it costs 2 us): a batch that began
        with nothing configured answers False there and hears nothing more (see the hookspec)."""
        return self._batch() is None and self._idle()

    @hookimpl
    def centralmcp_batch_started(self, total: int) -> bool | None:
        if self._idle():
            return False  # nothing would record it: no span, and no call per entry either
        # Set in the batch's own task before its workers start, so every entry of this batch sees it.
        span = self.tracer.start_span(BATCH_SPAN, attributes={"centralmcp.batch.total": total})
        self._current.set([_BatchTrace(span, trace.set_span_in_context(span))])
        return None

    @hookimpl
    def centralmcp_batch_item_completed(self, item: Mapping[str, Any], seconds: float) -> None:
        if self._skips():
            return
        status = str(item.get("status"))
        labels = {"centralmcp.status": status, **_tool_attributes(None, item.get("server"))}
        self.entries.add(1, labels)
        self.entry_duration.record(seconds, labels)
        batch = self._batch()
        attributes: dict[str, Any] = {
            "centralmcp.index": int(item.get("index", -1)),
            "centralmcp.status": status,
            "centralmcp.seconds": seconds,
            **_tool_attributes(item.get("tool"), item.get("server")),
        }
        span = self.tracer.start_span(
            ENTRY_SPAN,
            context=batch.parent if batch is not None else None,
            attributes=attributes,
            start_time=_seconds_ago_ns(seconds),
        )
        if status == "error":  # a refusal (blocked, unknown_tool, ...) is an answer, not a failure
            span.set_status(trace.StatusCode.ERROR, "error")
        span.end()

    @hookimpl
    def centralmcp_batch_completed(self, response: Mapping[str, Any], seconds: float) -> None:
        slot = self._current.get()
        batch = None if slot is None else slot[0]
        if batch is None and self._idle():
            return
        ok = bool(response.get("ok"))
        self.batch_duration.record(seconds, {"centralmcp.batch.ok": ok})
        if slot is None or batch is None:  # a caller that does not report the start: drawn afterwards
            span = self.tracer.start_span(BATCH_SPAN, start_time=_seconds_ago_ns(seconds))
        else:
            span = batch.span
            slot[0] = None  # every task context that copied the slot lets go of the span with it
            self._current.set(None)  # the same context as the start: the batch's own task
        counts = response.get("counts") or {}
        span.set_attributes(
            {
                "centralmcp.batch.ok": ok,
                "centralmcp.batch.total": int(counts.get("total", 0)),
                "centralmcp.batch.succeeded": int(counts.get("succeeded", 0)),
                "centralmcp.batch.failed": int(counts.get("failed", 0)),
                "centralmcp.batch.truncated": bool(response.get("truncated")),
            }
        )
        span.end()

    @hookimpl
    def centralmcp_batch_cancelled(self, seconds: float) -> None:
        # A batch cancelled before it answered: its span ends as an error, not left open and never exported.
        slot = self._current.get()
        batch = None if slot is None else slot[0]
        if slot is None or batch is None:  # its start was not told to this plugin: no span to end
            return
        self.batch_duration.record(seconds, {"centralmcp.batch.ok": False, "centralmcp.batch.cancelled": True})
        slot[0] = None
        self._current.set(None)
        batch.span.set_attribute("centralmcp.batch.cancelled", True)
        batch.span.set_status(trace.StatusCode.ERROR, "cancelled")
        batch.span.end()

    @hookimpl
    def centralmcp_rate_token_waited(self, tool: ToolRef, seconds: float) -> None:
        if self._skips():
            return
        self.rate_wait.record(seconds, _tool_attributes(None, tool.server))


if AVAILABLE:
    _global = BatchTelemetry()
    centralmcp_batch_started = _global.centralmcp_batch_started
    centralmcp_batch_item_completed = _global.centralmcp_batch_item_completed
    centralmcp_batch_completed = _global.centralmcp_batch_completed
    centralmcp_batch_cancelled = _global.centralmcp_batch_cancelled
    centralmcp_rate_token_waited = _global.centralmcp_rate_token_waited
