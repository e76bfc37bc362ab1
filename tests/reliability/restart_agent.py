"""The agent of the restart suite (``tests/node/test/restart.test.js``): a multi-step run whose
model and tool can be held at named points, so that the test kills the server exactly there.

``AGENT=tests.reliability.restart_agent:build_agent`` with ``RESTART_GATES=<folder>``. The run::

    step 0  "I will do this in three parts." (held mid-text at ``text-0``) + work(part=1)
    step 1  work(part=2)                      (the tool held at ``tool-2``)
    step 2  work(part=3)
    step 3  (held before the model call at ``step-3``) "All three parts are done: 1, 4, 9."

A point ``P`` holds while the file ``hold-P`` exists in the folder; on reaching it the agent
creates ``at-P``, which the test waits for. Every execution of the tool appends its part to
``executions.log`` before anything else, so the test counts executions across processes.
The replies depend only on the conversation, so a step redone after a restart is the same step.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from durable_harness import Agent, tool
from durable_harness.messages import ToolMessage, ToolResultContent
from durable_harness.models.base import ModelRequest, ModelStreamPart, finish
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from pydantic import BaseModel, Field

PARTS = 3
PLAN = "I will do this in three parts, one after the other, and then tell you how it went."


def _gates() -> Path:
    return Path(os.environ["RESTART_GATES"])


def _reached(point: str) -> bool:
    """Whether ``point`` holds; if it does, tell the test the agent is there."""
    if not (_gates() / f"hold-{point}").exists():
        return False
    (_gates() / f"at-{point}").touch()
    return True


async def _hold(point: str) -> None:
    if _reached(point):
        while (_gates() / f"hold-{point}").exists():
            await asyncio.sleep(0.01)


class WorkInput(BaseModel):
    """Input of ``work``."""

    part: int = Field(ge=1, le=PARTS)


@tool
def work(input: WorkInput) -> dict[str, int]:
    """Do one part of the task."""
    with open(_gates() / "executions.log", "a") as log:
        log.write(f"{input.part}\n")
    if _reached(f"tool-{input.part}"):
        while (_gates() / f"hold-tool-{input.part}").exists():
            time.sleep(0.01)
    return {"part": input.part, "result": input.part**2}


async def _script(request: ModelRequest, step: int) -> AsyncIterator[ModelStreamPart]:
    if step == 0:
        text = text_step(PLAN)[:-1]  # without its finish: the step goes on with a tool call
        half = len(text) // 2
        for part in text[:half]:
            yield part
        await _hold("text-0")
        for part in [*text[half:], *tool_calls_step(("call-1", "work", {"part": 1}))]:
            yield part
        return
    if step < PARTS:
        for part in tool_calls_step((f"call-{step + 1}", "work", {"part": step + 1})):
            yield part
        return
    await _hold(f"step-{step}")
    results = [
        str(p.output.value["result"])  # type: ignore[union-attr]
        for m in request.messages
        if isinstance(m, ToolMessage)
        for p in m.content
        if isinstance(p, ToolResultContent)
    ]
    for part in text_step(f"All three parts are done: {', '.join(results)}.")[:-1]:
        yield part
    yield finish("stop", input_tokens=10, output_tokens=10)


def build_agent() -> Agent:
    """The restart suite's agent (gates in ``RESTART_GATES``; ``RESTART_DELAY`` s between parts)."""
    delay = float(os.environ.get("RESTART_DELAY", "0.002"))
    return Agent(model=FunctionModel(_script, model_id="restart", delay=delay), tools=[work])
