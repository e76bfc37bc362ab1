"""Harness stream parts (``HarnessV1StreamPart``): the 19 events a harness adapter emits per turn.

Decoding follows ``harnessV1StreamPartSchema`` of ``@ai-sdk/harness`` 1.0.122 (zod 4.6.7): unknown
``type`` rejected, unknown extra keys stripped, ``null`` rejected for optional fields, the
``unknown`` keys ``error`` / ``rawValue`` required but ``null`` allowed. Encoding writes ``type``
first, then the camelCase fields, like the Go port's ``MarshalStreamPart``.
"""

import json
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field

from ..errors import ProtocolError
from ..wire import RARE, JSONValue, ProviderMetadata
from .ui_chunks import FinishReasonName, StrictWireModel, validate_tagged

HarnessMetadata = dict[str, dict[str, JSONValue]]
"""``Record<string, Record<string, JSONValue>>``; the outer key is the harness id."""

Number = int | float
"""``z.number()``: ints stay ints so they re-encode without a ``.0``."""

# --- shared shapes --------------------------------------------------------------------------------


class UnsupportedSettingWarning(StrictWireModel):
    """The runtime ignores a call setting."""

    type: Literal["unsupported-setting"] = "unsupported-setting"
    setting: str
    details: str | None = None


class UnsupportedToolWarning(StrictWireModel):
    """The runtime cannot use a tool."""

    type: Literal["unsupported-tool"] = "unsupported-tool"
    tool: str
    details: str | None = None


class OtherWarning(StrictWireModel):
    """Any other warning."""

    type: Literal["other"] = "other"
    message: str


CallWarning = Annotated[UnsupportedSettingWarning | UnsupportedToolWarning | OtherWarning, Field(discriminator="type")]
"""A warning of ``stream-start``."""


class FinishReason(StrictWireModel):
    """Why a step or turn ended: the unified reason plus the runtime's own word for it."""

    unified: FinishReasonName
    raw: str | None = None


class InputTokens(StrictWireModel):
    """Input token counts; every counter is optional."""

    total: Number | None = None
    no_cache: Number | None = None
    cache_read: Number | None = None
    cache_write: Number | None = None


class OutputTokens(StrictWireModel):
    """Output token counts; every counter is optional."""

    total: Number | None = None
    text: Number | None = None
    reasoning: Number | None = None


class Usage(StrictWireModel):
    """Token usage; ``inputTokens`` and ``outputTokens`` are required objects (may be empty)."""

    input_tokens: InputTokens
    output_tokens: OutputTokens
    raw: dict[str, JSONValue] | None = None


# --- the 19 parts ---------------------------------------------------------------------------------


class HarnessPartModel(StrictWireModel):
    """Base class of every harness stream part."""

    type: str


class StreamStartPart(HarnessPartModel):
    """The turn's stream began; ``modelId`` is the model the runtime resolved."""

    type: Literal["stream-start"] = "stream-start"
    warnings: list[CallWarning] | None = None
    model_id: str | None = None


class TextStartPart(HarnessPartModel):
    """Opens a text block."""

    type: Literal["text-start"] = "text-start"
    id: str
    harness_metadata: HarnessMetadata | None = None


class TextDeltaPart(HarnessPartModel):
    """A piece of text."""

    type: Literal["text-delta"] = "text-delta"
    id: str
    delta: str
    harness_metadata: HarnessMetadata | None = None


class TextEndPart(HarnessPartModel):
    """Closes a text block."""

    type: Literal["text-end"] = "text-end"
    id: str
    harness_metadata: HarnessMetadata | None = None


class ReasoningStartPart(HarnessPartModel):
    """Opens a reasoning block."""

    type: Literal["reasoning-start"] = "reasoning-start"
    id: str
    harness_metadata: HarnessMetadata | None = None


class ReasoningDeltaPart(HarnessPartModel):
    """A piece of reasoning."""

    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    delta: str
    harness_metadata: HarnessMetadata | None = None


class ReasoningEndPart(HarnessPartModel):
    """Closes a reasoning block."""

    type: Literal["reasoning-end"] = "reasoning-end"
    id: str
    harness_metadata: HarnessMetadata | None = None


class ToolInputStartPart(HarnessPartModel):
    """A tool call starts streaming its input; ``id`` is the tool call id."""

    type: Literal["tool-input-start"] = "tool-input-start"
    id: str
    tool_name: str
    provider_metadata: ProviderMetadata | None = None
    provider_executed: bool | None = None
    dynamic: bool | None = None
    title: str | None = None


class ToolInputDeltaPart(HarnessPartModel):
    """A piece of a tool call's JSON input text."""

    type: Literal["tool-input-delta"] = "tool-input-delta"
    id: str
    delta: str
    provider_metadata: ProviderMetadata | None = None


class ToolInputEndPart(HarnessPartModel):
    """The tool call's input finished streaming."""

    type: Literal["tool-input-end"] = "tool-input-end"
    id: str
    provider_metadata: ProviderMetadata | None = None


class ToolCallPart(HarnessPartModel):
    """A complete tool call; ``input`` is the stringified JSON input."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: str
    provider_executed: bool | None = None
    dynamic: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    native_name: str | None = None
    step_tool_call_count: Annotated[int, Field(gt=0)] | None = None


class ToolApprovalRequestPart(HarnessPartModel):
    """The runtime asks for approval of a tool call it already emitted."""

    model_config = RARE

    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str
    provider_metadata: ProviderMetadata | None = None


class ToolResultPart(HarnessPartModel):
    """A tool call's result; ``result`` is required and may be ``null``."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    result: JSONValue
    is_error: bool | None = None
    preliminary: bool | None = None
    dynamic: bool | None = None
    provider_metadata: ProviderMetadata | None = None


class FinishStepPart(HarnessPartModel):
    """A model step ended."""

    type: Literal["finish-step"] = "finish-step"
    finish_reason: FinishReason
    usage: Usage
    harness_metadata: HarnessMetadata | None = None


class FinishPart(HarnessPartModel):
    """The turn ended."""

    type: Literal["finish"] = "finish"
    finish_reason: FinishReason
    total_usage: Usage
    harness_metadata: HarnessMetadata | None = None


class FileChangePart(HarnessPartModel):
    """A workspace file changed through a mechanism with no visible tool call."""

    model_config = RARE

    type: Literal["file-change"] = "file-change"
    event: Literal["create", "modify", "delete"]
    path: str
    harness_metadata: HarnessMetadata | None = None


class CompactionPart(HarnessPartModel):
    """The runtime compacted its context."""

    model_config = RARE

    type: Literal["compaction"] = "compaction"
    trigger: Literal["manual", "auto"]
    summary: str
    tokens_before: Number | None = None
    tokens_after: Number | None = None
    harness_metadata: HarnessMetadata | None = None


class ErrorPart(HarnessPartModel):
    """A runtime error; the ``error`` key must exist (``null`` allowed)."""

    model_config = RARE

    type: Literal["error"] = "error"
    error: JSONValue


class RawPart(HarnessPartModel):
    """Adapter-specific passthrough; the ``rawValue`` key must exist (``null`` allowed)."""

    model_config = RARE

    type: Literal["raw"] = "raw"
    raw_value: JSONValue


HarnessStreamPart: TypeAlias = (
    StreamStartPart | TextStartPart | TextDeltaPart | TextEndPart | ReasoningStartPart
    | ReasoningDeltaPart | ReasoningEndPart | ToolInputStartPart | ToolInputDeltaPart | ToolInputEndPart
    | ToolCallPart | ToolApprovalRequestPart | ToolResultPart | FinishStepPart | FinishPart
    | FileChangePart | CompactionPart | ErrorPart | RawPart
)  # fmt: skip
"""Any of the 19 harness stream parts."""

PART_CLASSES: dict[str, type[HarnessPartModel]] = {
    cls.model_fields["type"].default: cls for cls in HarnessPartModel.__subclasses__()
}
"""Part class by ``type``."""


def decode_part(obj: dict[str, Any] | str | bytes) -> HarnessStreamPart:
    """A harness part from its JSON object (or JSON text), validated like ``harnessV1StreamPartSchema``.

    Raises :class:`UnknownPartTypeError` for an unknown ``type`` and :class:`ProtocolError` naming
    the type and the key for anything else.
    """
    if isinstance(obj, str | bytes):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise ProtocolError(f"harness stream part is not valid JSON: {exc}") from None
    return validate_tagged(obj, PART_CLASSES, "harness stream part")  # type: ignore[return-value]


def encode_part(part: HarnessPartModel) -> str:
    """Compact JSON of a part: ``type`` first, then the camelCase fields."""
    return part.to_json()
