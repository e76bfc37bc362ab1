"""Deployed waits (decision D16): a parked run costs no compute until an event or a deadline.

When a slice ends with the run ``awaiting_event``, the slice function returns ``wait`` (see
:func:`wait_of`) and the state machine parks the execution (statemachine/run.asl.json):

* waiting for an event: ``AwaitEvent`` puts its task token on the run record (``event_token``, an
  attribute no checkpoint write touches) and waits, with the time to the wait's deadline as its
  ``TimeoutSeconds``; unless the record carries ``event_pending``: an event came after the slice
  looked, and the condition fails, so the state machine runs the slice at once;
* a sleep only: a ``Wait`` state until its end.

Either way the next state is ``RunSlice``; a slice of a run that is not due returns at once.

An event delivery (:class:`StepFunctionsWaker`) records the event, then sets ``event_pending`` and
reads ``event_token`` in one UpdateItem, and answers the token with ``SendTaskSuccess``. A slice of
a parked run removes ``event_pending`` before it looks at the events, and goes on at once if one
came before it parked; so an event is never left unseen in the gap between a slice and its park.
A wait longer than :data:`MAX_PARK_SECONDS` parks again after that (no task may wait past the
execution's year), and an execution older than :data:`RENEW_AFTER_SECONDS` continues as new.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from ..runner.state import RunState
from ._errors import aws_errors, error_code
from .stepfunctions import TASK_GONE
from .table import PK, Head, run_key

logger = logging.getLogger(__name__)

MAX_PARK_SECONDS = 30 * 24 * 3600
"""The longest one park lasts (the task's TimeoutSeconds, the Wait's end); the run then parks again."""
RENEW_AFTER_SECONDS = 300 * 24 * 3600
"""An execution this old continues as new when its run parks (a Standard execution lasts a year)."""


def wait_of(state: RunState, *, started: str | None = None, now: float | None = None) -> dict[str, Any] | None:
    """What the state machine parks a run ``awaiting_event`` on: ``{event, until, seconds, renew}``
    (None for a run that is not parked). ``started``: the execution's start time (ISO 8601)."""
    if state.status != "awaiting_event":
        return None
    now = time.time() if now is None else now
    deadlines = [w.deadline for w in state.waits if w.deadline is not None]
    end = min([now + MAX_PARK_SECONDS, *deadlines])
    renew = False
    if started:
        try:
            age = now - datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
            renew = age > RENEW_AFTER_SECONDS
        except ValueError:
            logger.warning("execution start time %r is not ISO 8601", started)
    return {
        "event": any(w.kind == "event" for w in state.waits),
        # Whole seconds, rounded up: a Wait state that ends a moment early would find the run not due.
        "until": datetime.fromtimestamp(math.ceil(end), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": max(1, math.ceil(end - now)),
        "renew": renew,
    }


class StepFunctionsWaker:
    """Wakes a parked execution for an event delivery, and clears the marker a slice starts with."""

    def __init__(self, *, client: Any, dynamodb_client: Any, table_name: str) -> None:
        """``client``: Step Functions; ``dynamodb_client`` and ``table_name``: the runs table."""
        self._sfn = client
        self._ddb = dynamodb_client
        self._table = table_name

    def wake(self, run_id: str) -> None:
        """Mark an event pending for the run and answer its parked task, if it has one."""
        with aws_errors(f"waking run {run_id!r}"):
            item = self._ddb.update_item(
                TableName=self._table,
                Key=run_key(run_id),
                # The token stays: answered twice, a token is refused (and that is ignored); removed, a
                # failed answer would leave the run asleep until its deadline.
                UpdateExpression="SET #pending = :now",
                ConditionExpression=f"attribute_exists({PK})",
                ExpressionAttributeNames={"#pending": Head.EVENT_PENDING},
                ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
                ReturnValues="ALL_OLD",
            ).get("Attributes", {})
        token = item.get(Head.EVENT_TOKEN, {}).get("S")
        if not token:
            return  # not parked yet: the park finds event_pending and does not wait
        with aws_errors(f"waking the parked task of run {run_id!r}"):
            try:
                self._sfn.send_task_success(taskToken=token, output="{}")
            except ClientError as exc:
                if error_code(exc) not in TASK_GONE:
                    raise
                logger.info("run %s: its parked task is gone already (%s)", run_id, error_code(exc))

    def clear(self, run_id: str) -> None:
        """Remove the pending marker (a slice of a parked run does, before it looks at the events)."""
        with aws_errors(f"clearing the event marker of run {run_id!r}"):
            self._ddb.update_item(
                TableName=self._table,
                Key=run_key(run_id),
                UpdateExpression="REMOVE #pending",
                ExpressionAttributeNames={"#pending": Head.EVENT_PENDING},
            )
