"""``PydanticAIHarness``: drives a Pydantic AI ``Agent`` through ``agent.iter`` one slice at a time.

Deferred tool calls (a tool raises ``CallDeferred``) park the run on events (:mod:`.deferred`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai import messages as pm
from pydantic_ai.agent import AgentRun, CallToolsNode, ModelRequestNode
from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel
from pydantic_graph import End

from ...approvals import ApprovalSecret
from ...errors import AgentConfigError, ProtocolError
from ...ids import new_id
from ...protocol import harness_parts as hp
from ...protocol.ui_chunks import FinishReasonName
from ..interface import (
    CancelNotice,
    Checkpoint,
    ContinueTurn,
    GeneratorTurn,
    HarnessEvent,
    HarnessOptions,
    StartTurn,
    TurnRequest,
    Wait,
)
from .deferred import deferred_waits, settle, specs
from .history import conversation
from .parts import IsOutputTool, ResponseParts, jsonable, response_events, result_part, tokens, usage_of
from .steps import Answers, RecordedResults, TurnState

OUTPUT_TOOL_PREFIX = "final_result"
"""Pydantic AI's default output tool names, for when its tool manager cannot say."""


class PydanticAIHarness:
    """A Pydantic AI ``Agent`` as a durable harness (``AGENT=module:attr`` names it like any agent)."""

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        send_reasoning: bool = True,
        approval_secret: ApprovalSecret | None = None,
    ) -> None:
        self.agent = agent
        self._options = HarnessOptions(
            tool_names=None,  # the agent's tools run inside it: every call is provider-executed
            send_reasoning=send_reasoning,
            approval_secret=approval_secret,
            has_output=agent.output_type is not str,
        )

    @property
    def options(self) -> HarnessOptions:
        """Reasoning and approval settings; structured output when the agent has an output type."""
        return self._options

    def create_session(self, session_id: str | None = None) -> str:
        """Sessions are stateless: the message history travels in the checkpoint."""
        return session_id or new_id("sess")

    def open(self, request: TurnRequest) -> GeneratorTurn:
        """Run the agent for one slice."""
        return GeneratorTurn(self._turn(request))

    async def on_cancel(self, notice: CancelNotice) -> None:
        """Nothing to release."""

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: a Pydantic AI agent takes its settings in the agent file, so call options are ignored."""
        return None

    def run_result(self, state: Any) -> dict[str, Any]:
        """The turn's last text and its messages in Pydantic AI's JSON form."""
        messages = TurnState.load(state).messages
        text = ""
        for message in pm.ModelMessagesTypeAdapter.validate_python(messages):
            if isinstance(message, pm.ModelResponse):
                text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart)) or text
        return {"text": text, "pydanticAiMessages": messages}

    def streams(self) -> bool:
        """Whether the agent's model streams its responses (else each arrives whole)."""
        model = self.agent.model
        if isinstance(model, FunctionModel):
            return model.stream_function is not None
        return not isinstance(model, Model) or type(model).request_stream is not Model.request_stream

    async def _turn(self, request: TurnRequest) -> AsyncGenerator[HarnessEvent, None]:
        prompt: Any = None
        if isinstance(request, StartTurn):
            history, prompt = conversation(request.messages)
            state = TurnState.start(history)
        else:
            assert isinstance(request, ContinueTurn)
            state = TurnState.load(request.state)
            if request.continuation is not None:  # a new run: the paused step's calls get their answers
                state.run_tools(None, Answers.of(request))
                state.input_tokens = state.output_tokens = 0
        answered: DeferredToolResults | None = None
        if state.deferred:  # parked on deferred calls: their events (or timeouts) are their results
            if request.events is None:
                raise AgentConfigError("A deferred tool call needs a durable run (the HTTP API) to wait in.")
            results, waiting = await asyncio.to_thread(settle, state.deferred, request.events)
            if waiting:  # woken for another wait: park again on what has not come
                yield Checkpoint(state.to_json())
                yield Wait(tuple(waiting))
                return
            state.deferred = None
            state.run_tools(None)
            answered = DeferredToolResults(calls=results)
        answers = state.answers
        if answers is not None:
            answered = answers.results()
        recorded = {part.tool_call_id: part for part in state.results or []}
        replay = isinstance(request, ContinueTurn) and request.replay_step and state.results is not None
        run: AgentRun[Any, Any]
        async with self.agent.iter(
            prompt, message_history=state.history(), output_type=[self.agent.output_type, DeferredToolRequests],
            deferred_tool_results=answered, capabilities=[RecordedResults(recorded)],
        ) as run:  # fmt: skip
            steps = _Steps(run, state, recorded, streaming=self.streams(), can_wait=request.events is not None)
            node: Any
            async for node in run:
                if isinstance(node, ModelRequestNode):
                    events = steps.model_request(node)
                elif isinstance(node, CallToolsNode):
                    events, replay = steps.tool_calls(node, replay=replay), False
                elif isinstance(node, End):
                    events = steps.end(node.data.output, has_output=self._options.has_output)
                else:
                    continue
                async with aclosing(events):  # closed with the turn, should it stop or fail in the middle
                    async for event in events:
                        yield event


class _Steps:
    """One slice of a turn: the agent run's nodes as steps of harness parts and checkpoints."""

    def __init__(
        self, run: AgentRun[Any, Any], state: TurnState, recorded: dict[str, pm.ToolReturnPart], *, streaming: bool,
        can_wait: bool = False,
    ) -> None:  # fmt: skip
        self.run, self.state, self.recorded, self.streaming = run, state, recorded, streaming
        self.can_wait = can_wait  # a durable run: deferred calls park it
        self.hidden = set(state.answers.denied) if state.answers else set()  # the runner shows denials itself
        self.is_output_tool = _output_tools(run)
        self.step_open = False
        self.fresh = False  # the model answered in this slice: its response is being shown live
        self.response: pm.ModelResponse | None = None

    async def model_request(self, node: ModelRequestNode[Any, Any]) -> AsyncGenerator[HarnessEvent, None]:
        """A model request: the step before it ends (a slice point), the response streams."""
        state = self.state
        if self.step_open:
            yield self._finish_step("tool-calls")
            state.next_step([*self.run.all_messages(), node.request])
            yield Checkpoint(state.to_json())
        self.step_open = self.fresh = True
        if not self.streaming:
            return
        parts = ResponseParts(state.step, self.is_output_tool)
        async with node.stream(self.run.ctx) as stream:
            async for model_event in stream:
                for part in parts.on(model_event):
                    yield part
            for part in parts.close(stream.response):
                yield part

    async def tool_calls(self, node: CallToolsNode[Any, Any], *, replay: bool) -> AsyncGenerator[HarnessEvent, None]:
        """A model response's tool calls: a checkpoint once the response is complete and after every
        result, so that a redone step never runs a tool whose result was recorded."""
        state, response = self.state, node.model_response
        self.response, self.step_open = response, True
        if self.fresh:
            if not self.streaming:
                for event in response_events(response, state.step, self.is_output_tool):
                    yield event
            state.add_usage(response.usage)
            if any(not self.is_output_tool(call.tool_name) for call in response.tool_calls):
                state.run_tools(self.run.all_messages())  # the step's response is durable
                yield Checkpoint(state.to_json())
        elif replay:  # the client dropped the step (reset-step): show what it had shown again
            if state.answers is None:  # (a continuation's response was shown by the paused run)
                for event in response_events(response, state.step, self.is_output_tool):
                    yield event
            for result in self.recorded.values():
                yield result_part(result)
        self.fresh = False
        async with node.stream(self.run.ctx) as tool_events:
            async for tool_event in tool_events:
                if not isinstance(tool_event, pm.FunctionToolResultEvent):
                    continue
                result = tool_event.part
                if result.tool_call_id in self.recorded or result.tool_call_id in self.hidden:
                    continue
                self.recorded[result.tool_call_id] = result
                if state.results is not None:
                    state.results.append(result)
                yield result_part(result)
                yield Checkpoint(state.to_json())  # this tool never runs again

    async def end(self, output: Any, *, has_output: bool) -> AsyncGenerator[HarnessEvent, None]:
        """The turn's end: a pause for approvals, a park on deferred calls, or its answer."""
        state = self.state
        paused = isinstance(output, DeferredToolRequests)
        if paused and output.calls and output.approvals:  # (its continuation would fail in Pydantic AI)
            raise ProtocolError(
                "A step that defers a call (CallDeferred) and asks for an approval at once is not supported: "
                f"call {output.calls[0].tool_call_id} waits for an event, {output.approvals[0].tool_call_id} for "
                "the user; let them happen in different steps."
            )
        if paused and output.calls:  # the run waits for the calls' events
            if not self.can_wait:
                raise AgentConfigError("A deferred tool call needs a durable run (the HTTP API) to wait in.")
            waits = deferred_waits(output)
            if self.step_open:
                yield self._finish_step("tool-calls")
            state.next_step(self.run.all_messages())
            state.deferred = waits
            yield Checkpoint(state.to_json())  # the turn goes on from here once they are answered
            yield Wait(specs(waits))
            return
        if paused:
            for call in output.approvals:
                yield hp.ToolApprovalRequestPart(
                    approval_id=f"approval-{call.tool_call_id}", tool_call_id=call.tool_call_id
                )
        reason: FinishReasonName = "tool-calls" if paused else "stop"
        if self.step_open:
            yield self._finish_step(reason)
        state.next_step(self.run.all_messages())
        total = tokens(state.input_tokens, state.output_tokens)
        if paused:
            yield Checkpoint(state.to_json())  # the paused turn goes on from here
        yield hp.FinishPart(finish_reason=hp.FinishReason(unified=reason), total_usage=total)
        if not paused:
            yield Checkpoint(state.to_json(), _json_output(output) if has_output else None)

    def _finish_step(self, reason: FinishReasonName) -> hp.FinishStepPart:
        usage = usage_of(self.response.usage) if self.response is not None else tokens(0, 0)
        return hp.FinishStepPart(finish_reason=hp.FinishReason(unified=reason), usage=usage)


def _output_tools(run: AgentRun[Any, Any]) -> IsOutputTool:
    """Tells the agent's output tools (structured output) from its function tools."""

    def is_output_tool(name: str) -> bool:
        tool_def = run.ctx.deps.tool_manager.get_tool_def(name)
        if tool_def is None:
            return name.startswith(OUTPUT_TOOL_PREFIX)
        return bool(tool_def.kind == "output")

    return is_output_tool


def _json_output(output: Any) -> Any:
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json")
    return jsonable(output)
