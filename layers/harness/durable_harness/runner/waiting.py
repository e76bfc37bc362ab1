"""The runner's side of durable waits (decision D16): parking a run, and knowing when it is due.

A turn that yields :class:`~durable_harness.harness.interface.Wait` parks its run: status
``awaiting_event``, :attr:`RunState.waits` set, and one ``data-wait`` chunk per wait in the log
(``{"type": "data-wait", "id": "wait-<toolCallId>", "data": {..., "status": "waiting"}}``). The
stream stays open: there is no ``finish``, a follower sees keep-alives, and the continuation
streams into the same assistant message. The part is not transient, so a client that replays the
stream from 0 sees the tool card waiting too; on resume a chunk with the same ``id`` and
``status: "resumed"`` replaces it in place (the AI SDK updates a data part by ``type`` + ``id``).

A parked run is due (a slice may run) once any of its waits is: an event it waits for was
delivered, or a deadline passed. Anything may start a parked run at any time (a timer, a
delivery, a restart): a slice of a run that is not due does nothing.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from ..approvals import ApprovalSecret
from ..harness import interface as hi
from ..protocol.ui_chunks import DataChunk
from ..waits import EVENTS_PATH, Delivery, EventBook, EventClaims, sign_event_token
from .state import RunState, WaitRecord, waits_json

__all__ = ["RunEventSource", "due", "next_deadline", "park", "resume_chunks"]


class RunEventSource:
    """The events of one run, as its turn reads them (:class:`~durable_harness.waits.RunEvents`)."""

    def __init__(self, book: EventBook, secret: ApprovalSecret, run_id: str, base_url: str | None) -> None:
        """``base_url``: where the server is reached from outside (``PUBLIC_URL``); without one,
        event URLs are paths on this server."""
        self.book = book
        self.secret = secret
        self.run_id = run_id
        self.base_url = (base_url or "").rstrip("/")

    def event(self, name: str) -> Delivery | None:
        """The run's event ``name`` if it was delivered."""
        return self.book.get(self.run_id, name)

    def url(self, tool_call_id: str, name: str, expires_at: float) -> str:
        """The signed URL of the event ``name`` for this run and call, valid until ``expires_at``."""
        token = sign_event_token(self.secret, EventClaims(self.run_id, tool_call_id, name, expires_at))
        return f"{self.base_url}{EVENTS_PATH}{quote(token, safe='.')}"


def park(state: RunState, wait: hi.Wait) -> list[DataChunk]:
    """Mark ``state`` parked on ``wait``; the ``data-wait`` chunks that tell the client."""
    state.status = "awaiting_event"
    state.waits = [WaitRecord(tool_call_id=w.tool_call_id, name=w.name, kind=w.kind, deadline=w.deadline)
                   for w in wait.waits]  # fmt: skip
    return [_chunk(item, "waiting") for item in waits_json(state)]


def resume_chunks(state: RunState) -> list[DataChunk]:
    """The chunks that replace a resuming run's ``data-wait`` parts; clears its waits."""
    chunks = [_chunk(item, "resumed") for item in waits_json(state)]
    state.waits = []
    return chunks


def _chunk(item: dict[str, object], status: str) -> DataChunk:
    return DataChunk(type="data-wait", id=f"wait-{item['toolCallId']}", data={**item, "status": status})


def due(book: EventBook, state: RunState, *, now: float | None = None) -> bool:
    """True when a parked run may go on: an awaited event arrived or a deadline passed."""
    if state.status != "awaiting_event":
        return False
    now = time.time() if now is None else now
    for wait in state.waits:
        if wait.deadline is not None and now >= wait.deadline:
            return True
        if wait.kind == "event" and book.get(state.run_id, wait.name) is not None:
            return True
    return not state.waits  # parked on nothing (cannot happen): let it go on rather than hang


def next_deadline(state: RunState) -> float | None:
    """The earliest deadline of a parked run's waits (when a timer must start it), or None."""
    deadlines = [w.deadline for w in state.waits if w.deadline is not None]
    return min(deadlines) if deadlines and state.status == "awaiting_event" else None
