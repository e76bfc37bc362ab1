"""The agent of the wait suites (``tests/waits``, ``tests/node/test/waits.test.js``): tools that
record a step, then wait for an event or sleep (issue 21).

``AGENT=tests.waits.wait_agent:build_agent`` with ``WAIT_DIR=<folder>``. The user's text picks the
tool: ``build`` calls ``run_build`` (a step that appends ``started`` to ``effects.log`` and writes
the event URL to ``url.txt``, then ``ctx.wait_for_event("build-done")``, with
``WAIT_TIMEOUT`` seconds as its timeout when set); ``nap`` calls ``nap`` (a step, then
``ctx.sleep(NAP_SECONDS)``, then a line ``woke`` in ``effects.log``). The model then answers with
the tool's result.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from durable_harness import Agent, ToolContext, WaitTimeout, tool
from durable_harness.messages import TextPart, ToolMessage, ToolResultContent, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from pydantic import BaseModel


def _dir() -> Path:
    return Path(os.environ["WAIT_DIR"])


def _note(line: str) -> None:
    with (_dir() / "effects.log").open("a") as f:
        f.write(line + "\n")


class Repo(BaseModel):
    """Input of ``run_build``."""

    repo: str


class Nap(BaseModel):
    """Input of ``nap``."""

    label: str = "nap"


@tool
async def run_build(input: Repo, ctx: ToolContext) -> dict[str, Any]:
    """Start a build and wait for the build system's event."""
    raw = os.environ.get("WAIT_TIMEOUT")
    timeout = float(raw) if raw else None
    hook = ctx.event_url("build-done", timeout_seconds=timeout)

    def start() -> dict[str, str]:
        _note(f"started {input.repo}")
        (_dir() / "url.txt").write_text(hook)
        return {"id": "build-1"}

    build = await ctx.step("start", start)
    try:
        event = await ctx.wait_for_event("build-done", timeout_seconds=timeout)
    except WaitTimeout as exc:
        return {"build": build["id"], "status": "timeout", "error": str(exc)}
    return {"build": build["id"], "status": event.get("status") if isinstance(event, dict) else event}


@tool
async def nap(input: Nap, ctx: ToolContext) -> dict[str, Any]:
    """Sleep durably, then say so."""
    await ctx.step("before", lambda: _note(f"napping {input.label}"))
    await ctx.sleep(float(os.environ.get("NAP_SECONDS", "2")))
    await ctx.step("after", lambda: _note(f"woke {input.label}"))
    return {"slept": True, "label": input.label}


async def _script(request: ModelRequest, step: int) -> AsyncIterator[ModelStreamPart]:
    results = [p.output.value for m in request.messages if isinstance(m, ToolMessage) for p in m.content
               if isinstance(p, ToolResultContent)]  # fmt: skip
    if results:
        for part in text_step(f"Done: {json.dumps(results[-1], sort_keys=True)}"):
            yield part
        return
    last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
    text = " ".join(p.text for p in last.content if isinstance(p, TextPart))
    call = ("call-1", "nap", {"label": "n1"}) if "nap" in text else ("call-1", "run_build", {"repo": "acme/app"})
    for part in tool_calls_step(call):
        yield part


def build_agent() -> Agent:
    """The wait suites' agent."""
    return Agent(model=FunctionModel(_script, model_id="waits"), tools=[run_build, nap])
