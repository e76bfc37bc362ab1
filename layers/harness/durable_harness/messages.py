"""Model messages: what an agent sends to a language model, shaped like the AI SDK's ``ModelMessage``.

These are tagged, serializable pydantic models; their JSON (``to_dict``) is the JSON of the AI
SDK's ``ModelMessage`` for the same content, so reference examples compare directly.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from .wire import JSONValue, ProviderMetadata, WireModel

# --- content parts --------------------------------------------------------------------------------


class TextPart(WireModel):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str
    provider_options: ProviderMetadata | None = None


class FileUrlData(WireModel):
    """File content addressed by a URL (``data:`` URLs included)."""

    type: Literal["url"] = "url"
    url: str


class FileReferenceData(WireModel):
    """File content held by a provider, addressed by provider-specific references."""

    type: Literal["reference"] = "reference"
    reference: dict[str, str]


FileData = Annotated[FileUrlData | FileReferenceData, Field(discriminator="type")]


class FilePart(WireModel):
    """A file (image, PDF, ...) sent to or produced by the model."""

    type: Literal["file"] = "file"
    media_type: str
    data: FileData
    filename: str | None = None
    provider_options: ProviderMetadata | None = None


class ReasoningPart(WireModel):
    """The model's reasoning text."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    provider_options: ProviderMetadata | None = None


class ReasoningFilePart(WireModel):
    """A file produced as part of the model's reasoning."""

    type: Literal["reasoning-file"] = "reasoning-file"
    media_type: str
    data: FileData
    provider_options: ProviderMetadata | None = None


class CustomPart(WireModel):
    """A provider-specific content part (``kind`` is ``"provider.type"``)."""

    type: Literal["custom"] = "custom"
    kind: str
    provider_options: ProviderMetadata | None = None


class ToolCallContent(WireModel):
    """A call of a tool by the model; ``input`` is the parsed JSON input."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JSONValue
    provider_executed: bool | None = None
    provider_options: ProviderMetadata | None = None


class TextOutput(WireModel):
    """A tool result given to the model as text."""

    type: Literal["text"] = "text"
    value: str


class JsonOutput(WireModel):
    """A tool result given to the model as JSON."""

    type: Literal["json"] = "json"
    value: JSONValue


class ErrorTextOutput(WireModel):
    """A failed tool call, described as text."""

    type: Literal["error-text"] = "error-text"
    value: str


class ErrorJsonOutput(WireModel):
    """A failed tool call, described as JSON."""

    type: Literal["error-json"] = "error-json"
    value: JSONValue


class ExecutionDeniedOutput(WireModel):
    """The user denied the tool call."""

    type: Literal["execution-denied"] = "execution-denied"
    reason: str | None = None


ToolResultOutput = Annotated[
    TextOutput | JsonOutput | ErrorTextOutput | ErrorJsonOutput | ExecutionDeniedOutput,
    Field(discriminator="type"),
]


class ToolResultContent(WireModel):
    """The result of a tool call."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: ToolResultOutput
    provider_options: ProviderMetadata | None = None


class ToolApprovalRequestContent(WireModel):
    """The server asked the user to approve a tool call (signed when a secret is configured)."""

    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str
    is_automatic: bool | None = None
    reason: str | None = None
    input_schema_input: JSONValue | None = None
    signature: str | None = None


class ToolApprovalResponsePart(WireModel):
    """The user's answer to an approval request."""

    type: Literal["tool-approval-response"] = "tool-approval-response"
    approval_id: str
    approved: bool
    reason: str | None = None
    provider_executed: bool | None = None


UserContent = Annotated[TextPart | FilePart, Field(discriminator="type")]
AssistantContent = Annotated[
    TextPart
    | FilePart
    | ReasoningPart
    | ReasoningFilePart
    | CustomPart
    | ToolCallContent
    | ToolResultContent
    | ToolApprovalRequestContent,
    Field(discriminator="type"),
]
ToolContent = Annotated[ToolResultContent | ToolApprovalResponsePart, Field(discriminator="type")]

# --- messages -------------------------------------------------------------------------------------


class SystemMessage(WireModel):
    """Instructions for the model."""

    role: Literal["system"] = "system"
    content: str
    provider_options: ProviderMetadata | None = None


class UserMessage(WireModel):
    """A message from the user."""

    role: Literal["user"] = "user"
    content: list[UserContent]
    provider_options: ProviderMetadata | None = None


class AssistantMessage(WireModel):
    """What the model produced in one step (text, reasoning, tool calls)."""

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent]
    provider_options: ProviderMetadata | None = None


class ToolMessage(WireModel):
    """Tool results and approval responses, sent back to the model."""

    role: Literal["tool"] = "tool"
    content: list[ToolContent]
    provider_options: ProviderMetadata | None = None


ModelMessage = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]

_MESSAGES: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage])


def parse_messages(data: list[dict[str, Any]]) -> list[ModelMessage]:
    """Model messages from their JSON objects (accepts a plain string as user/assistant content)."""
    normalized = [
        {**item, "content": [{"type": "text", "text": item["content"]}]}
        if isinstance(item, dict) and isinstance(item.get("content"), str) and item.get("role") in ("user", "assistant")
        else item
        for item in data
    ]
    return _MESSAGES.validate_python(normalized)
