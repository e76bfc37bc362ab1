"""Deterministic models for tests: a scripted model and a function model.

``ScriptedModel`` plays back one list of parts per call; ``FunctionModel`` asks a Python function
what to stream. Helpers build the parts of common steps (a text reply, tool calls).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from ..errors import ModelError
from ..messages import AssistantMessage, UserMessage
from ..protocol import harness_parts as hp
from .base import ModelRequest, ModelStreamPart, finish

StepFunction = Callable[[ModelRequest, int], Iterable[ModelStreamPart] | AsyncIterator[ModelStreamPart]]


class FunctionModel:
    """A model whose every call is answered by ``function(request, step_index)``.

    ``step_index`` counts the model calls of the current turn (assistant messages after the last
    user message), so a step that is redone after a crash gets the same answer. The function
    returns (or is a generator of) harness parts; it may raise
    :class:`~durable_harness.errors.ModelError` to fail the call. ``delay`` seconds pass
    between parts, for tests of streaming behaviour.
    """

    def __init__(self, function: StepFunction, *, model_id: str = "function", delay: float = 0.0) -> None:
        self._function = function
        self._model_id = model_id
        self.delay = delay
        self.requests: list[ModelRequest] = []

    @property
    def model_id(self) -> str:
        """The id given at construction."""
        return self._model_id

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Yield the parts the function gives for this call."""
        index = turn_step_index(request)
        self.requests.append(request)
        produced = self._function(request, index)
        if inspect.isasyncgen(produced) or hasattr(produced, "__anext__"):
            async for part in produced:  # type: ignore[union-attr]
                yield part
                if self.delay:
                    await asyncio.sleep(self.delay)
        else:
            for part in produced:
                yield part
                if self.delay:
                    await asyncio.sleep(self.delay)


def turn_step_index(request: ModelRequest) -> int:
    """How many model calls of the current turn came before this one."""
    index = 0
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            break
        index += isinstance(message, AssistantMessage)
    return index


class ScriptedModel(FunctionModel):
    """Plays back ``steps[i]`` for the i-th step of a turn; a step may also be an exception to raise."""

    def __init__(self, steps: Sequence[Sequence[ModelStreamPart] | BaseException], *, delay: float = 0.0) -> None:
        self.steps = list(steps)
        super().__init__(self._play, model_id="scripted", delay=delay)

    def _play(self, request: ModelRequest, index: int) -> Iterable[ModelStreamPart]:
        if index >= len(self.steps):
            raise ModelError(f"scripted model has {len(self.steps)} steps; call {index + 1} was not scripted")
        step = self.steps[index]
        if isinstance(step, BaseException):
            raise step
        return list(step)


def text_step(
    text: str, *, part_id: str = "t0", pieces: int | None = None, reason: str = "stop"
) -> list[ModelStreamPart]:
    """The parts of a step that answers ``text`` (split into words, or into ``pieces`` parts)."""
    if pieces is None:
        words = text.split(" ")
        deltas = [w if i == 0 else " " + w for i, w in enumerate(words)]
    else:
        size = max(1, -(-len(text) // pieces))
        deltas = [text[i : i + size] for i in range(0, len(text), size)]
    parts: list[ModelStreamPart] = [hp.TextStartPart(id=part_id)]
    parts += [hp.TextDeltaPart(id=part_id, delta=d) for d in deltas if d]
    parts += [hp.TextEndPart(id=part_id), finish(reason, input_tokens=10, output_tokens=len(deltas))]
    return parts


def tool_calls_step(*calls: tuple[str, str, Any], text: str | None = None) -> list[ModelStreamPart]:
    """The parts of a step that calls tools: each call is ``(tool_call_id, tool_name, input)``."""
    parts: list[ModelStreamPart] = []
    if text:
        parts += text_step(text)[:-1]
    for call_id, name, arguments in calls:
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
        parts += [
            hp.ToolInputStartPart(id=call_id, tool_name=name),
            hp.ToolInputDeltaPart(id=call_id, delta=raw),
            hp.ToolInputEndPart(id=call_id),
            hp.ToolCallPart(tool_call_id=call_id, tool_name=name, input=raw),
        ]
    parts.append(finish("tool-calls", input_tokens=10, output_tokens=5))
    return parts
