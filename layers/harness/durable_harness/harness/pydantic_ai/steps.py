"""The turn's checkpointed state, and how a redone step gets the tool results it had recorded.

A checkpoint holds the agent's message history in Pydantic AI's JSON form. At a step boundary it
is the history the next model request goes out with. While a step's tools run it is the history
up to the step's model response, with the results recorded so far (:attr:`TurnState.results`)
and, on the step that continues a paused turn, the verified answers to its approvals.

Pydantic AI's graph cannot be entered half-way through a ``CallToolsNode``: a run resumed from a
history that ends with a model response runs all of that response's tool calls again. So a redone
step is run from the response with :class:`RecordedResults`, an outermost capability whose
``wrap_tool_execute`` hands back each recorded result instead of calling the tool: only the calls
without a recorded result execute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.exceptions import ModelRetry, ToolFailed

from ..interface import ContinueTurn

INVALID_APPROVAL = "The approval of this call was missing or not valid; the tool was not run."
"""What the model is told about a deferred call whose approval did not verify (it is denied)."""
DENIED = "The user denied this tool call."
"""What the model is told about a denial without a reason."""


@dataclass
class Answers:
    """The verified answers to a paused turn's approval requests, as Pydantic AI's deferred results.

    ``denied`` maps a call to what the model is told; every call not approved is denied (a missing
    or tampered answer included), and the runner shows those denials to the client itself.
    """

    approved: list[str] = field(default_factory=list)
    denied: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, request: ContinueTurn) -> Answers:
        """The answers a continuation brings (each pending request gets one)."""
        assert request.continuation is not None
        decided = {a.tool_call_id: a for a in request.continuation.approvals}
        answers = cls()
        for pending in request.continuation.pending:
            decision = decided.get(pending.tool_call_id)
            if decision is not None and decision.approved:
                answers.approved.append(pending.tool_call_id)
            else:
                reason = INVALID_APPROVAL if decision is None else decision.reason or DENIED
                answers.denied[pending.tool_call_id] = reason
        return answers

    def results(self) -> DeferredToolResults:
        """Pydantic AI's form: approved calls run, denied ones return their message."""
        approvals: dict[str, bool | ToolApproved | ToolDenied] = dict.fromkeys(self.approved, True)
        approvals.update({call_id: ToolDenied(message) for call_id, message in self.denied.items()})
        return DeferredToolResults(approvals=approvals)

    def to_json(self) -> dict[str, Any]:
        """The checkpointed form."""
        return {"approved": self.approved, "denied": self.denied}


@dataclass
class TurnState:
    """What a checkpoint holds (its JSON is the harness state the runner stores).

    ``messages`` stays in JSON form: it is written at every checkpoint and read once per slice.
    ``results`` is None at a step boundary; while a step's tools run it holds the results recorded
    so far (``messages`` then ends with the step's model response). ``answers`` is set while the
    step that continues a paused turn runs. ``deferred``: the calls the run is parked on (a tool
    raised ``CallDeferred``), each ``{toolCallId, name, deadline, seconds}`` (:mod:`.deferred`).
    """

    messages: list[Any]
    step: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    results: list[pm.ToolReturnPart] | None = None
    answers: Answers | None = None
    deferred: list[dict[str, Any]] | None = None

    @classmethod
    def start(cls, history: list[pm.ModelMessage]) -> TurnState:
        """The state of a new turn on ``history``."""
        return cls(messages=dump(history))

    @classmethod
    def load(cls, state: Any) -> TurnState:
        """A checkpoint's state (checkpoints of the first version, without usage or tools, load too)."""
        data: dict[str, Any] = state if isinstance(state, dict) else {}
        usage = data.get("usage") or {}
        tools = data.get("tools")
        results: list[pm.ToolReturnPart] | None = None
        answers = None
        if isinstance(tools, dict):
            recorded = load(tools.get("results") or [])
            results = [p for m in recorded for p in m.parts if isinstance(p, pm.ToolReturnPart)]
            if tools.get("answers"):
                answers = Answers(**tools["answers"])
        return cls(
            messages=list(data.get("messages", [])), step=int(data.get("step", 0)),
            input_tokens=int(usage.get("inputTokens", 0)), output_tokens=int(usage.get("outputTokens", 0)),
            results=results, answers=answers, deferred=data.get("deferred"),
        )  # fmt: skip

    def history(self) -> list[pm.ModelMessage]:
        """The message history to run from."""
        return load(self.messages)

    def add_usage(self, usage: Any) -> None:
        """Count a model response's tokens in the turn's total."""
        self.input_tokens += int(usage.input_tokens or 0)
        self.output_tokens += int(usage.output_tokens or 0)

    def run_tools(self, history: list[pm.ModelMessage] | None, answers: Answers | None = None) -> None:
        """The step's tools start running, from ``history`` (None: the current messages)."""
        if history is not None:
            self.messages = dump(history)
        self.results, self.answers = [], answers

    def next_step(self, history: list[pm.ModelMessage]) -> None:
        """The step ended: the next one starts from ``history``."""
        self.messages, self.step, self.results, self.answers = dump(history), self.step + 1, None, None

    def to_json(self) -> dict[str, Any]:
        """The checkpointed state."""
        state: dict[str, Any] = {
            "messages": self.messages,
            "step": self.step,
            "usage": {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens},
        }
        if self.results is not None:
            recorded = dump([pm.ModelRequest(parts=list(self.results))])
            state["tools"] = {"results": recorded, "answers": self.answers.to_json() if self.answers else None}
        if self.deferred:
            state["deferred"] = self.deferred
        return state


@dataclass
class RecordedResults(AbstractCapability[Any]):
    """Returns the recorded result of a tool call instead of running the tool again.

    Outermost, so none of the agent's own tool hooks run again either: what they made of the
    result the first time is what was recorded.
    """

    recorded: dict[str, pm.ToolReturnPart] = field(default_factory=dict)

    def get_ordering(self) -> CapabilityOrdering:
        """The outermost layer around tool execution."""
        return CapabilityOrdering(position="outermost")

    async def wrap_tool_execute(
        self, ctx: Any, *, call: pm.ToolCallPart, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        """The recorded outcome of ``call``, or the tool's (when nothing was recorded)."""
        part = self.recorded.get(call.tool_call_id)
        if part is None:
            return await handler(args)
        if part.outcome == "failed":
            raise ToolFailed(part.model_response_str(wrap_if_error=False))
        if part.outcome == "retried":
            raise ModelRetry(part.model_response_str(wrap_if_error=False))
        if part.metadata is not None:
            return pm.ToolReturn(return_value=part.content, metadata=part.metadata)
        return part.content


def dump(messages: list[pm.ModelMessage]) -> list[Any]:
    """Messages in Pydantic AI's JSON form."""
    return list(pm.ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def load(data: Any) -> list[pm.ModelMessage]:
    """Messages from Pydantic AI's JSON form."""
    return pm.ModelMessagesTypeAdapter.validate_python(data)
