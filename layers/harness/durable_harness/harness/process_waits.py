"""Durable waits of a :class:`~durable_harness.harness.process.ProcessHarness` program (decision D16).

The program's side of the primitives a tool gets on its ``ToolContext`` (``docs/harness.md``):

* ``{"type":"wait","name":"build-done","timeoutSeconds":3600,"toolCallId":"c1"}`` waits for the
  run's event ``name`` (``timeoutSeconds`` and ``toolCallId`` optional);
* ``{"type":"sleep","name":"cool-down","seconds":5,"toolCallId":"c1"}`` sleeps durably.

The runner answers each with an ``event`` line: ``{"type":"event","name":…,"payload":<JSON>}``
(the event arrived), ``{"type":"event","name":…,"timeout":true}`` (its timeout passed first) or
``{"type":"event","name":…,"slept":true}`` (the sleep is over). When the answer is not there yet
the run **parks** (status ``awaiting_event``, nothing running, the program stopped): the turn
yields a checkpoint and a :class:`~durable_harness.harness.interface.Wait`, and once the event or
the deadline comes a new process gets ``continue`` with the program's last checkpoint. So a
``wait`` or ``sleep`` line must come right after a checkpoint (or first thing after ``start`` /
``continue``): the program resumes from that state, and writes the same line again, which is now
answered. A wait's deadline (a sleep's end) is fixed the first time its line comes, and kept in
the runner's part of the checkpoint (``waits``), so the line written again waits no longer.

In a persistent session (protocol 2, :mod:`.session_turn`) the program is not stopped when the
run parks: it waits on its stdin, and the slice that resumes the run sends it the ``event`` line.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidRequestError
from ..waits import RunEvents, WaitSpec, check_event_name

WAIT_LINES = frozenset({"wait", "sleep"})
"""The program's line types that wait."""


class ProgramWaits:
    """The waits of one program turn: their deadlines (checkpointed) and the answers to its lines."""

    def __init__(self, records: Any, events: RunEvents | None, clock: Callable[[], float] = time.time) -> None:
        """``records``: the ``waits`` of the runner's part of the last checkpoint (or None)."""
        self.records: dict[str, dict[str, Any]] = dict(records) if isinstance(records, dict) else {}
        self.events = events
        self.clock = clock

    async def answer(self, obj: dict[str, Any]) -> dict[str, Any] | WaitSpec:
        """The ``event`` line that answers the program's ``wait`` or ``sleep`` line ``obj``, or
        what the run must park on. ValueError (saying what is wrong) for an invalid line."""
        kind = "event" if obj["type"] == "wait" else "sleep"
        name, seconds, call_id = _parse(obj, kind)
        key = f"{kind}:{name}"
        record = self.records.get(key)
        if record is None:  # the first time: its deadline is fixed now, and checkpointed
            deadline = None if seconds is None else self.clock() + seconds
            record = self.records[key] = {"deadline": deadline, "seconds": seconds}
        deadline = record.get("deadline")
        if kind == "event":
            if self.events is None:
                raise ValueError(f'a "wait" for {name!r} needs a durable run (the HTTP API)')
            delivery = await asyncio.to_thread(self.events.event, name)
            if delivery is not None:
                return {"type": "event", "name": name, "payload": delivery.payload}
            if deadline is not None and self.clock() >= deadline:
                return {"type": "event", "name": name, "timeout": True}
            return WaitSpec(call_id, name, "event", deadline)
        assert deadline is not None
        left = deadline - self.clock()
        if left > 0 and self.events is not None:
            return WaitSpec(call_id, f"sleep:{name}", "sleep", deadline)
        if left > 0:  # no durable run: an ordinary sleep
            await asyncio.sleep(left)
        return {"type": "event", "name": name, "slept": True}


def _parse(obj: dict[str, Any], kind: str) -> tuple[str, float | None, str]:
    """``(name, seconds, toolCallId)`` of a wait line; ValueError for one that is not valid."""
    line = "wait" if kind == "event" else "sleep"
    name = obj.get("name")
    try:
        check_event_name(name)  # type: ignore[arg-type]
    except InvalidRequestError:
        raise ValueError(
            f'a "{line}" line needs a "name" of 1 to 128 letters, digits, "_", ".", ":" or "-", not {name!r}'
        ) from None
    field = "timeoutSeconds" if kind == "event" else "seconds"
    seconds = obj.get(field)
    if kind == "sleep" and seconds is None:
        raise ValueError(f'a "sleep" line needs "seconds" (a number >= 0), got {obj!r}')
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0
    ):
        raise ValueError(f'"{field}" of a "{line}" line must be a number >= 0, not {seconds!r}')
    call_id = obj.get("toolCallId", f"{kind}-{name}")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f'"toolCallId" of a "{line}" line must be a non-empty string, not {call_id!r}')
    return str(name), None if seconds is None else float(seconds), call_id


__all__ = ["WAIT_LINES", "ProgramWaits"]
