"""The demo model: deterministic, credential-free, calls the weather tool when asked."""

from __future__ import annotations

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
