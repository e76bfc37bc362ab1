"""Delivering external events to runs (decision D16): the signed URL, the run API, EventBridge.

Three doors, one rule (:meth:`EventDesk.deliver`):

* ``POST /hooks/events/{token}``: the URL a tool handed out (``ctx.event_url``); the token is the
  credential (401 when altered, 410 when expired or the wait is over);
* ``POST /api/runs/{runId}/events/{name}``: for the run's principal (404 for anyone else);
* an EventBridge ``Run Event`` (``detail: {runId, name, payload}``) through the trigger function.

An event is recorded once per (run, name) in the :class:`~durable_harness.waits.EventBook`; a second
delivery is a 409 that repeats the first one's outcome, and nothing runs twice. An event for a run
that does not wait for it (yet) is kept (``outcome: "kept"``) until the tool asks; one it waits for
resumes it (``"resumed"``). A run that ended takes no more events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError
from ..runner.state import RunState
from ..waits import (
    MAX_EVENT_BYTES,
    Delivery,
    check_event_name,
    parse_event_payload,
    payload_size,
    verify_event_token,
)
from .service import ChatService


@dataclass(frozen=True)
class DeliveryAnswer:
    """How a delivery was answered: ``status`` 202 (recorded) or 409 (a duplicate), and the body."""

    status: int
    body: dict[str, Any]


class EventDesk:
    """Takes events for runs and wakes the runs that wait for them."""

    def __init__(self, service: ChatService, wake: Callable[[str], None] | None = None) -> None:
        """``wake(run_id)``: makes a parked run go on (deployed, it answers the parked execution's
        task; called in a worker thread); by default the orchestrator starts the run (locally, on
        the event loop: a slice that sees the event)."""
        self.service = service
        self.wake = wake

    async def by_token(self, token: str, body: bytes) -> DeliveryAnswer:
        """An event posted to a signed event URL (the token checked before anything else)."""
        claims = verify_event_token(self.service.runner.approval_secret, token)
        state = await self.service.load(claims.run_id)
        return await self.deliver(state, claims.name, parse_event_payload(body), via="url", expired_410=True)

    async def by_api(self, run_id: str, name: str, body: bytes, principal: str | None) -> DeliveryAnswer:
        """An event posted to the run API by ``principal`` (404 unless the run is theirs)."""
        state = await self.service.load(run_id, principal)
        return await self.deliver(state, check_event_name(name), parse_event_payload(body), via="api")

    async def deliver(
        self, state: RunState, name: str, payload: Any, *, via: str, expired_410: bool = False
    ) -> DeliveryAnswer:
        """Record the event ``name`` of the run ``state`` and resume the run if it waits for it.

        The caller checked that it may (the run's principal, a signed URL, the event bus).
        ``expired_410``: a run that ended answers 410 (the URL's wait is over) rather than 409.
        """
        if payload_size(payload) > MAX_EVENT_BYTES:
            raise InvalidRequestError(
                f"The event payload is larger than {MAX_EVENT_BYTES} bytes.", code="payload_too_large", status=413
            )
        runner, run_id = self.service.runner, state.run_id
        first = await asyncio.to_thread(runner.events.get, run_id, name)
        if first is not None:
            await self._wake_if_due(run_id)  # the first delivery's wake may have failed after its record
            return _duplicate(first)
        _check_open(state, name, expired_410)
        waiting = state.status == "awaiting_event" and any(w.kind == "event" and w.name == name for w in state.waits)
        outcome = "resumed" if waiting else "kept"
        delivery, created = await asyncio.to_thread(
            runner.events.deliver, run_id, name, payload, outcome=outcome, via=via
        )
        if not created:
            return _duplicate(delivery)
        await self._wake_if_due(run_id)
        return DeliveryAnswer(202, delivery.to_json())

    async def _wake_if_due(self, run_id: str) -> None:
        """Wake the run if it is parked and due. Looked at after the event's write: a run that parked
        meanwhile (it did not see the event) goes on now; a running one finds it when its tool asks."""
        state = await self.service.load(run_id)
        if state.status != "awaiting_event" or not await asyncio.to_thread(self.service.runner.due, state):
            return
        if self.wake is None:
            self.service.orchestrator.start(run_id)
        else:
            await asyncio.to_thread(self.wake, run_id)


def _check_open(state: RunState, name: str, expired_410: bool) -> None:
    """Refuse an event for a run that ended, or whose wait for ``name`` timed out."""
    gone = 410 if expired_410 else 409
    if state.terminal:
        raise InvalidRequestError(f"Run {state.run_id} already ended ({state.status}); it takes no more events.",
                                  code="run_ended", status=gone)  # fmt: skip
    now = time.time()
    for wait in state.waits:
        if wait.kind == "event" and wait.name == name and wait.deadline is not None and now >= wait.deadline:
            raise InvalidRequestError(f"The wait for event {name!r} of run {state.run_id} is over (it timed out).",
                                      code="expired", status=410)  # fmt: skip


def _duplicate(first: Delivery) -> DeliveryAnswer:
    message = f"Event {first.name!r} was already delivered to run {first.run_id}; nothing was done again."
    return DeliveryAnswer(409, {"error": {"code": "duplicate_event", "message": message}, **first.to_json()})
