"""The built-in tool-loop agent (WorkflowAgent parity): call the model, run tools, repeat.

It is a harness like any other (:mod:`durable_harness.harness.interface`). Each step is split at
checkpoints: after the model call (deferrable: written only if the tools take longer than the
runner's grace period, so a crash while a slow tool runs never repeats the model call), after each
tool result while other tools of the step still run (a finished tool never runs again), and at the
end of the step (a slice point, which also carries the step's last results; for the turn's last
step, deferrable too: the turn's final checkpoint carries it). A step whose tools are quick is one
checkpoint write.
Approvals pause the turn; the continuation's messages (or, through the run API, the paused turn's
own checkpoint plus the answers) continue it, executing only the answers the runner verified.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from ..approvals import ApprovalSecret, approval_id_for
from ..errors import AgentConfigError, ModelError, OutputError, RunTimeoutError, ToolError
from ..harness import interface as hi
from ..harness.answers import match_approvals
from ..ids import new_id
from ..messages import (
    AssistantMessage,
    ModelMessage,
    SystemMessage,
    TextPart,
    ToolApprovalRequestContent,
    ToolMessage,
    UserMessage,
)
from ..models.base import LanguageModel, ModelRequest
from ..output import Output, as_output
from ..protocol import harness_parts as hp
from ..tools.definition import Tool, accepts_positional
from ..waits import RunEvents
from .calls import (
    dump_state,
    is_empty_part,
    json_ready,
    maybe_await,
    ordered_outcomes,
    replay_events,
    request_messages,
    resolve_model_spec,
    usage_of,
    validate_call,
    validate_tools_context,
)
from .continuation import continuation_messages
from .control import Callback, PrepareHook, RepairToolCall, StopCondition, Timeouts, TokenUsage, step_count_is
from .execution import Parked, Recorded, ToolRunner, answered_approvals, refuse_provider_approvals, result_part
from .modelcall import StepResult, stream_model_step
from .options import Preparation
from .results import TurnResult, collect_result, empty_result, finish_reason_of, turn_result
from .state import LoopTurnState, StepCall, StepSummary

logger = logging.getLogger(__name__)

DEFAULT_MAX_STEPS = 20
"""Steps a turn may take unless ``stop_when`` says otherwise, so a looping model cannot burn money."""


class ToolLoopAgent:
    """An agent: instructions, a model, tools, and the options of the AI SDK's WorkflowAgent.

    ``model`` is a :class:`LanguageModel` or a spec string (``"demo"``, ``"bedrock:<id>"``,
    ``"openai:<model>"``, ``"anthropic:<model>"``). ``stop_when`` defaults to
    ``[step_count_is(20)]``; pass your own list to raise the cap, or ``[]`` to remove it.
    Callbacks may be sync or async; in a durable run a callback of a step that is redone after
    a crash runs again (at-least-once).
    """

    def __init__(
        self,
        *,
        model: LanguageModel | str,
        instructions: str | None = None,
        tools: Sequence[Tool] = (),
        stop_when: Sequence[StopCondition] | None = None,
        max_total_tokens: int | None = None,
        output: Output | type[BaseModel] | None = None,
        call_options: type[BaseModel] | None = None,
        tool_choice: Any = "auto",
        active_tools: Sequence[str] | None = None,
        tool_call_concurrency: int | None = None,
        runtime_context: Any = None,
        tools_context: Mapping[str, Any] | None = None,
        settings: Mapping[str, Any] | None = None,
        allow_system_in_messages: bool = False,
        send_reasoning: bool = True,
        approval_secret: ApprovalSecret | None = None,
        max_retries: int = 2,
        retry_initial_delay: float = 2.0,
        timeout: Timeouts | None = None,
        repair_tool_call: RepairToolCall | None = None,
        prepare_call: PrepareHook | None = None,
        prepare_step: PrepareHook | None = None,
        on_start: Callback | None = None,
        on_step_start: Callback | None = None,
        on_tool_execution_start: Callback | None = None,
        on_tool_execution_end: Callback | None = None,
        on_step_end: Callback | None = None,
        on_end: Callback | None = None,
        on_error: Callback | None = None,
        on_abort: Callback | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.model = resolve_model_spec(model)
        self.instructions = instructions
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise AgentConfigError("two tools have the same name")
        unknown = set(active_tools or ()) - self.tools.keys()
        if unknown:
            raise AgentConfigError(f"active_tools names unknown tools: {sorted(unknown)}")
        if tool_call_concurrency is not None and tool_call_concurrency < 1:
            raise AgentConfigError("tool_call_concurrency must be at least 1 (or None for unlimited)")
        self.stop_when = list(stop_when) if stop_when is not None else [step_count_is(DEFAULT_MAX_STEPS)]
        self.max_total_tokens = max_total_tokens
        self.output = as_output(output)
        self.call_options = call_options
        self.tool_choice = tool_choice
        self.active_tools = list(active_tools) if active_tools is not None else None
        self.runtime_context = json_ready(runtime_context, "runtime_context")
        self.tools_context = validate_tools_context(self.tools, tools_context or {})
        self.settings = dict(settings or {})
        self.allow_system_in_messages = allow_system_in_messages
        self.send_reasoning = send_reasoning
        self.approval_secret = approval_secret if approval_secret is not None else ApprovalSecret()
        self.max_retries = max_retries
        self.retry_initial_delay = retry_initial_delay
        self.timeout = timeout or Timeouts()
        self.repair_tool_call = repair_tool_call
        self.prepare_call, self.prepare_step = prepare_call, prepare_step
        self.preparation = Preparation(
            instructions=instructions, tool_choice=tool_choice, active_tools=self.active_tools,
            settings=self.settings, call_options_model=call_options, prepare_call=prepare_call,
            prepare_step=prepare_step,
        )  # fmt: skip
        self.callbacks = {
            "start": on_start, "step_start": on_step_start, "tool_start": on_tool_execution_start,
            "tool_end": on_tool_execution_end, "step_end": on_step_end, "end": on_end,
            "error": on_error, "abort": on_abort,
        }  # fmt: skip
        self.sleep = sleep
        self.runner = ToolRunner(
            self.tools,
            concurrency=tool_call_concurrency,
            tools_context=self.tools_context,
            on_start=lambda call: self._callback("tool_start", call),
            on_end=lambda call, outcome: self._callback("tool_end", call, outcome),
        )

    # --- the harness interface ---------------------------------------------------------------------

    @property
    def options(self) -> hi.HarnessOptions:
        """The agent's tools, reasoning and system-message settings, and its approval secret."""
        return hi.HarnessOptions(
            tool_names=self.tools.keys(),
            send_reasoning=self.send_reasoning,
            allow_system_in_messages=self.allow_system_in_messages,
            approval_secret=self.approval_secret,
            has_output=self.output is not None,
        )

    def create_session(self, session_id: str | None = None) -> str:
        """Sessions are stateless here: the conversation travels in the turn's messages."""
        return session_id or new_id("sess")

    def sign_approval(self, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any) -> str | None:
        """Sign an approval request (None when no secret is configured)."""
        return self.approval_secret.sign(approval_id, tool_call_id, tool_name, tool_input)

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """``raw`` validated by the agent's ``call_options`` model (None without one: ignored)."""
        return hi.validate_call_options(self.call_options, raw)

    def open(self, request: hi.TurnRequest) -> hi.HarnessTurn:
        """Open the turn for one slice: a new turn, the next slice of one, or a continuation."""
        if isinstance(request, hi.StartTurn):
            turn = self._start(request.messages, request.call_options, frozenset(), request.events)
            return hi.GeneratorTurn(turn)
        continuation = request.continuation
        if continuation is None:
            state = LoopTurnState.model_validate(request.state)
            state._events = request.events
            return hi.GeneratorTurn(self._guard(state, replay=request.replay_step, fresh=False))
        paused = LoopTurnState.model_validate(request.state)
        if continuation.messages is not None:  # the chat client's history, with its answers
            messages = list(continuation.messages)
        else:  # the run API: the paused turn's own messages plus the answers
            messages = continuation_messages(request.state, continuation.approvals)
        verified = frozenset(a.approval_id for a in continuation.approvals)
        options = request.call_options if request.call_options is not None else paused.call_options
        return hi.GeneratorTurn(self._start(messages, options, verified, request.events))

    def _start(
        self,
        messages: list[ModelMessage],
        call_options: dict[str, Any] | None,
        verified: frozenset[str],
        events: RunEvents | None = None,
    ) -> AsyncGenerator[hi.HarnessEvent, None]:
        """A turn on the conversation ``messages`` with the run's validated ``call_options``;
        ``verified``: the approval ids whose answers (in the last tool message) may execute;
        ``events``: the run's external events (None: its tools cannot wait)."""
        if not self.allow_system_in_messages and any(isinstance(m, SystemMessage) for m in messages):
            raise AgentConfigError("system messages are not allowed in the messages (use instructions)")
        state = LoopTurnState(messages=list(messages), call_options=call_options, runtime_context=self.runtime_context)
        state._events = events
        return self._guard(state, replay=False, fresh=True, verified=verified)

    async def on_cancel(self, notice: hi.CancelNotice) -> None:
        """A cancel through the API ended the run: ``on_abort`` with the steps that finished."""
        turn = notice.state
        await self._callback("abort", LoopTurnState.model_validate(turn).steps if turn else [])

    def run_result(self, turn: Any) -> dict[str, Any]:
        """The JSON result of a turn (see :class:`~durable_harness.agent.results.TurnResult`)."""
        if turn is None:
            return empty_result().to_dict()
        return turn_result(LoopTurnState.model_validate(turn), signer=self.sign_approval).to_dict()

    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[ModelMessage] = (),
        call_options: BaseModel | Mapping[str, Any] | None = None,
    ) -> TurnResult:
        """Run a turn in memory, without streaming, and return its result (the AI SDK's ``generate``).

        ``prompt`` is appended to ``messages`` as a user message. A turn that pauses for approval
        returns with ``pending_approvals`` and signed requests in ``response_messages``: append those,
        then a tool message with ``ToolApprovalResponsePart`` answers, and call again. A failed model
        call or an answer that does not parse as the output raises. Nothing is checkpointed (use the
        HTTP API for durable runs); cancelling the task calls ``on_abort``.
        """
        conversation = [m.model_copy(deep=True) for m in messages]  # the turn adds to its last message
        if prompt is not None:
            conversation.append(UserMessage(content=[TextPart(text=prompt)]))
        if not conversation:
            raise AgentConfigError("generate() needs a prompt or messages")
        raw = call_options.model_dump(mode="json") if isinstance(call_options, BaseModel) else call_options
        options = self.parse_call_options(raw) if raw is not None else None
        events = self._start(conversation, options, self._signed_answers(conversation))
        return await collect_result(
            events, on_abort=lambda steps: self._callback("abort", steps), signer=self.sign_approval
        )

    def _signed_answers(self, messages: list[ModelMessage]) -> frozenset[str]:
        """In memory (``generate``), with no runner: the answers whose signature this agent verifies."""
        return frozenset(
            a.request.approval_id
            for a in match_approvals(messages)
            if self.approval_secret.verify(
                a.request.signature, a.request.approval_id, a.call.tool_call_id, a.call.tool_name, a.call.input
            )
        )

    # --- the loop ----------------------------------------------------------------------------------

    async def _guard(
        self, state: LoopTurnState, *, replay: bool, fresh: bool, verified: frozenset[str] = frozenset()
    ) -> AsyncGenerator[hi.HarnessEvent, None]:
        # A cancelled task is not an abort here: the durable runner resumes the run later, or ends
        # it through on_cancelled (a cancel through the API). The total time limit is an abort.
        try:
            async for event in self._run(state, replay=replay, fresh=fresh, verified=verified):
                yield event
        except RunTimeoutError:
            await self._callback("abort", state.steps)
            raise
        except (ModelError, OutputError) as exc:
            await self._callback("error", exc)
            raise

    async def _run(
        self, state: LoopTurnState, *, replay: bool, fresh: bool, verified: frozenset[str]
    ) -> AsyncIterator[hi.HarnessEvent]:
        if fresh:
            await self.preparation.call(state)
            last = state.messages[-1] if state.messages else None
            state.response_start = len(state.messages)
            state.input_tool_parts = len(last.content) if isinstance(last, ToolMessage) else None
            await self._callback("start", state.messages)
            actions = answered_approvals(state.messages, verified, self.tools)
            refuse_provider_approvals(state.messages, actions.refused)
            if actions.runnable or actions.denied:  # (the runner shows the denials to the client)
                state.phase, state.approval_step, state.step_calls = "tools", True, actions.runnable
                # Deferrable: lost, the turn starts over from the same answers.
                yield hi.Checkpoint(dump_state(state), deferrable=True)
        elif state.phase == "tools" and replay:
            for event in replay_events(state):
                yield event
        while True:
            if state.phase == "tools":
                async for event in self._tools_phase(state):
                    yield event
                    if isinstance(event, hi.Wait):
                        return  # parked: the turn resumes from the last checkpoint
            ends = state.take_turn_ends()
            if ends if ends is not None else self._turn_ends(state):
                break
            async for event in self._model_phase(state):
                yield event
        async for event in self._end(state):
            yield event

    def _turn_ends(self, state: LoopTurnState) -> bool:
        return state.paused or bool(state.client_calls) or self._should_stop(state)

    def _should_stop(self, state: LoopTurnState) -> bool:
        if not state.steps:
            return False
        if not isinstance(state.messages[-1], ToolMessage):
            return True
        if self.max_total_tokens is not None and sum(state.total_usage) >= self.max_total_tokens:
            state.stop_reason = "token_budget"
            return True
        if any(condition(state.steps) for condition in self.stop_when):
            state.stop_reason = "stop_condition"
            return True
        return False

    async def _model_phase(self, state: LoopTurnState) -> AsyncIterator[hi.HarnessEvent]:
        total = self.timeout.total
        deadline = None if total is None else state.started_at + total
        if deadline is not None and time.time() >= deadline:
            raise RunTimeoutError(f"The run exceeded its total time limit of {total:g} s.")
        options = await self.preparation.step(state)
        model = resolve_model_spec(options.model) if options.model else self.model
        active = options.active_tools
        request = ModelRequest(
            instructions=options.instructions,
            messages=[],  # set below, not validated again when they are message models already
            tools=[t.definition() for t in self.tools.values() if active is None or t.name in active],
            tool_choice=options.tool_choice,
            response_format=self.output.response_format() if self.output else None,
            settings=options.settings,
        )
        request.messages = request_messages(options.messages)
        await self._callback("step_start", state.step, options)
        result = StepResult()
        validate = lambda part: validate_call(part, self.tools, self.repair_tool_call)  # noqa: E731
        async for item in stream_model_step(
            model, request, result, validate=validate, max_retries=self.max_retries, timeouts=self.timeout,
            retry_initial_delay=self.retry_initial_delay, sleep=self.sleep, deadline=deadline,
        ):  # fmt: skip
            yield item
        state.messages.append(AssistantMessage(content=[c for c in result.content if not is_empty_part(c)]))
        state.step_finish_reason = result.finish_reason
        state.step_usage = result.usage
        state.total_usage = (state.total_usage[0] + result.usage[0], state.total_usage[1] + result.usage[1])
        state.steps.append(
            StepSummary(
                number=state.step, finish_reason=result.finish_reason, text=result.text,
                tool_calls=[c.tool_name for c in result.calls],
                input_tokens=result.usage[0], output_tokens=result.usage[1],
            )
        )  # fmt: skip
        state.step_calls, state.step_outcomes, state.reported = result.calls, [], 0
        state.provider_approvals = list(result.provider_approvals)
        if result.calls:
            state.phase, state.approval_step = "tools", False
            # Deferrable: if the tools are quick, the step's next checkpoint supersedes this one.
            yield hi.Checkpoint(dump_state(state), deferrable=True)
        else:
            async for event in self._end_step(state):
                yield event

    async def _tools_phase(self, state: LoopTurnState) -> AsyncIterator[hi.HarnessEvent]:
        runnable: list[StepCall] = []
        if not state.approval_step:
            for event in await self._sort_calls(state, runnable):
                yield event
        else:
            runnable = list(state.step_calls)
        async for item in self.runner.run_step(state, runnable):
            if isinstance(item, Recorded):
                # With no other tool running, the step's end follows with no side effect in between
                # and its checkpoint carries these results: no checkpoint (nor its fence read) here.
                # (Parked calls count as running: their waits are in this checkpoint.)
                if item.others_running:
                    yield hi.Checkpoint(dump_state(state))
            elif isinstance(item, Parked):
                yield hi.Wait(item.waits)  # after the Recorded checkpoint that holds the waits
                return
            else:
                yield item
        waiting = set(state.pending_approvals) | set(state.client_calls)
        results = [result_part(o) for o in ordered_outcomes(state) if o.tool_call_id not in waiting]
        if state.approval_step:
            last = state.messages[-1]
            assert isinstance(last, ToolMessage)
            last.content.extend(results)
        elif results:
            state.messages.append(ToolMessage(content=list(results)))
        async for event in self._end_step(state):
            yield event

    async def _sort_calls(self, state: LoopTurnState, runnable: list[StepCall]) -> list[hi.HarnessEvent]:
        """Split the step's calls: run now, wait for approval, or leave to the client."""
        if state.pending_approvals or state.client_calls or state.step_outcomes:
            # Sorted already before a checkpoint: recompute the same split without new events.
            waiting = set(state.pending_approvals) | set(state.client_calls)
            runnable.extend(c for c in state.step_calls if c.tool_call_id not in waiting)
            return []
        events: list[hi.HarnessEvent] = []
        assistant = state.messages[-1]
        for call in state.step_calls:
            tool = self.tools.get(call.tool_name)
            if call.invalid_error is None and tool is not None and tool.client_side:
                state.client_calls.append(call.tool_call_id)
            elif call.invalid_error is None and tool is not None and await self._needs_approval(tool, call, state):
                state.pending_approvals.append(call.tool_call_id)
                approval_id = approval_id_for(call.tool_call_id)
                events.append(hp.ToolApprovalRequestPart(approval_id=approval_id, tool_call_id=call.tool_call_id))
                if isinstance(assistant, AssistantMessage):
                    assistant.content.append(
                        ToolApprovalRequestContent(approval_id=approval_id, tool_call_id=call.tool_call_id)
                    )
            else:
                runnable.append(call)
        return events

    async def _needs_approval(self, tool: Tool, call: StepCall, state: LoopTurnState) -> bool:
        try:
            validated = tool.validate(call.input)
        except ToolError:
            return False  # invalid input never runs; it is reported as an error instead
        return await tool.approval_needed(validated, self.runner.context(call, state))

    async def _end_step(self, state: LoopTurnState) -> AsyncIterator[hi.HarnessEvent]:
        if not state.approval_step:
            state.step += 1
        state.phase, state.approval_step = "model", False
        if not (state.pending_approvals or state.client_calls):
            state.step_calls, state.step_outcomes, state.reported = [], [], 0
        state.journals = {}
        yield hp.FinishStepPart(
            finish_reason=hp.FinishReason(unified=state.step_finish_reason),  # type: ignore[arg-type]
            usage=usage_of(state.step_usage),
        )
        if state.steps:
            await self._callback("step_end", state.steps[-1])
        ends = self._turn_ends(state)
        state.decide_turn_ends(ends)
        # After finish-step: a slice point. When the turn ends next, deferrable instead: the turn's
        # last checkpoint carries it (one write fewer, and no slice only to send `finish`).
        yield hi.Checkpoint(dump_state(state), deferrable=ends)

    async def _end(self, state: LoopTurnState) -> AsyncIterator[hi.HarnessEvent]:
        # End callbacks run before the output is checked (as in the seed): on_end gets the output
        # when it parses, None when it does not, and the run then fails with the parse error.
        # Seed 003: only a last step that called no tools holds the answer; a turn that ends on a
        # tool step (a stop condition, the token budget, a client tool, an approval) has no output.
        output, problem = None, None
        last = state.steps[-1] if state.steps else None
        if self.output is not None and not state.paused and not (last and last.tool_calls):
            try:
                output = self.output.parse(last.text if last else "")
            except OutputError as exc:
                problem = exc
        usage = TokenUsage(input_tokens=state.total_usage[0], output_tokens=state.total_usage[1])
        await self._callback("end", state.steps, output, usage)
        if problem is not None:
            raise problem
        reason, raw = finish_reason_of(state)
        yield hp.FinishPart(
            finish_reason=hp.FinishReason(unified=reason, raw=raw),  # type: ignore[arg-type]
            total_usage=usage_of(state.total_usage),
        )
        yield hi.Checkpoint(dump_state(state), output)

    async def _callback(self, name: str, *args: Any) -> None:
        callback = self.callbacks.get(name)
        if callback is None:
            return
        if name == "end" and not accepts_positional(callback, 3):
            args = args[:2]  # on_end(steps, output) from before the total usage was passed
        await maybe_await(callback(*args))
