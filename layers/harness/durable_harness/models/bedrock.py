"""Amazon Bedrock's ConverseStream API (through boto3) as a :class:`LanguageModel`.

boto3 is synchronous: the ``converse_stream`` call and every read of its event stream run in a
worker thread (:func:`asyncio.to_thread`), so the event loop is never blocked. The events become
harness parts:

* ``messageStart`` -> ``stream-start``;
* ``contentBlockStart`` with ``toolUse`` -> ``tool-input-start``;
* ``contentBlockDelta`` with ``text`` -> ``text-*``; with ``toolUse.input`` ->
  ``tool-input-delta``; with ``reasoningContent`` (``text`` / ``signature`` /
  ``redactedContent``) -> ``reasoning-*``, whose ``reasoning-end`` carries
  ``harnessMetadata {"bedrock": {"signature": ...}}`` (or ``{"redactedData": <base64>}``);
* ``contentBlockStop`` -> ``text-end`` / ``reasoning-end`` / ``tool-input-end`` + ``tool-call``;
* ``messageStop`` (stop reason) and ``metadata`` (usage) -> the ``finish`` part;
* exception events (``throttlingException``, ``serviceUnavailableException``,
  ``internalServerException``, ``modelStreamErrorException``: retryable;
  ``validationException``: not) -> :class:`~durable_harness.errors.ModelError`.

A model given no client makes one on first use with the factory its composition root installed
(:func:`set_client_factory`): the local kit's is :func:`botocore_client` (a ``bedrock-runtime``
client, region and credentials from the usual AWS chain), a function's makes the lite client of
the AWS adapters in Lambda (no botocore import or client creation: the chat function's first turn
starts sooner); without a root it is :func:`botocore_client`. Every one makes one attempt (the
agent loop retries, the provider never does) with :data:`CLIENT_SETTINGS`, and raises botocore's
exceptions, which :func:`~.bedrock_errors.model_error` maps.
The caller needs ``bedrock:InvokeModelWithResponseStream`` on the model (or inference profile).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelError
from ..messages import (
    AssistantMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    FilePart,
    FileReferenceData,
    JsonOutput,
    ModelMessage,
    ReasoningPart,
    SystemMessage,
    TextPart,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from ..protocol import harness_parts as hp
from ..wire import compact_json
from .base import ModelRequest, ModelStreamPart
from .bedrock_errors import model_error
from .provider_utils import (
    add_turn,
    cached_usage,
    copy_settings,
    finish_part,
    forced_tool,
    merge_provider_settings,
    parse_data_url,
    tool_input_object,
    tool_input_text,
    tool_output_text,
    tool_spec,
    unsupported_settings,
)

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content-filter",
    "content_filtered": "content-filter",
}
_SETTINGS = {
    "max_output_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop_sequences": "stopSequences",
}
"""The standard settings Converse takes, by their ``inferenceConfig`` names."""
_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
_DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
}
_END = object()


CLIENT_SETTINGS: dict[str, Any] = {"connect_timeout": 10.0, "read_timeout": 600.0, "max_attempts": 1}
"""The ``bedrock-runtime`` client's settings, whichever client a root makes: one attempt (the agent
loop retries a failed turn, the provider never does), a 10 s connect timeout and a 600 s read
timeout (a model may think for minutes before its first event). The lite client's names."""

ClientFactory = Callable[[], Any]
"""Makes a ``bedrock-runtime`` client (boto3's or one with its methods and errors)."""


def client_config() -> Any:
    """:data:`CLIENT_SETTINGS` as a botocore ``Config`` (imported here: ``botocore.config`` alone
    costs a cold start tens of milliseconds, which a lite client does not pay)."""
    from botocore.config import Config

    return Config(
        retries={"total_max_attempts": CLIENT_SETTINGS["max_attempts"], "mode": "standard"},
        connect_timeout=CLIENT_SETTINGS["connect_timeout"],
        read_timeout=CLIENT_SETTINGS["read_timeout"],
        user_agent_extra="durable-harness",
    )


def botocore_client() -> Any:
    """A botocore ``bedrock-runtime`` client with :func:`client_config` (region and credentials from
    the usual AWS chain): the local kit's, and the default without a composition root."""
    import botocore.session

    return botocore.session.get_session().create_client("bedrock-runtime", config=client_config())


_client_factory: ClientFactory = botocore_client


def set_client_factory(factory: ClientFactory | None) -> None:
    """Install the composition root's way to make a model's default client (None: :func:`botocore_client`)."""
    global _client_factory
    _client_factory = factory or botocore_client


def default_client() -> Any:
    """A new ``bedrock-runtime`` client from the installed factory (see :func:`set_client_factory`)."""
    return _client_factory()


class BedrockConverseModel:
    """A Bedrock model (id, inference profile id or ARN) through ConverseStream.

    ``client`` is a boto3 or lite ``bedrock-runtime`` client (made on first use when not given; see
    :func:`default_client`). ``inference_config`` holds default ``inferenceConfig`` fields
    (``maxTokens``, ``temperature``, ``topP``, ``stopSequences``); the request's settings override
    them. ``settings["bedrock"]`` is merged into the ``converse_stream`` arguments (for example
    ``additionalModelRequestFields``, ``guardrailConfig``, ``performanceConfig``).
    """

    def __init__(
        self, model_id: str, *, client: Any | None = None, inference_config: dict[str, Any] | None = None
    ) -> None:
        self.bedrock_model_id = model_id
        self.inference_config = dict(inference_config or {})
        self._client = client
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``"bedrock:<model-id>"``."""
        return f"bedrock:{self.bedrock_model_id}"

    def __repr__(self) -> str:
        return f"BedrockConverseModel({self.bedrock_model_id!r})"

    @property
    def client(self) -> Any:
        """The ``bedrock-runtime`` client (the default one is made on first use)."""
        with self._lock:
            if self._client is None:
                self._client = default_client()
            return self._client

    def request_arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``converse_stream`` for ``request``."""
        tools = request.tools if request.tool_choice != "none" else []
        system, messages = convert_messages(request, tools_allowed=bool(tools))
        arguments: dict[str, Any] = {"modelId": self.bedrock_model_id, "messages": messages}
        if system:
            arguments["system"] = system
        inference = dict(self.inference_config)
        settings = request.settings
        copy_settings(inference, settings, _SETTINGS)
        if inference:
            arguments["inferenceConfig"] = inference
        if tools:
            specs = [{"toolSpec": tool_spec(t, "inputSchema", {"json": t.input_schema})} for t in tools]
            tool_config: dict[str, Any] = {"tools": specs}
            choice = request.tool_choice
            if isinstance(choice, dict):
                tool_config["toolChoice"] = {"tool": {"name": forced_tool(choice)}}
            elif choice == "required":
                tool_config["toolChoice"] = {"any": {}}
            arguments["toolConfig"] = tool_config  # "auto" is the default: not every model accepts it
        if request.response_format is not None:
            arguments["outputConfig"] = {
                "textFormat": {
                    "type": "json_schema",
                    "structure": {"jsonSchema": {"schema": compact_json(request.response_format), "name": "output"}},
                }
            }
        merge_provider_settings(arguments, settings.get("bedrock"))
        arguments["modelId"] = self.bedrock_model_id
        return arguments

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Call the model once and yield its parts."""
        arguments = self.request_arguments(request)
        warnings = unsupported_settings(request.settings, _SETTINGS)
        try:
            response = await asyncio.to_thread(self._call, arguments)
        except ModelError:
            raise
        except Exception as exc:
            raise model_error(exc) from None
        event_stream = response["stream"]
        events: Iterator[dict[str, Any]] = iter(event_stream)
        state = _StreamState(model_id=self.bedrock_model_id, warnings=warnings)
        drained = False
        try:
            while True:
                try:
                    event = await asyncio.to_thread(next, events, _END)
                except Exception as exc:
                    raise model_error(exc) from None
                if not isinstance(event, dict):
                    drained = True
                    break
                for part in state.on_event(event):
                    yield part
        finally:
            if not drained:  # stopped early or failed: drop the connection instead of reusing it
                _close(event_stream)
        yield state.finish()

    def _call(self, arguments: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = self.client.converse_stream(**arguments)
        return response


def _close(event_stream: Any) -> None:
    with contextlib.suppress(Exception):  # closing a broken stream may fail; nothing is left to do
        event_stream.close()


# --- messages -------------------------------------------------------------------------------------


def convert_messages(
    request: ModelRequest, *, tools_allowed: bool = True
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system blocks, messages)`` of ConverseStream for ``request``.

    System messages join the instructions in ``system``; tool messages become user messages of
    ``toolResult`` blocks; consecutive messages of one role are merged (Converse requires
    alternating roles). Without tools in the request (none, or ``tool_choice="none"``) Bedrock
    rejects ``toolUse`` / ``toolResult`` blocks, so earlier calls and results are sent as text.
    """
    system: list[dict[str, Any]] = []
    if request.instructions:
        system.append({"text": request.instructions})
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, SystemMessage):
            system.append({"text": message.content})
            continue
        role, blocks = _convert(message, tools_allowed)
        if not blocks:
            continue
        add_turn(messages, role, blocks)
    return system, messages


def _convert(message: ModelMessage, tools_allowed: bool) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, UserMessage):
        return "user", [_user_block(p) for p in message.content]
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text.strip():
                    blocks.append({"text": part.text})
            elif isinstance(part, ReasoningPart):
                bedrock = (part.provider_options or {}).get("bedrock") or {}
                if bedrock.get("signature"):
                    reasoning = {"reasoningText": {"text": part.text, "signature": bedrock["signature"]}}
                    blocks.append({"reasoningContent": reasoning})
                elif bedrock.get("redactedData"):
                    blocks.append({"reasoningContent": {"redactedContent": base64.b64decode(bedrock["redactedData"])}})
            elif isinstance(part, ToolCallContent) and not part.provider_executed:
                if tools_allowed:
                    call = {
                        "toolUseId": part.tool_call_id,
                        "name": part.tool_name,
                        "input": tool_input_object(part.input),
                    }
                    blocks.append({"toolUse": call})
                else:
                    blocks.append({"text": f"[called tool {part.tool_name} with input {tool_input_text(part.input)}]"})
        return "assistant", blocks
    if isinstance(message, ToolMessage):
        results: list[dict[str, Any]] = []
        for result in message.content:
            if not isinstance(result, ToolResultContent):
                continue
            output = result.output
            if not tools_allowed:
                results.append({"text": f"[result of tool {result.tool_name}: {tool_output_text(output)}]"})
                continue
            is_json = isinstance(output, JsonOutput | ErrorJsonOutput) and isinstance(output.value, dict)
            content = {"json": output.value} if is_json else {"text": tool_output_text(output)}  # type: ignore[union-attr]
            block: dict[str, Any] = {"toolUseId": result.tool_call_id, "content": [content]}
            if isinstance(output, ErrorTextOutput | ErrorJsonOutput):
                block["status"] = "error"
            results.append({"toolResult": block})
        return "user", results
    raise ModelError(f"unsupported message role {getattr(message, 'role', message)!r}")


def _user_block(part: TextPart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    media_type = part.media_type
    image_format = _IMAGE_FORMATS.get(media_type)
    document_format = _DOCUMENT_FORMATS.get(media_type)
    if image_format is None and document_format is None:
        raise ModelError(f"file media type {media_type!r} is not supported by Bedrock Converse")
    if isinstance(part.data, FileReferenceData):
        uri = part.data.reference.get("bedrock") or part.data.reference.get("s3")
        if uri is None:
            raise ModelError("a file reference sent to Bedrock needs a 'bedrock' (s3://...) reference")
        source: dict[str, Any] = {"s3Location": {"uri": uri}}
    elif part.data.url.startswith("s3://"):
        source = {"s3Location": {"uri": part.data.url}}
    else:
        decoded = parse_data_url(part.data.url)
        if decoded is None:
            raise ModelError("Bedrock takes files only as data: or s3:// URLs")
        source = {"bytes": decoded[1]}
    if image_format is not None:
        return {"image": {"format": image_format, "source": source}}
    return {"document": {"format": document_format, "name": _document_name(part.filename), "source": source}}


def _document_name(filename: str | None) -> str:
    """A document name Bedrock accepts: letters, digits, spaces, hyphens, parentheses, brackets."""
    stem = (filename or "document").rsplit(".", 1)[0]
    name = re.sub(r"\s+", " ", re.sub(r"[^A-Za-z0-9 \-()\[\]]", "-", stem)).strip()
    return name or "document"


# --- the stream -----------------------------------------------------------------------------------


@dataclass
class _Block:
    kind: str  # "text" | "reasoning" | "tool"
    id: str
    name: str = ""
    input: str = ""
    signature: str = ""
    redacted: bytes = b""


@dataclass
class _StreamState:
    model_id: str
    warnings: list[hp.CallWarning]
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    started: bool = False

    def on_event(self, event: dict[str, Any]) -> list[ModelStreamPart]:
        parts: list[ModelStreamPart] = []
        if not self.started:
            self.started = True
            parts.append(hp.StreamStartPart(model_id=self.model_id, warnings=self.warnings or None))
        if "contentBlockStart" in event:
            body = event["contentBlockStart"]
            tool = (body.get("start") or {}).get("toolUse")
            if tool:
                index = int(body.get("contentBlockIndex", 0))
                block = self.blocks[index] = _Block("tool", tool["toolUseId"], name=tool["name"])
                parts.append(hp.ToolInputStartPart(id=block.id, tool_name=block.name))
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            parts += self._delta(int(body.get("contentBlockIndex", 0)), body.get("delta") or {})
        elif "contentBlockStop" in event:
            parts += self._stop(int(event["contentBlockStop"].get("contentBlockIndex", 0)))
        elif "messageStop" in event:
            self.stop_reason = event["messageStop"].get("stopReason")
        elif "metadata" in event:
            self.usage.update(event["metadata"].get("usage") or {})
        return parts

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ModelStreamPart]:
        parts: list[ModelStreamPart] = []
        block = self.blocks.get(index)
        if "text" in delta:
            if block is None:
                block = self.blocks[index] = _Block("text", f"text-{index}")
                parts.append(hp.TextStartPart(id=block.id))
            if delta["text"]:
                parts.append(hp.TextDeltaPart(id=block.id, delta=delta["text"]))
        elif "toolUse" in delta and block is not None and block.kind == "tool":
            piece = delta["toolUse"].get("input") or ""
            if piece:
                block.input += piece
                parts.append(hp.ToolInputDeltaPart(id=block.id, delta=piece))
        elif "reasoningContent" in delta:
            reasoning = delta["reasoningContent"]
            if block is None:
                block = self.blocks[index] = _Block("reasoning", f"reasoning-{index}")
                parts.append(hp.ReasoningStartPart(id=block.id))
            if reasoning.get("text"):
                parts.append(hp.ReasoningDeltaPart(id=block.id, delta=reasoning["text"]))
            block.signature += reasoning.get("signature") or ""
            block.redacted += reasoning.get("redactedContent") or b""
        return parts

    def _stop(self, index: int) -> list[ModelStreamPart]:
        block = self.blocks.pop(index, None)
        if block is None:
            return []
        if block.kind == "text":
            return [hp.TextEndPart(id=block.id)]
        if block.kind == "reasoning":
            meta: dict[str, Any] = {}
            if block.signature:
                meta["signature"] = block.signature
            if block.redacted:
                meta["redactedData"] = base64.b64encode(block.redacted).decode("ascii")
            return [hp.ReasoningEndPart(id=block.id, harness_metadata={"bedrock": meta} if meta else None)]
        return [
            hp.ToolInputEndPart(id=block.id),
            hp.ToolCallPart(tool_call_id=block.id, tool_name=block.name, input=block.input or "{}"),
        ]

    def finish(self) -> hp.FinishPart:
        if self.stop_reason is None:
            raise ModelError("Bedrock stream ended before messageStop", retryable=True)
        usage = cached_usage(self.usage, "inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens", "outputTokens")
        return finish_part(self.stop_reason, _STOP_REASONS, usage)
