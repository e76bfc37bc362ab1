"""The deployed handover of a chat run's first slice: a Step Functions callback task (D14).

The chat function runs the first slice of a run it creates itself, streaming it to its client as
it writes the durable log (:mod:`durable_harness.server.inline`). It starts the run's execution
with ``inline: {"heartbeatSeconds": n}``; the state machine's ``AwaitChatSlice`` state then puts
its task token on the run record (``inline_token``: an attribute no checkpoint write touches, so
the version fence is unaffected) and waits:

* while the slice runs, the chat function reads the token (one GetItem, once) and sends
  ``SendTaskHeartbeat`` every ``heartbeat_interval`` seconds (at most a third of ``n``), each run's
  interval jittered down by up to a fifth: runs started together (a burst of chats) drift apart
  instead of beating together. ``SendTaskHeartbeat``'s quota is a 500 per second refill in the
  largest Regions (less elsewhere): 10,000 such slices at once, at 30 s (27 s on average), send
  about 370 per second; a heartbeat that is throttled is sent again by the next, and ``n`` of three
  intervals survives one lost heartbeat;
* at the end of the slice it sends ``SendTaskSuccess`` with ``{"status", "slices"}``, which the
  state machine routes as it routes a slice of its own (``ready_for_next_step``: the slice
  function goes on; ``finished`` or ``awaiting_tool_approval``: the execution ends);
* a slice that failed sends ``SendTaskFailure``; a chat function that died sends nothing, and the
  task times out after ``n`` seconds without a heartbeat. Either way the state machine's catch
  runs the slice function, whose claim of the run fences the chat function's writer off (its next
  append or checkpoint raises ``FencedError``) and which resumes from the last checkpoint, with
  ``reset-step`` if the chat function died mid-step.

The three ``SendTask*`` actions take no resource ARN in IAM: the token is the capability, and only
the runs table holds it. A token whose task is gone (timed out, the execution stopped by a cancel)
is answered ``TaskTimedOut``, ``TaskDoesNotExist`` or ``InvalidToken``: the chat function no longer
owns the run.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ._errors import aws_errors, error_code
from .stepfunctions import TASK_GONE, StepFunctionsOrchestrator
from .table import Head, run_key

__all__ = ["StepFunctionsHandover"]

logger = logging.getLogger(__name__)

_FIRST_LOOK, _LONGEST_LOOK = 0.02, 0.5
_SEND_WINDOW, _FIRST_RESEND, _LONGEST_RESEND = 30.0, 0.1, 4.0


class StepFunctionsHandover:
    """A :class:`~durable_harness.ports.SliceHandover` through the run state machine's callback task.

    ``client`` is a Step Functions client, ``dynamodb_client`` and ``table_name`` the runs table.
    ``token_wait`` bounds how long :meth:`hand_over` waits for the token to appear (the execution
    may not have reached the task yet); past it, the task times out and the slice function
    takes the run over from its checkpoint, which is correct, only later.
    """

    def __init__(
        self,
        orchestrator: StepFunctionsOrchestrator,
        *,
        client: Any,
        dynamodb_client: Any,
        table_name: str,
        heartbeat_seconds: int = 30,
        heartbeat_interval: float | None = None,
        token_wait: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """Hand runs of ``orchestrator``'s state machine over through its ``AwaitChatSlice`` task.

        ``heartbeat_seconds`` is how long the task waits for a heartbeat (its timeout);
        ``heartbeat_interval`` how often the chat function sends one (``None``: a third of it).
        """
        if heartbeat_seconds < 1:
            raise ValueError(f"heartbeat_seconds must be at least 1, got {heartbeat_seconds}")
        interval = heartbeat_seconds / 3 if heartbeat_interval is None else float(heartbeat_interval)
        if not 0 < interval <= heartbeat_seconds / 3:
            raise ValueError(
                f"the heartbeat interval ({interval:g} s) must be positive and at most a third of the timeout "
                f"({heartbeat_seconds} s), so that one lost heartbeat hands nothing over"
            )
        self.timeout_seconds = int(heartbeat_seconds)
        self.interval = interval
        self._jitter = jitter
        self._orchestrator = orchestrator
        self._sfn = client
        self._ddb = dynamodb_client
        self._table = table_name
        self._token_wait = token_wait
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}

    def heartbeat_interval(self) -> float:
        """Seconds between the heartbeats of the next in-process slice (read once per slice): the
        interval jittered down by up to a fifth, so that the heartbeats of runs started together
        spread out; never above the third of the timeout the task waits for."""
        return self.interval * (1 - 0.2 * self._jitter())

    def start(self, run_id: str) -> None:
        """Start the run's execution so that it waits for the in-process slice first."""
        self._orchestrator.start(run_id, inline={"heartbeatSeconds": self.timeout_seconds})

    def heartbeat(self, run_id: str) -> bool:
        """Send a heartbeat (nothing before the token is there); False once the task is gone."""
        token = self._token(run_id, 0.0)
        if token is None:
            return True  # the execution has not reached the task yet: nothing to keep alive
        return self._send(run_id, "heartbeat", lambda: self._sfn.send_task_heartbeat(taskToken=token))

    def hand_over(self, run_id: str, status: str, slices: int) -> bool:
        """Complete the task with the slice's outcome; False if it is gone or never appeared."""
        token = self._token(run_id, self._token_wait)
        self.forget(run_id)
        if token is None:
            logger.warning("run %s: no task token after %.0f s; the state machine takes over", run_id, self._token_wait)
            return False
        output = json.dumps({"status": status, "slices": slices}, separators=(",", ":"))
        return self._send(run_id, "hand-over", lambda: self._sfn.send_task_success(taskToken=token, output=output))

    def fail(self, run_id: str, reason: str) -> None:
        """Fail the task: the state machine's catch runs the slice function at once."""
        token = self._token(run_id, self._token_wait)
        self.forget(run_id)
        if token is None:
            logger.warning("run %s: no task token after %.0f s; the state machine takes over", run_id, self._token_wait)
        else:
            error = "ChatSliceFailed"
            self._send(run_id, "failure", lambda: self._sfn.send_task_failure(taskToken=token, error=error,
                                                                              cause=reason[:1000]))  # fmt: skip

    def forget(self, run_id: str) -> None:
        """Drop the run's token (its task is completed, or gone)."""
        with self._lock:
            self._tokens.pop(run_id, None)

    # --- internals ---------------------------------------------------------------------------------

    def _send(self, run_id: str, what: str, request: Callable[[], Any]) -> bool:
        # A lost heartbeat is retried by the next one. A hand-over or failure not delivered leaves
        # the execution waiting out the heartbeat timeout, so a throttled one is tried again (with
        # backoff, past the client's own retries) for up to _SEND_WINDOW seconds.
        deadline, pause = time.monotonic() + _SEND_WINDOW, _FIRST_RESEND
        while True:
            try:
                request()
                return True
            except ClientError as exc:
                if error_code(exc) in TASK_GONE:
                    logger.info("run %s: %s: the task is gone (%s)", run_id, what, error_code(exc))
                    self.forget(run_id)
                    return False
                failure: Exception = exc
            except BotoCoreError as exc:
                failure = exc
            if what == "heartbeat" or time.monotonic() + pause > deadline:
                logger.warning("run %s: %s failed: %s", run_id, what, failure)
                return what == "heartbeat"
            logger.info("run %s: %s failed (%s); trying again in %.1f s", run_id, what, failure, pause)
            self._sleep(pause)
            pause = min(2 * pause, _LONGEST_RESEND)

    def _token(self, run_id: str, wait: float) -> str | None:
        """The task token on the run record, looking again for up to ``wait`` seconds."""
        with self._lock:
            known = self._tokens.get(run_id)
        if known is not None:
            return known
        deadline, pause = time.monotonic() + wait, _FIRST_LOOK
        while True:
            with aws_errors(f"reading the task token of run {run_id!r}"):
                item = self._ddb.get_item(
                    TableName=self._table,
                    Key=run_key(run_id),
                    ConsistentRead=True,
                    ProjectionExpression="#t",
                    ExpressionAttributeNames={"#t": Head.INLINE_TOKEN},
                ).get("Item")
            found = item.get(Head.INLINE_TOKEN, {}).get("S") if item else None
            if found is not None:
                token = str(found)
                with self._lock:
                    self._tokens[run_id] = token
                return token
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._sleep(min(pause, remaining))
            pause = min(pause * 2, _LONGEST_LOOK)
