"""The library's demo agent: the demo model with a plain tool and one that needs approval.

Tests, benchmarks and the examples use it; your own agent lives in ``layers/harness/my_agent.py``.
"""

from __future__ import annotations

import hashlib
import os
import time

from pydantic import BaseModel, Field

from .agent.loop import ToolLoopAgent
from .approvals import ApprovalSecret
from .models.demo import DemoModel
from .tools import Tool, tool


class WeatherInput(BaseModel):
    """Input of the demo weather tool."""

    city: str = Field(description="The city to report on, e.g. 'Paris'.", min_length=1, max_length=100)


@tool
def get_weather(input: WeatherInput) -> dict[str, object]:
    """Get the current weather for a city (made up, but the same city always gets the same answer)."""
    digest = hashlib.sha256(input.city.strip().lower().encode()).digest()
    conditions = ["sunny", "cloudy", "rainy", "windy", "foggy"][digest[0] % 5]
    return {"city": input.city.strip(), "tempC": digest[1] % 35 - 5, "conditions": conditions}


class NoteInput(BaseModel):
    """Input of the demo note tool."""

    title: str = Field(min_length=1, max_length=80)
    text: str = Field(max_length=10_000)


SAVED_NOTES: dict[str, str] = {}
"""Where the demo ``save_note`` keeps notes (in memory: this is a demo)."""


@tool(needs_approval=True)
def save_note(input: NoteInput) -> dict[str, object]:
    """Save a note. Every call waits for the user's approval."""
    SAVED_NOTES[input.title] = input.text
    return {"saved": input.title, "notes": len(SAVED_NOTES)}


class LongStepInput(BaseModel):
    """Input of ``long_step``."""

    part: int = Field(ge=1, description="Which part of the task this call does.")
    of: int = Field(ge=1, description="How many parts the task has.")


@tool
def long_step(input: LongStepInput) -> dict[str, object]:
    """Do one part of a long task: works for LONG_STEP_SECONDS (default 1 s), then reports."""
    time.sleep(float(os.environ.get("LONG_STEP_SECONDS", "1")))
    return {"part": input.part, "of": input.of, "done": input.part == input.of}


DEMO_TOOLS: list[Tool] = [get_weather, save_note, long_step]


def build_demo_agent(*, delay: float = 0.03, approval_secret: ApprovalSecret | None = None) -> ToolLoopAgent:
    """The demo agent; ``delay`` seconds between streamed pieces (0 for tests and benchmarks)."""
    return ToolLoopAgent(
        model=DemoModel(delay=delay),
        instructions="You are a helpful assistant. Use tools when they help.",
        tools=DEMO_TOOLS,
        approval_secret=approval_secret,
    )
