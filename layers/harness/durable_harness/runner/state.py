"""The serializable state of one run (one turn of a conversation), stored as its checkpoint."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..messages import ModelMessage
from ..protocol.translate import TranslatorState

RunStatus = Literal["not_started", "ready_for_next_step", "awaiting_tool_approval", "finished", "failed", "cancelled"]

TERMINAL_STATUSES: frozenset[str] = frozenset({"awaiting_tool_approval", "finished", "failed", "cancelled"})
"""Statuses after which no slice runs again (an approval continues in a new run)."""


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


class RunState(BaseModel):
    """The checkpoint of a run (decision D5: history stored once per checkpoint, never per step)."""

    run_id: str
    session_id: str
    chat_id: str | None = None
    created_at: float = Field(default_factory=time.time)
    origin: Literal["chat", "event"] = "chat"
    principal: str | None = None
    status: RunStatus = "not_started"
    message_id: str
    """The assistant message id sent in ``start.messageId``; stable for the whole run."""
    input_messages: list[ModelMessage] = Field(default_factory=list)
    """The conversation the turn starts from (kept until the first boundary)."""
    call_options: dict[str, Any] | None = None
    """The run's call options, as the agent validated them (the client's ``body`` fields)."""
    turn: dict[str, Any] | None = None
    """The agent's state at its last boundary."""
    stream: StreamContext = Field(default_factory=StreamContext)
    slices: int = 0
    final_result: FinalResult | None = None
    error: str | None = None
    continued_by: str | None = None
    """The run that answered this paused run's approvals through the run API."""

    @property
    def terminal(self) -> bool:
        """True once no more slices will run."""
        return self.status in TERMINAL_STATUSES
