"""The runner's telemetry port: an observer per slice, fed every event of the harness's turn.

The runner knows only :class:`Telemetry` (``start_slice``) and :class:`SliceObserver` (``event``,
``end``). :class:`RunTelemetry` records each slice (:mod:`.record`) and hands the finished record
to its exporters: OpenTelemetry (:mod:`.otel`), X-Ray through Powertools' Tracer (:mod:`.xray`),
CloudWatch metrics through Powertools Metrics (:mod:`.metrics`). :func:`telemetry_from_env`
chooses them from the environment and imports nothing it does not use, so a cold start with
tracing and OpenTelemetry off pays for none of them (the recorder itself is loaded at the first
slice: a function that runs none, the deployed chat function, never loads it).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import SettingsError

if TYPE_CHECKING:
    from ..harness.interface import Harness, HarnessEvent
    from .record import AgentInfo, SliceRecord, SliceRecorder
    from .view import RunView

logger = logging.getLogger(__name__)

_TRUE = ("1", "y", "yes", "t", "true", "on")  # Powertools' strtobool
_FALSE = ("0", "n", "no", "f", "false", "off")

TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"


class SliceObserver(Protocol):
    """Watches one slice: every event of the turn, then its end."""

    def event(self, event: HarnessEvent) -> None:
        """One event of the harness's turn, as the runner reads it (must be cheap, must not raise)."""
        ...

    def end(self, state: RunView, error: BaseException | None) -> None:
        """The slice ended with ``state`` (``error``: the exception that ended it, if any)."""
        ...


class Telemetry(Protocol):
    """What the runner reports its slices to."""

    def start_slice(self, state: RunView) -> SliceObserver:
        """An observer for the slice that starts now (``state.slices`` is its number)."""
        ...


class Exporter(Protocol):
    """Sends a finished slice somewhere (spans, metrics)."""

    def export(self, record: SliceRecord) -> None:
        """Send ``record``; may raise (the caller logs it and goes on)."""
        ...


class _NoObserver:
    def event(self, event: HarnessEvent) -> None:
        """Nothing to record."""

    def end(self, state: RunView, error: BaseException | None) -> None:
        """Nothing to send."""


class NoTelemetry:
    """Telemetry off: observers that do nothing."""

    _observer = _NoObserver()

    def start_slice(self, state: RunView) -> SliceObserver:
        """The do-nothing observer."""
        return self._observer


NO_TELEMETRY = NoTelemetry()
"""The default when nothing is configured."""


class _Observer:
    def __init__(self, recorder: SliceRecorder, exporters: Sequence[Exporter]) -> None:
        self._recorder = recorder
        self._exporters = exporters
        self.event = recorder.event

    def end(self, state: RunView, error: BaseException | None) -> None:
        try:
            record = self._recorder.finish(state, error)
        except Exception:
            logger.exception("telemetry: could not close the slice's spans")
            return
        for exporter in self._exporters:
            try:
                exporter.export(record)
            except Exception:  # a backend's failure must not fail (and so repeat) the slice
                logger.exception("telemetry: %s failed", type(exporter).__name__)


class RunTelemetry:
    """Records every slice and hands it to ``exporters`` when it ends."""

    def __init__(self, exporters: Sequence[Exporter], agent: AgentInfo) -> None:
        self.exporters = list(exporters)
        self.agent = agent

    def start_slice(self, state: RunView) -> SliceObserver:
        """A recording observer."""
        from .record import SliceRecorder

        return _Observer(SliceRecorder(state, self.agent), self.exporters)


def agent_info(harness: Harness, env: Mapping[str, str] = os.environ) -> AgentInfo:
    """The harness's name and model, as far as it tells them.

    The name is the harness's ``name`` attribute (a Pydantic AI agent's ``name``), else ``AGENT``
    (``module:attribute``), else the harness's class name. The model is the harness's ``model``
    (the built-in agent's model spec; a Pydantic AI agent's model), when it has one.
    """
    from .record import AgentInfo

    owners = [harness, getattr(harness, "agent", None)]
    name = next((n for o in owners if isinstance(n := getattr(o, "name", None), str) and n), None)
    model: str | None = None
    for owner in owners:
        value: Any = getattr(owner, "model", None)
        if isinstance(value, str):
            model = value
        elif value is not None:
            spec = getattr(value, "model_id", None)
            if not isinstance(spec, str):  # a Pydantic AI model: its provider ("system") and name
                system, model_name = getattr(value, "system", None), getattr(value, "model_name", None)
                spec = f"{system}:{model_name}" if isinstance(system, str) and isinstance(model_name, str) else None
            model = spec
        if model:
            break
    return AgentInfo(name=name or env.get("AGENT") or type(harness).__name__, model=model or None)


def otel_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """True when an OpenTelemetry SDK is installed and not disabled (``OTEL_SDK_DISABLED``)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    try:
        # Imports only the `opentelemetry` namespace package; the SDK itself is loaded when used.
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ImportError:  # no `opentelemetry` package at all
        return False


def tracing_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """True when Lambda's invocations are traced with X-Ray, under the rules Powertools' ``Tracer``
    applies: inside Lambda, not under an emulator (``sam local``: no X-Ray daemon), and
    ``POWERTOOLS_TRACE_DISABLED`` not true. The handlers' tracing (``aws/tracing.py``) and the
    X-Ray exporter follow it; a value other than true or false is a :class:`~durable_harness.errors.SettingsError`."""
    raw = env.get(TRACE_DISABLED_ENV, "false").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise SettingsError(f"{TRACE_DISABLED_ENV} must be true or false, got {env.get(TRACE_DISABLED_ENV)!r}")
    local = env.get("AWS_SAM_LOCAL") or env.get("AWS_CHALICE_CLI_MODE")
    return bool(env.get("LAMBDA_TASK_ROOT")) and not local and raw in _FALSE


def telemetry_from_env(harness: Harness, env: Mapping[str, str] = os.environ) -> Telemetry:
    """The telemetry this environment asks for (:data:`NO_TELEMETRY` when none).

    * OpenTelemetry spans when an SDK is installed (:func:`otel_enabled`), sent to the global
      tracer provider;
    * in Lambda: X-Ray subsegments when the handlers are traced
      (:func:`tracing_enabled`), and CloudWatch metrics (EMF) when
      ``POWERTOOLS_METRICS_NAMESPACE`` is set (Powertools' ``POWERTOOLS_METRICS_DISABLED`` applies).
    """
    exporters: list[Exporter] = []
    if otel_enabled(env):
        from .otel import OpenTelemetryExporter

        exporters.append(OpenTelemetryExporter())
    if env.get("LAMBDA_TASK_ROOT"):
        if tracing_enabled(env):
            from .xray import XRayExporter

            exporters.append(XRayExporter())
        if env.get("POWERTOOLS_METRICS_NAMESPACE"):
            from .metrics import MetricsExporter

            exporters.append(MetricsExporter())
    if not exporters:
        return NO_TELEMETRY
    return RunTelemetry(exporters, agent_info(harness, env))
