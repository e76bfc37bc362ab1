"""Agents the Node suites serve (``--agent tests.node.agents:<name>``).

``build_options_agent`` takes call options (the AI SDK's ``body`` fields) and answers with what
``prepare_call`` made of them, so the client can see that they arrived, validated.
"""

from __future__ import annotations

from typing import Literal

from durable_harness import Agent, CallOptions
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step
from pydantic import BaseModel, ConfigDict


class ChatOptions(BaseModel):
    """What a client may choose per request: a locale and a model tier."""

    model_config = ConfigDict(extra="forbid")
    locale: Literal["en", "fr"] = "en"
    tier: Literal["fast", "best"] = "fast"


def _prepare_call(options: CallOptions) -> CallOptions:
    chosen = options.call_options
    assert isinstance(chosen, ChatOptions)  # validated before it got here
    options.instructions = f"locale={chosen.locale} tier={chosen.tier}"
    return options


def _echo(request: ModelRequest, step: int) -> list[ModelStreamPart]:
    return text_step(f"Prepared with {request.instructions}.")


def build_options_agent() -> Agent:
    """An agent that answers with the instructions its ``prepare_call`` built from the call options."""
    model = FunctionModel(_echo, model_id="options-echo")
    return Agent(model=model, call_options=ChatOptions, prepare_call=_prepare_call)


def build_counting_agent() -> Agent:
    """An agent whose model numbers its answers ("Answer number N."): a reply that repeats an
    earlier number was replayed, not generated."""
    calls: list[int] = []

    def answer(request: ModelRequest, step: int) -> list[ModelStreamPart]:
        calls.append(step)
        return text_step(f"Answer number {len(calls)}.")

    return Agent(model=FunctionModel(answer, model_id="counting"))
