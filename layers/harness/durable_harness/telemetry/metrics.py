"""CloudWatch metrics per agent and model, through Powertools Metrics (EMF on stdout, in Lambda).

At the end of every slice, one EMF document per model the slice used, in the namespace
``POWERTOOLS_METRICS_NAMESPACE``, with the dimensions ``agent`` and ``model`` (and Powertools'
``service``): never a run id, so the number of metric streams stays that of agents x models.

Each slice's figures (all Count, except SliceDuration):

* ``InputTokens``, ``OutputTokens``: the tokens of the slice's steps;
* ``Steps``, ``ToolCalls``, ``ToolErrors`` (failed executions, error results, invalid inputs);
* ``ApprovalsWaiting``: the approval requests a run paused for (when the slice paused it);
* ``RunsWaiting``: 1 when the slice parked its run (``awaiting_event``, decision D16);
* ``SliceDuration`` (Milliseconds): the slice, on the slice's model.

A separate ``EphemeralMetrics`` is used, so these dimensions never leak into the handler's own
metrics (``Slices``, ``RunsFailed``, ...).
"""

from __future__ import annotations

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from .record import ModelCounters, SliceRecord

INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
STEPS = "Steps"
TOOL_CALLS = "ToolCalls"
TOOL_ERRORS = "ToolErrors"
APPROVALS_WAITING = "ApprovalsWaiting"
RUNS_WAITING = "RunsWaiting"
SLICE_DURATION = "SliceDuration"
METRIC_NAMES = (
    INPUT_TOKENS, OUTPUT_TOKENS, STEPS, TOOL_CALLS, TOOL_ERRORS, APPROVALS_WAITING, RUNS_WAITING, SLICE_DURATION
)  # fmt: skip
"""Every metric this module emits."""
DIMENSIONS = ("agent", "model")
"""The dimensions of every metric (Powertools adds ``service``)."""


class MetricsExporter:
    """Emits a slice's metrics as EMF (``namespace``/``service`` default to Powertools' variables)."""

    def __init__(self, *, namespace: str | None = None, service: str | None = None) -> None:
        self.namespace = namespace
        self.service = service

    def export(self, record: SliceRecord) -> None:
        """Print one EMF document per model of the slice."""
        counters = dict(record.counters)
        counters.setdefault(record.model, ModelCounters())  # the slice's own figures go there
        for model, c in counters.items():
            metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
            metrics.add_dimension("agent", record.agent)
            metrics.add_dimension("model", model)
            metrics.add_metric(name=INPUT_TOKENS, unit=MetricUnit.Count, value=c.input_tokens)
            metrics.add_metric(name=OUTPUT_TOKENS, unit=MetricUnit.Count, value=c.output_tokens)
            metrics.add_metric(name=STEPS, unit=MetricUnit.Count, value=c.steps)
            metrics.add_metric(name=TOOL_CALLS, unit=MetricUnit.Count, value=c.tool_calls)
            metrics.add_metric(name=TOOL_ERRORS, unit=MetricUnit.Count, value=c.tool_errors)
            if model == record.model:
                metrics.add_metric(name=APPROVALS_WAITING, unit=MetricUnit.Count, value=record.approvals_waiting)
                metrics.add_metric(name=RUNS_WAITING, unit=MetricUnit.Count, value=record.runs_waiting)
                metrics.add_metric(name=SLICE_DURATION, unit=MetricUnit.Milliseconds, value=record.duration_ms)
            metrics.flush_metrics()
