"""The serializable state of one run (one turn of a conversation), stored as its checkpoint."""

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import OtherAgentError
from ..messages import ModelMessage
from ..ports import AGENT_META, StoredRun
from ..ports import TERMINAL_STATUSES as TERMINAL_STATUSES  # (defined in ports, with the other statuses)
from ..protocol.translate import TranslatorState

RunStatus = Literal[
    "not_started", "ready_for_next_step", "awaiting_tool_approval", "awaiting_event", "finished", "failed", "cancelled"
]


class StreamContext(BaseModel):
    """What a later slice needs to continue the run's UI message stream."""

    translator: TranslatorState = Field(default_factory=TranslatorState)
    chunk_count: int = 0
    """Chunks of the log covered by this checkpoint; more in the log means a slice died mid-step."""
    final_chunks: list[str] = Field(default_factory=list)
    """The run's last chunks (ending with ``finish``), written only after the terminal checkpoint
    so that ``finish`` is always the log's last chunk. ``chunk_count`` includes them."""


class FinalResult(BaseModel):
    """How a finished turn ended."""

    finish_reason: str
    raw_finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    output: Any = None


class StepMark(BaseModel):
    """How one step of the turn ended (noted by the runner at its ``finish-step``, for the result)."""

    finish_reason: str
    input_tokens: int = 0
    output_tokens: int = 0


class ApprovalRecord(BaseModel):
    """An approval request the turn raised (recorded by the runner as the stream passes)."""

    approval_id: str
    tool_call_id: str
    tool_name: str
    input: Any = None
    provider_executed: bool = False
    """The runtime runs the call itself once approved (not the host)."""


class DecisionRecord(BaseModel):
    """A verified answer to an approval request."""

    approval_id: str
    tool_call_id: str
    approved: bool
    reason: str | None = None
    tool_name: str = ""
    input: Any = None


class ContinuationRecord(BaseModel):
    """How a run continues a paused run: that run, and the verified answers to its requests.

    Kept until the run's first checkpoint (a slice that dies before it starts over from here).
    """

    paused_run_id: str
    approvals: list[DecisionRecord] = Field(default_factory=list)
    pending: list[ApprovalRecord] = Field(default_factory=list)
    with_messages: bool = False
    """The chat client sent the conversation (``input_messages``) with its answers."""


class WaitRecord(BaseModel):
    """What a run ``awaiting_event`` waits for (decision D16): a tool call's event or sleep."""

    tool_call_id: str
    name: str
    kind: Literal["event", "sleep"]
    deadline: float | None = None
    """Epoch seconds when the wait ends anyway (a sleep's end, an event's timeout); None: never."""
    since: float = Field(default_factory=time.time)


class RunState(BaseModel):
    """The checkpoint of a run (decision D5: history stored once per checkpoint, never per step)."""

    run_id: str
    session_id: str
    chat_id: str | None = None
    created_at: float = Field(default_factory=time.time)
    origin: Literal["chat", "event"] = "chat"
    principal: str | None = None
    agent: str | None = None
    """The identity of the agent whose run it is (the ``AGENT`` spec, ``module:attribute``, of the
    server that created it); None for a run made by a runner without one, which any runner drives."""
    status: RunStatus = "not_started"
    message_id: str
    """The assistant message id sent in ``start.messageId``; stable for the whole run."""
    input_messages: list[ModelMessage] = Field(default_factory=list)
    """The conversation the turn starts from (kept until the first boundary)."""
    call_options: dict[str, Any] | None = None
    """The run's call options, as the harness validated them (the client's ``body`` fields)."""
    turn: Any = None
    """The harness's own (opaque JSON) state at its last checkpoint; None before the first."""
    session_state: Any = None
    """The state of the last checkpoint of the session's previous turn (None on a first turn);
    a new turn's harness gets it with its ``StartTurn``."""
    continuation: ContinuationRecord | None = None
    """Set on a run that answers a paused run's approvals, until its first checkpoint."""
    pending_approvals: list[ApprovalRecord] = Field(default_factory=list)
    """Approval requests this turn raised; a turn that ends with any is paused."""
    stream: StreamContext = Field(default_factory=StreamContext)
    slices: int = 0
    steps: list[StepMark] = Field(default_factory=list)
    """The turn's finished steps, as the runner saw them (the run result's ``steps``)."""
    final_result: FinalResult | None = None
    error: str | None = None
    continued_by: str | None = None
    """The run that answered this paused run's approvals through the run API."""
    waits: list[WaitRecord] = Field(default_factory=list)
    """While ``awaiting_event``: what the run waits for (any one due resumes it)."""
    slice_times: list[tuple[int, float]] = Field(default_factory=list)
    """When each slice began: (the log index of its first chunk, epoch seconds)."""
    chunk_times: list[tuple[int, float]] = Field(default_factory=list)
    """When the chunks the runs inspector times were written (a step's start and finish, a tool
    call's input, output or error, an approval request): (log index, epoch seconds). Nothing else in
    the log or the checkpoint says when something happened; about 20 bytes a mark."""

    @property
    def terminal(self) -> bool:
        """True once no more slices will run."""
        return self.status in TERMINAL_STATUSES


def checkpoint_of(
    state: RunState, previous: StoredRun | None = None, *, text: str | None = None, value: Any = None
) -> StoredRun:
    """The store record of ``state`` (keeping the fencing counters of ``previous``); ``text`` and
    ``value``: its JSON and JSON value, when the caller has them
    (:class:`~durable_harness.runner.encoding.StateEncoder`)."""
    return StoredRun(
        run_id=state.run_id,
        state=state.model_dump_json(by_alias=True) if text is None else text,
        value=value,
        status=state.status,
        version=previous.version if previous else 0,
        epoch=previous.epoch if previous else 0,
        principal=state.principal,
        chat_id=state.chat_id,
        meta={AGENT_META: state.agent} if state.agent else {},
    )


def foreign(agent: str | None, agent_id: str | None) -> bool:
    """True when a run of ``agent`` is another agent's than ``agent_id`` (a runner's): both known,
    and different. A run or a runner without an identity matches any."""
    return bool(agent and agent_id and agent != agent_id)


def check_agent(state: RunState, agent_id: str | None) -> None:
    """Raise :class:`~durable_harness.errors.OtherAgentError` (a 409) for another agent's run."""
    if foreign(state.agent, agent_id):
        assert state.agent is not None and agent_id is not None
        raise OtherAgentError(state.run_id, state.agent, agent_id)


ENDED_WITHOUT_LAMBDA = "The run failed because of an internal error (its worker could not be started)."
"""The error of a run the state machine ended itself (statemachine/run.asl.json, EndWithoutLambda)."""


def state_of(cp: StoredRun) -> RunState:
    """The run state a checkpoint holds, with its record's ``failed`` status winning.

    The state machine's failure path without Lambda (``EndWithoutLambda``) can write the record's
    status, counters and the log's ``error`` and ``finish``, but not the state inside the record:
    such a run is failed, and its log already ends (``chunk_count`` stays below the log's count,
    so nothing repairs its tail again).
    """
    state = RunState.model_validate_json(cp.state)
    if cp.status == "failed" and not state.terminal:
        state.status, state.error = "failed", state.error or ENDED_WITHOUT_LAMBDA
    return state


def waits_json(state: RunState) -> list[dict[str, Any]]:
    """What a waiting run waits for, as the run API and the ``data-wait`` chunks show it."""
    return [
        {
            "toolCallId": w.tool_call_id,
            "name": w.name,
            "kind": w.kind,
            "deadline": None if w.deadline is None else int(w.deadline * 1000),
        }
        for w in state.waits
    ]


def pending_json(state: RunState) -> list[dict[str, Any]]:
    """The approvals a paused run waits for, as the run API shows them."""
    pending = []
    for r in state.pending_approvals:
        item = {"approvalId": r.approval_id, "toolCallId": r.tool_call_id, "toolName": r.tool_name, "input": r.input}
        pending.append({**item, "providerExecuted": True} if r.provider_executed else item)
    return pending
