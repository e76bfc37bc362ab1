"""PydanticAIHarness through the real runner, with Pydantic AI's deterministic models (no credentials).

``FunctionModel`` plays the model: :func:`script` decides each response, and :func:`streamed`
streams the same response token by token (the model's ``stream_function``), as a provider does.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is part of the dev install")

from durable_harness.approvals import sign_tool_approval
from durable_harness.harness import PydanticAIHarness, StartTurn
from durable_harness.messages import TextPart, UserMessage
from durable_harness.ports import StoredRun
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.assemble import UIMessageAssembler
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel

from tests.harness.support import SECRET, Turns, answered, parts_of
from tests.support import SimulatedCrash, log_chunks, user_message

ASK = "remove the old items"
THINKING = "The user wants old items gone; look them up first."
LOOKING = "Looking at the old items now."
Script = Callable[[list[pm.ModelMessage], AgentInfo], pm.ModelResponse]


def script(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    """For ``ASK``: two lookups in one step, a removal that needs approval, then the answer."""
    prompts = [p.content for m in messages for p in m.parts if isinstance(p, pm.UserPromptPart)]
    if prompts[-1] != ASK:
        return pm.ModelResponse(parts=[pm.TextPart("Nothing else to do.")])
    asked = max(i for i, m in enumerate(messages) if any(isinstance(p, pm.UserPromptPart) for p in m.parts))
    done = sum(1 for m in messages[asked:] if isinstance(m, pm.ModelResponse))
    if done == 0:
        return pm.ModelResponse(
            parts=[
                pm.ThinkingPart(THINKING),
                pm.TextPart(LOOKING),
                pm.ToolCallPart("lookup", {"name": "alpha"}, "c1"),
                pm.ToolCallPart("lookup", {"name": "beta"}, "c2"),
            ]
        )
    if done == 1:
        return pm.ModelResponse(parts=[pm.ToolCallPart("remove", {"name": "beta"}, "c3")])
    last = messages[-1].parts[-1]
    return pm.ModelResponse(parts=[pm.TextPart(f"Finished: {getattr(last, 'content', '')}")])


def streamed(script: Script) -> Callable[[list[pm.ModelMessage], AgentInfo], AsyncIterator[Any]]:
    """The script's responses streamed: text and thinking a word at a time, tool arguments 5
    characters at a time (FunctionModel's stream items)."""

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for i, part in enumerate(script(messages, info).parts):
            if isinstance(part, pm.TextPart):
                for word in re.findall(r"\S+\s*", part.content):
                    yield word
            elif isinstance(part, pm.ThinkingPart):
                for word in re.findall(r"\S+\s*", part.content):
                    yield {i: DeltaThinkingPart(content=word)}
            elif isinstance(part, pm.ToolCallPart):
                args = part.args_as_json_str()
                for k in range(0, len(args), 5):
                    name, call_id = (part.tool_name, part.tool_call_id) if k == 0 else (None, None)
                    yield {i: DeltaToolCall(name=name, json_args=args[k : k + 5], tool_call_id=call_id)}

    return stream


def build(ledger: Counter[str], *, streaming: bool = True, crash: set[str] | None = None) -> PydanticAIHarness:
    """The scripted agent; ``ledger`` counts tool executions; a lookup named in ``crash`` kills the
    slice the first time it runs (after the lookups before it finished: lookups run one at a time)."""
    crash = crash if crash is not None else set()
    model = FunctionModel(script, stream_function=streamed(script) if streaming else None)
    agent: Agent[None, str] = Agent(model, instructions="Be brief.")

    @agent.tool_plain(sequential=True)
    def lookup(name: str) -> dict[str, str]:
        """Look an item up."""
        ledger[f"lookup:{name}"] += 1
        if name in crash:
            crash.discard(name)
            raise SimulatedCrash(f"died while looking up {name}")
        return {"item": name, "status": "old"}

    @agent.tool_plain(requires_approval=True)
    def remove(name: str) -> str:
        """Remove an item (needs approval)."""
        ledger[f"remove:{name}"] += 1
        return f"{name} removed"

    return PydanticAIHarness(agent)


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def recorded(turn: Any) -> set[str]:
    """The calls whose results a checkpointed harness state records for the step in progress."""
    tools = (turn or {}).get("tools") or {}
    return {p["tool_call_id"] for m in tools.get("results") or [] for p in m["parts"]}


class CrashingSave(MemoryCheckpointStore):
    """A store whose ``save`` dies (the slice with it) the first time ``when(harness state)`` holds."""

    def __init__(self, when: Callable[[Any], bool]) -> None:
        super().__init__()
        self.when, self.crashed = when, False

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        if not self.crashed and self.when(json.loads(checkpoint.state).get("turn")):
            self.crashed = True
            raise SimulatedCrash("the slice died before this checkpoint")
        return super().save(checkpoint, expected_version)


async def crash_and_retry(turns: Turns, ui_messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """Run a turn whose first slice dies, then the retry the state machine makes; the log and state."""
    run_id = turns.create(ui_messages, "msg_a")
    with pytest.raises(SimulatedCrash):
        await turns.orchestrator.drive(run_id)
    state = await turns.orchestrator.drive(run_id)
    return log_chunks(turns.log, run_id), state


# --- steps, slices, streaming ------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False])
async def test_steps_are_slices_and_a_sliced_turn_equals_a_whole_one(streaming: bool) -> None:
    whole, whole_state = await Turns(build(Counter(), streaming=streaming)).ask(ASK)
    assert whole_state.status == "awaiting_tool_approval" and whole_state.slices == 1
    ledger: Counter[str] = Counter()
    sliced, state = await Turns(build(ledger, streaming=streaming), slice_seconds=0).ask(ASK)
    assert state.status == "awaiting_tool_approval" and state.slices == 2  # one per model step
    assert parts_of(sliced) == parts_of(whole)
    assert state.final_result is not None and whole_state.final_result is not None
    assert state.final_result.input_tokens == whole_state.final_result.input_tokens > 0  # summed over slices
    assert ledger == Counter({"lookup:alpha": 1, "lookup:beta": 1})
    tools = [(p["type"], p["toolCallId"], p["state"]) for p in parts_of(whole) if p["type"].startswith("tool-")]
    assert tools == [
        ("tool-lookup", "c1", "output-available"),
        ("tool-lookup", "c2", "output-available"),
        ("tool-remove", "c3", "approval-requested"),
    ]
    request = next(c for c in whole if c["type"] == "tool-approval-request")
    assert request["signature"] == sign_tool_approval(SECRET, "approval-c3", "c3", "remove", {"name": "beta"})


async def test_text_reasoning_and_tool_input_stream_token_by_token() -> None:
    chunks, _ = await Turns(build(Counter())).ask(ASK)
    text = [c["delta"] for c in chunks if c["type"] == "text-delta"]
    reasoning = [c["delta"] for c in chunks if c["type"] == "reasoning-delta"]
    c1_input = [c["inputTextDelta"] for c in chunks if c["type"] == "tool-input-delta" and c["toolCallId"] == "c1"]
    assert len(text) == len(LOOKING.split()) and "".join(text) == LOOKING
    assert len(reasoning) == len(THINKING.split()) and "".join(reasoning) == THINKING
    assert len(c1_input) > 1 and json.loads("".join(c1_input)) == {"name": "alpha"}
    c1 = [c["type"] for c in chunks if c.get("toolCallId") == "c1"]
    assert c1 == [
        "tool-input-start",
        *["tool-input-delta"] * len(c1_input),
        "tool-input-available",
        "tool-output-available",
    ]
    # Streamed or whole, the client ends with the same message.
    whole, _ = await Turns(build(Counter(), streaming=False)).ask(ASK)
    assert [c["type"] for c in whole].count("text-delta") == 1
    assert parts_of(chunks) == parts_of(whole)
    assert [p["type"] for p in parts_of(chunks)][:3] == ["step-start", "reasoning", "text"]


async def test_the_first_tokens_reach_the_log_while_the_model_is_still_writing() -> None:
    log, first_token_durable = MemoryChunkLog(), asyncio.Event()

    def on_commit(run_id: str, count: int) -> None:
        if any(c.get("delta") == "Hello " for c in log_chunks(log, run_id)):
            first_token_durable.set()

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Hello "
        await asyncio.wait_for(first_token_durable.wait(), 10)  # writes on only once the client can see it
        yield "world."

    runner = Runner(PydanticAIHarness(Agent(FunctionModel(stream_function=stream))), MemoryCheckpointStore(), log,
                    flush_interval=0, on_commit=on_commit)  # fmt: skip
    run_id = runner.create_run([UserMessage(content=[TextPart(text="hi")])], message_id="msg_a").run_id
    state = await runner.run(run_id)
    assert state.status == "finished"
    assert parts_of(log_chunks(log, run_id))[-1] == {"type": "text", "text": "Hello world.", "state": "done"}


# --- crashes -------------------------------------------------------------------------------------


async def test_a_step_redone_after_a_crash_never_reruns_a_tool_whose_result_was_recorded() -> None:
    whole, _ = await Turns(build(Counter())).ask(ASK)
    ledger: Counter[str] = Counter()
    # The slice dies once c2's result is in the log but before it is checkpointed (c1's is).
    turns = Turns(build(ledger), store=CrashingSave(lambda turn: "c2" in recorded(turn)))
    chunks, state = await crash_and_retry(turns, [user_message(ASK)])
    assert state.status == "awaiting_tool_approval"
    reset = types(chunks).index("reset-step")
    assert chunks[reset - 1] == {
        "type": "tool-output-available",
        "toolCallId": "c2",
        "output": {"item": "beta", "status": "old"},
    }
    assert types(chunks).count("reset-step") == 1 and types(chunks).count("finish") == 1
    assert ledger == Counter({"lookup:alpha": 1, "lookup:beta": 2})  # alpha's result was recorded: never run again
    assert parts_of(chunks) == parts_of(whole)  # the redone step shows what it had shown, then goes on


async def test_a_crash_inside_a_tool_goes_on_from_the_last_result_without_a_reset() -> None:
    whole, _ = await Turns(build(Counter())).ask(ASK)
    ledger: Counter[str] = Counter()
    chunks, state = await crash_and_retry(Turns(build(ledger, crash={"beta"})), [user_message(ASK)])
    assert state.status == "awaiting_tool_approval"
    assert "reset-step" not in types(chunks)  # the log held nothing the checkpoint did not cover
    assert ledger == Counter({"lookup:alpha": 1, "lookup:beta": 2})
    assert chunks == whole


async def test_an_approved_call_whose_result_was_recorded_is_not_run_again_after_a_crash() -> None:
    uncut = Turns(build(Counter()))
    first, _ = await uncut.ask(ASK)
    rest, _ = await uncut.run(answered(ASK, first, "c3", True), "msg_a")
    ledger: Counter[str] = Counter()
    seen: list[bool] = []

    def after_c3(turn: Any) -> bool:  # dies at the step's end, after the approved call's result was recorded
        seen.append("c3" in recorded(turn))
        return len(seen) > 1 and seen[-2] and not seen[-1]

    turns = Turns(build(ledger), store=CrashingSave(after_c3))
    chunks, _ = await turns.ask(ASK)
    more, state = await crash_and_retry(turns, answered(ASK, chunks, "c3", True))
    assert state.status == "finished" and "reset-step" in types(more)
    assert ledger["remove:beta"] == 1
    assert parts_of(chunks + more[1:]) == parts_of(first + rest[1:])
    assert parts_of(chunks + more[1:])[-1]["text"] == "Finished: beta removed"


async def test_a_redone_step_that_also_asks_for_approval_asks_again_without_rerunning_its_other_tool() -> None:
    def one_step(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        if not any(isinstance(m, pm.ModelResponse) for m in messages):
            calls = [
                pm.ToolCallPart("lookup", {"name": "beta"}, "c1"),
                pm.ToolCallPart("remove", {"name": "beta"}, "c3"),
            ]
            return pm.ModelResponse(parts=[pm.TextPart("Checking, then removing."), *calls])
        return pm.ModelResponse(parts=[pm.TextPart(f"Done: {getattr(messages[-1].parts[-1], 'content', '')}")])

    def harness(ledger: Counter[str]) -> PydanticAIHarness:
        agent: Agent[None, str] = Agent(FunctionModel(one_step, stream_function=streamed(one_step)))

        @agent.tool_plain
        def lookup(name: str) -> str:
            ledger[f"lookup:{name}"] += 1
            return f"{name} is old"

        @agent.tool_plain(requires_approval=True)
        def remove(name: str) -> str:
            ledger[f"remove:{name}"] += 1
            return f"{name} removed"

        return PydanticAIHarness(agent)

    whole, _ = await Turns(harness(Counter())).ask(ASK)
    ledger: Counter[str] = Counter()
    seen: list[bool] = []

    def after_c1(turn: Any) -> bool:  # dies at the save after c1's result was recorded (the step's end)
        seen.append("c1" in recorded(turn))
        return len(seen) > 1 and seen[-2] and not seen[-1]

    turns = Turns(harness(ledger), store=CrashingSave(after_c1))
    chunks, state = await crash_and_retry(turns, [user_message(ASK)])
    assert state.status == "awaiting_tool_approval" and "reset-step" in types(chunks)
    assert ledger == Counter({"lookup:beta": 1})
    assert parts_of(chunks) == parts_of(whole)
    assert [r.tool_call_id for r in state.pending_approvals] == ["c3"]
    more, state = await turns.run(answered(ASK, chunks, "c3", True), "msg_a")
    assert state.status == "finished" and ledger == Counter({"lookup:beta": 1, "remove:beta": 1})
    assert parts_of(chunks + more[1:])[-1]["text"] == "Done: beta removed"


# --- approvals, output, history ----------------------------------------------------------------


@pytest.mark.parametrize("approved", [True, False])
async def test_a_deferred_tool_is_a_signed_approval_answered_in_the_same_message(approved: bool) -> None:
    ledger: Counter[str] = Counter()
    turns = Turns(build(ledger), slice_seconds=0)
    chunks, _ = await turns.ask(ASK)
    more, state = await turns.run(answered(ASK, chunks, "c3", approved), "msg_a")
    assert state.status == "finished" and more[0] == {"type": "start", "messageId": "msg_a"}
    final = parts_of(chunks + more[1:])
    remove = next(p for p in final if p.get("toolCallId") == "c3")
    if approved:
        assert ledger["remove:beta"] == 1
        assert remove["state"] == "output-available" and remove["output"] == "beta removed"
        assert final[-1]["text"] == "Finished: beta removed"
    else:
        assert ledger["remove:beta"] == 0
        assert remove["state"] == "output-denied"
        assert final[-1]["text"] == "Finished: not now"


async def test_a_tampered_approval_is_a_denial_and_never_runs_the_tool() -> None:
    ledger: Counter[str] = Counter()
    turns = Turns(build(ledger))
    chunks, _ = await turns.ask(ASK)
    more, state = await turns.run(answered(ASK, chunks, "c3", True, signature="AAAA" + "x" * 39), "msg_a")
    assert state.status == "finished" and ledger["remove:beta"] == 0
    assert not [c for c in more if c.get("toolCallId") == "c3"]
    assert "not valid" in parts_of(chunks + more[1:])[-1]["text"]


def shape(messages: list[pm.ModelMessage]) -> list[list[tuple[Any, ...]]]:
    """What a history says to the model, message by message (ids and timestamps aside)."""
    out: list[list[tuple[Any, ...]]] = []
    for message in messages:
        parts: list[tuple[Any, ...]] = []
        for p in message.parts:
            if isinstance(p, pm.UserPromptPart | pm.TextPart | pm.ThinkingPart):
                parts.append((p.part_kind, p.content))
            elif isinstance(p, pm.ToolCallPart):
                parts.append(("call", p.tool_call_id, p.tool_name, p.args_as_dict()))
            elif isinstance(p, pm.ToolReturnPart):
                parts.append(("return", p.tool_call_id, p.tool_name, p.content, p.outcome))
        out.append(parts)
    return out


@pytest.mark.parametrize("approved", [True, False])
async def test_an_earlier_turns_tool_calls_and_results_reach_the_model(approved: bool) -> None:
    sent: list[list[pm.ModelMessage]] = []
    harness = build(Counter())
    model = harness.agent.model
    assert isinstance(model, FunctionModel) and model.stream_function is not None
    inner = model.stream_function

    async def recording(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        sent.append(list(messages))
        async for item in inner(messages, info):
            yield item

    model.stream_function = recording
    turns = Turns(harness)
    chunks, _ = await turns.ask(ASK)
    history = answered(ASK, chunks, "c3", approved)
    more, state = await turns.run(history, "msg_a")
    client = UIMessageAssembler(message=history[-1])  # the client's message goes on with the continuation
    client.apply_all(more)
    assistant = client.message()
    _, second = await turns.run([user_message(ASK), assistant, user_message("Anything else?", "u2")], "msg_b")
    assert second.status == "finished"
    outcome = ("beta removed", "success") if approved else ("not now", "denied")
    assert shape(sent[-1]) == [
        [("user-prompt", ASK)],
        [("thinking", THINKING), ("text", LOOKING),
         ("call", "c1", "lookup", {"name": "alpha"}), ("call", "c2", "lookup", {"name": "beta"})],
        [("return", "c1", "lookup", {"item": "alpha", "status": "old"}, "success"),
         ("return", "c2", "lookup", {"item": "beta", "status": "old"}, "success")],
        [("call", "c3", "remove", {"name": "beta"})],
        [("return", "c3", "remove", *outcome)],
        [("text", f"Finished: {outcome[0]}")],
        [("user-prompt", "Anything else?")],
    ]  # fmt: skip
    # The same as Pydantic AI's own record of the first turn.
    native = pm.ModelMessagesTypeAdapter.validate_python(turns.runner.result(state)["pydanticAiMessages"])
    assert shape(sent[-1])[:-1] == shape(native)


class Verdict(BaseModel):
    city: str
    rain: bool


async def test_structured_output_reaches_the_runs_result() -> None:
    model = TestModel(custom_output_args={"city": "Oslo", "rain": True})
    agent: Agent[None, Verdict] = Agent(model, output_type=Verdict)
    harness = PydanticAIHarness(agent)
    assert harness.options.has_output and harness.streams()
    chunks, state = await Turns(harness).ask("Will it rain in Oslo?")
    assert state.status == "finished" and chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert state.final_result is not None and state.final_result.output == {"city": "Oslo", "rain": True}
    assert not [c for c in chunks if c["type"].startswith("tool-")]  # the output tool is not shown


async def test_a_plain_test_model_turn_streams_its_text() -> None:
    agent: Agent[None, str] = Agent(TestModel(custom_output_text="Hello from Pydantic AI."))
    chunks, state = await Turns(PydanticAIHarness(agent)).ask("hi")
    assert state.status == "finished" and not PydanticAIHarness(agent).options.has_output
    assert parts_of(chunks)[-1] == {"type": "text", "text": "Hello from Pydantic AI.", "state": "done"}
    assert types(chunks).count("text-delta") > 1
    assert types(chunks).count("finish") == 1
    assert state.final_result is not None and state.final_result.input_tokens > 0


async def test_each_step_reports_its_own_usage_and_a_sliced_turn_the_whole_turns_total() -> None:
    # One turn read straight from the harness: the steps' usage adds up to the turn's total.
    request = StartTurn(run_id="wrun_x", session_id="sess_x", messages=[UserMessage(content=[TextPart(text=ASK)])])
    turn = build(Counter()).open(request)
    steps, totals = [], []
    try:
        async for event in turn.events():
            if isinstance(event, hp.FinishStepPart | hp.FinishPart):
                usage = event.usage if isinstance(event, hp.FinishStepPart) else event.total_usage
                pair = (int(usage.input_tokens.total or 0), int(usage.output_tokens.total or 0))
                (steps if isinstance(event, hp.FinishStepPart) else totals).append(pair)
    finally:
        await turn.close()
    (total,) = totals
    assert len(steps) >= 2 and total[0] > 0 and (sum(s[0] for s in steps), sum(s[1] for s in steps)) == total
    # Sliced (a new Pydantic AI run per slice), the turn's total is the same.
    _, sliced = await Turns(build(Counter()), slice_seconds=0).ask(ASK)
    assert sliced.final_result is not None and sliced.slices >= 2
    assert (sliced.final_result.input_tokens, sliced.final_result.output_tokens) == total
