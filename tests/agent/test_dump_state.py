"""dump_state: the turn state a checkpoint carries, made incrementally, always equal to a full dump."""

from __future__ import annotations

import json

from durable_harness.agent.calls import RECENT_MESSAGES, dump_state
from durable_harness.agent.state import LoopTurnState, StepSummary
from durable_harness.messages import AssistantMessage, TextPart, UserMessage


def full(state: LoopTurnState) -> str:
    """The state's JSON as pydantic makes it from scratch (what dump_state must equal)."""
    return json.dumps(state.model_dump(mode="json", by_alias=True))


def test_each_dump_equals_a_full_one_as_the_turn_grows_and_changes_its_last_messages() -> None:
    state = LoopTurnState(messages=[UserMessage(content=[TextPart(text="go")])])
    assert json.dumps(dump_state(state)) == full(state)
    for step in range(6):
        state.messages.append(AssistantMessage(content=[TextPart(text=f"step {step}")]))
        assert json.dumps(dump_state(state)) == full(state)
        # The turn adds to its last message after a dump (an approval request, a grown part).
        state.messages[-1].content.append(TextPart(text="more"))
        state.steps.append(StepSummary(number=step, finish_reason="tool-calls"))
        state.step = step + 1
        assert json.dumps(dump_state(state)) == full(state)


def test_a_message_replaced_by_another_object_is_dumped_again() -> None:
    state = LoopTurnState(messages=[UserMessage(content=[TextPart(text=f"m{i}")]) for i in range(RECENT_MESSAGES + 4)])
    dump_state(state)
    state.messages[1] = UserMessage(content=[TextPart(text="replaced")])
    del state.messages[3]
    assert json.dumps(dump_state(state)) == full(state)


def test_a_dump_is_not_changed_by_later_dumps_or_edits() -> None:
    state = LoopTurnState(messages=[UserMessage(content=[TextPart(text="a")]) for _ in range(RECENT_MESSAGES + 2)])
    first = dump_state(state)
    text = json.dumps(first)
    state.messages.append(AssistantMessage(content=[TextPart(text="b")]))
    state.messages[-1].content.append(TextPart(text="c"))
    dump_state(state)
    assert json.dumps(first) == text
