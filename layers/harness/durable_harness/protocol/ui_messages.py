"""UI messages (what ``useChat`` POSTs) and their conversion to model messages.

Parsing follows the AI SDK's ``validateUIMessages`` (unknown part types rejected, optional fields
absent rather than ``null``, each tool state with its fields); errors carry the JSON path.
:func:`convert_to_model_messages` is ``convertToModelMessages`` of ``ai`` 7.0.173.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeAlias, TypeGuard

from pydantic import AfterValidator

from .. import messages as mm
from ..errors import ProtocolError, UnknownPartTypeError
from ..wire import JSONValue, ProviderMetadata
from . import ui_chunks as uc
from .sse import url_href
from .ui_chunks import StrictWireModel, type_prefix, validate_wire

# --- parts ----------------------------------------------------------------------------------------


class TextUIPart(StrictWireModel):
    """Text of a user or assistant message."""

    type: Literal["text"] = "text"
    text: str
    state: Literal["streaming", "done"] | None = None
    provider_metadata: ProviderMetadata | None = None
    citations: list[JSONValue] | None = None


class ReasoningUIPart(StrictWireModel):
    """The model's reasoning."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    id: str | None = None
    state: Literal["streaming", "done"] | None = None
    provider_metadata: ProviderMetadata | None = None


class FileUIPart(StrictWireModel):
    """A file: a browser upload (a ``data:`` URL) or a model output."""

    type: Literal["file"] = "file"
    media_type: str
    url: str
    filename: str | None = None
    provider_reference: dict[str, str] | None = None
    provider_metadata: ProviderMetadata | None = None


# The client pushes these chunks as parts of the very same shape.
DataUIPart = uc.DataChunk
"""App data ``data-<name>``; dropped by the conversion unless ``convert_data_part`` keeps it."""
ReasoningFileUIPart = uc.ReasoningFileChunk
"""A file produced as part of the model's reasoning."""
SourceUrlUIPart = uc.SourceUrlChunk
"""A cited URL (dropped by the conversion)."""
SourceDocumentUIPart = uc.SourceDocumentChunk
"""A cited document (dropped by the conversion)."""
CustomUIPart = uc.CustomChunk
"""A provider-specific part."""


class StepStartUIPart(StrictWireModel):
    """A step boundary: assistant parts are split into model messages here."""

    type: Literal["step-start"] = "step-start"


class ToolApproval(StrictWireModel):
    """The approval of a tool part: the request fields, then the user's answer."""

    _nullable = frozenset({"descriptor", "inputSchemaInput"})
    id: str
    descriptor: JSONValue = None
    request_reason: str | None = None
    is_automatic: bool | None = None
    signature: str | None = None
    input_schema_input: JSONValue = None
    approved: bool | None = None
    reason: str | None = None


ToolState = Literal[
    "input-streaming", "input-available", "approval-requested", "approval-responded",
    "output-available", "output-error", "output-denied",
]  # fmt: skip
"""The lifecycle of a tool part."""


class _ToolPartFields(StrictWireModel):
    """Fields shared by static and dynamic tool parts (which ones are required depends on ``state``)."""

    _nullable = frozenset({"input", "output", "rawInput"})
    type: str
    tool_call_id: str
    state: ToolState
    title: str | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    input: JSONValue = None
    output: JSONValue = None
    error_text: str | None = None
    raw_input: JSONValue = None
    input_encoding: Literal["json", "text"] | None = None
    preliminary: bool | None = None
    provider_executed: bool | None = None
    call_provider_metadata: ProviderMetadata | None = None
    result_provider_metadata: ProviderMetadata | None = None
    approval: ToolApproval | None = None


class ToolUIPart(_ToolPartFields):
    """A call of a tool from the tool set; ``type`` is ``tool-<name>``."""

    type: Annotated[str, AfterValidator(type_prefix("tool-"))]

    @property
    def tool_name(self) -> str:
        """The tool's name (the ``type`` without ``tool-``)."""
        return self.type[5:]


class DynamicToolUIPart(_ToolPartFields):
    """A call of a tool not known statically (MCP tools, runtime built-ins, invalid calls)."""

    type: Literal["dynamic-tool"] = "dynamic-tool"
    tool_name: str
    dynamic: Literal[False] | None = None  # false: a static tool that is no longer available


UIPart: TypeAlias = (
    TextUIPart | ReasoningUIPart | FileUIPart | ReasoningFileUIPart | SourceUrlUIPart | SourceDocumentUIPart
    | CustomUIPart | StepStartUIPart | DataUIPart | ToolUIPart | DynamicToolUIPart
)  # fmt: skip
"""Any part of a UI message."""


class UIMessage(StrictWireModel):
    """A chat message as the client holds it."""

    _nullable = frozenset({"metadata"})
    id: str
    role: Literal["system", "user", "assistant"]
    metadata: JSONValue = None
    parts: list[UIPart]


# --- parsing --------------------------------------------------------------------------------------

_PART_CLASSES: dict[str, type[StrictWireModel]] = {cls.model_fields["type"].default: cls for cls in (
    TextUIPart, ReasoningUIPart, FileUIPart, ReasoningFileUIPart, SourceUrlUIPart, SourceDocumentUIPart,
    CustomUIPart, StepStartUIPart, DynamicToolUIPart,
)}  # fmt: skip
_PREFIXED_PART_CLASSES: dict[str, type[StrictWireModel]] = {"data-": DataUIPart, "tool-": ToolUIPart}
# Per state, as in validateUIMessages: the fields a tool part needs, the fields it must not have,
# and the value ``approval.approved`` must have when there is an approval (``...``: any boolean).
_TOOL_STATE_RULES: dict[str, tuple[str, str, object]] = {
    "input-streaming": ("", "output errorText approval", ...),
    "input-available": ("input", "output errorText approval", ...),
    "approval-requested": ("input approval", "output errorText approval.approved approval.reason", ...),
    "approval-responded": ("input approval approval.approved", "output errorText", ...),
    "output-available": ("input output", "errorText", True),
    "output-error": ("errorText", "output", True),
    "output-denied": ("input approval", "output errorText", False),
}
_PRESENCE_KEYS = {"input": "input", "output": "output", "error_text": "errorText", "approval": "approval"}


def parse_ui_messages(data: Any) -> list[UIMessage]:
    """UI messages from the POSTed ``messages`` array (or a whole body holding one); a :class:`ProtocolError`
    starts with the JSON path, e.g. ``messages[1].parts[0]: unknown part type "foo"``."""
    if isinstance(data, dict) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list) or not data:
        raise ProtocolError("messages: expected a non-empty array of UI messages")
    messages = []
    for i, raw in enumerate(data):
        path = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise ProtocolError(f"{path}: expected a JSON object")
        raw_parts = raw.get("parts")
        if not isinstance(raw_parts, list):
            problem = "missing" if raw_parts is None else "invalid"
            raise ProtocolError(f'{path}: {problem} required field "parts"')
        message = validate_wire(UIMessage, {**raw, "parts": []}, path)
        message.parts = [_parse_part(part, f"{path}.parts[{j}]") for j, part in enumerate(raw_parts)]
        if not message.parts and message.role != "assistant":
            raise ProtocolError(f"{path}.parts: a {message.role} message must contain at least one part")
        messages.append(message)
    return messages


def _parse_part(obj: Any, path: str) -> UIPart:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{path}: expected a JSON object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f'{path}: a part needs a string "type"')
    cls = _PART_CLASSES.get(kind) or _PREFIXED_PART_CLASSES.get(kind[:5])
    if cls is None:
        raise UnknownPartTypeError(f'{path}: unknown part type "{kind}"')
    part = validate_wire(cls, obj, path)
    if isinstance(part, _ToolPartFields):
        _check_tool_state(part, path)
    return part  # type: ignore[return-value]


def _check_tool_state(part: _ToolPartFields, path: str) -> None:
    required, forbidden, approved = _TOOL_STATE_RULES[part.state]
    present = {alias for name, alias in _PRESENCE_KEYS.items() if name in part.model_fields_set}
    if (approval := part.approval) is not None:
        present |= {f"approval.{key}" for key in ("approved", "reason") if getattr(approval, key) is not None}
    problems = [f'missing required field "{key}"' for key in required.split() if key not in present]
    problems += [f'field "{key}" must be absent' for key in forbidden.split() if key in present]
    if approval is not None and approved is not ... and approval.approved is not approved:
        problems.append(f'invalid field "approval.approved": must be {str(approved).lower()}')
    if problems:
        raise ProtocolError(f'{path}: {problems[0]} in state "{part.state}"')


# --- conversion -----------------------------------------------------------------------------------

ConvertDataPart = Callable[[DataUIPart], "mm.TextPart | mm.FilePart | None"]
"""Turns a data part into a model content part, or None to drop it."""

_KEEP_WHEN_IGNORING = frozenset({"approval-responded", "output-available", "output-error", "output-denied"})


def convert_to_model_messages(
    messages: list[UIMessage],
    *,
    ignore_incomplete_tool_calls: bool = False,
    convert_data_part: ConvertDataPart | None = None,
) -> list[mm.ModelMessage]:
    """Model messages for UI messages, like the AI SDK's ``convertToModelMessages`` (7.0.173)."""
    parts_of = [list(m.parts) for m in messages]
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if ignore_incomplete_tool_calls or last_user > 0:
        # An approval request nobody answered before the last user turn is abandoned.
        for i in range(max(last_user, 0)):
            parts_of[i] = [p for p in parts_of[i] if not (_is_tool(p) and p.state == "approval-requested")]
        if ignore_incomplete_tool_calls:
            parts_of = [[p for p in parts if not _is_tool(p) or _complete(p)] for parts in parts_of]
    out: list[mm.ModelMessage] = []
    for message, parts in zip(messages, parts_of, strict=True):
        if message.role == "system":
            texts = [p for p in parts if isinstance(p, TextUIPart)]
            po = {key: value for t in texts for key, value in (t.provider_metadata or {}).items()}
            out.append(mm.SystemMessage(content="".join(t.text for t in texts), provider_options=po or None))
        elif message.role == "user":
            out.append(mm.UserMessage(content=_user_content(parts, convert_data_part)))
        else:
            block: list[UIPart] = []
            for part in parts:
                if isinstance(part, StepStartUIPart):
                    _convert_block(block, out, convert_data_part)
                    block = []
                elif not isinstance(part, SourceUrlUIPart | SourceDocumentUIPart):
                    block.append(part)
            _convert_block(block, out, convert_data_part)
    return out


def _is_tool(part: UIPart) -> TypeGuard[_ToolPartFields]:
    return isinstance(part, _ToolPartFields)


def _complete(part: _ToolPartFields) -> bool:  # ignoreIncompleteToolCalls keeps only these
    return part.state in _KEEP_WHEN_IGNORING and not (part.state == "output-available" and part.preliminary)


def _user_content(parts: list[UIPart], convert_data_part: ConvertDataPart | None) -> list[mm.UserContent]:
    return [item for part in parts for item in _shared_content(part, convert_data_part)]


def _shared_content(part: UIPart, convert: ConvertDataPart | None) -> list[mm.TextPart | mm.FilePart]:
    """The model content of a text, file or (converted) data part, in a message of either role."""
    if isinstance(part, TextUIPart):
        return [mm.TextPart(text=part.text, provider_options=part.provider_metadata)]
    if isinstance(part, FileUIPart):
        return [_file_part(part)]
    converted = convert(part) if isinstance(part, DataUIPart) and convert is not None else None
    return [converted] if converted is not None else []


def _file_part(part: FileUIPart) -> mm.FilePart:
    data: mm.FileData = mm.FileUrlData(url=url_href(part.url))
    if part.provider_reference is not None:
        data = mm.FileReferenceData(reference=part.provider_reference)
    media_type, options = part.media_type, part.provider_metadata
    return mm.FilePart(media_type=media_type, filename=part.filename, data=data, provider_options=options)


def _model_output(part: _ToolPartFields) -> mm.ToolResultOutput:
    if isinstance(part, DynamicToolUIPart) and part.dynamic is False:
        return mm.TextOutput(value="Tool output omitted because the tool is no longer available.")
    output = part.output
    return mm.TextOutput(value=output) if isinstance(output, str) else mm.JsonOutput(value=output)


def _convert_block(block: list[UIPart], out: list[mm.ModelMessage], convert: ConvertDataPart | None) -> None:
    if not block:
        return
    content: list[mm.AssistantContent] = []
    for part in block:
        if isinstance(part, ReasoningUIPart):
            content.append(mm.ReasoningPart(text=part.text, provider_options=part.provider_metadata))
        elif isinstance(part, ReasoningFileUIPart):
            data, po = mm.FileUrlData(url=url_href(part.url)), part.provider_metadata
            content.append(mm.ReasoningFilePart(media_type=part.media_type, data=data, provider_options=po))
        elif isinstance(part, CustomUIPart):
            content.append(mm.CustomPart(kind=part.kind, provider_options=part.provider_metadata))
        elif isinstance(part, _ToolPartFields):
            if part.state != "input-streaming":
                content.extend(_assistant_tool_parts(part))
        else:
            content.extend(_shared_content(part, convert))
    if content:
        out.append(mm.AssistantMessage(content=content))
    tool_content = [item for part in block if _is_tool(part) for item in _tool_message_parts(part)]
    if tool_content:
        out.append(mm.ToolMessage(content=tool_content))


def _name(part: _ToolPartFields) -> str:
    return part.tool_name if isinstance(part, DynamicToolUIPart) else part.type[5:]


def _assistant_tool_parts(part: _ToolPartFields) -> list[mm.AssistantContent]:
    errored = part.state == "output-error"
    call_input = (part.input if part.input is not None else part.raw_input) if errored else part.input
    call_options, result_options = part.call_provider_metadata, part.result_provider_metadata
    call = mm.ToolCallContent(
        tool_call_id=part.tool_call_id,
        tool_name=_name(part),
        input=call_input,
        provider_executed=part.provider_executed,
        provider_options=result_options if call_options is None and errored else call_options,
    )
    items: list[mm.AssistantContent] = [call]
    if (approval := part.approval) is not None:
        request = mm.ToolApprovalRequestContent(
            approval_id=approval.id,
            tool_call_id=part.tool_call_id,
            is_automatic=approval.is_automatic,
            reason=approval.request_reason,
            input_schema_input=approval.input_schema_input,
            signature=approval.signature,
        )
        items.append(request)
    if part.provider_executed is True and part.state in ("output-available", "output-error"):
        output = mm.ErrorJsonOutput(value=part.error_text) if errored else _model_output(part)
        items.append(_result(part, output, call_options if result_options is None else result_options))
    return items


def _result(part: _ToolPartFields, output: mm.ToolResultOutput, options: ProviderMetadata | None) -> Any:
    call_id, name = part.tool_call_id, _name(part)
    return mm.ToolResultContent(tool_call_id=call_id, tool_name=name, output=output, provider_options=options)


def _tool_message_parts(part: _ToolPartFields) -> list[mm.ToolContent]:
    approval = part.approval
    answered = approval is not None and approval.approved is not None
    if part.provider_executed is True and not answered:
        return []  # the provider's result is already in the assistant content
    items: list[mm.ToolContent] = []
    if approval is not None and approval.approved is not None:
        response = mm.ToolApprovalResponsePart(
            approval_id=approval.id,
            approved=approval.approved,
            reason=approval.reason,
            provider_executed=part.provider_executed,
        )
        items.append(response)
        if part.state == "approval-responded" and approval.approved is False:
            denied = mm.ExecutionDeniedOutput(reason=approval.reason)
            items.append(_result(part, denied, part.call_provider_metadata))
    if part.provider_executed is True:
        return items  # the provider runs it: the response goes back, the result is in the assistant content
    output: mm.ToolResultOutput
    if part.state == "output-denied":
        reason = approval.reason if approval is not None else None
        output = mm.ErrorTextOutput(value=reason if reason is not None else "Tool call execution denied.")
    elif part.state == "output-error":
        output = mm.ErrorTextOutput(value=part.error_text or "")
    elif part.state == "output-available":
        output = _model_output(part)
    else:
        return items
    items.append(_result(part, output, part.call_provider_metadata))
    return items
