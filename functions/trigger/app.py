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

import asyncio
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from durable_harness.aws.events import (
    RUN_EVENT_DETAIL_TYPE,
    SCHEDULE_SOURCE,
    START_RUN_SOURCE,
    parse_start_run_event,
)
from durable_harness.aws.runtime import AwsRuntime, build_runtime
from durable_harness.aws.tracing import capture_lambda_handler
from durable_harness.cli import agent_spec, load_agent
from durable_harness.errors import InvalidRequestError, ProtocolError, RunExistsError, RunNotFoundError
from durable_harness.hardening import deny_proc_reads
from durable_harness.ids import is_run_id
from durable_harness.protocol.ui_messages import convert_to_model_messages
from durable_harness.runner.runner import Runner
from durable_harness.server.events import DeliveryAnswer, EventDesk
from durable_harness.server.service import ChatService
from durable_harness.waits import check_event_name

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory

logger = Logger()
metrics = Metrics()


@cache
def _runtime() -> tuple[AwsRuntime, Runner]:
    """The AWS adapters and the runner, built once per container on first use."""
    runtime = build_runtime()
    spec = agent_spec()
    agent = load_agent(spec)
    return runtime, Runner(agent, runtime.store, runtime.log, agent_id=spec)


def create_run(runner: Runner, event: dict[str, Any]) -> tuple[str, bool]:
    """Create the event's run unless it exists; ``(run_id, needs_start)``."""
    source = SCHEDULE_SOURCE if event.get("source") == SCHEDULE_SOURCE else START_RUN_SOURCE
    request = parse_start_run_event(event, source=source)
    call_options = runner.agent.parse_call_options(request.call_options or {})
    messages = convert_to_model_messages(request.messages)
    last = request.messages[-1]
    message_id = last.id if last.role == "assistant" and last.id else None
    try:
        runner.create_run(
            messages,
            run_id=request.run_id,
            chat_id=request.chat_id,
            principal=None,  # visible to every authenticated caller of the chat API (it follows the run)
            origin="event",
            message_id=message_id,
            call_options=call_options,
        )
    except RunExistsError:
        # A redelivery. Start only if the first delivery died between creating and starting.
        return request.run_id, runner.load(request.run_id).status == "not_started"
    return request.run_id, True


def deliver_event(runtime: AwsRuntime, runner: Runner, event: dict[str, Any]) -> dict[str, Any]:
    """Deliver a "Run Event" to its run (kept if the run does not wait for it yet); its outcome."""
    detail = event.get("detail")
    if not isinstance(detail, dict) or not is_run_id(detail.get("runId")) or not isinstance(detail.get("name"), str):
        raise InvalidRequestError("A Run Event needs detail {runId, name, payload}.")
    service = ChatService(runner, runtime.orchestrator)
    desk = EventDesk(service, runtime.waker.wake if runtime.waker is not None else None)

    async def deliver() -> DeliveryAnswer:
        state = await service.load(detail["runId"])
        return await desk.deliver(state, check_event_name(detail["name"]), detail.get("payload"), via="eventbridge")

    answer = asyncio.run(deliver())
    return {"runId": detail["runId"], "outcome": answer.body.get("outcome"), "duplicate": answer.status == 409}


@logger.inject_lambda_context(clear_state=True)
@capture_lambda_handler  # X-Ray only when tracing is on: the SDK costs 150-250 ms of cold start
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Start the run an event asks for; returns ``{"runId"}`` (or ``{"error"}`` for a bad event).
    A "Run Event" returns ``{"runId", "outcome", "duplicate"}``."""
    runtime, runner = _runtime()
    if event.get("detail-type") == RUN_EVENT_DETAIL_TYPE:
        try:
            return deliver_event(runtime, runner, event)
        except (InvalidRequestError, RunNotFoundError) as exc:  # a redelivery cannot fix it: drop it
            logger.error("rejected a Run Event", extra={"event_id": event.get("id"), "reason": str(exc)})
            metrics.add_metric(name="InvalidRunEvents", unit=MetricUnit.Count, value=1)
            return {"error": str(exc)}
    try:
        run_id, needs_start = create_run(runner, event)
    except (InvalidRequestError, ProtocolError, ValueError) as exc:
        # Retrying cannot fix a malformed event: report it and drop it.
        logger.error("rejected a Start Run event", extra={"event_id": event.get("id"), "reason": str(exc)})
        metrics.add_metric(name="InvalidStartRunEvents", unit=MetricUnit.Count, value=1)
        return {"error": str(exc)}
    logger.append_keys(run_id=run_id)
    if needs_start:
        runtime.orchestrator.start(run_id)
    logger.info("run started" if needs_start else "run already started", extra={"event_id": event.get("id")})
    metrics.add_metric(name="RunsStarted", unit=MetricUnit.Count, value=1 if needs_start else 0)
    return {"runId": run_id}


# Loading made a few hundred thousand objects that live as long as the container; the collector's
# runs during the load walked them again and again, for nothing (bench/cold_start.py: about a
# tenth of the import). Frozen, no later collection looks at them either; the collector is back on
# for the objects of the invocations.
gc.freeze()
gc.enable()
