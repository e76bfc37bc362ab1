"""The serializable state of a tool-loop turn, checkpointed at every boundary."""

import time
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from ..messages import ModelMessage


class StepCall(BaseModel):
    """A tool call of the current step, in the model's order."""

    tool_call_id: str
    tool_name: str
    input: Any = None
    invalid_error: str | None = None
    """Why the call cannot run (unknown tool, bad input, bad approval signature)."""
    silent: bool = False
    """Report the error to the model only, with no UI chunk (a bad approval signature)."""


class StepOutcome(BaseModel):
    """The result of one tool call of the current step (what ``on_tool_execution_end`` receives)."""

    tool_call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None
    duration_ms: float | None = Field(default=None, exclude=True)
    """How long the execution took (set when the tool ran in this process; not checkpointed)."""

    @property
    def success(self) -> bool:
        """True when the tool returned a result, False when it failed (``error`` says why)."""
        return self.error is None


class StepSummary(BaseModel):
    """What stop conditions and callbacks know about a finished step."""

    number: int
    finish_reason: str
    text: str = ""
    tool_calls: list[str] = Field(default_factory=list)
    """Names of the tools the model called in this step."""
    input_tokens: int = 0
    output_tokens: int = 0


class CallOverrides(BaseModel):
    """The serializable part of what ``prepare_call`` decided (it runs once per run)."""

    model: str | None = None
    instructions: str | None = None
    tool_choice: Any = None
    active_tools: list[str] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class LoopTurnState(BaseModel):
    """The state of a turn of :class:`~durable_harness.agent.loop.ToolLoopAgent`."""

    messages: list[ModelMessage]
    response_start: int | None = None
    """Where this turn's own messages begin in ``messages`` (None: after the last user message)."""
    input_tool_parts: int | None = None
    """For a turn that starts by acting on approvals: the parts of the last input (tool) message
    before this turn added its tool results there."""
    call_options: dict[str, Any] | None = None
    """The run's validated call options (the client's ``body`` fields, or an event's)."""
    runtime_context: Any = None
    """The shared agent state tools see; ``prepare_call`` / ``prepare_step`` may replace it."""
    started_at: float = Field(default_factory=time.time)
    prepared: CallOverrides | None = None
    step: int = 0
    phase: Literal["model", "tools"] = "model"
    approval_step: bool = False
    """The current tools phase executes approved calls of an earlier turn."""
    step_calls: list[StepCall] = Field(default_factory=list)
    step_outcomes: list[StepOutcome] = Field(default_factory=list)
    reported: int = 0
    """How many of ``step_calls`` (in order) have had their result sent to the client."""
    pending_approvals: list[str] = Field(default_factory=list)
    provider_approvals: list[str] = Field(default_factory=list)
    """Provider-executed calls whose approval the model asked for (answered back to the provider)."""
    client_calls: list[str] = Field(default_factory=list)
    step_finish_reason: str = "stop"
    step_usage: tuple[int, int] = (0, 0)
    total_usage: tuple[int, int] = (0, 0)
    steps: list[StepSummary] = Field(default_factory=list)
    stop_reason: str | None = None
    journals: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The recorded steps and waits of the current step's tool calls, by tool call id
    (:mod:`durable_harness.tools.durable`)."""

    _dumped: list[tuple[ModelMessage, dict[str, Any]]] = PrivateAttr(default_factory=list)
    """The JSON of ``messages`` at the last :func:`~durable_harness.agent.calls.dump_state`, by
    message object: a message that is not the last ones is never changed again, so its JSON is
    made once (a checkpoint's cost does not grow with the history)."""

    _dumped_steps: list[tuple[StepSummary, dict[str, Any]]] = PrivateAttr(default_factory=list)
    """The JSON of ``steps`` at the last dump, by step summary (as ``_dumped``)."""
    _events: Any = PrivateAttr(default=None)
    """The run's events (``RunEvents``) for this slice; None outside a durable run."""
    _turn_ends: bool | None = PrivateAttr(default=None)
    """Whether the turn ends after the step that just ended (decided once, at the step's end)."""

    @property
    def paused(self) -> bool:
        """True while the turn waits for the user's approval of host or provider-executed calls."""
        return bool(self.pending_approvals or self.provider_approvals)

    def decide_turn_ends(self, ends: bool) -> None:
        """Record the decision taken at the end of a step (stop conditions are asked once)."""
        self._turn_ends = ends

    def take_turn_ends(self) -> bool | None:
        """The decision recorded at the end of the last step (None if none), forgotten once taken."""
        ends, self._turn_ends = self._turn_ends, None
        return ends
