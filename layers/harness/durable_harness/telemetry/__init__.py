"""Telemetry of runs: spans per slice, step, model call and tool call, and metrics per agent and model.

The runner reports each slice to a :class:`Telemetry` (see :mod:`.base`); what it records comes
from the harness's event stream alone (:mod:`.record`), so every harness is covered alike.
Exporters: OpenTelemetry with the GenAI semantic conventions (:mod:`.otel`, when an SDK is
installed), X-Ray through Powertools' Tracer (:mod:`.xray`, when the handlers are traced) and
Powertools Metrics (:mod:`.metrics`, in Lambda). Each is imported only when it is used.
"""

from .base import (
    NO_TELEMETRY,
    Exporter,
    NoTelemetry,
    RunTelemetry,
    SliceObserver,
    Telemetry,
    agent_info,
    otel_enabled,
    telemetry_from_env,
)
from .record import AgentInfo, ModelCounters, SliceRecord, SliceRecorder, SpanRecord

__all__ = [
    "NO_TELEMETRY",
    "AgentInfo",
    "Exporter",
    "ModelCounters",
    "NoTelemetry",
    "RunTelemetry",
    "SliceObserver",
    "SliceRecord",
    "SliceRecorder",
    "SpanRecord",
    "Telemetry",
    "agent_info",
    "otel_enabled",
    "telemetry_from_env",
]
