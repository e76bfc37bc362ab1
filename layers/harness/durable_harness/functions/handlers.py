"""The slice and finalizer functions' bodies, and the base of every function's handler body
(:class:`FunctionHandler`: its parts, built at the container's first invocation)."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from ..aws.events import EventPublisher, announce_slice, kind_for_status
from ..aws.runtime import SAFETY_MARGIN_SECONDS, FunctionParts, function_parts
from ..aws.waits import wait_of
from ..errors import FencedError, HarnessError, RetryableError, RunNotFoundError
from ..runner.runner import Runner
from ..runner.state import RunState
from ..settings import Settings

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger, Metrics

__all__ = ["FinalizerFunction", "FunctionHandler", "RetryableSliceError", "SliceFunction", "client_message"]

GENERIC_MESSAGES = {
    "RetryableSliceError": "The run failed after repeated errors.",
    "Sandbox.Timedout": "The run failed: a step took too long.",
    "States.Timeout": "The run failed: a step took too long.",
    "Runtime.ExitError": "The run failed: its worker stopped unexpectedly.",
    "Lambda.Unknown": "The run failed: its worker stopped unexpectedly (a timeout or out of memory).",
    "Runtime.OutOfMemory": "The run failed: its worker ran out of memory.",
    "OtherAgentError": "The run failed: another agent started it, and the stack's Agent parameter has changed since.",
}
DEFAULT_MESSAGE = "The run failed because of an internal error."
MAX_LOGGED_CAUSE = 4000


class RetryableSliceError(Exception):
    """A transient failure of a slice; the state machine retries the slice on this error name."""


def client_message(error_name: str) -> str:
    """The message the client sees for a failure named ``error_name`` (never its cause)."""
    return GENERIC_MESSAGES.get(error_name, DEFAULT_MESSAGE)


class FunctionHandler:
    """A function's handler body, over its parts: built once per container on first use
    (:func:`durable_harness.aws.runtime.function_parts`), with the module-level Logger and Metrics of its handler."""

    flush_interval: float | None = None
    """The chunk log's group-commit interval (None: ``STREAM_FLUSH_SECONDS``)."""
    check_secret = True
    """Read the approval secret at the start (a function that signs approvals)."""

    def __init__(self, logger: Logger, metrics: Metrics) -> None:
        self.logger, self.metrics = logger, metrics
        self._parts: FunctionParts | None = None
        self._lock = threading.Lock()

    def parts(self) -> FunctionParts:
        """The settings, adapters and runner of this container (built at the first call)."""
        with self._lock:
            if self._parts is None:
                self._parts = function_parts(
                    Settings.from_env(), flush_interval=self.flush_interval, check_secret=self.check_secret
                )
            return self._parts

    def count(self, name: str, value: int = 1) -> None:
        """Add ``value`` to the metric ``name`` of this invocation."""
        self.metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


class SliceFunction(FunctionHandler):
    """One time slice of a run, for the state machine's ``RunSlice`` task (see ``functions/slice``)."""

    def budget(self, context: Any) -> float:
        """Seconds this slice may spend: ``SLICE_SECONDS``, capped by the invocation's remaining time."""
        budget = self.parts().settings.slice_seconds
        if context is not None:
            budget = min(budget, context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_SECONDS)
        return max(0.0, budget)

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Run one slice of ``event["runId"]``; ``{"runId", "status", "slices", "wait"}``."""
        run_id = str(event["runId"])
        self.logger.append_keys(run_id=run_id, generation=event.get("generation"), attempt=event.get("attempt"))
        parts = self.parts()
        self.count("Slices")
        try:
            before, state = asyncio.run(self._run(parts, run_id, self.budget(context)))
        except FencedError as exc:
            self.logger.info("slice fenced off by a newer writer; stopping", extra={"reason": str(exc)})
            return {"runId": run_id, "status": "fenced", "slices": 0, "wait": None}
        except RetryableError as exc:
            self.logger.warning("slice failed with a retryable error", extra={"reason": str(exc)})
            self.count("SliceRetries")
            raise RetryableSliceError(str(exc)) from exc
        self.logger.info("slice done", extra={"before": before, "status": state.status, "slices": state.slices})
        announce_slice(parts.runtime.events, before, state, parts.runner.result)  # best effort
        wait = wait_of(state, started=event.get("started"))
        return {"runId": run_id, "status": state.status, "slices": state.slices, "wait": wait}

    @staticmethod
    async def _run(parts: FunctionParts, run_id: str, budget: float) -> tuple[str, RunState]:
        runner, waker = parts.runner, parts.runtime.waker
        before = (await asyncio.to_thread(runner.load, run_id)).status
        if before == "awaiting_event" and waker is not None:
            await asyncio.to_thread(waker.clear, run_id)  # before the events are looked at (see aws.waits)
        state = await runner.run_slice(run_id, budget_seconds=budget)
        while state.status == "awaiting_event" and await asyncio.to_thread(runner.due, state):
            state = await runner.run_slice(run_id, budget_seconds=budget)  # an event came as it parked
        return before, state


class FinalizerFunction(FunctionHandler):
    """Ends a failed run (the state machine's catch; see ``functions/finalizer``)."""

    flush_interval = 0.0  # it writes only error and finish: no pacing
    check_secret = False  # it signs nothing

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """End ``event["runId"]`` as failed; ``{"runId", "status"}``."""
        run_id = str(event["runId"])
        raw_error = event.get("error")
        error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
        name = str(error.get("Error") or "Unknown")
        cause = str(error.get("Cause") or "")[:MAX_LOGGED_CAUSE]
        self.logger.append_keys(run_id=run_id)
        self.logger.error("finalizing a failed run", extra={"error_name": name, "error_cause": cause})
        parts = self.parts()
        try:
            before, state = asyncio.run(self._finalize(parts.runner, run_id, client_message(name)))
        except RunNotFoundError:
            self.logger.warning("no such run (expired or never created); nothing to finalize")
            return {"runId": run_id, "status": "missing"}
        self.count("RunsFailed", 1 if state.status != before else 0)
        self._announce(parts.runtime.events, before, state)
        return {"runId": run_id, "status": state.status}

    @staticmethod
    async def _finalize(runner: Runner, run_id: str, message: str) -> tuple[str, RunState]:
        before = (await asyncio.to_thread(runner.load, run_id)).status
        return before, await runner.finalize(run_id, status="failed", error=message)

    def _announce(self, events: EventPublisher | None, before: str, state: RunState) -> None:
        """Publish the run's terminal event if this call ended it (best effort)."""
        kind = kind_for_status(state.status) if state.status != before else None
        if events is None or kind is None:
            return
        try:
            events.publish(state, kind)
        except HarnessError as exc:
            self.logger.warning("could not publish a lifecycle event", extra={"kind": kind, "reason": str(exc)})
