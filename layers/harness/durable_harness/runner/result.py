"""A run's result assembled from what the runner recorded, the same for every harness.

The run's chunk log is the message the client holds; the AI SDK's ``convertToModelMessages``
makes it the turn's response messages, and each step (the parts between two ``step-start``)
becomes a step record with the finish reason and usage the runner noted at its ``finish-step``.
A harness's ``run_result`` may give its own ``text``, ``steps`` and ``responseMessages`` (the
built-in loop does, from its history); what it leaves out comes from here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..agent.control import TokenUsage
from ..agent.results import StepRecord
from ..errors import ProtocolError
from ..messages import AssistantMessage, ModelMessage, ToolCallContent, ToolMessage, ToolResultContent
from ..protocol.assemble import UIMessageAssembler
from ..protocol.ui_messages import convert_to_model_messages, parse_ui_messages
from .state import StepMark

RECORDED_KEYS = ("text", "steps", "responseMessages")
"""What every run's result has, from the harness or else from here."""


def assemble_lenient(chunks: Sequence[str]) -> dict[str, Any]:
    """The assistant message of a run's chunks. A run that continues a paused one shows results
    of calls made in the paused run's part of the message: those chunks are left out here."""
    assembler = UIMessageAssembler()
    for raw in chunks:
        try:
            assembler.apply(json.loads(raw))
        except ProtocolError:
            if assembler.finished:
                break
            assembler.error = None  # a chunk about a call this run's chunks do not hold: skipped
    return assembler.message()


def _blocks(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The message's parts per step (a ``step-start`` opens each)."""
    blocks: list[list[dict[str, Any]]] = []
    for part in parts:
        if part["type"] == "step-start" or not blocks:
            blocks.append([])
        if part["type"] != "step-start":
            blocks[-1].append(part)
    return [b for b in blocks if b]


def recorded_result(chunks: Sequence[str], marks: Sequence[StepMark]) -> dict[str, Any]:
    """``text`` (the last step's), ``steps`` and ``responseMessages`` of a run from its chunk log
    and the step marks of its state (the k-th mark is the k-th step's ``finish-step``)."""
    response: list[ModelMessage] = []
    steps: list[StepRecord] = []
    for number, block in enumerate(_blocks(assemble_lenient(chunks)["parts"])):
        message = {"id": "m", "role": "assistant", "parts": [{"type": "step-start"}, *block]}
        converted = convert_to_model_messages(parse_ui_messages([message]))
        response.extend(converted)
        mark = marks[number] if number < len(marks) else StepMark(finish_reason="other")  # cut by an error
        parts = [p for m in converted if isinstance(m, AssistantMessage | ToolMessage) for p in m.content]
        steps.append(
            StepRecord(
                step_number=number,
                finish_reason=mark.finish_reason,
                usage=TokenUsage(input_tokens=mark.input_tokens, output_tokens=mark.output_tokens),
                text="".join(p["text"] for p in block if p["type"] == "text"),
                tool_calls=[p for p in parts if isinstance(p, ToolCallContent)],
                tool_results=[p for p in parts if isinstance(p, ToolResultContent)],
            )
        )
    return {
        "text": steps[-1].text if steps else "",
        "steps": [s.to_dict() for s in steps],
        "responseMessages": [m.to_dict() for m in response],
    }


__all__ = ["RECORDED_KEYS", "assemble_lenient", "recorded_result"]
