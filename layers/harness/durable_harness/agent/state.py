"""The serializable state of a tool-loop turn, checkpointed at every boundary."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

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
    """The result of one tool call of the current step."""

    tool_call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None


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
    client_calls: list[str] = Field(default_factory=list)
    step_finish_reason: str = "stop"
    step_usage: tuple[int, int] = (0, 0)
    total_usage: tuple[int, int] = (0, 0)
    steps: list[StepSummary] = Field(default_factory=list)
    stop_reason: str | None = None
