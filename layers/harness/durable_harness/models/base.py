"""One streaming interface for every language model.

A model call takes a :class:`ModelRequest` and yields harness stream parts
(:mod:`durable_harness.protocol.harness_parts`): ``stream-start``, ``text-*``, ``reasoning-*``,
``tool-input-*``, ``tool-call``, and finally one ``finish`` part whose ``totalUsage`` is the usage
of this call. A failed call raises :class:`~durable_harness.errors.ModelError`.
"""

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ..messages import ModelMessage
from ..protocol import harness_parts as hp


class ToolDefinition(BaseModel):
    """What a model is told about a tool: its name, description and JSON schema of its input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(BaseModel):
    """Everything one model call needs."""

    instructions: str | None = None
    messages: list[ModelMessage]
    tools: list[ToolDefinition] = Field(default_factory=list)
    tool_choice: Literal["auto", "none", "required"] | dict[str, str] = "auto"
    response_format: dict[str, Any] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


ModelStreamPart = hp.HarnessStreamPart
"""A part a model stream yields (a subset of the harness stream parts)."""


@runtime_checkable
class LanguageModel(Protocol):
    """A language model that streams its response as harness stream parts."""

    @property
    def model_id(self) -> str:
        """A string naming the provider and model, e.g. ``"demo"`` or ``"bedrock:..."``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Start one model call; iterate to receive its parts."""
        ...


def usage(input_tokens: int | None = None, output_tokens: int | None = None) -> hp.Usage:
    """A usage record with just totals."""
    return hp.Usage(input_tokens=hp.InputTokens(total=input_tokens), output_tokens=hp.OutputTokens(total=output_tokens))


def finish(reason: str = "stop", *, input_tokens: int | None = None, output_tokens: int | None = None) -> hp.FinishPart:
    """The ``finish`` part that ends a model call."""
    return hp.FinishPart(
        finish_reason=hp.FinishReason(unified=reason),  # type: ignore[arg-type]
        total_usage=usage(input_tokens, output_tokens),
    )
