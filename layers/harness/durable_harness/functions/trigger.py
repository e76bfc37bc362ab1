"""The trigger function's root and handler body: a run per "Start Run" event (decision D9), and
each "Run Event" (``detail: {runId, name, payload}``) delivered to its waiting run (decision D16).
``functions/trigger/app.py`` says what the events are and how a redelivery starts one run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..aws.events import RUN_EVENT_DETAIL_TYPE, SCHEDULE_SOURCE, START_RUN_SOURCE, parse_start_run_event
from ..aws.runtime import FunctionParts
from ..errors import InvalidRequestError, ProtocolError, RunExistsError, RunNotFoundError
from ..ids import is_run_id
from ..protocol.ui_messages import convert_to_model_messages
from ..runner.runner import Runner
from ..server.events import DeliveryAnswer, EventDesk
from ..server.service import ChatService
from ..waits import check_event_name
from .handlers import FunctionHandler

if TYPE_CHECKING:
    pass

__all__ = ["TriggerFunction"]


class TriggerFunction(FunctionHandler):
    """Starts a run per "Start Run" event and delivers "Run Event"s (see ``functions/trigger``)."""

    check_secret = False  # it creates runs and delivers events; it signs nothing

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Start the run an event asks for; ``{"runId"}`` (or ``{"error"}`` for a bad event).
        A "Run Event" returns ``{"runId", "outcome", "duplicate"}``."""
        parts = self.parts()
        if event.get("detail-type") == RUN_EVENT_DETAIL_TYPE:
            try:
                return self.deliver_event(parts, event)
            except (InvalidRequestError, RunNotFoundError) as exc:  # a redelivery cannot fix it: drop it
                self.logger.error("rejected a Run Event", extra={"event_id": event.get("id"), "reason": str(exc)})
                self.count("InvalidRunEvents")
                return {"error": str(exc)}
        try:
            run_id, needs_start = self.create_run(parts.runner, event)
        except (InvalidRequestError, ProtocolError, ValueError) as exc:
            # Retrying cannot fix a malformed event: report it and drop it.
            self.logger.error("rejected a Start Run event", extra={"event_id": event.get("id"), "reason": str(exc)})
            self.count("InvalidStartRunEvents")
            return {"error": str(exc)}
        self.logger.append_keys(run_id=run_id)
        if needs_start:
            parts.runtime.orchestrator.start(run_id)
        self.logger.info("run started" if needs_start else "run already started", extra={"event_id": event.get("id")})
        self.count("RunsStarted", 1 if needs_start else 0)
        return {"runId": run_id}

    @staticmethod
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

    @staticmethod
    def deliver_event(parts: FunctionParts, event: dict[str, Any]) -> dict[str, Any]:
        """Deliver a "Run Event" to its run (kept if the run does not wait for it yet); its outcome."""
        raw = event.get("detail")
        detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
        run_id, name = detail.get("runId"), detail.get("name")
        if not isinstance(run_id, str) or not is_run_id(run_id) or not isinstance(name, str):
            raise InvalidRequestError("A Run Event needs detail {runId, name, payload}.")
        runtime = parts.runtime
        service = ChatService(parts.runner, runtime.orchestrator)
        desk = EventDesk(service, runtime.waker.wake if runtime.waker is not None else None)

        async def deliver() -> DeliveryAnswer:
            state = await service.load(run_id)
            return await desk.deliver(state, check_event_name(name), detail.get("payload"), via="eventbridge")

        answer = asyncio.run(deliver())
        return {"runId": run_id, "outcome": answer.body.get("outcome"), "duplicate": answer.status == 409}
