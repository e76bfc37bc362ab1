"""X-Ray subsegments of a slice, through Powertools' Tracer (loaded only when tracing is on).

A finished slice becomes subsegments of the current X-Ray entity (in Lambda, the handler's
``## handler`` subsegment that ``capture_lambda_handler`` opened), nested as the spans are and
with their recorded times: ``invoke_agent {agent}``, ``step``, ``chat {model}``,
``execute_tool {tool}``. Every attribute is metadata (namespace ``durable_harness``); the slice
subsegment is annotated with ``run_id``, ``agent``, ``model`` and ``slice``, so that a run's
slices can be found with ``annotation.run_id = "wrun_..."``. A failed operation is flagged as a
fault, with ``error.type`` in its metadata.

With Step Functions tracing on (the template's ``Tracing: Enabled``), every slice of one
execution is in the execution's trace.
"""

from __future__ import annotations

from typing import Any

from .record import AttributeValue, SliceRecord, SpanRecord

NAMESPACE = "durable_harness"


class XRayExporter:
    """Writes each slice as subsegments through ``tracer.provider`` (Powertools' X-Ray recorder).

    ``tracer`` defaults to ``Tracer()``, which shares the configuration of the handler's.
    """

    def __init__(self, tracer: Any = None) -> None:
        self._tracer = tracer

    def export(self, record: SliceRecord) -> None:
        """Write the slice's subsegments, parents first, with their recorded times."""
        if self._tracer is None:
            from aws_lambda_powertools import Tracer

            self._tracer = Tracer()
        recorder = self._tracer.provider
        annotations: dict[str, AttributeValue] = {"run_id": record.run_id, "agent": record.agent, "model": record.model}
        annotations["slice"] = record.span.attributes.get("durable_harness.slice.number", 0)
        _emit(recorder, record.span, annotations)


def _emit(recorder: Any, record: SpanRecord, annotations: dict[str, AttributeValue]) -> None:
    subsegment = recorder.begin_subsegment(record.name, "local")
    if subsegment is None:  # no segment to add to (the recorder logged why)
        return
    subsegment.start_time = record.start_ns / 1e9
    for key, value in annotations.items():
        subsegment.put_annotation(key, value)
    for key, value in record.attributes.items():
        subsegment.put_metadata(key, value, NAMESPACE)
    if record.error is not None:
        subsegment.put_metadata("error.type", record.error, NAMESPACE)
        subsegment.add_fault_flag()
    for child in record.children:
        _emit(recorder, child, {})
    recorder.end_subsegment(max(record.end_ns, record.start_ns) / 1e9)
