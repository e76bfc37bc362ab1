"""The assistant message a ``useChat`` client builds from a UI chunk stream.

:class:`UIMessageAssembler` replays ``WorkflowChatTransport``'s normalizer
(``normalizeUIMessageStreamParts``, ``@ai-sdk/workflow`` 2.0.43) and then the Chat's reducer
(``processUIMessageStream``, ``ai`` 7.0.173) on plain JSON dicts, so tests can compare "the
message the client ends with" across crashes, resumes and retried steps. The message keeps the
client's JSON shape: an absent key is JS ``undefined``, ``None`` is JSON ``null``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, NoReturn

from ..errors import ProtocolError
from .sse import UNDEFINED, parse_partial_json
from .ui_chunks import UIChunkModel, parse_ui_chunk

_UNDEF: Any = UNDEFINED
_RESULT_STATES = frozenset({"output-available", "output-error"})
_PLAIN_PART_KEYS = {  # chunks the client pushes as parts of the same shape
    "file": ("mediaType", "url", "providerMetadata"),
    "reasoning-file": ("mediaType", "url", "providerMetadata"),
    "custom": ("kind", "providerMetadata"),
    "source-url": ("sourceId", "url", "title", "providerMetadata"),
    "source-document": ("sourceId", "mediaType", "title", "filename", "providerMetadata"),
}
_UNSAFE_KEYS = frozenset({"__proto__", "constructor", "prototype"})


def _nullish(value: Any) -> bool:
    return value is _UNDEF or value is None


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    # ``if (value != null) obj.key = value``.
    if not _nullish(value):
        target[key] = value


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    # ``obj.key = value``, then JSON.stringify: an undefined value drops the key.
    if value is _UNDEF:
        target.pop(key, None)
    else:
        target[key] = value


def _spread(value: Any) -> dict[str, Any]:
    # ``{...value}`` of a JSON value: arrays and strings spread by index, other primitives to nothing.
    if isinstance(value, dict):
        return dict(value)
    return {str(i): item for i, item in enumerate(value)} if isinstance(value, list | str) else {}


def merge_objects(base: Any, overrides: Any) -> Any:
    """The AI SDK's ``mergeObjects``: objects merge recursively, arrays and primitives are replaced."""
    result = _spread(base)
    for key, value in _spread(overrides).items():
        if key in _UNSAFE_KEYS:
            continue
        current = result.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            result[key] = merge_objects(current, value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _is_tool(part: dict[str, Any]) -> bool:
    kind: str = part["type"]
    return kind == "dynamic-tool" or kind.startswith("tool-")


def _approval_id(part: dict[str, Any]) -> Any:
    return (part.get("approval") or {}).get("id") if _is_tool(part) else None


class UIMessageAssembler:
    """Applies UI chunks (JSON dicts or chunk models) to an assistant message, like the client.

    A chunk the client's reducer would throw on (a delta for an unknown tool call, an output for a
    tool call that does not exist, ...) raises :class:`ProtocolError` with the client's message.
    An ``error`` chunk is recorded in :attr:`error` and, as in the Chat, ends processing.
    """

    def __init__(self, message_id: str | None = None, *, message: dict[str, Any] | None = None) -> None:
        """Continue ``message`` if it is an assistant message (``createStreamingUIMessageState``),
        else start an empty one with ``message_id`` (``""`` when None: the Chat would generate one)."""
        if message is not None and message.get("role") == "assistant":
            self._message = copy.deepcopy(message)
        else:
            self._message = {"id": message_id or "", "role": "assistant", "parts": []}
        self._active_text: dict[str, dict[str, Any]] = {}
        self._active_reasoning: dict[str, dict[str, Any]] = {}
        # Tool inputs still streaming in the last step of a continued message stay open.
        self._partial_tools = {
            part["toolCallId"]: {
                "text": part.get("rawInput") or "", "inputEncoding": part.get("inputEncoding", _UNDEF),
                "toolName": part["toolName"] if part["type"] == "dynamic-tool" else part["type"][5:],
                "dynamic": part["type"] == "dynamic-tool", "title": part.get("title", _UNDEF),
                "toolMetadata": part.get("toolMetadata", _UNDEF),
            }
            for part in self._step_parts()
            if _is_tool(part) and part.get("state") == "input-streaming"
        }  # fmt: skip
        # The transport's normalizer: open and ended part ids per kind.
        self._open: dict[str, set[str]] = {"text": set(), "reasoning": set()}
        self._ended: dict[str, set[str]] = {"text": set(), "reasoning": set()}
        self.finish_reason: str | None = None
        """The ``finishReason`` of the last ``finish`` chunk that had one."""
        self.finished = False
        """Whether a ``finish`` chunk arrived (the transport's only end signal)."""
        self.error: str | None = None
        """The ``errorText`` of an ``error`` chunk (or the reducer's error); nothing is applied after it."""

    def apply(self, chunk: dict[str, Any] | UIChunkModel) -> None:
        """Apply one chunk; a dict is validated first, as the transport does."""
        if self.error is not None:
            return
        if isinstance(chunk, UIChunkModel):
            data = chunk.to_dict()
        else:
            parse_ui_chunk(chunk)
            data = chunk
        for item in self._normalize(data):
            self._reduce(item)

    def apply_all(self, chunks: Iterable[dict[str, Any] | UIChunkModel]) -> None:
        """Apply chunks in order."""
        for chunk in chunks:
            self.apply(chunk)

    def message(self) -> dict[str, Any]:
        """A copy of the message as the client holds it, as a JSON dict."""
        return copy.deepcopy(self._message)

    # --- normalizeUIMessageStreamParts ------------------------------------------------------------

    def _normalize(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        kind, _, op = chunk["type"].partition("-")
        if kind in ("text", "reasoning") and op in ("start", "delta", "end"):
            part_id, opened, ended = chunk["id"], self._open[kind], self._ended[kind]
            if op == "start":
                if part_id in opened or part_id in ended:
                    return []  # a replayed start, or an id reused within the step
                opened.add(part_id)
                return [chunk]
            if part_id in ended:
                return []  # a re-delivered delta or end
            out = [] if part_id in opened else [{"type": f"{kind}-start", "id": part_id}]
            opened.add(part_id)
            if op == "end":
                opened.discard(part_id)
                ended.add(part_id)
            return [*out, chunk]
        if chunk["type"] == "finish-step":
            for ids in self._ended.values():
                ids.clear()
        elif chunk["type"] == "reset-step":
            for ids in (*self._open.values(), *self._ended.values()):
                ids.clear()
        return [chunk]

    # --- processUIMessageStream -------------------------------------------------------------------

    def _fail(self, message: str) -> NoReturn:
        self.error = message
        raise ProtocolError(message)

    def _reduce(self, chunk: dict[str, Any]) -> None:
        kind: str = chunk["type"]
        parts: list[dict[str, Any]] = self._message["parts"]
        if kind in ("text-start", "reasoning-start"):
            name = kind[:-6]
            part: dict[str, Any] = {"type": name, "id": chunk["id"]} if kind[0] == "r" else {"type": name}
            part |= {"text": "", **_pick(chunk, "providerMetadata"), "state": "streaming"}
            (self._active_text if name == "text" else self._active_reasoning)[chunk["id"]] = part
            parts.append(part)
        elif kind in ("text-delta", "text-end", "reasoning-delta", "reasoning-end"):
            name, _, op = kind.partition("-")
            active = self._active_text if name == "text" else self._active_reasoning
            found = active.get(chunk["id"])
            if found is None:
                self._fail(
                    f'Received {kind} for missing {name} part with ID "{chunk["id"]}". '
                    f'Ensure a "{name}-start" chunk is sent before any "{kind}" chunks.'
                )
            if op == "delta":
                found["text"] += chunk["delta"]
            else:
                found["state"] = "done"
                _set(found, "citations", chunk.get("citations"))
                del active[chunk["id"]]
            _set(found, "providerMetadata", chunk.get("providerMetadata"))
        elif kind in _PLAIN_PART_KEYS:
            plain = {"type": kind}
            for key in _PLAIN_PART_KEYS[kind]:
                _set(plain, key, chunk.get(key))
            parts.append(copy.deepcopy(plain))
        elif kind.startswith("tool-"):
            self._tool_chunk(chunk)
        elif kind == "start-step":
            parts.append({"type": "step-start"})
        elif kind == "reset-step":
            # The retried step streams again: drop the parts after the last step-start.
            del parts[len(parts) - len(self._step_parts()) :]
            self._active_text, self._active_reasoning, self._partial_tools = {}, {}, {}
        elif kind == "start":
            _set(self._message, "id", chunk.get("messageId"))
            self._merge_metadata(chunk.get("messageMetadata"))
        elif kind == "finish":
            self.finished = True
            if not _nullish(chunk.get("finishReason")):
                self.finish_reason = chunk["finishReason"]
            self._merge_metadata(chunk.get("messageMetadata"))
        elif kind == "message-metadata":
            self._merge_metadata(chunk.get("messageMetadata"))
        elif kind == "error":
            self.error = chunk["errorText"]
        elif kind.startswith("data-") and not chunk.get("transient"):
            part_id = chunk.get("id")
            same = [p for p in parts if part_id is not None and p["type"] == kind and p.get("id") == part_id]
            if same:
                same[0]["data"] = copy.deepcopy(chunk["data"])  # an update in place
            else:
                parts.append(copy.deepcopy(chunk))
        # finish-step, abort and transient data leave the message as it is.

    def _merge_metadata(self, metadata: Any) -> None:
        if not _nullish(metadata):
            current = self._message.get("metadata")
            merged = copy.deepcopy(metadata) if current is None else merge_objects(current, metadata)
            self._message["metadata"] = merged

    # --- tool parts -------------------------------------------------------------------------------

    def _step_parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = self._message["parts"]
        for i in range(len(parts) - 1, -1, -1):  # from the end: steps are appended
            if parts[i]["type"] == "step-start":
                return parts[i + 1 :]
        return parts[:]

    def _invocation(self, tool_call_id: str) -> dict[str, Any]:
        # The current step first, then the whole message from its end (a continuation).
        for part in (*self._step_parts(), *reversed(self._message["parts"])):
            if _is_tool(part) and part["toolCallId"] == tool_call_id:
                found: dict[str, Any] = part
                return found
        self._fail(f'No tool invocation found for tool call ID "{tool_call_id}".')

    def _tool_chunk(self, chunk: dict[str, Any]) -> None:
        kind, call_id = chunk["type"], chunk.get("toolCallId", "")
        dynamic = bool(chunk.get("dynamic"))
        if kind == "tool-input-start":
            keep = ("inputEncoding", "title", "toolMetadata")
            self._partial_tools[call_id] = {"text": "", "toolName": chunk["toolName"], "dynamic": dynamic} | {
                key: chunk.get(key, _UNDEF) for key in keep
            }
            options = _pick(chunk, *keep, "providerExecuted", "providerMetadata")
            self._update_tool(dynamic, call_id, chunk["toolName"], "input-streaming", options)
        elif kind == "tool-input-delta":
            partial = self._partial_tools.get(call_id)
            if partial is None:
                self._fail(
                    f'Received tool-input-delta for missing tool call with ID "{call_id}". '
                    'Ensure a "tool-input-start" chunk is sent before any "tool-input-delta" chunks.'
                )
            partial["text"] += chunk["inputTextDelta"]
            text = partial["text"]
            value = text if partial["inputEncoding"] == "text" else parse_partial_json(text)
            options = _pick(partial, "inputEncoding", "title", "toolMetadata") | {"input": value}
            options["rawInput"] = text
            self._update_tool(partial["dynamic"], call_id, partial["toolName"], "input-streaming", options)
        elif kind in ("tool-input-available", "tool-input-error"):
            if kind == "tool-input-error":
                # An existing part of this call keeps its kind instead of getting a twin.
                existing = [p for p in self._step_parts() if _is_tool(p) and p["toolCallId"] == call_id]
                dynamic = existing[0]["type"] == "dynamic-tool" if existing else dynamic
            state = "input-available" if kind == "tool-input-available" else "output-error"
            options = _pick(chunk, "input", "errorText", "providerExecuted", "providerMetadata")
            options |= _pick(chunk, "toolMetadata")
            if kind == "tool-input-available":
                options |= _pick(chunk, "title")
            self._update_tool(dynamic, call_id, chunk["toolName"], state, options)
        elif kind == "tool-approval-request":
            part = self._invocation(call_id)
            part["state"] = "approval-requested"
            approval: dict[str, Any] = {"id": chunk["approvalId"]}
            _set(approval, "descriptor", chunk.get("approvalDescriptor"))
            approval |= _pick(chunk, "inputSchemaInput")  # kept even when null
            _set(approval, "requestReason", chunk.get("reason"))
            if chunk.get("isAutomatic") is True:
                approval["isAutomatic"] = True
            _set(approval, "signature", chunk.get("signature"))
            part["approval"] = approval
        elif kind == "tool-approval-response":
            approval_id = chunk["approvalId"]
            found = [p for p in self._message["parts"] if _approval_id(p) == approval_id]
            if not found:
                self._fail(f'No tool invocation found for approval ID "{approval_id}".')
            part = found[0]
            part["state"] = "approval-responded"
            reason = {} if _nullish(chunk.get("reason")) else {"reason": chunk["reason"]}
            part["approval"] = part["approval"] | {"id": approval_id, "approved": chunk["approved"]} | reason
            _set(part, "providerExecuted", chunk.get("providerExecuted"))
            _set(part, "callProviderMetadata", chunk.get("providerMetadata"))
        elif kind == "tool-output-denied":
            self._invocation(call_id)["state"] = "output-denied"
        elif kind in ("tool-output-available", "tool-output-error"):
            part = self._invocation(call_id)
            dynamic = part["type"] == "dynamic-tool"
            options = _pick(part, "input", "title") | _pick(
                chunk, "output", "errorText", "preliminary", "providerExecuted", "providerMetadata"
            )
            metadata = chunk.get("toolMetadata", part.get("toolMetadata", _UNDEF))
            options |= {} if metadata is _UNDEF else {"toolMetadata": metadata}
            if kind == "tool-output-error" and not dynamic:
                options |= _pick(part, "rawInput")  # a static part keeps its raw input
            name = part["toolName"] if dynamic else part["type"][5:]
            state = "output-available" if kind == "tool-output-available" else "output-error"
            self._update_tool(dynamic, call_id, name, state, options, existing=part)

    def _update_tool(
        self, dynamic: bool, call_id: str, tool_name: str, state: str, options: dict[str, Any],
        existing: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """``updateToolPart`` / ``updateDynamicToolPart``; a key missing from ``options`` is undefined."""
        part = existing
        if part is None:
            for candidate in self._step_parts():
                static = candidate["type"].startswith("tool-")
                if candidate.get("toolCallId") == call_id and (not static if dynamic else static):
                    part = candidate
                    break
        key = "resultProviderMetadata" if state in _RESULT_STATES else "callProviderMetadata"
        metadata = {} if _nullish(options.get("providerMetadata")) else {key: options["providerMetadata"]}
        if part is None:
            keys = _NEW_DYNAMIC_KEYS if dynamic else _NEW_STATIC_KEYS
            # A static part's key order: type, toolCallId, state, title, ...; a dynamic one: toolName second.
            name = {"toolName": tool_name} if dynamic else {}
            head = {"type": "dynamic-tool" if dynamic else f"tool-{tool_name}", **name}
            fields = {name: options[name] for name in keys if options.get(name, _UNDEF) is not _UNDEF}
            self._message["parts"].append(head | {"toolCallId": call_id, "state": state} | fields | metadata)
            return
        part["state"] = state
        if dynamic:
            part["toolName"] = tool_name
        else:
            part["type"] = f"tool-{tool_name}"
        for key in ("input", "output", "errorText", "rawInput", "inputEncoding", "preliminary"):
            _put(part, key, options.get(key, _UNDEF))
        part |= _pick(options, "title", "toolMetadata")
        _set(part, "providerExecuted", options.get("providerExecuted"))  # once set, it stays
        part |= metadata


# The keys of a new tool part (JSON.stringify drops the undefined ones; a dynamic part has no rawInput).
_NEW_STATIC_KEYS = (
    "title", "toolMetadata", "input", "inputEncoding", "output", "rawInput", "errorText", "providerExecuted",
    "preliminary",
)  # fmt: skip
_NEW_DYNAMIC_KEYS = (
    "input", "inputEncoding", "output", "errorText", "preliminary", "providerExecuted", "title",
    "toolMetadata",
)  # fmt: skip


def _pick(source: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: source[key] for key in keys if key in source and source[key] is not _UNDEF}


def assemble_ui_message(
    chunks: Iterable[dict[str, Any] | UIChunkModel], message_id: str | None = None
) -> dict[str, Any]:
    """The assistant message (a JSON dict) a client ends with after these chunks."""
    assembler = UIMessageAssembler(message_id)
    assembler.apply_all(chunks)
    return assembler.message()
