"""The trigger function: starts a run for each "Start Run" event (decision D9), and delivers each
"Run Event" (``detail: {runId, name, payload}``) to its waiting run (decision D16).

Invoked by the EventBridge rule on ``source: durable-harness.client, detail-type: Start Run``
(and, when a schedule is configured, by EventBridge Scheduler with an event of the same shape
whose source is ``durable-harness.schedule``). ``detail`` carries ``prompt`` (one user message)
or ``messages`` (AI SDK UI messages), and optionally ``runId``, ``chatId`` and ``callOptions``
(validated by the agent's ``call_options`` model, like a chat client's extra ``body`` fields).

EventBridge delivers at least once, and Scheduler retries. The run id is derived from the event
(a valid ``detail.runId``, else its ``id``; for a scheduled event the schedule and the scheduled
time), the run is created only if it does not exist, and the execution is named after the run:
the same event delivered twice, or one scheduled time invoked twice, starts one run. The run then
streams to the same chunk log as a chat run and can be followed with ``GET /api/chat/<runId>/stream``.
"""

from __future__ import annotations

import gc

gc.disable()  # while the handler's modules load (see the end of this module)

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.functions.trigger import TriggerFunction
from durable_harness.hardening import deny_proc_reads

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()
function = TriggerFunction(logger, metrics)
"""This container's function: its settings, adapters and runner are built at the first invocation."""


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Start the run an event asks for; returns ``{"runId"}`` (or ``{"error"}`` for a bad event).
    A "Run Event" returns ``{"runId", "outcome", "duplicate"}``."""
    return function(event, context)


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
