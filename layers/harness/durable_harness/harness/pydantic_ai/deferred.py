"""Pydantic AI's deferred tool calls as durable event waits (decision D16).

A tool of the agent that raises ``CallDeferred`` ends Pydantic AI's run with a
``DeferredToolRequests`` whose ``calls`` wait for a result from outside. The harness parks the run
on them (status ``awaiting_event``, nothing running), one event wait per call:

* the event's name is the call's ``metadata["event"]`` (``CallDeferred(metadata={"event":
  "build-done", "timeoutSeconds": 3600})``), else the tool call id;
* ``metadata["timeoutSeconds"]`` (optional) is the wait's timeout.

The event's JSON payload becomes the call's result (``DeferredToolResults.calls``) when the run
resumes; a call whose timeout passed first gets ``{"timeout": true, "error": "No event … arrived
within … s."}``. The run resumes once each of its calls has its event or its timeout.
"""

from __future__ import annotations

import math
import time
from typing import Any

from pydantic_ai import DeferredToolRequests

from ...errors import InvalidRequestError, ProtocolError
from ...waits import RunEvents, WaitSpec, WaitTimeout, check_event_name


def deferred_waits(output: DeferredToolRequests, now: float | None = None) -> list[dict[str, Any]]:
    """The waits of the deferred calls of ``output`` (their names, deadlines and timeouts); a
    ProtocolError (the run fails saying so) for metadata that names no valid event or timeout."""
    now = time.time() if now is None else now
    records = []
    for call in output.calls:
        meta = output.metadata.get(call.tool_call_id) or {}
        name, seconds = meta.get("event", call.tool_call_id), meta.get("timeoutSeconds")
        try:
            check_event_name(name)
        except InvalidRequestError as exc:
            raise ProtocolError(f"The deferred call {call.tool_call_id} of tool {call.tool_name!r} "
                                   f'needs metadata["event"], a valid event name: {exc}') from None  # fmt: skip
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                                    or not math.isfinite(seconds) or seconds < 0):  # fmt: skip
            raise ProtocolError(f'metadata["timeoutSeconds"] of the deferred call {call.tool_call_id} must be '
                                   f"a number >= 0, not {seconds!r}")  # fmt: skip
        deadline = None if seconds is None else now + float(seconds)
        records.append({"toolCallId": call.tool_call_id, "name": name, "deadline": deadline, "seconds": seconds})
    return records


def settle(
    records: list[dict[str, Any]], events: RunEvents, now: float | None = None
) -> tuple[dict[str, Any], list[WaitSpec]]:
    """The results of the calls whose event or timeout came, and what the others still wait for."""
    now = time.time() if now is None else now
    results: dict[str, Any] = {}
    waiting: list[WaitSpec] = []
    for record in records:
        call_id, name, deadline = record["toolCallId"], record["name"], record.get("deadline")
        delivery = events.event(name)
        if delivery is not None:
            results[call_id] = delivery.payload
        elif deadline is not None and now >= deadline:
            results[call_id] = {"timeout": True, "error": str(WaitTimeout(name, record.get("seconds")))}
        else:
            waiting.append(WaitSpec(call_id, name, "event", deadline))
    return results, waiting


def specs(records: list[dict[str, Any]]) -> tuple[WaitSpec, ...]:
    """What the run parks on for ``records``."""
    return tuple(WaitSpec(r["toolCallId"], r["name"], "event", r.get("deadline")) for r in records)


__all__ = ["deferred_waits", "settle", "specs"]
