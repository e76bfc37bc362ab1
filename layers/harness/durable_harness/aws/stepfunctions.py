"""The deployed orchestrator: one Step Functions Standard execution drives a run's slices (D6).

Executions are named after the run *incarnation* (see :mod:`.dynamodb`): ``<run_id>-<inc>``,
because a run id can be used again once its record has expired, while Step Functions keeps an
execution name taken for 90 days after the execution closed. The name is the idempotency key of
one incarnation: ``StartExecution`` with the same name and input as a running execution returns
that execution, and a name already used is ``ExecutionAlreadyExists``, which ``start`` treats as
success only after checking that the execution is this incarnation's own (its input names the
same run and incarnation). The state machine carries only the run id (and the incarnation), never
the run's state: that lives in DynamoDB and S3 (D5).

After about a thousand slices an execution continues as new, in an execution named
``<base>-c<n>`` where ``<base>`` is the first execution's name (see :func:`execution_name`), to
stay far below the 25,000-event history limit. ``cancel`` stops whichever generation is running.
The caller then finalizes the run (``Runner.finalize(run_id, status="cancelled")``), which fences
off a slice still in flight and writes the closing ``finish`` chunk; stopping the execution only
stops further slices.

A record made before incarnations existed has none; its executions keep the old names
(``<run_id>``, ``<run_id>-c<n>``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import FatalError
from ._errors import has_code, translate

__all__ = ["ExecutionNameTakenError", "StepFunctionsOrchestrator", "execution_name"]

logger = logging.getLogger(__name__)

# Step Functions execution names: 1-80 characters, none of whitespace, brackets, wildcards or
# "#%\^|~`$&,;:/. (moto accepts anything, AWS does not; CloudWatch logging wants this subset.)
# A run id (31 characters) plus "-" and an incarnation (10) plus "-c<generation>" stays far below.
_NAME = re.compile(r"^[0-9A-Za-z_.-]{1,80}$")
_MAX_GENERATIONS = 10_000
TASK_GONE = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})
"""How Step Functions answers a task token whose task is gone (timed out, its execution stopped)."""


class ExecutionNameTakenError(FatalError):
    """An execution with the run incarnation's name exists but belongs to something else."""


def execution_name(run_id: str, generation: int = 0, incarnation: str | None = None) -> str:
    """The execution name of a run incarnation's ``generation`` (0: the first; n: the n-th continue-as-new)."""
    base = run_id if incarnation is None else f"{run_id}-{incarnation}"
    name = base if generation == 0 else f"{base}-c{generation}"
    if generation < 0 or not _NAME.match(name):
        raise ValueError(f"{name!r} cannot name a Step Functions execution")
    return name


class StepFunctionsOrchestrator:
    """An :class:`~durable_harness.ports.Orchestrator` that starts and stops executions.

    ``state_machine_arn`` is the run state machine; ``client`` a boto3 Step Functions client.
    ``incarnation`` returns the current incarnation of a run (``DynamoCheckpointStore.incarnation``;
    ``None`` for a record without one, and when not given at all). ``slice_seconds``, when set, is
    passed in the execution input for the slice function to use as its time budget (otherwise the
    function's own default applies).
    """

    def __init__(
        self,
        state_machine_arn: str,
        *,
        client: Any,
        slice_seconds: float | None = None,
        incarnation: Callable[[str], str | None] | None = None,
    ) -> None:
        """Drive runs with the state machine ``state_machine_arn``."""
        parts = state_machine_arn.split(":")
        if len(parts) < 7 or parts[2] != "states" or parts[5] != "stateMachine":
            raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
        self._arn = state_machine_arn
        # arn:partition:states:region:account:stateMachine:name[:version-or-alias]
        self._execution_base = ":".join([*parts[:5], "execution", parts[6]])
        self._sfn = client
        self._slice_seconds = slice_seconds
        self._incarnation = incarnation

    @property
    def state_machine_arn(self) -> str:
        """The state machine this orchestrator starts."""
        return self._arn

    def execution_arn(self, run_id: str, generation: int = 0, incarnation: str | None = None) -> str:
        """The ARN of a run incarnation's execution (derived: no request)."""
        return f"{self._execution_base}:{execution_name(run_id, generation, incarnation)}"

    def execution_input(
        self, run_id: str, incarnation: str | None = None, inline: Mapping[str, Any] | None = None
    ) -> str:
        """The execution input for a run: deterministic, so a repeated start is the same request.
        ``inline`` (``{"heartbeatSeconds": n}``) makes the execution wait for the first slice run
        by the chat function before its own (the ``AwaitChatSlice`` state)."""
        payload: dict[str, Any] = {"runId": run_id}
        if incarnation is not None:
            payload["incarnation"] = incarnation
        if inline is not None:
            payload["inline"] = dict(inline)
        if self._slice_seconds is not None:
            payload["sliceSeconds"] = self._slice_seconds
        return json.dumps(payload, separators=(",", ":"), sort_keys=True)

    def current_incarnation(self, run_id: str) -> str | None:
        """The run's incarnation, as the ``incarnation`` callable tells it (``None`` without one)."""
        return self._incarnation(run_id) if self._incarnation is not None else None

    def start(self, run_id: str, *, inline: Mapping[str, Any] | None = None) -> None:
        """Start the run's execution; a no-op when this incarnation of the run has (or had) one.
        ``inline``: see :meth:`execution_input` (and :mod:`.handover`)."""
        incarnation = self.current_incarnation(run_id)
        name = execution_name(run_id, 0, incarnation)
        try:
            self._sfn.start_execution(
                stateMachineArn=self._arn, name=name, input=self.execution_input(run_id, incarnation, inline)
            )
        except (ClientError, BotoCoreError) as exc:
            if not has_code(exc, "ExecutionAlreadyExists"):
                raise translate(exc, f"starting run {run_id!r}") from exc
            # Running with another input, or closed: if it is this incarnation's, the run was
            # already started, and starting it twice must not drive it twice.
            self._check_own(run_id, incarnation, name)
            logger.info("run %s: execution %s already exists; not starting another", run_id, name)

    def _check_own(self, run_id: str, incarnation: str | None, name: str) -> None:
        """Raise ``ExecutionNameTakenError`` unless execution ``name`` drives this run incarnation."""
        try:
            described = self._sfn.describe_execution(executionArn=f"{self._execution_base}:{name}")
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, f"starting run {run_id!r}") from exc
        try:
            given = json.loads(described.get("input") or "{}")
        except ValueError:
            given = {}
        if not isinstance(given, dict) or given.get("runId") != run_id or given.get("incarnation") != incarnation:
            raise ExecutionNameTakenError(
                f"starting run {run_id!r}: execution {name!r} exists but drives another run or incarnation"
            )

    def cancel(self, run_id: str) -> None:
        """Stop every running execution of the run's incarnation (all continue-as-new generations).

        Generations are looked up by their derived names in order until one does not exist, so
        this costs one DescribeExecution per generation (normally one) plus the stops.
        """
        incarnation = self.current_incarnation(run_id)
        for generation in range(_MAX_GENERATIONS):
            arn = self.execution_arn(run_id, generation, incarnation)
            try:
                status = self._sfn.describe_execution(executionArn=arn)["status"]
            except (ClientError, BotoCoreError) as exc:
                if has_code(exc, "ExecutionDoesNotExist"):
                    return
                raise translate(exc, f"cancelling run {run_id!r}") from exc
            if status == "RUNNING":
                self._stop(run_id, arn)

    def _stop(self, run_id: str, arn: str) -> None:
        try:
            self._sfn.stop_execution(executionArn=arn, error="Cancelled", cause="The run was cancelled.")
        except (ClientError, BotoCoreError) as exc:
            # Stopping an execution that just ended is not a failure: the goal is reached.
            if not has_code(exc, "ExecutionDoesNotExist"):
                raise translate(exc, f"cancelling run {run_id!r}") from exc
