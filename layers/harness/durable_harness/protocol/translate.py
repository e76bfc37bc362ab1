"""Harness stream parts to UI message chunks (``@ai-sdk/harness`` §5 translation, both stages at once).

The translator owns the step boundaries, as ``HarnessAgent`` does: ``start`` once per run,
``start-step`` lazily before the first content of a step, ``finish-step`` / ``finish`` from the
harness parts. Its state is a small pydantic model, so a run sliced over several Lambda
invocations checkpoints it and continues the stream exactly where the last slice stopped.
"""

import json
import secrets
import string
from collections.abc import Callable, Collection
from typing import Any

from pydantic import BaseModel, Field

from ..errors import ProtocolError, ToolError
from ..wire import compact_json
from . import harness_parts as hp
from . import ui_chunks as uc
from .sse import UNDEFINED

ABSENT: Any = UNDEFINED
"""Marks an argument that was not given (``None`` is a value: JSON ``null``)."""

_ALPHANUMERIC = string.digits + string.ascii_letters
# Chunks that are not step content: they never open a step.
_BOUNDARY_TYPES = frozenset(
    {"start", "start-step", "finish-step", "finish", "reset-step", "abort", "error", "message-metadata"}
)


def short_id() -> str:
    """A random 16-character alphanumeric id, like the AI SDK's ``generateId()``."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(16))


def default_on_error(error: Any) -> str:
    """The AI SDK's default ``onError``: a generic text that leaks nothing."""
    return "An error occurred."


class ToolCallInfo(BaseModel):
    """A tool call the translator has seen (validated), kept for approvals and results."""

    tool_name: str
    input: Any = None
    provider_executed: bool = False
    dynamic: bool | None = None
    title: str | None = None


class TranslatorState(BaseModel):
    """Everything a later slice needs to continue the UI stream; checkpointed between slices."""

    started: bool = False
    step_open: bool = False
    open_text: list[str] = Field(default_factory=list)
    open_reasoning: list[str] = Field(default_factory=list)
    tool_calls: dict[str, ToolCallInfo] = Field(default_factory=dict)
    input_titles: dict[str, str] = Field(default_factory=dict)
    """Titles from ``tool-input-start`` whose ``tool-call`` has not arrived yet."""


Signer = Callable[[str, str, str, Any], "str | None"]
"""``signer(approval_id, tool_call_id, tool_name, input)`` returns the approval signature, or None."""


def _parse_json(text: str) -> tuple[bool, Any]:
    # JSON.parse semantics: NaN / Infinity are not JSON.
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return False, exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _add(ids: list[str], part_id: str) -> None:
    if part_id not in ids:
        ids.append(part_id)


def _discard(ids: list[str], part_id: str) -> None:
    if part_id in ids:
        ids.remove(part_id)


class StreamTranslator:
    """Stateful translation of harness stream parts (and our own UI chunks) into UI chunks."""

    def __init__(
        self,
        state: TranslatorState | None = None,
        *,
        tool_names: Collection[str] | None = None,
        signer: Signer | None = None,
        on_error: Callable[[Any], str] = default_on_error,
        id_factory: Callable[[], str] = short_id,
        send_reasoning: bool = True,
    ) -> None:
        """A translator continuing ``state`` (a fresh run when None).

        ``tool_names`` is the merged tool set; None means every name is a known host tool.
        """
        self._state = state if state is not None else TranslatorState()
        self._tool_names = None if tool_names is None else frozenset(tool_names)
        self._signer = signer
        self._on_error = on_error
        self._id_factory = id_factory
        self._send_reasoning = send_reasoning

    @property
    def state(self) -> TranslatorState:
        """The live state (checkpoint it with ``model_dump_json()``)."""
        return self._state

    def start(self, message_id: str | None = None, message_metadata: Any = ABSENT) -> list[uc.UIMessageChunk]:
        """The ``start`` chunk, once per run; an empty list when it was already sent."""
        if self._state.started:
            return []
        self._state.started = True
        if message_metadata is ABSENT:
            return [uc.StartChunk(message_id=message_id)]
        return [uc.StartChunk(message_id=message_id, message_metadata=message_metadata)]

    def reset_step(self) -> list[uc.UIMessageChunk]:
        """``reset-step``: the client drops the current step's parts; part ids may be reused.

        ``step_open`` is unchanged because the client keeps the step's ``step-start`` part.
        """
        self._state.open_text.clear()
        self._state.open_reasoning.clear()
        return [uc.ResetStepChunk()]

    def translate(self, item: hp.HarnessStreamPart | uc.UIMessageChunk) -> list[uc.UIMessageChunk]:
        """The UI chunks for one harness part, or for one UI chunk produced by the agent itself."""
        handler = _HANDLERS.get(type(item))
        if handler is not None:
            return handler(self, item)
        if isinstance(item, uc.UIChunkModel):
            return self._pass_through(item)
        raise ProtocolError(f"cannot translate a {type(item).__name__}")

    # --- helpers ----------------------------------------------------------------------------------

    def _content(self, *chunks: uc.UIMessageChunk) -> list[uc.UIMessageChunk]:
        # The client pushes a step-start part per start-step: a step opens with its first content.
        if self._state.step_open:
            return list(chunks)
        self._state.step_open = True
        return [uc.StartStepChunk(), *chunks]

    def _track(self, chunk: uc.UIMessageChunk) -> None:
        state = self._state
        if isinstance(chunk, uc.TextStartChunk):
            _add(state.open_text, chunk.id)
        elif isinstance(chunk, uc.TextEndChunk):
            _discard(state.open_text, chunk.id)
        elif isinstance(chunk, uc.ReasoningStartChunk):
            _add(state.open_reasoning, chunk.id)
        elif isinstance(chunk, uc.ReasoningEndChunk):
            _discard(state.open_reasoning, chunk.id)

    def _pass_through(self, chunk: uc.UIMessageChunk) -> list[uc.UIMessageChunk]:
        kind = chunk.type
        if kind in _BOUNDARY_TYPES:
            if kind == "start":
                self._state.started = True
            elif kind == "start-step":
                self._state.step_open = True
            elif kind == "finish-step":
                self._state.step_open = False
            elif kind == "reset-step":
                self._state.open_text.clear()
                self._state.open_reasoning.clear()
            return [chunk]
        if isinstance(chunk, uc.DataChunk) and chunk.transient:
            return [chunk]
        self._track(chunk)
        return self._content(chunk)

    # --- harness parts ----------------------------------------------------------------------------

    def _nothing(self, part: hp.HarnessPartModel) -> list[uc.UIMessageChunk]:
        return []

    def _text_start(self, part: hp.TextStartPart) -> list[uc.UIMessageChunk]:
        _add(self._state.open_text, part.id)
        return self._content(uc.TextStartChunk(id=part.id, provider_metadata=part.harness_metadata))

    def _text_delta(self, part: hp.TextDeltaPart) -> list[uc.UIMessageChunk]:
        chunk = uc.TextDeltaChunk(id=part.id, delta=part.delta, provider_metadata=part.harness_metadata)
        return self._content(chunk)

    def _text_end(self, part: hp.TextEndPart) -> list[uc.UIMessageChunk]:
        _discard(self._state.open_text, part.id)
        return self._content(uc.TextEndChunk(id=part.id, provider_metadata=part.harness_metadata))

    def _reasoning_start(self, part: hp.ReasoningStartPart) -> list[uc.UIMessageChunk]:
        if not self._send_reasoning:
            return []
        _add(self._state.open_reasoning, part.id)
        return self._content(uc.ReasoningStartChunk(id=part.id, provider_metadata=part.harness_metadata))

    def _reasoning_delta(self, part: hp.ReasoningDeltaPart) -> list[uc.UIMessageChunk]:
        if not self._send_reasoning:
            return []
        chunk = uc.ReasoningDeltaChunk(id=part.id, delta=part.delta, provider_metadata=part.harness_metadata)
        return self._content(chunk)

    def _reasoning_end(self, part: hp.ReasoningEndPart) -> list[uc.UIMessageChunk]:
        if not self._send_reasoning:
            return []
        _discard(self._state.open_reasoning, part.id)
        return self._content(uc.ReasoningEndChunk(id=part.id, provider_metadata=part.harness_metadata))

    def _tool_input_start(self, part: hp.ToolInputStartPart) -> list[uc.UIMessageChunk]:
        if part.title is not None:
            self._state.input_titles[part.id] = part.title
        chunk = uc.ToolInputStartChunk(
            tool_call_id=part.id,
            tool_name=part.tool_name,
            provider_executed=part.provider_executed,
            provider_metadata=part.provider_metadata,
            dynamic=part.dynamic,
            title=part.title,
        )
        return self._content(chunk)

    def _tool_input_delta(self, part: hp.ToolInputDeltaPart) -> list[uc.UIMessageChunk]:
        return self._content(uc.ToolInputDeltaChunk(tool_call_id=part.id, input_text_delta=part.delta))

    def _tool_call(self, part: hp.ToolCallPart) -> list[uc.UIMessageChunk]:
        # parseToolCall against the merged tool set, with no repair function (§5.2).
        name = part.tool_name
        known = self._tool_names is None or name in self._tool_names
        dynamic: bool | None = None
        error: Exception | None = None
        if known or (part.provider_executed is True and part.dynamic is True):
            dynamic = None if known else True
            ok, value = (True, {}) if not part.input.strip() else _parse_json(part.input)
            if not ok:
                error = ToolError(f"Invalid input for tool {name}: JSON parsing failed: {value}")
        else:
            available = ", ".join(sorted(self._tool_names or ()))
            error = ToolError(f"Model tried to call unavailable tool '{name}'. Available tools: {available}.")
        if error is not None:
            ok, value = _parse_json(part.input)
            value = value if ok else part.input
            dynamic = True
        fields: dict[str, Any] = {"tool_call_id": part.tool_call_id, "tool_name": name, "input": value}
        fields |= {"provider_executed": part.provider_executed, "provider_metadata": part.provider_metadata}
        chunk: uc.UIMessageChunk = (
            uc.ToolInputAvailableChunk(**fields, dynamic=dynamic)
            if error is None
            else uc.ToolInputErrorChunk(**fields, dynamic=True, error_text=self._on_error(error))
        )
        self._state.tool_calls[part.tool_call_id] = ToolCallInfo(
            tool_name=name,
            input=value,
            provider_executed=part.provider_executed is True,
            dynamic=dynamic,
            title=self._state.input_titles.pop(part.tool_call_id, None),
        )
        return self._content(chunk)

    def _approval_request(self, part: hp.ToolApprovalRequestPart) -> list[uc.UIMessageChunk]:
        info = self._state.tool_calls.get(part.tool_call_id)
        if info is None:
            raise ProtocolError(
                f"Harness emitted approval request '{part.approval_id}' for unknown tool call '{part.tool_call_id}'."
            )
        signature = None
        if self._signer is not None:
            signature = self._signer(part.approval_id, part.tool_call_id, info.tool_name, info.input)
        chunk = uc.ToolApprovalRequestChunk(
            approval_id=part.approval_id, tool_call_id=part.tool_call_id, signature=signature
        )
        return self._content(chunk)

    def _tool_result(self, part: hp.ToolResultPart) -> list[uc.UIMessageChunk]:
        # A call from an earlier slice is unknown here and counts as provider-executed (`?? true`).
        info = self._state.tool_calls.get(part.tool_call_id)
        chunk: uc.UIMessageChunk
        if part.is_error and (info is None or info.provider_executed):
            result = part.result
            chunk = uc.ToolOutputErrorChunk(
                tool_call_id=part.tool_call_id,
                error_text=result if isinstance(result, str) else compact_json(result),
                provider_executed=True,
                provider_metadata=part.provider_metadata,
                dynamic=part.dynamic,
            )
        else:
            chunk = uc.ToolOutputAvailableChunk(
                tool_call_id=part.tool_call_id,
                output=part.result,
                provider_metadata=part.provider_metadata,
                dynamic=part.dynamic,
                preliminary=part.preliminary,
            )
        return self._content(chunk)

    def _synthetic_pair(
        self, call_id: str, tool_name: str, input: Any, output: Any, metadata: Any
    ) -> list[uc.UIMessageChunk]:
        fields: dict[str, Any] = {
            "tool_call_id": call_id,
            "provider_executed": True,
            "provider_metadata": metadata,
            "dynamic": True,
        }
        call = uc.ToolInputAvailableChunk(tool_name=tool_name, input=input, **fields)
        return self._content(call, uc.ToolOutputAvailableChunk(output=output, **fields))

    def _file_change(self, part: hp.FileChangePart) -> list[uc.UIMessageChunk]:
        value = {"event": part.event, "path": part.path}
        call_id = f"harness-file-change-{self._id_factory()}"
        return self._synthetic_pair(call_id, "fileChange", value, dict(value), part.harness_metadata)

    def _compaction(self, part: hp.CompactionPart) -> list[uc.UIMessageChunk]:
        output: dict[str, Any] = {"trigger": part.trigger, "summary": part.summary}
        if part.tokens_before is not None:
            output["tokensBefore"] = part.tokens_before
        if part.tokens_after is not None:
            output["tokensAfter"] = part.tokens_after
        call_id = f"harness-compaction-{self._id_factory()}"
        return self._synthetic_pair(call_id, "compaction", {}, output, part.harness_metadata)

    def _finish_step(self, part: hp.FinishStepPart) -> list[uc.UIMessageChunk]:
        # An empty step is still announced, so start-step / finish-step always pair up.
        chunks = self._content(uc.FinishStepChunk())
        self._state.step_open = False
        return chunks

    def _finish(self, part: hp.FinishPart) -> list[uc.UIMessageChunk]:
        if self._state.step_open:
            raise ProtocolError(
                "HarnessAgent: received terminal finish with unclosed step content. "
                "Harness adapters must emit 'finish-step' before 'finish'."
            )
        return [uc.FinishChunk(finish_reason=part.finish_reason.unified)]

    def _error(self, part: hp.ErrorPart) -> list[uc.UIMessageChunk]:
        return [uc.ErrorChunk(error_text=self._on_error(part.error))]


_HANDLERS: dict[type, Callable[[StreamTranslator, Any], list[uc.UIMessageChunk]]] = {
    hp.StreamStartPart: StreamTranslator._nothing,
    hp.TextStartPart: StreamTranslator._text_start,
    hp.TextDeltaPart: StreamTranslator._text_delta,
    hp.TextEndPart: StreamTranslator._text_end,
    hp.ReasoningStartPart: StreamTranslator._reasoning_start,
    hp.ReasoningDeltaPart: StreamTranslator._reasoning_delta,
    hp.ReasoningEndPart: StreamTranslator._reasoning_end,
    hp.ToolInputStartPart: StreamTranslator._tool_input_start,
    hp.ToolInputDeltaPart: StreamTranslator._tool_input_delta,
    hp.ToolInputEndPart: StreamTranslator._nothing,
    hp.ToolCallPart: StreamTranslator._tool_call,
    hp.ToolApprovalRequestPart: StreamTranslator._approval_request,
    hp.ToolResultPart: StreamTranslator._tool_result,
    hp.FinishStepPart: StreamTranslator._finish_step,
    hp.FinishPart: StreamTranslator._finish,
    hp.FileChangePart: StreamTranslator._file_change,
    hp.CompactionPart: StreamTranslator._compaction,
    hp.ErrorPart: StreamTranslator._error,
    hp.RawPart: StreamTranslator._nothing,
}
