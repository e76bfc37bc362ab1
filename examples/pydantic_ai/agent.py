"""An agent file whose agent is a Pydantic AI ``Agent`` (needs ``pip install 'durable-harness[pydantic-ai]'``).

Serve it with ``AGENT=examples.pydantic_ai.agent:agent make dev`` (from the repository root).
``PYDANTIC_AI_MODEL`` picks the model (any Pydantic AI model name, e.g. ``openai:gpt-4.1-mini``,
``bedrock:...``, with that provider's credentials); unset, a scripted demo model answers with no
credentials, streaming its answers word by word: it looks two items up (a step each), asks to
remove one (``remove`` needs the user's approval, a Pydantic AI deferred tool), then reports.
``report`` is the same agent with structured output (``StockReport``), which becomes the run's
``output`` in the run API.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator

from durable_harness.harness import PydanticAIHarness
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

INSTRUCTIONS = "You keep the stock list tidy. Look items up before removing them; removing needs approval."
STOCK = {"alpha": 12, "beta": 0, "gamma": 3}


def _demo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A scripted model: the same conversation always gets the same answers (each turn anew)."""
    asked = max((i for i, m in enumerate(messages) if any(isinstance(p, UserPromptPart) for p in m.parts)), default=0)
    steps = sum(1 for m in messages[asked:] if isinstance(m, ModelResponse))
    if steps == 0:
        return ModelResponse(parts=[TextPart("Let me check the stock."), ToolCallPart("lookup", {"name": "alpha"})])
    if steps == 1:
        return ModelResponse(parts=[ToolCallPart("lookup", {"name": "beta"})])
    if steps == 2:
        return ModelResponse(parts=[ToolCallPart("remove", {"name": "beta"})])
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    outcome = str(returns[-1].content) if returns else "nothing"
    if info.output_tools:  # structured output: answer through the output tool
        args = {"removed": ["beta"] if outcome == "beta removed" else [], "in_stock": ["alpha"]}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
    return ModelResponse(parts=[TextPart(f"Alpha is in stock. Beta: {outcome}.")])


async def _demo_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """The demo's answers streamed as a provider streams them: text a word at a time, tool
    arguments a few characters at a time."""
    for i, part in enumerate(_demo(messages, info).parts):
        if isinstance(part, TextPart):
            for word in re.findall(r"\S+\s*", part.content):
                yield word
        elif isinstance(part, ToolCallPart):
            args = part.args_as_json_str()
            for k in range(0, len(args), 8):
                first = k == 0
                yield {i: DeltaToolCall(name=part.tool_name if first else None, json_args=args[k : k + 8],
                                        tool_call_id=part.tool_call_id if first else None)}  # fmt: skip


def _model() -> Model | str:
    return os.environ.get("PYDANTIC_AI_MODEL") or FunctionModel(_demo, stream_function=_demo_stream, model_name="demo")


class StockReport(BaseModel):
    """The structured result of a ``report`` run."""

    removed: list[str]
    in_stock: list[str]


def _agent(output_type: type = str) -> Agent:  # type: ignore[type-arg]
    stock: Agent = Agent(_model(), instructions=INSTRUCTIONS, output_type=output_type)  # type: ignore[type-arg]

    @stock.tool_plain
    def lookup(name: str) -> dict[str, object]:
        """How many of an item are in stock."""
        return {"item": name, "count": STOCK.get(name, 0)}

    @stock.tool_plain(requires_approval=True)
    def remove(name: str) -> str:
        """Remove an item from the list (the user must approve)."""
        return f"{name} removed"

    return stock


agent = PydanticAIHarness(_agent())
report = PydanticAIHarness(_agent(StockReport))
