"""The slice function: one time slice of a run, invoked by the state machine's ``RunSlice`` task.

Event: ``{"runId": ..., "generation": ..., "execution": ..., "attempt": ...}`` (only ``runId`` is
needed). The slice loads the run's checkpoint, runs the agent until its budget is spent at a step
boundary (or the turn pauses or ends), and returns the small result the state machine routes on:
``{"runId", "status", "slices", "wait"}`` (``wait``: what a run ``awaiting_event`` parks on, see
:mod:`durable_harness.aws.waits`; else null). A slice of a parked run that is not due returns at
once; one whose awaited event came before it parked goes on at once.

Errors, as the state machine sees them:

* a :class:`~durable_harness.errors.RetryableError` becomes :class:`RetryableSliceError`, the
  error name the state machine retries with backoff (the next attempt resumes from the last
  checkpoint, with ``reset-step`` if this one died mid-step);
* a :class:`~durable_harness.errors.FencedError` (a newer writer, such as a cancel, owns the run)
  returns status ``fenced``, and the execution ends quietly;
* anything else propagates; the state machine's catch runs the finalizer.
"""

from __future__ import annotations

import gc

gc.disable()  # while the handler's modules load (see the end of this module)

import asyncio
import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.events import announce_slice
from durable_harness.aws.runtime import AwsRuntime, build_runtime
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.aws.waits import StepFunctionsWaker, wait_of
from durable_harness.cli import agent_spec, load_agent
from durable_harness.errors import FencedError, RetryableError
from durable_harness.hardening import deny_proc_reads
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()

SAFETY_MARGIN_SECONDS = 60.0
"""Time kept back from the invocation's remaining time: a slice stops only at a step boundary."""


class RetryableSliceError(Exception):
    """A transient failure; the state machine retries the slice on this error name."""


@cache
def _runtime() -> tuple[AwsRuntime, Runner]:
    """The AWS adapters and the runner, built once per container on first use."""
    runtime = build_runtime()
    spec = agent_spec()
    agent = load_agent(spec)
    flush = float(os.environ.get("STREAM_FLUSH_SECONDS", "0.07"))  # one DynamoDB write per flush
    runner = Runner(agent, runtime.store, runtime.log, flush_interval=flush, agent_id=spec)
    runner.approval_secret.check()  # a secret under 32 bytes fails here, with its own message
    return runtime, runner


def slice_budget(context: LambdaContext | None) -> float:
    """Seconds this slice may spend: ``SLICE_SECONDS``, capped by the invocation's remaining time."""
    budget = float(os.environ.get("SLICE_SECONDS", "600"))
    if context is not None:
        budget = min(budget, context.get_remaining_time_in_millis() / 1000 - SAFETY_MARGIN_SECONDS)
    return max(0.0, budget)


async def _run_slice(
    runner: Runner, run_id: str, budget: float, waker: StepFunctionsWaker | None
) -> tuple[str, RunState]:
    before = (await asyncio.to_thread(runner.load, run_id)).status
    if before == "awaiting_event" and waker is not None:
        await asyncio.to_thread(waker.clear, run_id)  # before the events are looked at (see aws.waits)
    state = await runner.run_slice(run_id, budget_seconds=budget)
    while state.status == "awaiting_event" and await asyncio.to_thread(runner.due, state):
        state = await runner.run_slice(run_id, budget_seconds=budget)  # an event came as it parked
    return before, state


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one slice of ``event["runId"]``; returns ``{"runId", "status", "slices", "wait"}``."""
    run_id = str(event["runId"])
    logger.append_keys(run_id=run_id, generation=event.get("generation"), attempt=event.get("attempt"))
    runtime, runner = _runtime()
    metrics.add_metric(name="Slices", unit=MetricUnit.Count, value=1)
    try:
        before, state = asyncio.run(_run_slice(runner, run_id, slice_budget(context), runtime.waker))
    except FencedError as exc:
        logger.info("slice fenced off by a newer writer; stopping", extra={"reason": str(exc)})
        return {"runId": run_id, "status": "fenced", "slices": 0, "wait": None}
    except RetryableError as exc:
        logger.warning("slice failed with a retryable error", extra={"reason": str(exc)})
        metrics.add_metric(name="SliceRetries", unit=MetricUnit.Count, value=1)
        raise RetryableSliceError(str(exc)) from exc
    logger.info("slice done", extra={"before": before, "status": state.status, "slices": state.slices})
    announce_slice(runtime.events, before, state, runner.result)  # best effort
    wait = wait_of(state, started=event.get("started"))
    return {"runId": run_id, "status": state.status, "slices": state.slices, "wait": wait}


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
