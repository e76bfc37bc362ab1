"""What one slice did, read from the runner's event stream: spans and counters, for any harness.

The runner hands every event of a harness turn to a :class:`SliceRecorder` (stream parts, UI
chunks and checkpoints; :mod:`durable_harness.harness.interface`). From those alone it rebuilds:

* the **slice** span (the root), from the start of the slice to its end;
* a **step** span per step: from the end of the previous step (or the start of the slice) to its
  ``finish-step``, so that it includes the wait for the model's first part;
* a **model call** span per step: from the same start to the model's last part (text, reasoning,
  tool input or tool call); a ``reset-step`` sent by the harness (a retried model call) ends the
  attempt with ``error.type = retried`` and the next part starts a new one. The usage of the
  step's ``finish-step`` is the model call's;
* a **tool call** span per call: from its ``tool-call`` part (for a tool the host runs, not before
  the model call ended) to its result, error or denial. A call answered in this slice but made
  in an earlier one (a continuation after approval) starts with its step. A call still waiting
  for approval, or unfinished, ends with its step or with the slice;
* a **wait** span per wait a parked run resumes from (decision D16): from when the run parked to
  the start of the slice that resumed it, named after the event (``wait build-done``) or the sleep.

It also counts, per model, the input and output tokens, steps, tool calls and tool errors (a
failed execution, an error result or an invalid input). Nothing of a message's content is kept:
the spans carry ids, names, counts and reasons only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..harness.interface import Checkpoint, HarnessEvent, Wait
from ..protocol import harness_parts as hp
from ..protocol import ui_chunks as uc

if TYPE_CHECKING:
    from .view import RunView

logger = logging.getLogger(__name__)

AttributeValue: TypeAlias = str | int | float | bool | list[str]
"""A span attribute's value (OpenTelemetry's primitive types, and a list of strings)."""

SpanKind: TypeAlias = Literal["slice", "step", "model", "tool", "wait"]
"""What a span stands for."""

# Parts that come from the model itself: each one moves the end of the step's model call.
_MODEL_PARTS = (
    hp.StreamStartPart, hp.TextStartPart, hp.TextDeltaPart, hp.TextEndPart, hp.ReasoningStartPart,
    hp.ReasoningDeltaPart, hp.ReasoningEndPart, hp.ToolInputStartPart, hp.ToolInputDeltaPart,
    hp.ToolInputEndPart, hp.ToolCallPart,
)  # fmt: skip
# UI chunks that are no step content (as for the translator, they never open a step).
_BOUNDARY_CHUNKS = frozenset({"start", "start-step", "finish-step", "finish", "abort", "error", "message-metadata"})
_PROVIDERS = {"bedrock": "aws.bedrock", "openai": "openai", "anthropic": "anthropic"}


@dataclass
class SpanRecord:
    """One span: what it stands for, its name, its times (epoch nanoseconds) and attributes."""

    kind: SpanKind
    name: str
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    children: list[SpanRecord] = field(default_factory=list)
    error: str | None = None
    """``error.type`` when the operation failed (a low-cardinality name, never a message)."""

    def walk(self) -> Iterator[SpanRecord]:
        """This span and every span under it, parents first."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class ModelCounters:
    """What the steps of one model did in a slice."""

    input_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0


@dataclass
class SliceRecord:
    """A finished slice: its span tree and its counters, handed to every exporter."""

    run_id: str
    agent: str
    model: str
    """The slice's model, as a metric dimension: the harness's model spec, else the model the
    first ``stream-start`` named, else ``unknown``."""
    span: SpanRecord
    counters: dict[str, ModelCounters]
    """By model (the step's, named like :attr:`model`)."""
    duration_ms: float
    approvals_waiting: int
    """Approval requests the run waits for, when the slice ended with the run paused (else 0)."""
    status: str
    runs_waiting: int = 0
    """1 when the slice parked the run (``awaiting_event``: it now waits for an event or a time)."""


@dataclass(frozen=True)
class AgentInfo:
    """What telemetry says about the harness: its name, and its model when it has a fixed one."""

    name: str
    model: str | None = None
    """The model spec (``"bedrock:<id>"``, ``"openai:<model>"``, ``"demo"``, ...), if known."""

    @property
    def provider(self) -> str:
        """``gen_ai.provider.name``: the spec's provider in the semantic conventions' words."""
        if self.model is None:
            return "_OTHER"
        prefix, sep, _ = self.model.partition(":")
        return _PROVIDERS.get(prefix, prefix) if sep else self.model

    @property
    def request_model(self) -> str | None:
        """``gen_ai.request.model``: the model spec without its provider."""
        return None if self.model is None else self.model.partition(":")[2] or self.model

    def attributes(self, operation: str) -> dict[str, AttributeValue]:
        """The ``gen_ai`` attributes of an ``operation`` of this harness: its provider and model."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": self.provider,
        }
        if self.request_model:
            attributes["gen_ai.request.model"] = self.request_model
        return attributes


class SliceRecorder:
    """Turns one slice's events into a :class:`SliceRecord` (see the module docstring).

    Never raises from :meth:`event`: telemetry must not fail a run. ``clock`` gives epoch
    nanoseconds (tests pass a fake one).
    """

    def __init__(self, state: RunView, agent: AgentInfo, *, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._agent = agent
        self._run_id = state.run_id
        self._slice = state.slices
        now = clock()
        self._started = now
        attributes = agent.attributes("invoke_agent") | {
            "gen_ai.agent.name": agent.name,
            "gen_ai.conversation.id": state.session_id,
            "durable_harness.run.id": state.run_id,
            "durable_harness.run.origin": state.origin,
            "durable_harness.slice.number": state.slices,
        }
        if state.continuation is not None:  # a run that answers a paused run's approvals
            attributes["durable_harness.run.continues"] = state.continuation.paused_run_id
        self.root = SpanRecord("slice", f"invoke_agent {agent.name}", now, attributes=attributes)
        for wait in state.waits if state.status == "awaiting_event" else []:  # the waits this slice ends
            start = min(now, int(wait.since * 1e9))
            waited: dict[str, AttributeValue] = {
                "durable_harness.wait.name": wait.name,
                "durable_harness.wait.kind": wait.kind,
                "gen_ai.tool.call.id": wait.tool_call_id,
                "durable_harness.wait.duration_ms": (now - start) / 1e6,
            }
            self.root.children.append(SpanRecord("wait", f"wait {wait.name}", start, now, attributes=waited))
        self._boundary = now  # when the next step began waiting for the model
        self._step: SpanRecord | None = None
        self._model: SpanRecord | None = None
        self._model_last = 0  # when the current model call's last part arrived
        self._model_ended = 0  # when the step's last finished model call ended
        self._tools: dict[str, SpanRecord] = {}  # open tool spans of the current step, by call id
        self._names: dict[str, str] = {}  # tool names by call id (for error chunks, which carry none)
        self._provider_calls: set[str] = set()
        self._response_model: str | None = None
        self._steps = 0
        self._broken = False
        self.counters: dict[str, ModelCounters] = {}

    # --- events ----------------------------------------------------------------------------------

    def event(self, event: HarnessEvent) -> None:
        """Take in one event of the turn (cheap; never raises)."""
        if self._broken:
            return
        try:
            self._event(event, self._clock())
        except Exception:  # a telemetry bug must never fail the run: stop recording this slice
            self._broken = True
            logger.exception("telemetry: could not record an event; this slice's spans are incomplete")

    def _event(self, event: HarnessEvent, now: int) -> None:
        if isinstance(event, Wait):  # the run parks: the slice ends next (its waits' spans start then)
            self.root.attributes["durable_harness.waits.started"] = len(event.waits)
            return
        if isinstance(event, Checkpoint):
            if self._step is None:
                self._boundary = now  # the step's checkpoint is written: the next step starts now
            return
        if isinstance(event, hp.FinishStepPart):
            self._finish_step(event, now)
            return
        if isinstance(event, hp.FinishPart):
            usage = event.total_usage
            self.root.attributes["durable_harness.turn.finish_reason"] = event.finish_reason.unified
            self.root.attributes["durable_harness.turn.input_tokens"] = _tokens(usage.input_tokens.total)
            self.root.attributes["durable_harness.turn.output_tokens"] = _tokens(usage.output_tokens.total)
            return
        if isinstance(event, hp.ErrorPart):
            if self._model is not None:
                self._model.error = "model_error"
            return
        if event.type in _BOUNDARY_CHUNKS:
            return
        step = self._open_step(now)
        if isinstance(event, uc.ResetStepChunk):  # the harness retries the model call
            if self._model is not None:
                self._model.error = "retried"
                self._end_model(now)
        elif isinstance(event, _MODEL_PARTS):
            self._model_part(step, event, now)
        elif isinstance(event, uc.ToolInputErrorChunk):  # an invalid call, reported while the model streams
            self._model_part(step, None, now)
            span = self._start_tool(step, event.tool_call_id, event.tool_name, now, provider=False)
            self._end_tool(span, now, "invalid_input")
        elif isinstance(event, hp.ToolResultPart):
            if event.tool_call_id in self._provider_calls:
                self._model_last = now
            if not event.preliminary:
                span = self._tool_for(step, event.tool_call_id, event.tool_name)
                self._end_tool(span, now, "tool_error" if event.is_error else None)
        elif isinstance(event, uc.ToolOutputErrorChunk):
            self._end_tool(self._tool_for(step, event.tool_call_id, None), now, "tool_error")
        elif isinstance(event, uc.ToolOutputDeniedChunk):
            span = self._tool_for(step, event.tool_call_id, None)
            span.attributes["durable_harness.tool.outcome"] = "denied"
            self._end_tool(span, now, None)
        elif isinstance(event, hp.ToolApprovalRequestPart):
            if event.tool_call_id in self._provider_calls:
                self._model_last = now
            span = self._tool_for(step, event.tool_call_id, None)
            span.attributes["durable_harness.tool.outcome"] = "approval_requested"

    # --- steps, model calls, tool calls ----------------------------------------------------------

    def _open_step(self, now: int) -> SpanRecord:
        if self._step is None:
            number = self._steps + 1
            self._step = SpanRecord(
                "step",
                "step",
                self._boundary,
                attributes={
                    "durable_harness.run.id": self._run_id,
                    "durable_harness.step.id": f"{self._run_id}/{self._slice}.{number}",
                    "durable_harness.step.number": number,
                },
            )
            self.root.children.append(self._step)
            self._model_last = self._model_ended = 0
        return self._step

    def _model_part(self, step: SpanRecord, part: hp.HarnessStreamPart | None, now: int) -> None:
        if self._model is None:
            # The first model call of a step waits from the step's start; a retry from the failure.
            start = self._model_ended or step.start_ns
            name = f"chat {self._agent.request_model or 'model'}"
            self._model = SpanRecord("model", name, start, attributes=self._agent.attributes("chat"))
            step.children.append(self._model)
        self._model_last = now
        if isinstance(part, hp.StreamStartPart) and part.model_id:
            self._model.attributes["gen_ai.response.model"] = part.model_id
            self._response_model = self._response_model or part.model_id
        elif isinstance(part, hp.ToolCallPart):  # its span stays open until its result
            self._start_tool(step, part.tool_call_id, part.tool_name, now, provider=bool(part.provider_executed))
            if part.provider_executed:
                self._provider_calls.add(part.tool_call_id)

    def _end_model(self, now: int) -> None:
        if self._model is not None:
            self._model.end_ns = max(self._model.start_ns, self._model_last or now)
            self._model_ended = self._model.end_ns
            self._model = None

    def _start_tool(self, step: SpanRecord, call_id: str, name: str, now: int, *, provider: bool) -> SpanRecord:
        span = SpanRecord(
            "tool",
            f"execute_tool {name}",
            now,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "extension" if provider else "function",
                "durable_harness.run.id": self._run_id,
            },
        )
        step.children.append(span)
        self._tools[call_id] = span
        self._names[call_id] = name
        self._counters().tool_calls += 1
        return span

    def _tool_for(self, step: SpanRecord, call_id: str, name: str | None) -> SpanRecord:
        """The open span of a call; a call made in an earlier slice starts with this step."""
        span = self._tools.get(call_id)
        if span is None:
            name = name or self._names.get(call_id, "unknown")
            span = self._start_tool(step, call_id, name, step.start_ns, provider=False)
        return span

    def _end_tool(self, span: SpanRecord, now: int, error: str | None) -> None:
        call_id = str(span.attributes["gen_ai.tool.call.id"])
        if self._tools.get(call_id) is not span:
            return  # ended already
        del self._tools[call_id]
        if span.attributes["gen_ai.tool.type"] == "function" and self._model_last:
            # A tool the host runs starts after the model call that asked for it has ended.
            span.start_ns = max(span.start_ns, min(self._model_last, now))
        span.end_ns = max(span.start_ns, now)
        if error is not None:
            span.error = error
            self._counters().tool_errors += 1
        span.attributes.setdefault("durable_harness.tool.outcome", "error" if error else "done")

    def _finish_step(self, part: hp.FinishStepPart, now: int) -> None:
        step = self._open_step(now)
        input_tokens, output_tokens = _tokens(part.usage.input_tokens.total), _tokens(part.usage.output_tokens.total)
        reason = part.finish_reason.unified
        model = self._model or next((s for s in reversed(step.children) if s.kind == "model"), None)
        if model is not None:
            model.attributes["gen_ai.usage.input_tokens"] = input_tokens
            model.attributes["gen_ai.usage.output_tokens"] = output_tokens
            model.attributes["gen_ai.response.finish_reasons"] = [reason]
        self._end_model(now)
        self._close_tools(now, "step_ended")
        step.attributes |= {
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "durable_harness.step.finish_reason": reason,
        }
        step.end_ns = now
        counters = self._counters()
        counters.steps += 1
        counters.input_tokens += input_tokens
        counters.output_tokens += output_tokens
        self._steps += 1
        self._step = None
        self._boundary = now

    def _close_tools(self, now: int, outcome: str) -> None:
        for span in list(self._tools.values()):
            span.attributes.setdefault("durable_harness.tool.outcome", outcome)
            self._end_tool(span, now, None)

    def _counters(self) -> ModelCounters:
        return self.counters.setdefault(self.model, ModelCounters())

    @property
    def model(self) -> str:
        """The slice's model as a metric dimension (see :attr:`SliceRecord.model`)."""
        return self._agent.model or self._response_model or "unknown"

    # --- the end ---------------------------------------------------------------------------------

    def finish(self, state: RunView, error: BaseException | None) -> SliceRecord:
        """Close every open span and return the slice's record (``error``: what ended it, if it raised)."""
        now = self._clock()
        failure = type(error).__name__ if error is not None else "run_failed" if state.status == "failed" else None
        if self._model is not None and failure is not None:
            self._model.error = self._model.error or failure
        self._end_model(now)
        self._close_tools(now, "unfinished")
        if self._step is not None:
            self._step.end_ns = now
            self._step.error = failure
            self._step = None
        waiting = len(state.pending_approvals) if state.status == "awaiting_tool_approval" else 0
        self.root.attributes |= {
            "durable_harness.run.status": state.status,
            "durable_harness.slice.steps": self._steps,
            "durable_harness.approvals.waiting": waiting,
            "gen_ai.usage.input_tokens": sum(c.input_tokens for c in self.counters.values()),
            "gen_ai.usage.output_tokens": sum(c.output_tokens for c in self.counters.values()),
        }
        self.root.error = failure
        self.root.end_ns = now
        return SliceRecord(
            run_id=self._run_id,
            agent=self._agent.name,
            model=self.model,
            span=self.root,
            counters=self.counters,
            duration_ms=(now - self._started) / 1e6,
            approvals_waiting=waiting,
            status=state.status,
            runs_waiting=int(state.status == "awaiting_event"),
        )


def _tokens(value: float | None) -> int:
    return int(value or 0)
