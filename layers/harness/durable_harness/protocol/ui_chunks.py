"""AI SDK UI message chunks: what the server streams to ``useChat`` (``ai`` 7.0.112 schema).

One model per chunk type of ``uiMessageChunkSchema``; ``steering-message`` is not modelled because
the transport's pinned ``ai`` 7.0.112 rejects it. Parsing follows the client's zod schema: optional
fields absent, never ``null`` (except ``unknown`` ones); extra keys accepted and dropped. The strict
base below is shared by the other wire modules.
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeAlias, TypeVar

from pydantic import AfterValidator, ConfigDict, ValidationError, ValidationInfo
from pydantic.functional_serializers import model_serializer
from pydantic.functional_validators import model_validator
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from ..errors import ProtocolError, UnknownPartTypeError
from ..wire import RARE, JSONValue, ProviderMetadata, WireModel

# --- the strict base ------------------------------------------------------------------------------

WIRE_CONTEXT: dict[str, bool] = {"wire": True}
"""Context of JSON read from the wire: only then is ``null`` rejected (Python code passes ``None``)."""


class StrictWireModel(WireModel):
    """A :class:`WireModel` that validates like zod: no type coercion, ``null`` optionals rejected.

    ``_nullable`` lists the aliases of optional ``unknown`` fields: there ``null`` is a value, so
    it is accepted on parse and written back when it was set explicitly."""

    model_config = ConfigDict(strict=True)
    _nullable: ClassVar[frozenset[str]] = frozenset()
    _null_rejected: ClassVar[frozenset[str]] = frozenset()
    _nullable_names: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._null_rejected = cls._omit_if_none - cls._nullable
        aliases = {(field.alias or name): name for name, field in cls.model_fields.items()}
        cls._nullable_names = {alias: name for alias, name in aliases.items() if alias in cls._nullable}

    @model_validator(mode="before")
    @classmethod
    def _reject_null_optionals(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context is WIRE_CONTEXT and isinstance(data, dict):
            for key in cls._null_rejected:
                if key in data and data[key] is None:
                    raise PydanticCustomError("null_optional", "must be omitted, not null", {"field": key})
        return data

    @model_serializer(mode="wrap")
    def _drop_absent_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Same name as the base serializer, so this one replaces it: it also keeps an explicit null
        # of a nullable optional (``"messageMetadata": null`` is a value, not an absent key).
        data: dict[str, Any] = handler(self)
        cls = type(self)
        for key in cls._omit_if_none:
            if key in data and data[key] is None:
                name = cls._nullable_names.get(key)
                if name is None or name not in self.model_fields_set:
                    del data[key]
        return data


_ModelT = TypeVar("_ModelT", bound=StrictWireModel)


def type_prefix(prefix: str) -> Callable[[str], str]:
    """A validator of a ``type`` that must start with ``prefix`` (``data-<name>``, ``tool-<name>``)."""

    def check(value: str) -> str:
        if not value.startswith(prefix):
            raise ValueError(f'type must start with "{prefix}"')
        return value

    return check


def describe_validation_error(exc: ValidationError, obj: Any) -> str:
    """A one-line description of the first problem: which field (as a JSON path like
    ``parts[0].toolCallId``) is missing or invalid, and why."""
    err = exc.errors(include_url=False)[0]
    # Walk the location through the input, so union member tags pydantic puts in it are left out.
    path, loc = "", err["loc"]
    for i, item in enumerate(loc):
        if isinstance(item, int) and isinstance(obj, list) and 0 <= item < len(obj):
            path, obj = f"{path}[{item}]", obj[item]
        elif isinstance(item, str) and isinstance(obj, dict) and (item in obj or i == len(loc) - 1):
            path, obj = f"{path}.{item}" if path else item, obj.get(item)
    if err["type"] == "null_optional":
        field = str((err.get("ctx") or {}).get("field"))
        return f'optional field "{path + "." + field if path else field}" must be omitted, not null'
    if err["type"] == "missing":
        return f'missing required field "{path}"'
    return f'invalid field "{path}": {err["msg"]}' if path else str(err["msg"])


def validate_wire(cls: type[_ModelT], obj: Any, what: str) -> _ModelT:
    """Validate a JSON object read from the wire; a :class:`ProtocolError` names ``what`` and the field."""
    try:
        return cls.model_validate(obj, context=WIRE_CONTEXT, by_name=False)
    except ValidationError as exc:
        raise ProtocolError(f"{what}: {describe_validation_error(exc, obj)}") from None


def validate_tagged(
    obj: Any, classes: Mapping[str, type[_ModelT]], what: str, *, data: type[_ModelT] | None = None
) -> _ModelT:
    """Validate the JSON object of one of ``classes``, picked by its ``type`` (``data``: the class of
    any ``data-*`` type): :class:`UnknownPartTypeError` for another ``type``, else a
    :class:`ProtocolError` naming ``what``, the type and the field."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"a {what} must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f'a {what} needs a string "type"')
    cls = classes.get(kind) or (data if data is not None and kind.startswith("data-") else None)
    if cls is None:
        raise UnknownPartTypeError(f'unknown {what} type "{kind}"')
    return validate_wire(cls, obj, f'{what} "{kind}"')


# --- chunks ---------------------------------------------------------------------------------------

FinishReasonName = Literal["stop", "length", "content-filter", "tool-calls", "error", "other"]
"""The finish reasons ``ai`` 7.0.112 accepts (``"interrupted"`` is 7.0.173 only, never sent)."""


class UIChunkModel(StrictWireModel):
    """Base class of every UI message chunk."""

    type: str


class StartChunk(UIChunkModel):
    """Starts the assistant message; ``messageId`` keeps the client's message id stable."""

    _nullable = frozenset({"messageMetadata"})
    type: Literal["start"] = "start"
    message_metadata: JSONValue = None
    message_id: str | None = None


class StartStepChunk(UIChunkModel):
    """Starts a step (the client pushes a ``step-start`` part)."""

    type: Literal["start-step"] = "start-step"


class FinishStepChunk(UIChunkModel):
    """Ends a step."""

    type: Literal["finish-step"] = "finish-step"


class ResetStepChunk(UIChunkModel):
    """Discards the current step's parts on the client (a retried step streams again)."""

    model_config = RARE

    type: Literal["reset-step"] = "reset-step"


class FinishChunk(UIChunkModel):
    """Ends the stream: the only end signal ``WorkflowChatTransport`` knows."""

    _nullable = frozenset({"messageMetadata"})
    type: Literal["finish"] = "finish"
    finish_reason: FinishReasonName | None = None
    message_metadata: JSONValue = None


class AbortChunk(UIChunkModel):
    """The run was aborted (not an end signal for the transport)."""

    model_config = RARE

    type: Literal["abort"] = "abort"
    reason: str | None = None


class MessageMetadataChunk(UIChunkModel):
    """Deep-merges metadata into the message; the key must exist, ``null`` allowed."""

    model_config = RARE

    type: Literal["message-metadata"] = "message-metadata"
    message_metadata: JSONValue


class ErrorChunk(UIChunkModel):
    """A fatal error: the Chat stops processing the stream."""

    model_config = RARE

    type: Literal["error"] = "error"
    error_text: str


class TextStartChunk(UIChunkModel):
    """Opens a text part."""

    type: Literal["text-start"] = "text-start"
    id: str
    provider_metadata: ProviderMetadata | None = None


class TextDeltaChunk(UIChunkModel):
    """Appends to an open text part."""

    type: Literal["text-delta"] = "text-delta"
    id: str
    delta: str
    provider_metadata: ProviderMetadata | None = None


class TextEndChunk(UIChunkModel):
    """Closes a text part; its id must not be reused in the same step."""

    _nullable = frozenset({"citations"})
    type: Literal["text-end"] = "text-end"
    id: str
    provider_metadata: ProviderMetadata | None = None
    citations: JSONValue = None  # 7.0.173 only: the transport's 7.0.112 schema passes it unchecked


class ReasoningStartChunk(UIChunkModel):
    """Opens a reasoning part."""

    type: Literal["reasoning-start"] = "reasoning-start"
    id: str
    provider_metadata: ProviderMetadata | None = None


class ReasoningDeltaChunk(UIChunkModel):
    """Appends to an open reasoning part."""

    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    delta: str
    provider_metadata: ProviderMetadata | None = None


class ReasoningEndChunk(UIChunkModel):
    """Closes a reasoning part."""

    type: Literal["reasoning-end"] = "reasoning-end"
    id: str
    provider_metadata: ProviderMetadata | None = None


class ToolInputStartChunk(UIChunkModel):
    """A tool call begins streaming its input."""

    _nullable = frozenset({"inputEncoding"})
    type: Literal["tool-input-start"] = "tool-input-start"
    tool_call_id: str
    tool_name: str
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    dynamic: bool | None = None
    title: str | None = None
    input_encoding: JSONValue = None  # "json" | "text"; 7.0.173 only, unchecked by the transport


class ToolInputDeltaChunk(UIChunkModel):
    """A piece of a tool call's input text."""

    type: Literal["tool-input-delta"] = "tool-input-delta"
    tool_call_id: str
    input_text_delta: str


class ToolInputAvailableChunk(UIChunkModel):
    """A tool call's complete, parsed input."""

    type: Literal["tool-input-available"] = "tool-input-available"
    tool_call_id: str
    tool_name: str
    input: JSONValue
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    dynamic: bool | None = None
    title: str | None = None


class ToolInputErrorChunk(UIChunkModel):
    """An invalid tool call (unknown tool, malformed input)."""

    model_config = RARE

    type: Literal["tool-input-error"] = "tool-input-error"
    tool_call_id: str
    tool_name: str
    input: JSONValue
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    dynamic: bool | None = None
    error_text: str
    title: str | None = None


class ToolApprovalRequestChunk(UIChunkModel):
    """Asks the user to approve a tool call; ``signature`` proves the server issued it."""

    model_config = RARE

    _nullable = frozenset({"approvalDescriptor", "inputSchemaInput"})
    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str
    approval_descriptor: JSONValue = None
    input_schema_input: JSONValue = None  # 7.0.173 only, unchecked by the transport
    reason: str | None = None
    is_automatic: bool | None = None
    signature: str | None = None


class ToolApprovalResponseChunk(UIChunkModel):
    """The answer to an approval request (an automatic denial, or a continuation)."""

    model_config = RARE

    type: Literal["tool-approval-response"] = "tool-approval-response"
    approval_id: str
    approved: bool
    reason: str | None = None
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None


class ToolOutputAvailableChunk(UIChunkModel):
    """A tool call's output; ``output`` is required and may be ``null``."""

    type: Literal["tool-output-available"] = "tool-output-available"
    tool_call_id: str
    output: JSONValue
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    dynamic: bool | None = None
    preliminary: bool | None = None


class ToolOutputErrorChunk(UIChunkModel):
    """A tool call failed."""

    model_config = RARE

    type: Literal["tool-output-error"] = "tool-output-error"
    tool_call_id: str
    error_text: str
    provider_executed: bool | None = None
    provider_metadata: ProviderMetadata | None = None
    tool_metadata: dict[str, JSONValue] | None = None
    dynamic: bool | None = None


class ToolOutputDeniedChunk(UIChunkModel):
    """The user denied the tool call."""

    model_config = RARE

    type: Literal["tool-output-denied"] = "tool-output-denied"
    tool_call_id: str


class SourceUrlChunk(UIChunkModel):
    """A URL source cited by the model."""

    model_config = RARE

    type: Literal["source-url"] = "source-url"
    source_id: str
    url: str
    title: str | None = None
    provider_metadata: ProviderMetadata | None = None


class SourceDocumentChunk(UIChunkModel):
    """A document source cited by the model."""

    model_config = RARE

    type: Literal["source-document"] = "source-document"
    source_id: str
    media_type: str
    title: str
    filename: str | None = None
    provider_metadata: ProviderMetadata | None = None


class FileChunk(UIChunkModel):
    """A file produced by the model."""

    model_config = RARE

    type: Literal["file"] = "file"
    url: str
    media_type: str
    provider_metadata: ProviderMetadata | None = None


class ReasoningFileChunk(UIChunkModel):
    """A file produced as part of the model's reasoning."""

    model_config = RARE

    type: Literal["reasoning-file"] = "reasoning-file"
    url: str
    media_type: str
    provider_metadata: ProviderMetadata | None = None


class CustomChunk(UIChunkModel):
    """A provider-specific part (``kind`` is ``"provider.type"``)."""

    model_config = RARE

    type: Literal["custom"] = "custom"
    kind: str
    provider_metadata: ProviderMetadata | None = None


class DataChunk(UIChunkModel):
    """App data ``data-<name>`` (also the part the client keeps); ``data`` required, ``null`` allowed."""

    model_config = RARE

    type: Annotated[str, AfterValidator(type_prefix("data-"))]
    id: str | None = None
    data: JSONValue
    transient: bool | None = None


UIMessageChunk: TypeAlias = (
    StartChunk | StartStepChunk | FinishStepChunk | ResetStepChunk | FinishChunk | AbortChunk
    | MessageMetadataChunk | ErrorChunk | TextStartChunk | TextDeltaChunk | TextEndChunk
    | ReasoningStartChunk | ReasoningDeltaChunk | ReasoningEndChunk | ToolInputStartChunk
    | ToolInputDeltaChunk | ToolInputAvailableChunk | ToolInputErrorChunk | ToolApprovalRequestChunk
    | ToolApprovalResponseChunk | ToolOutputAvailableChunk | ToolOutputErrorChunk | ToolOutputDeniedChunk
    | SourceUrlChunk | SourceDocumentChunk | FileChunk | ReasoningFileChunk | CustomChunk | DataChunk
)  # fmt: skip
"""Any UI message chunk."""

CHUNK_CLASSES: dict[str, type[UIChunkModel]] = {
    cls.model_fields["type"].default: cls for cls in UIChunkModel.__subclasses__() if cls is not DataChunk
}
"""Chunk class by ``type`` (``data-*`` chunks are :class:`DataChunk`)."""


def parse_ui_chunk(obj: Any) -> UIMessageChunk:
    """A UI chunk from its JSON object, validated like the transport's schema: an unknown ``type``
    raises :class:`UnknownPartTypeError`, anything else :class:`ProtocolError` naming the field."""
    return validate_tagged(obj, CHUNK_CLASSES, "UI message chunk", data=DataChunk)  # type: ignore[return-value]


def encode_ui_chunk(chunk: UIChunkModel) -> str:
    """Compact JSON of a chunk, as ``JSON.stringify`` writes it."""
    return chunk.to_json()


FINISH_PREFIX = '{"type":"finish"'
"""How an encoded ``finish`` chunk begins (``type`` is every chunk's first field): a log's last
chunk is checked for it without parsing."""
