"""PydanticAIHarness through the real runner, with Pydantic AI's deterministic models (no credentials)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is part of the dev install")

from durable_harness.approvals import sign_tool_approval
from durable_harness.harness import PydanticAIHarness, StartTurn
from durable_harness.messages import TextPart as UserText
from durable_harness.messages import UserMessage
from durable_harness.protocol import harness_parts as hp
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from tests.harness.support import SECRET, Turns, answered, parts_of

ASK = "remove the old items"


class Ledger:
    """What the tools did (a crash-free run executes each exactly once)."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def build(ledger: Ledger) -> Agent[None, str]:
    """Two steps of a looked-up item, a removal that needs approval, then an answer."""

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        if done == 0:
            return ModelResponse(parts=[TextPart("Looking."), ToolCallPart("lookup", {"name": "alpha"}, "c1")])
        if done == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"name": "beta"}, "c2")])
        if done == 2:
            return ModelResponse(parts=[ToolCallPart("remove", {"name": "beta"}, "c3")])
        last = messages[-1].parts[-1]
        return ModelResponse(parts=[TextPart(f"Finished: {getattr(last, 'content', '')}")])

    agent: Agent[None, str] = Agent(FunctionModel(script), instructions="Be brief.")

    @agent.tool_plain
    def lookup(name: str) -> dict[str, str]:
        """Look an item up."""
        ledger.calls.append(f"lookup:{name}")
        return {"item": name, "status": "old"}

    @agent.tool_plain(requires_approval=True)
    def remove(name: str) -> str:
        """Remove an item (needs approval)."""
        ledger.calls.append(f"remove:{name}")
        return f"{name} removed"

    return agent


async def test_steps_are_slices_and_a_sliced_turn_equals_a_whole_one() -> None:
    whole, state = await Turns(PydanticAIHarness(build(Ledger()))).ask(ASK)
    assert state.status == "awaiting_tool_approval" and state.slices == 1
    ledger = Ledger()
    sliced, state = await Turns(PydanticAIHarness(build(ledger)), slice_seconds=0).ask(ASK)
    assert state.status == "awaiting_tool_approval" and state.slices == 3  # one per model step
    assert parts_of(sliced) == parts_of(whole)
    assert ledger.calls == ["lookup:alpha", "lookup:beta"]
    tools = [(p["type"], p["toolCallId"], p["state"]) for p in parts_of(whole) if p["type"].startswith("tool-")]
    assert tools == [
        ("tool-lookup", "c1", "output-available"),
        ("tool-lookup", "c2", "output-available"),
        ("tool-remove", "c3", "approval-requested"),
    ]
    request = next(c for c in whole if c["type"] == "tool-approval-request")
    assert request["signature"] == sign_tool_approval(SECRET, "approval-c3", "c3", "remove", {"name": "beta"})


async def test_each_step_reports_its_own_usage_and_a_sliced_turn_the_whole_turns_total() -> None:
    # One turn read straight from the harness: the steps' usage adds up to the turn's total.
    request = StartTurn(run_id="wrun_x", session_id="sess_x", messages=[UserMessage(content=[UserText(text=ASK)])])
    turn = PydanticAIHarness(build(Ledger())).open(request)
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
    assert len(steps) == 3 and total[0] > 0 and (sum(s[0] for s in steps), sum(s[1] for s in steps)) == total
    # Sliced (a new Pydantic AI run per slice), the turn's total is the same.
    _, sliced = await Turns(PydanticAIHarness(build(Ledger())), slice_seconds=0).ask(ASK)
    assert sliced.final_result is not None and sliced.slices == 3
    assert (sliced.final_result.input_tokens, sliced.final_result.output_tokens) == total


@pytest.mark.parametrize("approved", [True, False])
async def test_a_deferred_tool_is_a_signed_approval_answered_in_the_same_message(approved: bool) -> None:
    ledger = Ledger()
    turns = Turns(PydanticAIHarness(build(ledger)), slice_seconds=0)
    chunks, _ = await turns.ask(ASK)
    more, state = await turns.run(answered(ASK, chunks, "c3", approved), "msg_a")
    assert state.status == "finished" and more[0] == {"type": "start", "messageId": "msg_a"}
    final = parts_of(chunks + more[1:])
    remove = next(p for p in final if p.get("toolCallId") == "c3")
    if approved:
        assert ledger.calls == ["lookup:alpha", "lookup:beta", "remove:beta"]
        assert remove["state"] == "output-available" and remove["output"] == "beta removed"
        assert final[-1]["text"] == "Finished: beta removed"
    else:
        assert ledger.calls == ["lookup:alpha", "lookup:beta"]
        assert remove["state"] == "output-denied"
        assert final[-1]["text"] == "Finished: not now"


async def test_a_tampered_approval_is_a_denial_and_never_runs_the_tool() -> None:
    ledger = Ledger()
    turns = Turns(PydanticAIHarness(build(ledger)))
    chunks, _ = await turns.ask(ASK)
    more, state = await turns.run(answered(ASK, chunks, "c3", True, signature="AAAA" + "x" * 39), "msg_a")
    assert state.status == "finished" and "remove:beta" not in ledger.calls
    assert not [c for c in more if c.get("toolCallId") == "c3"]
    assert "not valid" in parts_of(chunks + more[1:])[-1]["text"]


class Verdict(BaseModel):
    city: str
    rain: bool


async def test_structured_output_reaches_the_runs_result() -> None:
    model = TestModel(custom_output_args={"city": "Oslo", "rain": True})
    agent: Agent[None, Verdict] = Agent(model, output_type=Verdict)
    harness = PydanticAIHarness(agent)
    assert harness.options.has_output
    chunks, state = await Turns(harness).ask("Will it rain in Oslo?")
    assert state.status == "finished" and chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert state.final_result is not None and state.final_result.output == {"city": "Oslo", "rain": True}
    assert not [p for p in parts_of(chunks) if p["type"].startswith("tool-")]  # the output tool is not shown


async def test_a_plain_test_model_turn_streams_its_text() -> None:
    agent: Agent[None, str] = Agent(TestModel(custom_output_text="Hello from Pydantic AI."))
    chunks, state = await Turns(PydanticAIHarness(agent)).ask("hi")
    assert state.status == "finished" and not PydanticAIHarness(agent).options.has_output
    assert parts_of(chunks)[-1] == {"type": "text", "text": "Hello from Pydantic AI.", "state": "done"}
    assert [c["type"] for c in chunks].count("finish") == 1
