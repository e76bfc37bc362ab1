"""OpenTelemetry spans of a slice, with the GenAI semantic conventions (imported only when used).

A finished slice becomes spans with the recorded times: ``invoke_agent {agent}`` (INTERNAL: the
agent runs in this process), a ``step`` span per step, ``chat {model}`` (CLIENT) per model call
and ``execute_tool {tool}`` (INTERNAL) per tool call, with the ``gen_ai.*`` attributes of the
semantic conventions (operation, provider, agent, conversation, request and response model,
token usage, finish reasons, tool name, call id and type) and ``durable_harness.*`` ones (run
id, slice, step id, run status, approvals waiting). A failed operation has status ERROR and
``error.type``. No message content is recorded.

**A trace per run.** When the slice runs inside a span (an instrumented Lambda, whose trace on
AWS is the Step Functions execution's), the slice span is its child. Otherwise its parent is a
run span that is never recorded: its trace id and span id are derived from the run id, so every
slice of a run, in any process, lands in one trace (backends show the slices under a missing
root). The first slice of a run that answers a paused run's approvals links to the paused run's
span.
"""

from __future__ import annotations

import hashlib

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .record import SliceRecord, SpanRecord

INSTRUMENTATION = "durable_harness"
_KINDS = {"slice": SpanKind.INTERNAL, "step": SpanKind.INTERNAL, "model": SpanKind.CLIENT, "tool": SpanKind.INTERNAL,
          "wait": SpanKind.INTERNAL}  # fmt: skip


class OpenTelemetryExporter:
    """Sends each slice's spans to ``tracer`` (default: the global tracer provider's).

    With no provider configured (the API's proxy), nothing is built.
    """

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self._tracer = tracer

    def export(self, record: SliceRecord) -> None:
        """Create the slice's spans, parents first, with their recorded start and end times."""
        tracer = self._tracer
        if tracer is None:
            provider = trace.get_tracer_provider()
            if isinstance(provider, trace.ProxyTracerProvider):
                return  # no SDK configured: the spans would be dropped anyway
            tracer = provider.get_tracer(INSTRUMENTATION)
        paused = record.span.attributes.get("durable_harness.run.continues")
        links = [Link(_run_span(paused))] if isinstance(paused, str) else []
        _emit(tracer, record.span, run_context(record.run_id), links)


def run_context(run_id: str) -> Context | None:
    """The parent of a slice span: the current span if there is one, else the run's own span."""
    if trace.get_current_span().get_span_context().is_valid:
        return None  # the current context
    return trace.set_span_in_context(NonRecordingSpan(_run_span(run_id)))


def run_trace_id(run_id: str) -> int:
    """The trace id of a run's slices when no span surrounds them."""
    return _derived(run_id, "trace", 16)


def _run_span(run_id: str) -> SpanContext:
    """The (never recorded) span of a run: ids derived from the run id."""
    return SpanContext(
        trace_id=run_trace_id(run_id),
        span_id=_derived(run_id, "run", 8),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _derived(run_id: str, purpose: str, size: int) -> int:
    digest = hashlib.sha256(f"{purpose}:{run_id}".encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1  # 0 is the invalid id


def _emit(tracer: trace.Tracer, record: SpanRecord, context: Context | None, links: list[Link] | None = None) -> None:
    span = tracer.start_span(
        record.name,
        context=context,
        kind=_KINDS[record.kind],
        attributes=record.attributes,
        links=links,
        start_time=record.start_ns,
    )
    inner = trace.set_span_in_context(span, context)
    for child in record.children:
        _emit(tracer, child, inner)
    if record.error is not None:
        span.set_attribute("error.type", record.error)
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=max(record.end_ns, record.start_ns))
