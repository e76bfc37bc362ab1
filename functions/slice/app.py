"""The slice function: one time slice of a run, invoked by the state machine's ``RunSlice`` task.

Event: ``{"runId": ..., "generation": ..., "execution": ..., "attempt": ...}`` (only ``runId`` is
needed). The slice loads the run's checkpoint, runs the agent until its budget is spent at a step
boundary (or the turn pauses or ends), and returns the small result the state machine routes on:
``{"runId", "status", "slices", "wait"}`` (``wait``: what a run ``awaiting_event`` parks on, see
:mod:`durable_harness.aws.waits`; else null). A slice of a parked run that is not due returns at
once; one whose awaited event came before it parked goes on at once.

Errors, as the state machine sees them:

* a :class:`~durable_harness.errors.RetryableError` becomes
  :class:`~durable_harness.functions.handlers.RetryableSliceError`, the
  error name the state machine retries with backoff (the next attempt resumes from the last
  checkpoint, with ``reset-step`` if this one died mid-step);
* a :class:`~durable_harness.errors.FencedError` (a newer writer, such as a cancel, owns the run)
  returns status ``fenced``, and the execution ends quietly;
* anything else propagates; the state machine's catch runs the finalizer.
"""

from __future__ import annotations

import gc

gc.disable()  # while the handler's modules load (see the end of this module)

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.functions.handlers import SliceFunction
from durable_harness.hardening import deny_proc_reads

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()
function = SliceFunction(logger, metrics)
"""This container's function: its settings, adapters and runner are built at the first invocation."""


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Run one slice of ``event["runId"]``; returns ``{"runId", "status", "slices", "wait"}``."""
    return function(event, context)


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
