"""The demo model: deterministic, credential-free, calls the weather tool when asked."""

from __future__ import annotations

import pytest
from durable_harness.demo import build_demo_agent, get_weather
from durable_harness.messages import TextPart, UserMessage
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

from tests.support import log_chunks, message_of


async def turn(text: str) -> dict:
    log = MemoryChunkLog()
    runner = Runner(build_demo_agent(delay=0), MemoryCheckpointStore(), log, flush_interval=0)
    state = runner.create_run([UserMessage(content=[TextPart(text=text)])], message_id="msg_demo")
    await runner.run(state.run_id)
    return message_of(log_chunks(log, state.run_id))


async def test_weather_question_calls_the_tool_then_answers_from_its_result() -> None:
    message = await turn("What is the weather in Lisbon?")
    types = [p["type"] for p in message["parts"]]
    assert types == ["step-start", "reasoning", "tool-get_weather", "step-start", "text"]
    tool_part = message["parts"][2]
    expected = get_weather.execute(get_weather.validate({"city": "Lisbon"}))  # type: ignore[call-arg]
    assert tool_part["input"] == {"city": "Lisbon"} and tool_part["output"] == expected
    assert f"{expected['tempC']} °C" in message["parts"][-1]["text"]


async def test_other_messages_get_a_streamed_reply_and_the_same_reply_every_time() -> None:
    first, second = await turn("hello there"), await turn("hello there")
    assert first == second
    assert first["parts"][-1]["text"].startswith('You said: "hello there".')


async def test_a_long_task_takes_several_steps_and_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONG_STEP_SECONDS", "0")
    log = MemoryChunkLog()
    runner = Runner(build_demo_agent(delay=0), MemoryCheckpointStore(), log, flush_interval=0)
    state = runner.create_run([UserMessage(content=[TextPart(text="Run a long task")])], message_id="msg_long")
    statuses = []
    while not (state := await runner.run_slice(state.run_id, budget_seconds=0)).terminal:
        statuses.append(state.status)
    message = message_of(log_chunks(log, state.run_id))
    parts = [p for p in message["parts"] if p["type"] == "tool-long_step"]
    assert [p["output"]["part"] for p in parts] == [1, 2, 3, 4, 5] and parts[-1]["output"]["done"] is True
    assert state.status == "finished" and state.slices >= 6 and len(statuses) >= 5
    assert message["parts"][-1]["text"].startswith("All 5 parts of the long task are done.")
