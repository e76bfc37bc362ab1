"""Your agent: its instructions, its model and its tools. This is the one file to edit.

The local server (``make dev``) and the deployed slice function both load ``build_agent`` from
here. ``MODEL_ID`` picks the model: ``demo`` (the default: no credentials needed),
``bedrock:<model id>`` (the deployed default, set by the template's ModelId parameter),
``openai:<model>`` or ``anthropic:<model>``.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from durable_harness import Agent, tool
from durable_harness.models import LanguageModel
from pydantic import BaseModel, Field

INSTRUCTIONS = """You are a helpful assistant. Use the tools when they help.
Saving a note changes the user's files, so it waits for the user's approval.
A long task is done one part at a time with long_step."""


class WeatherInput(BaseModel):
    """Input of ``get_weather``."""

    city: str = Field(description="The city to report on, e.g. 'Paris'.", min_length=1, max_length=100)


@tool
def get_weather(input: WeatherInput) -> dict[str, object]:
    """Get the current weather for a city (made up: the same city always gets the same answer)."""
    digest = hashlib.sha256(input.city.strip().lower().encode()).digest()
    conditions = ["sunny", "cloudy", "rainy", "windy", "foggy"][digest[0] % 5]
    return {"city": input.city.strip(), "tempC": digest[1] % 35 - 5, "conditions": conditions}


class NoteInput(BaseModel):
    """Input of ``save_note``."""

    title: str = Field(description="A short title; it becomes the file name.", min_length=1, max_length=80)
    text: str = Field(description="The note's text.", max_length=10_000)


@tool(needs_approval=True)
def save_note(input: NoteInput) -> dict[str, object]:
    """Save a note as a text file. The user must approve every call."""
    folder = Path(os.environ.get("NOTES_DIR", "/tmp/durable-harness-notes"))
    folder.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^a-z0-9]+", "-", input.title.lower()).strip("-") or "note"
    path = folder / f"{name}.txt"
    path.write_text(input.text + "\n", encoding="utf-8")
    return {"saved": path.name, "bytes": len(input.text.encode()) + 1}


class LongStepInput(BaseModel):
    """Input of ``long_step``."""

    part: int = Field(ge=1, description="Which part of the task this call does.")
    of: int = Field(ge=1, description="How many parts the task has.")


@tool
def long_step(input: LongStepInput) -> dict[str, object]:
    """Do one part of a long task: works for LONG_STEP_SECONDS (default 1 s), then reports."""
    time.sleep(float(os.environ.get("LONG_STEP_SECONDS", "1")))
    return {"part": input.part, "of": input.of, "done": input.part == input.of}


def build_agent(*, model: str | LanguageModel | None = None, delay: float | None = None) -> Agent:
    """The agent. ``model``: a model spec (default ``MODEL_ID``) or a model object, e.g. a
    ``ScriptedModel`` in a test; ``delay`` slows the demo model's streaming (seconds between pieces)."""
    spec = model or os.environ.get("MODEL_ID", "demo")
    if spec == "demo" and delay is not None:
        from durable_harness.models.demo import DemoModel

        return Agent(model=DemoModel(delay=delay), instructions=INSTRUCTIONS, tools=[get_weather, save_note, long_step])
    return Agent(model=spec, instructions=INSTRUCTIONS, tools=[get_weather, save_note, long_step])
