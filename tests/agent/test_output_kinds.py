"""Output kinds like the AI SDK's ``Output``: text, object, array and choice.

The response formats are compared with what ``ai`` 7.0.173's ``Output.array`` / ``Output.choice``
send (``{"elements": [...]}``, ``{"result": ...}``), so a prompt or provider setting written for
one works with the other.
"""

from __future__ import annotations

from typing import Any

import pytest
from durable_harness import Agent, Output
from durable_harness.errors import AgentConfigError
from durable_harness.models.scripted import ScriptedModel, text_step
from pydantic import BaseModel

from tests.agent.test_parity import run


class City(BaseModel):
    name: str
    population: int


async def answer(output: Any, text: str) -> tuple[Any, ScriptedModel]:
    model = ScriptedModel([text_step(text)])
    _, state = await run(Agent(model=model, output=output))
    return state, model


async def test_text_output_is_the_final_text_and_asks_for_no_format() -> None:
    state, model = await answer(Output.text(), "Just words.")
    assert state.final_result.output == "Just words." and model.requests[0].response_format is None


async def test_object_output_is_the_same_as_passing_the_model() -> None:
    state, model = await answer(Output.object(City), '{"name": "Oslo", "population": 709000}')
    assert state.final_result.output == {"name": "Oslo", "population": 709000}
    assert model.requests[0].response_format == City.model_json_schema()


async def test_array_output_asks_for_elements_and_returns_the_list() -> None:
    state, model = await answer(
        Output.array(City),
        '{"elements": [{"name": "Oslo", "population": 709000}, {"name": "Bergen", "population": 291000}]}',
    )
    assert state.final_result.output == [
        {"name": "Oslo", "population": 709000}, {"name": "Bergen", "population": 291000},
    ]  # fmt: skip
    assert model.requests[0].response_format == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"elements": {"type": "array", "items": City.model_json_schema()}},
        "required": ["elements"],
        "additionalProperties": False,
    }
    strings, _ = await answer(Output.array(str), '{"elements": ["a", "b"]}')
    assert strings.final_result.output == ["a", "b"]


async def test_choice_output_asks_for_a_result_among_the_options() -> None:
    state, model = await answer(Output.choice(["positive", "neutral", "negative"]), '{"result": "neutral"}')
    assert state.final_result.output == "neutral"
    assert model.requests[0].response_format == {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"result": {"type": "string", "enum": ["positive", "neutral", "negative"]}},
        "required": ["result"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("output", "text", "says"),
    [
        (Output.array(City), '{"elements": [{"name": "Oslo"}]}', "elements[0]: population"),
        (Output.array(City), '[{"name": "Oslo", "population": 1}]', '"elements" array'),
        (Output.choice(["yes", "no"]), '{"result": "maybe"}', "one of ['yes', 'no']"),
        (Output.choice(["yes", "no"]), "yes", "not JSON"),
        (Output.object(City), '{"name": 3}', "not valid City output"),
    ],
)
async def test_an_answer_that_does_not_fit_fails_the_run_saying_why(output: Any, text: str, says: str) -> None:
    state, _ = await answer(output, text)
    assert state.status == "failed" and says in state.error


def test_bad_output_definitions_are_refused() -> None:
    with pytest.raises(AgentConfigError):
        Output.choice([])
    with pytest.raises(AgentConfigError):
        Agent(model=ScriptedModel([]), output=dict)  # type: ignore[arg-type]
