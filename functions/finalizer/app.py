"""The finalizer function: the state machine's failure path (decision D2).

Event (from the ``Catch`` of ``RunSlice`` or ``ContinueAsNew``)::

    {"runId": "wrun_...", "error": {"Error": "RetryableSliceError", "Cause": "{...}"}}

It ends the run as ``failed``: the runner claims the run (fencing off any slice still running)
and appends ``error`` and ``finish`` to its log, so that no client waits forever. The client sees
only a generic message chosen by the error's name; the ``Cause`` (which may hold stack traces and
other internals) goes to this function's log and never into the run's state or chunks. A run that
already ended is only repaired, never changed.
"""

from __future__ import annotations

import gc

gc.disable()  # while the handler's modules load (see the end of this module)

import asyncio
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.events import EventPublisher, kind_for_status
from durable_harness.aws.runtime import AwsRuntime, build_runtime
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.cli import agent_spec, load_agent
from durable_harness.errors import HarnessError, RunNotFoundError
from durable_harness.hardening import deny_proc_reads
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()

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


def client_message(error_name: str) -> str:
    """The message the client sees for a failure named ``error_name`` (never its cause)."""
    return GENERIC_MESSAGES.get(error_name, DEFAULT_MESSAGE)


@cache
def _runtime() -> tuple[AwsRuntime, Runner]:
    """The AWS adapters and the runner, built once per container on first use."""
    runtime = build_runtime()
    spec = agent_spec()
    agent = load_agent(spec)
    return runtime, Runner(agent, runtime.store, runtime.log, flush_interval=0, agent_id=spec)


def _announce(events: EventPublisher | None, before: str, state: RunState) -> None:
    """Publish the run's terminal event if this call ended it (best effort)."""
    kind = kind_for_status(state.status) if state.status != before else None
    if events is None or kind is None:
        return
    try:
        events.publish(state, kind)
    except HarnessError as exc:
        logger.warning("could not publish a lifecycle event", extra={"kind": kind, "reason": str(exc)})


async def _finalize(runner: Runner, run_id: str, message: str) -> tuple[str, RunState]:
    before = (await asyncio.to_thread(runner.load, run_id)).status
    return before, await runner.finalize(run_id, status="failed", error=message)


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """End ``event["runId"]`` as failed; returns ``{"runId", "status"}``."""
    run_id = str(event["runId"])
    raw_error = event.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    name = str(error.get("Error") or "Unknown")
    cause = str(error.get("Cause") or "")[:MAX_LOGGED_CAUSE]
    logger.append_keys(run_id=run_id)
    logger.error("finalizing a failed run", extra={"error_name": name, "error_cause": cause})
    runtime, runner = _runtime()
    try:
        before, state = asyncio.run(_finalize(runner, run_id, client_message(name)))
    except RunNotFoundError:
        logger.warning("no such run (expired or never created); nothing to finalize")
        return {"runId": run_id, "status": "missing"}
    metrics.add_metric(name="RunsFailed", unit=MetricUnit.Count, value=1 if state.status != before else 0)
    _announce(runtime.events, before, state)
    return {"runId": run_id, "status": state.status}


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
