"""Runs with tools for the telemetry tests, over three harnesses, with telemetry attached.

Each scenario is a turn with tool calls that ends paused for one approval, so that a run shows
tool results, an approval waiting and (for the built-in loop) a failing tool. The harnesses are
the built-in loop, the example harness program (``ProcessHarness``, a real child process) and a
Pydantic AI agent (``PydanticAIHarness``, Pydantic AI's ``FunctionModel``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable_harness import Agent, ApprovalSecret, tool
from durable_harness.harness import Harness
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.runner import RunState
from durable_harness.telemetry import Exporter, RunTelemetry, agent_info
from pydantic import BaseModel

from tests.harness import agents
from tests.harness.support import SECRET, Turns
from tests.harness.test_pydantic_ai import ASK, build

PRIVATE = "s3cret-item"
"""Text that appears in tool inputs and outputs: it must never reach a span or a metric."""


class Item(BaseModel):
    """A tool's input."""

    name: str


@tool
def lookup(input: Item) -> dict[str, str]:
    """Look an item up."""
    return {"item": input.name, "status": "old"}


@tool
def explode(input: Item) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {input.name}")


@tool(needs_approval=True)
def remove(input: Item) -> str:
    """Remove an item (needs approval)."""
    return f"{input.name} removed"


def builtin_agent() -> Agent:
    """Step 1: two lookups and a failing call; step 2: a removal that waits for approval."""
    model = ScriptedModel(
        [
            tool_calls_step(
                ("c1", "lookup", {"name": PRIVATE}), ("c2", "explode", {"name": "x"}), ("c3", "lookup", {"name": "b"}),
                text="Looking.",
            ),
            tool_calls_step(("c4", "remove", {"name": PRIVATE})),
            text_step("never reached"),
        ]
    )
    return Agent(
        model=model,
        tools=[lookup, explode, remove],
        tool_call_concurrency=1,
        approval_secret=ApprovalSecret.from_value(SECRET),
    )


@dataclass(frozen=True)
class Scenario:
    """A harness and the prompt that makes it call tools and pause for one approval."""

    name: str
    harness: Callable[[], Harness]
    prompt: str
    approval_call: str
    """The tool call id the run waits for."""


SCENARIOS = [
    Scenario("builtin", builtin_agent, f"check {PRIVATE}", "c4"),
    Scenario("process", lambda: agents.example, f"Save a note: {PRIVATE}", "call_save"),
    Scenario("pydantic_ai", lambda: build(Counter()), ASK, "c3"),
]


def observed_turns(harness: Harness, exporters: list[Exporter], *, slice_seconds: float | None = 0) -> Turns:
    """Turns of a conversation with ``harness`` whose runner reports to ``exporters``."""
    turns = Turns(harness, slice_seconds=slice_seconds)
    turns.runner.telemetry = RunTelemetry(exporters, agent_info(harness))
    return turns


async def run_scenario(
    scenario: Scenario, exporters: list[Exporter], *, slice_seconds: float | None = 0
) -> tuple[list[dict[str, Any]], RunState]:
    """Run the scenario's turn to its pause with ``exporters`` attached (one step per slice by
    default); returns the run's chunks and its last state."""
    turns = observed_turns(scenario.harness(), exporters, slice_seconds=slice_seconds)
    chunks, state = await turns.ask(scenario.prompt)
    assert state.status == "awaiting_tool_approval", state.error
    return chunks, state


def tool_calls_of(chunks: list[dict[str, Any]]) -> dict[str, str]:
    """Tool call id -> tool name, as the client saw them."""
    return {c["toolCallId"]: c["toolName"] for c in chunks if c["type"] == "tool-input-available"}
