"""A demo model that needs no credentials: it streams real-looking replies and calls tools.

It is deterministic: the same conversation always gives the same reply. Ask it about the weather
in a city and it calls the ``get_weather`` tool (when the agent has one), then answers with the
tool's result. Anything else gets a short reply that says what it is.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from ..messages import TextPart, ToolMessage, ToolResultContent, UserMessage
from ..protocol import harness_parts as hp
from .base import ModelRequest, ModelStreamPart, finish

_WEATHER = re.compile(r"weather\s+(?:in|for|at)\s+([A-Za-zÀ-ÿ' .-]+?)(?:[?.!,]|$)", re.IGNORECASE)
_LONG = re.compile(r"\blong task\b", re.IGNORECASE)
LONG_TASK_STEPS = 5
"""Steps of the demo's long task: one ``long_step`` tool call each, then a summary."""
_NOTE = re.compile(r"\b(?:save|write|take)\s+(?:a\s+)?note\b[:\s]*(.*)", re.IGNORECASE | re.DOTALL)


class DemoModel:
    """The demo model; ``delay`` seconds pass between streamed pieces (0 in tests)."""

    def __init__(self, *, delay: float = 0.03) -> None:
        self.delay = delay
        self.calls = 0

    @property
    def model_id(self) -> str:
        """Always ``"demo"``."""
        return "demo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Stream the reply to the conversation in ``request``."""
        self.calls += 1
        step = sum(1 for m in request.messages if isinstance(m, ToolMessage))
        last = request.messages[-1] if request.messages else None
        yield hp.StreamStartPart(model_id="demo")
        tools = {t.name for t in request.tools}
        prompt = _user_text(_last_user(request))
        if _LONG.search(prompt) and "long_step" in tools:
            done = _long_steps_done(request)
            if done < LONG_TASK_STEPS:
                async for part in self._call_tool("long_step", {"part": done + 1, "of": LONG_TASK_STEPS}, step):
                    yield part
                return
        if isinstance(last, ToolMessage):
            async for part in self._answer_from_results(last, step):
                yield part
            return
        city = _WEATHER.search(prompt)
        note = _NOTE.search(prompt)
        if city and "get_weather" in tools:
            async for part in self._call_weather(city.group(1).strip(), step):
                yield part
            return
        if note and "save_note" in tools:
            text = note.group(1).strip() or "Remember to try durable-harness."
            async for part in self._call_tool("save_note", {"title": " ".join(text.split()[:4]), "text": text}, step):
                yield part
            return
        async for part in self._text(_reply(prompt, [t.name for t in request.tools]), f"txt-{step}"):
            yield part
        yield finish("stop", input_tokens=_tokens(request), output_tokens=40)

    async def _call_weather(self, city: str, step: int) -> AsyncIterator[ModelStreamPart]:
        rid = f"rsn-{step}"
        yield hp.ReasoningStartPart(id=rid)
        for piece in _pieces(f"The user wants the weather in {city}. I will call get_weather."):
            await self._pause()
            yield hp.ReasoningDeltaPart(id=rid, delta=piece)
        yield hp.ReasoningEndPart(id=rid)
        async for part in self._call_tool("get_weather", {"city": city}, step):
            yield part

    async def _call_tool(self, name: str, arguments: dict[str, Any], step: int) -> AsyncIterator[ModelStreamPart]:
        cid = f"call_demo_{step}"
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        yield hp.ToolInputStartPart(id=cid, tool_name=name)
        for i in range(0, len(text), 8):
            await self._pause()
            yield hp.ToolInputDeltaPart(id=cid, delta=text[i : i + 8])
        yield hp.ToolInputEndPart(id=cid)
        yield hp.ToolCallPart(tool_call_id=cid, tool_name=name, input=text)
        yield finish("tool-calls", input_tokens=60, output_tokens=20)

    async def _answer_from_results(self, results: ToolMessage, step: int) -> AsyncIterator[ModelStreamPart]:
        facts = []
        for result in results.content:
            if not isinstance(result, ToolResultContent):
                continue
            value: Any = getattr(result.output, "value", None)
            if result.output.type == "execution-denied" or (
                result.output.type == "error-text" and "denied" in str(value).lower()
            ):
                facts.append(f"Understood: I did not run {result.tool_name}.")
            elif result.output.type in ("error-text", "error-json"):
                facts.append(f"{result.tool_name} failed: {str(value).rstrip('.')}.")
            elif result.tool_name == "long_step" and isinstance(value, dict):
                facts.append(f"All {value.get('of')} parts of the long task are done.")
            elif isinstance(value, dict) and {"city", "tempC"} <= value.keys():
                facts.append(f"It is {value['tempC']} °C and {value.get('conditions', 'clear')} in {value['city']}.")
            else:
                facts.append(f"The tool returned: {json.dumps(value, ensure_ascii=False)}.")
        text = " ".join(facts) + " (This is the demo model.)"
        async for part in self._text(text, f"txt-{step}"):
            yield part
        yield finish("stop", input_tokens=80, output_tokens=30)

    async def _text(self, text: str, part_id: str) -> AsyncIterator[ModelStreamPart]:
        yield hp.TextStartPart(id=part_id)
        for piece in _pieces(text):
            await self._pause()
            yield hp.TextDeltaPart(id=part_id, delta=piece)
        yield hp.TextEndPart(id=part_id)

    async def _pause(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)


def _last_user(request: ModelRequest) -> object:
    return next((m for m in reversed(request.messages) if isinstance(m, UserMessage)), None)


def _long_steps_done(request: ModelRequest) -> int:
    """``long_step`` results since the last user message."""
    done = 0
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            break
        if isinstance(message, ToolMessage):
            done += sum(1 for p in message.content if isinstance(p, ToolResultContent) and p.tool_name == "long_step")
    return done


def _user_text(message: object) -> str:
    if isinstance(message, UserMessage):
        return " ".join(p.text for p in message.content if isinstance(p, TextPart)).strip()
    return ""


def _reply(prompt: str, tools: list[str]) -> str:
    said = f'You said: "{prompt}". ' if prompt else ""
    hint = ' Try "What is the weather in Paris?" to see a tool call.' if "get_weather" in tools else ""
    if "long_step" in tools:
        hint += ' "Run a long task" takes several steps (and, with a short SLICE_SECONDS, several slices).'
    return (
        f"{said}I am the demo model of durable-harness, streaming this reply through a durable run: "
        f"every chunk is written to the run's log before it reaches you, so a dropped connection "
        f"resumes exactly where it stopped.{hint}"
    )


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _tokens(request: ModelRequest) -> int:
    return 20 + sum(len(m.model_dump_json()) for m in request.messages) // 4
