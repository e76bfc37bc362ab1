"""StateEncoder (issue 20): a slice's checkpoints made from the JSON of the history seen before,
always equal to a full dump of the state, and saved by a real store as that state."""

from __future__ import annotations

import json
from pathlib import Path

from durable_harness.agent.calls import dump_state
from durable_harness.agent.state import LoopTurnState, StepSummary
from durable_harness.messages import AssistantMessage, TextPart, UserMessage
from durable_harness.protocol.translate import ToolCallInfo
from durable_harness.runner.encoding import StateEncoder
from durable_harness.runner.state import RunState, StepMark, checkpoint_of
from durable_harness.sealed import dumps
from durable_harness.storage.sqlite import SqliteCheckpointStore


def grow(state: RunState, turn: LoopTurnState, step: int) -> None:
    """One step of a tool-loop turn, as the loop and the runner record it."""
    turn.messages.append(AssistantMessage(content=[TextPart(text=f"step {step} é")]))
    turn.steps.append(StepSummary(number=step, finish_reason="tool-calls", tool_calls=["lookup"]))
    state.turn = dump_state(turn)
    state.steps.append(StepMark(finish_reason="tool-calls", input_tokens=step, output_tokens=1))
    state.chunk_times.extend([(step * 4, 1764633600.5 + step), (step * 4 + 3, 1764633600.75 + step)])
    state.stream.translator.tool_calls[f"call_{step}"] = ToolCallInfo(tool_name="lookup", input={"q": step})
    state.stream.chunk_count = step * 4 + 4


def check(encoder: StateEncoder, state: RunState) -> dict[str, object]:
    """Encode ``state``: its text must be pydantic's, its value that text's JSON value."""
    text, value = encoder.encode(state)
    assert text == state.model_dump_json(by_alias=True)
    assert dumps(value) == text and value == json.loads(text)
    return value


def test_every_encoding_equals_a_full_dump_as_the_run_grows_and_its_history_is_edited() -> None:
    turn = LoopTurnState(messages=[UserMessage(content=[TextPart(text="go")])])
    state = RunState(run_id="run_1", session_id="s", message_id="msg_1", turn=dump_state(turn))
    state.slice_times.append((0, 1764633600.0))
    encoder = StateEncoder()
    check(encoder, state)
    for step in range(1, 8):
        grow(state, turn, step)
        check(encoder, state)
    # Edits other than appends: a tool call's info replaced, a list replaced or cut back, a step
    # mark replaced in place, the turn's state from another harness (not sealed at all).
    state.stream.translator.tool_calls["call_3"] = ToolCallInfo(tool_name="lookup", input={"q": 3.0})
    del state.stream.translator.tool_calls["call_5"]
    check(encoder, state)
    state.chunk_times = state.chunk_times[:3]
    state.steps[2] = StepMark(finish_reason="stop")
    state.steps = list(state.steps)
    check(encoder, state)
    state.turn = {"program": {"history": [1, 2.0, True]}}
    check(encoder, state)


def test_the_history_is_serialized_once_and_shared_between_checkpoints() -> None:
    turn = LoopTurnState(messages=[UserMessage(content=[TextPart(text="go")])])
    state = RunState(run_id="run_1", session_id="s", message_id="msg_1", turn=dump_state(turn))
    encoder = StateEncoder()
    for step in range(1, 4):
        grow(state, turn, step)
    first = check(encoder, state)
    grow(state, turn, 4)
    second = check(encoder, state)
    for path in (("turn", "messages", 0), ("turn", "steps", 0), ("steps", 0), ("chunk_times", 0)):
        a, b = first, second
        for key in path:
            a, b = a[key], b[key]  # type: ignore[index]
        assert a is b, path
    calls_a = first["stream"]["translator"]["tool_calls"]  # type: ignore[index]
    calls_b = second["stream"]["translator"]["tool_calls"]  # type: ignore[index]
    assert calls_a["call_1"] is calls_b["call_1"]


def test_a_store_saving_encoded_checkpoints_loads_the_state_saved(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "runs.sqlite3")
    turn = LoopTurnState(messages=[UserMessage(content=[TextPart(text="go " * 300)])])
    state = RunState(run_id="run_1", session_id="s", message_id="msg_1", turn=dump_state(turn))
    cp = store.claim("run_1", store.create(checkpoint_of(state)).version)
    encoder = StateEncoder()
    for step in range(1, 12):
        grow(state, turn, step)
        if step == 6:
            state.stream.translator.tool_calls["call_2"] = ToolCallInfo(tool_name="other", input=None)
        cp = store.save(encoder.checkpoint(state, cp), cp.version)
        assert store.load("run_1").state == state.model_dump_json(by_alias=True)
    # Another store on the file folds the records written (no state cached from the saves).
    assert json.loads(SqliteCheckpointStore(store.path).load("run_1").state) == json.loads(state.model_dump_json())
