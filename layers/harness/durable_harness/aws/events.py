"""EventBridge in both directions: run lifecycle events out, "Start Run" events in (D9).

Outbound. :class:`EventPublisher` puts one event per lifecycle transition on a bus, with
``source`` (default ``durable-harness``) and ``detail-type`` one of :data:`LIFECYCLE_KINDS`. The
detail names the run and how it ended: ``runId``, ``chatId``, ``status``, ``origin``,
``finishReason``, ``error``. "Run Finished" also carries ``result``, a summary of the answer
(``text``, ``output``, ``usage``) so that consumers need no second call, bounded so that the whole
detail stays under :data:`MAX_DETAIL_BYTES` (an EventBridge entry may have 256 KB; each 64 KB of
payload is billed as one event): the text is cut (``textTruncated``) and an output that does not
fit is left out (``outputTruncated``; the run API has everything).

Inbound. A run can be started by an event like::

    {"source": "durable-harness.client", "detail-type": "Start Run",
     "detail": {"prompt": "Summarize today's tickets", "chatId": "ops", "runId": "wrun_..."}}

with ``messages`` (AI SDK UI messages) instead of ``prompt`` for a whole conversation, and
optionally ``callOptions`` (validated by the agent, like a chat client's ``body``). EventBridge
delivers at least once, so the run id is derived from the event's ``id`` (the same on every
redelivery) unless ``detail.runId`` already is a valid run id: the same event starts one run.

The optional schedule (EventBridge Scheduler) sends events of the same shape with ``source``
:data:`SCHEDULE_SOURCE`. Its ``id`` is the scheduler's execution id, which is new on every retry
of an invocation, so a scheduled run's id is derived from what a retry keeps: the schedule's ARN
(``resources[0]``) and the scheduled time (``time``). One scheduled time starts one run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..errors import HarnessError, InvalidRequestError, ProtocolError, StorageError
from ..ids import MAX_CHAT_ID, derived_run_id, is_run_id
from ..protocol.ui_messages import TextUIPart, UIMessage, parse_ui_messages
from ..runner.state import RunState
from ._errors import aws_errors

__all__ = [
    "LIFECYCLE_KINDS",
    "MAX_DETAIL_BYTES",
    "RUN_EVENT_DETAIL_TYPE",
    "SCHEDULE_SOURCE",
    "START_RUN_DETAIL_TYPE",
    "START_RUN_SOURCE",
    "EventPublisher",
    "StartRunRequest",
    "announce_slice",
    "kind_for_status",
    "parse_start_run_event",
    "run_id_for_event",
    "start_run_pattern",
]

LIFECYCLE_KINDS: Final = frozenset(
    {"Run Started", "Run Awaiting Approval", "Run Finished", "Run Failed", "Run Cancelled"}
)
"""The ``detail-type`` values of outbound events."""

START_RUN_SOURCE: Final = "durable-harness.client"
"""Default ``source`` of inbound events that start a run."""

START_RUN_DETAIL_TYPE: Final = "Start Run"
RUN_EVENT_DETAIL_TYPE: Final = "Run Event"
"""An external event for a waiting run (decision D16): ``detail: {runId, name, payload}``."""
"""``detail-type`` of inbound events that start a run."""

SCHEDULE_SOURCE: Final = "durable-harness.schedule"
"""The ``source`` of the events the optional schedule sends (see template.yaml)."""

logger = logging.getLogger(__name__)

_STATUS_KINDS = {
    "awaiting_tool_approval": "Run Awaiting Approval",
    "finished": "Run Finished",
    "failed": "Run Failed",
    "cancelled": "Run Cancelled",
}
_MAX_ERROR = 1000  # characters of an error message put into an event
MAX_DETAIL_BYTES: Final = 60_000
"""Bytes of an event's detail (JSON, UTF-8) at most: one 64 KB billing unit with the envelope."""
_MAX_OUTPUT_SHARE = 0.5  # the structured output may take at most this share of the detail
_MAX_PROMPT = 100_000


def kind_for_status(status: str) -> str | None:
    """The lifecycle event for a run that reached ``status`` (``None`` when there is none)."""
    return _STATUS_KINDS.get(status)


def announce_slice(
    events: EventPublisher | None,
    before: str,
    state: RunState,
    result: Callable[[RunState], Mapping[str, Any] | None],
) -> None:
    """Publish the lifecycle events of one slice (wherever it ran): "Run Started" after a run's
    first slice, and the event of the status it reached, if any ("Run Finished" carries
    ``result(state)``, or none if that fails). Best effort: a lost notification is logged and must
    not fail (and so repeat) the slice."""
    if events is None:
        return
    kinds = ["Run Started"] if before == "not_started" else []
    if state.status != before and (kind := kind_for_status(state.status)):
        kinds.append(kind)
    for kind in kinds:
        summary = None
        if kind == "Run Finished":
            try:
                summary = result(state)
            except Exception:  # the event matters more than its summary, and the run has ended already
                logger.exception("run %s: could not summarize the result for its event", state.run_id)
        try:
            events.publish(state, kind, summary)
        except HarnessError as exc:
            logger.warning("run %s: could not publish %r: %s", state.run_id, kind, exc)


class EventPublisher:
    """Publishes run lifecycle events to an EventBridge bus through ``client`` (boto3 events)."""

    def __init__(self, event_bus_name: str, *, client: Any, source: str = "durable-harness") -> None:
        """Publish on ``event_bus_name`` (a name or ARN) with the given ``source``."""
        self._bus = event_bus_name
        self._events = client
        self._source = source

    @property
    def event_bus_name(self) -> str:
        """The bus events go to."""
        return self._bus

    def detail(self, run_state: RunState, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The event detail for a run: identifiers and outcome, and with ``result`` (the run API's
        result of the run) a size-bounded summary of the answer."""
        final = run_state.final_result
        error = run_state.error
        detail: dict[str, Any] = {
            "runId": run_state.run_id,
            "chatId": run_state.chat_id,
            "status": run_state.status,
            "origin": run_state.origin,
            "finishReason": final.finish_reason if final is not None else None,
            "error": error[:_MAX_ERROR] if error else None,
        }
        if result is not None:
            detail["result"] = bounded_summary(detail, result)
        return detail

    def publish(self, run_state: RunState, kind: str, result: Mapping[str, Any] | None = None) -> None:
        """Put one lifecycle event (with ``result``, its summary); ``StorageError`` when EventBridge
        does not accept it."""
        if kind not in LIFECYCLE_KINDS:
            raise ValueError(f"unknown lifecycle event kind {kind!r}; expected one of {sorted(LIFECYCLE_KINDS)}")
        entry = {
            "EventBusName": self._bus,
            "Source": self._source,
            "DetailType": kind,
            "Detail": _dumps(self.detail(run_state, result)),
        }
        with aws_errors(f"publishing {kind!r} for run {run_state.run_id!r}"):
            response = self._events.put_events(Entries=[entry])
        # PutEvents answers 200 even when it rejected entries; the failures are per entry.
        if response.get("FailedEntryCount", 0):
            failed: dict[str, Any] = next((e for e in response.get("Entries", []) if e.get("ErrorCode")), {})
            raise StorageError(
                f"publishing {kind!r} for run {run_state.run_id!r}: "
                f"{failed.get('ErrorCode', 'failed')}: {failed.get('ErrorMessage', '')}"
            )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _size(value: Any) -> int:
    return len(_dumps(value).encode())


def bounded_summary(detail: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """``{text, output?, usage}`` of a run's result, cut so that ``detail`` with it stays within
    :data:`MAX_DETAIL_BYTES`: the output is kept whole or left out, the text cut to what fits."""
    text = str(result.get("text") or "")
    summary: dict[str, Any] = {"text": "", "usage": result.get("totalUsage")}
    if "output" in result:
        summary["output"] = result["output"]
        if _size({**detail, "result": summary}) > MAX_DETAIL_BYTES * _MAX_OUTPUT_SHARE:
            del summary["output"]
            summary["outputTruncated"] = True
    if _size({**detail, "result": {**summary, "text": text}}) <= MAX_DETAIL_BYTES:
        summary["text"] = text
        return summary
    summary["textTruncated"] = True
    # The longest prefix that fits (escaping makes the bytes per character vary; each takes one at least).
    low, high = 0, min(len(text), MAX_DETAIL_BYTES)
    while low < high:
        middle = (low + high + 1) // 2
        if _size({**detail, "result": {**summary, "text": text[:middle]}}) <= MAX_DETAIL_BYTES:
            low = middle
        else:
            high = middle - 1
    summary["text"] = text[:low]
    return summary


# --- inbound --------------------------------------------------------------------------------------


def start_run_pattern(source: str = START_RUN_SOURCE) -> dict[str, list[str]]:
    """The EventBridge event pattern matching "Start Run" and "Run Event" events from ``source``."""
    return {"source": [source], "detail-type": [START_RUN_DETAIL_TYPE, RUN_EVENT_DETAIL_TYPE]}


def run_id_for_event(event: Mapping[str, Any]) -> str:
    """A run id that is the same every time this event is delivered.

    ``detail.runId`` when it is a valid run id; otherwise a SHA-256 derivation, in the format of
    ``ids.new_run_id``, of the event's ``id`` (EventBridge keeps it across redeliveries), or, for
    the schedule's events, of the schedule's ARN and the scheduled time (Scheduler keeps those
    across retries, not the id).
    """
    detail = event.get("detail")
    if isinstance(detail, Mapping):
        given = detail.get("runId")
        if isinstance(given, str) and is_run_id(given):
            return given
    if event.get("source") == SCHEDULE_SOURCE:
        resources, scheduled = event.get("resources"), event.get("time")
        schedule = resources[0] if isinstance(resources, list) and resources else None
        if not isinstance(schedule, str) or not schedule or not isinstance(scheduled, str) or not scheduled:
            raise InvalidRequestError(
                "a scheduled event needs the schedule's ARN in 'resources' and the scheduled time in 'time'",
                code="invalid_event",
            )
        return derived_run_id("scheduler-start-run", schedule, scheduled)
    event_id = event.get("id")
    if not isinstance(event_id, str) or not event_id:
        raise InvalidRequestError("the event has no 'id' to derive a run id from", code="invalid_event")
    # The first part keeps these ids apart from other derived ones (idempotent chat POSTs).
    return derived_run_id("eventbridge-start-run", event_id)


@dataclass(frozen=True)
class StartRunRequest:
    """What a "Start Run" event asks for."""

    run_id: str
    messages: list[UIMessage]
    chat_id: str | None = None
    call_options: Mapping[str, Any] | None = None
    """``detail.callOptions``, not yet validated (the agent's ``parse_call_options`` does that)."""


def parse_start_run_event(event: Mapping[str, Any], *, source: str = START_RUN_SOURCE) -> StartRunRequest:
    """Validate a "Start Run" event; raises ``InvalidRequestError`` saying what is wrong."""
    if event.get("source") != source or event.get("detail-type") != START_RUN_DETAIL_TYPE:
        raise InvalidRequestError(
            f"expected source {source!r} and detail-type {START_RUN_DETAIL_TYPE!r}", code="invalid_event"
        )
    detail = event.get("detail")
    if not isinstance(detail, Mapping):
        raise InvalidRequestError("the event's detail must be an object", code="invalid_event")
    run_id = run_id_for_event(event)
    chat_id = detail.get("chatId")
    if chat_id is not None and (not isinstance(chat_id, str) or not 0 < len(chat_id) <= MAX_CHAT_ID):
        raise InvalidRequestError(
            f"detail.chatId must be a string of 1 to {MAX_CHAT_ID} characters", code="invalid_event"
        )
    prompt, raw = detail.get("prompt"), detail.get("messages")
    if (prompt is None) == (raw is None):
        raise InvalidRequestError("detail needs exactly one of 'prompt' and 'messages'", code="invalid_event")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > _MAX_PROMPT:
            raise InvalidRequestError(
                f"detail.prompt must be a non-empty string of at most {_MAX_PROMPT} characters", code="invalid_event"
            )
        messages = [UIMessage(id=f"msg_{run_id[5:]}", role="user", parts=[TextUIPart(text=prompt)])]
    else:
        try:
            messages = parse_ui_messages(raw)
        except ProtocolError as exc:
            raise InvalidRequestError(f"detail.messages: {exc}", code="invalid_messages") from exc
    call_options = detail.get("callOptions")
    if call_options is not None and not isinstance(call_options, Mapping):
        raise InvalidRequestError("detail.callOptions must be an object", code="invalid_event")
    return StartRunRequest(run_id=run_id, messages=messages, chat_id=chat_id, call_options=call_options)
