"""The tool-loop agent through the runner: tools, invalid calls, failures, the step cap."""

from __future__ import annotations

from typing import Any

import pytest
from durable_harness.agent.loop import DEFAULT_MAX_STEPS, ToolLoopAgent
from durable_harness.errors import ToolError
from durable_harness.messages import TextPart, ToolMessage, UserMessage
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from durable_harness.tools import Tool, tool
from pydantic import BaseModel, Field

from tests.support import log_chunks, message_of


class Numbers(BaseModel):
    a: int = Field(description="first")
    b: int


@tool
def add(input: Numbers) -> int:
    """Add two numbers."""
    return input.a + input.b


@tool
async def explode(input: Numbers) -> int:
    """Always fails."""
    raise RuntimeError("kaboom")


async def run_turn(agent: ToolLoopAgent, text: str = "go") -> tuple[list[dict[str, Any]], Any]:
    log = MemoryChunkLog()
    runner = Runner(agent, MemoryCheckpointStore(), log, flush_interval=0)
    state = runner.create_run([UserMessage(content=[TextPart(text=text)])])
    final = await runner.run(state.run_id)
    return log_chunks(log, state.run_id), final


def test_tool_schema_comes_from_the_pydantic_model() -> None:
    definition = add.definition()
    assert definition.name == "add" and definition.description == "Add two numbers."
    assert definition.input_schema["properties"]["a"] == {"description": "first", "title": "A", "type": "integer"}
    assert definition.input_schema["required"] == ["a", "b"]


async def test_tool_results_reach_the_model_and_the_client() -> None:
    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 2, "b": 3})), text_step("It is 5.")])
    chunks, final = await run_turn(ToolLoopAgent(model=model, tools=[add]))
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": 5} in chunks
    tool_message = model.requests[1].messages[-1]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.to_dict()["content"][0]["output"] == {"type": "json", "value": 5}
    assert [t.name for t in model.requests[0].tools] == ["add"]
    assert final.status == "finished" and final.final_result.finish_reason == "stop"
    assert final.final_result.input_tokens == 20


async def test_invalid_input_unknown_tools_and_exceptions_become_error_results() -> None:
    model = ScriptedModel(
        [
            tool_calls_step(
                ("c1", "add", {"a": "not a number", "b": 1}),
                ("c2", "nope", {}),
                ("c3", "add", "{broken"),
                ("c4", "explode", {"a": 1, "b": 1}),
            ),
            text_step("Sorry."),
        ]
    )
    chunks, final = await run_turn(ToolLoopAgent(model=model, tools=[add, explode]))
    assert final.status == "finished"
    by_call = {c.get("toolCallId"): c for c in chunks if c["type"] in ("tool-output-error", "tool-input-error")}
    assert by_call["c1"]["type"] == "tool-input-error" and by_call["c1"]["input"] == {"a": "not a number", "b": 1}
    assert "a: Input should be a valid integer" in by_call["c1"]["errorText"]
    assert by_call["c2"]["type"] == "tool-input-error" and by_call["c2"]["dynamic"] is True
    assert by_call["c3"]["type"] == "tool-input-error" and by_call["c3"]["input"] == "{broken"
    assert "JSON parsing failed" in by_call["c3"]["errorText"]
    assert by_call["c4"] == {"type": "tool-output-error", "toolCallId": "c4", "errorText": "Error: kaboom"}
    results = model.requests[1].messages[-1].to_dict()["content"]
    outputs = {r["toolCallId"]: r["output"] for r in results}
    assert all(o["type"] == "error-text" for o in outputs.values())
    assert "unavailable tool 'nope'" in outputs["c2"]["value"]
    assert outputs["c4"]["value"] == "Error: kaboom"
    parts = {p.get("toolCallId"): p["state"] for p in message_of(chunks)["parts"] if "toolCallId" in p}
    assert parts == {"c1": "output-error", "c2": "output-error", "c3": "output-error", "c4": "output-error"}


async def test_the_default_step_cap_stops_a_looping_model() -> None:
    looping = ScriptedModel([tool_calls_step((f"c{i}", "add", {"a": i, "b": 1})) for i in range(50)])
    chunks, final = await run_turn(ToolLoopAgent(model=looping, tools=[add]))
    assert DEFAULT_MAX_STEPS == 20
    assert len(looping.requests) == DEFAULT_MAX_STEPS
    assert final.status == "finished" and final.final_result.finish_reason == "tool-calls"
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


async def test_a_tool_without_a_model_takes_raw_json() -> None:
    echo = Tool(name="echo", execute=lambda value: {"got": value}, input_schema={"type": "object"})
    model = ScriptedModel([tool_calls_step(("c1", "echo", {"x": [1, 2]})), text_step("ok")])
    chunks, _ = await run_turn(ToolLoopAgent(model=model, tools=[echo]))
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": {"got": {"x": [1, 2]}}} in chunks


SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["query", "limit"],
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "default": 10},
        "filters": {
            "type": "object",
            "default": {},
            "properties": {"lang": {"type": "string", "default": "en"}, "safe": {"type": "boolean", "default": True}},
        },
        "sort": {
            "type": "array",
            "items": {"type": "object", "properties": {"field": {"type": "string"}, "desc": {"default": False}}},
        },
        "note": {"type": ["string", "null"], "default": "none"},
    },
}


async def test_a_raw_schema_tool_gets_its_input_with_the_schema_defaults() -> None:
    # Seed 000: ValidateSerializableToolInput applies schema defaults and the tool gets that value.
    search = Tool(name="search", execute=lambda value: {"got": value}, input_schema=SEARCH_SCHEMA)
    raw = {"query": "oslo", "filters": {"safe": False}, "sort": [{"field": "date"}], "note": None}
    model = ScriptedModel([tool_calls_step(("c1", "search", raw)), text_step("ok")])
    chunks, _ = await run_turn(ToolLoopAgent(model=model, tools=[search]))
    got = {
        "query": "oslo",
        "limit": 10,  # a required property with a default is filled, not missing
        "filters": {"safe": False, "lang": "en"},  # nested: the present value kept, the missing one filled
        "sort": [{"field": "date", "desc": False}],  # each array item
        "note": None,  # present (even as null): kept
    }
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": {"got": got}} in chunks
    # The model's call keeps its own input: the client sees what the model sent.
    shown = next(c for c in chunks if c["type"] == "tool-input-available")
    assert shown["input"] == {"query": "oslo", "filters": {"safe": False}, "sort": [{"field": "date"}], "note": None}


def test_schema_defaults_fill_defaulted_objects_and_leave_required_fields_without_one_missing() -> None:
    search = Tool(name="search", input_schema=SEARCH_SCHEMA)
    first = search.validate({"query": "a"})
    assert first == {"query": "a", "limit": 10, "filters": {"lang": "en", "safe": True}, "note": "none"}
    first["filters"]["lang"] = "fr"  # a copy of the default: the next call gets the schema's own
    assert search.validate({"query": "b"})["filters"] == {"lang": "en", "safe": True}
    with pytest.raises(ToolError, match=r"input\.query: required"):
        search.validate({"limit": 3})
    with pytest.raises(ToolError, match=r"input\.limit: expected integer"):
        search.validate({"query": "a", "limit": "ten"})
