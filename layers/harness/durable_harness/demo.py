"""The demo agent: the demo model plus a made-up weather tool. Used by ``make dev`` and tests."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, Field

from .agent.loop import ToolLoopAgent
from .agent.tools import Tool, tool
from .models.demo import DemoModel


class WeatherInput(BaseModel):
    """Input of the demo weather tool."""

    city: str = Field(description="The city to report on, e.g. 'Paris'.", min_length=1, max_length=100)


@tool
def get_weather(input: WeatherInput) -> dict[str, object]:
    """Get the current weather for a city (made up, but the same city always gets the same answer)."""
    digest = hashlib.sha256(input.city.strip().lower().encode()).digest()
    conditions = ["sunny", "cloudy", "rainy", "windy", "foggy"][digest[0] % 5]
    return {"city": input.city.strip(), "tempC": digest[1] % 35 - 5, "conditions": conditions}


DEMO_TOOLS: list[Tool] = [get_weather]


def build_demo_agent(*, delay: float = 0.03) -> ToolLoopAgent:
    """The demo agent; ``delay`` seconds between streamed pieces (0 for tests and benchmarks)."""
    return ToolLoopAgent(
        model=DemoModel(delay=delay),
        instructions="You are a helpful assistant. Use tools when they help.",
        tools=DEMO_TOOLS,
    )
