"""Telemetry of runs: spans per slice, step, model call and tool call, and metrics per agent and model.

The runner reports each slice to a :class:`Telemetry` (see :mod:`.base`); what it records comes
from the harness's event stream alone (:mod:`.record`), so every harness is covered alike.
Exporters: OpenTelemetry with the GenAI semantic conventions (:mod:`.otel`, when an SDK is
installed), X-Ray through Powertools' Tracer (:mod:`.xray`, when the handlers are traced) and
Powertools Metrics (:mod:`.metrics`, in Lambda). Each is imported only when it is used; so is
:mod:`.record` (its names are loaded from there on first use).
"""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from .record import AgentInfo, ModelCounters, SliceRecord, SliceRecorder, SpanRecord

_RECORD_NAMES = frozenset({"AgentInfo", "ModelCounters", "SliceRecord", "SliceRecorder", "SpanRecord"})


def __getattr__(name: str) -> Any:
    """The recorder's names, imported on first use (the runner imports this package at start-up)."""
    if name in _RECORD_NAMES:
        from . import record

        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
