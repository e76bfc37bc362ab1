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

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.functions.handlers import FinalizerFunction
from durable_harness.hardening import deny_proc_reads

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()
function = FinalizerFunction(logger, metrics)
"""This container's function: its settings, adapters and runner are built at the first invocation."""


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """End ``event["runId"]`` as failed; returns ``{"runId", "status"}``."""
    return function(event, context)


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
