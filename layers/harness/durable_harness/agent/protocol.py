"""What the durable runner needs from an agent (modelled on the seed's ``HarnessWorkflowAgent``).

An agent streams a turn as harness stream parts (or, for what the harness protocol cannot say,
UI chunks), interleaved with :class:`Boundary` events. At a boundary the agent hands the runner
its serializable turn state; the runner makes the chunks so far durable, checkpoints that state,
and may end the time slice there. A later slice resumes with :meth:`continue_stream`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ..messages import ModelMessage
from ..protocol.harness_parts import HarnessStreamPart
from ..protocol.ui_chunks import UIMessageChunk

BoundaryKind = Literal["model", "tool-result", "step", "approval", "end"]


@dataclass(frozen=True)
class Boundary:
    """A point where the turn can be checkpointed.

    * ``model``: the step's model call is complete (its output is in ``turn``);
    * ``tool-result``: one more tool result is in ``turn``;
    * ``step``: a step ended (``finish-step`` was yielded); a slice may stop here;
    * ``approval``: the turn paused for tool approval (``finish`` was yielded);
    * ``end``: the turn is over (``finish`` was yielded); ``output`` holds structured output.
    """

    kind: BoundaryKind
    turn: dict[str, Any]
    output: Any = None


AgentEvent = HarnessStreamPart | UIMessageChunk | Boundary


@runtime_checkable
class HarnessWorkflowAgent(Protocol):
    """An agent the durable runner can drive across time slices."""

    @property
    def tool_names(self) -> Collection[str] | None:
        """Names of the host tools (used to validate tool calls), or ``None`` to accept any."""
        ...

    def has_output(self) -> bool:
        """True when the agent produces structured output at the end of a turn."""
        ...

    def create_session(self, session_id: str | None = None) -> str:
        """Return the session id for a conversation (creating one when ``None``)."""
        ...

    def stream(
        self, session_id: str, messages: list[ModelMessage], *, call_options: dict[str, Any] | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Start a turn on ``messages`` (the conversation, ending with the new input).

        ``call_options`` are the run's call options as :meth:`parse_call_options` returned them.
        """
        ...

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """Validate a request's call options (the client's extra ``body`` fields, an event's
        ``callOptions``); the JSON-ready options to checkpoint, or None when the agent takes none.

        Raises :class:`~durable_harness.errors.InvalidRequestError` naming the bad field.
        """
        ...

    async def on_cancelled(self, turn: dict[str, Any] | None) -> None:
        """The runner ended this run as cancelled (a cancel through the API); ``turn`` is the state
        of its last boundary (None before the first). Called once, after the cancel is recorded."""
        ...

    def run_result(self, turn: dict[str, Any] | None) -> dict[str, Any]:
        """The JSON result of a turn from the state of its last boundary: ``text``, ``finishReason``,
        ``totalUsage``, ``steps``, ``responseMessages``, ``pendingApprovals``."""
        ...

    def continue_stream(
        self, session_id: str, continue_from: dict[str, Any], *, replay_step: bool = False
    ) -> AsyncIterator[AgentEvent]:
        """Continue a turn from the state of its last boundary.

        With ``replay_step`` the client has just been told ``reset-step``: the agent re-sends
        what the current step had already shown (without re-running finished tools) first.
        """
        ...
