"""What the sync and async clients share: URLs, headers, request bodies and the conversation state."""

from __future__ import annotations

import copy
import secrets
import string
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeAlias, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from ..errors import ProtocolError
from ..protocol.assemble import UIMessageAssembler
from .errors import ChatClientError

DEFAULT_URL = "http://127.0.0.1:8000"
"""Where ``durable-harness serve`` listens by default."""

DEFAULT_TIMEOUT = httpx.Timeout(30.0, read=60.0)
"""Reads wait up to 60 s: a quiet run gets an SSE keep-alive every 15 s."""

Messages: TypeAlias = str | Sequence[Mapping[str, Any]]
"""What :meth:`ChatClient.send` takes: a user's text, or UI messages (JSON objects)."""

ApprovalAnswers: TypeAlias = Mapping[str, bool] | Sequence[Mapping[str, Any]]
"""Answers for the run API: ``{approval_id: approved}`` or ``[{"approvalId", "approved", "reason"?}]``."""

_ID_ALPHABET = string.ascii_letters + string.digits


def generate_id(size: int = 16) -> str:
    """A random id like the AI SDK's ``generateId()`` (16 alphanumeric characters)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(size))


def user_message(text: str, message_id: str | None = None) -> dict[str, Any]:
    """A UI user message with one text part, as ``useChat`` sends it."""
    return {"id": message_id or generate_id(), "role": "user", "parts": [{"type": "text", "text": text}]}


def base_url(url: str) -> str:
    """``url`` checked (http or https, with a host) and without a trailing slash."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as exc:
        raise ChatClientError(f"invalid URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ChatClientError(f"invalid URL {url!r}: expected http(s)://host[:port][/path]")
    if parts.query or parts.fragment:
        raise ChatClientError(f"invalid URL {url!r}: no query string or fragment, please")
    return text.rstrip("/")


def request_headers(token: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers of every request: ``headers``, plus ``Authorization: Bearer <token>``."""
    merged = {"accept": "text/event-stream, application/json"}
    merged.update(headers or {})
    if token:
        merged["authorization"] = f"Bearer {token}"
    return merged


def stream_path(run_id: str) -> str:
    """The path of a run's stream (the run id URL-encoded, as the transport does)."""
    return f"/api/chat/{quote(run_id, safe='')}/stream"


def run_path(run_id: str, action: str = "") -> str:
    """The run API path of ``run_id`` (``action``: ``""``, ``"cancel"`` or ``"approvals"``)."""
    path = f"/api/runs/{quote(run_id, safe='')}"
    return f"{path}/{action}" if action else path


def chat_body(messages: Messages, chat_id: str | None, body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The POST body: ``{"messages": [...], ...body}``, with ``"id": chat_id`` when given."""
    if isinstance(messages, str):
        items: list[Any] = [user_message(messages)]
    else:
        items = [dict(m) for m in messages]
    if not items:
        raise ValueError("send() needs a text or at least one message")
    payload: dict[str, Any] = {"messages": items, **(body or {})}
    if chat_id is not None:
        payload["id"] = chat_id
    return payload


def approvals_body(answers: ApprovalAnswers) -> dict[str, Any]:
    """The body of ``POST /api/runs/{id}/approvals``."""
    if isinstance(answers, Mapping):
        items = [{"approvalId": key, "approved": bool(value)} for key, value in answers.items()]
    else:
        items = []
        for answer in answers:
            item = {"approvalId": answer["approvalId"], "approved": bool(answer["approved"])}
            if answer.get("reason") is not None:
                item["reason"] = str(answer["reason"])
            items.append(item)
    if not items:
        raise ValueError("approve_run() needs at least one answer")
    return {"approvals": items}


def is_tool_part(part: Mapping[str, Any]) -> bool:
    """Whether a UI message part is a tool call (``tool-<name>`` or ``dynamic-tool``)."""
    kind = str(part.get("type", ""))
    return kind == "dynamic-tool" or kind.startswith("tool-")


def tool_name(part: Mapping[str, Any]) -> str:
    """The tool name of a tool part."""
    kind = str(part["type"])
    return str(part.get("toolName", "")) if kind == "dynamic-tool" else kind[5:]


class ConversationState:
    """A chat's UI message history and the assistant message being streamed, like ``useChat``'s.

    A turn starts from the history (plus a new user message, if any); the assistant message is
    assembled with :class:`UIMessageAssembler` as chunks arrive. When the history ends with an
    assistant message (a continuation after approvals) the assembler continues that message,
    and the result replaces it when the stream's ``start.messageId`` is its id (otherwise it is
    appended, exactly as the Chat does).
    """

    def __init__(self, messages: Sequence[Mapping[str, Any]] | None = None) -> None:
        """A conversation with ``messages`` as its history (copied)."""
        self._history: list[dict[str, Any]] = [copy.deepcopy(dict(m)) for m in messages or []]
        self._assembler: UIMessageAssembler | None = None
        self._applied = False
        self.turn = 0
        """Counts the turns begun (a turn's stream can only be resumed while it is the latest)."""
        self.run_id: str | None = None
        """The run of the latest turn."""
        self.finish_reason: str | None = None
        """The latest turn's finish reason."""
        self.error: str | None = None
        """The latest turn's error (an ``error`` chunk, or a chunk the client's reducer rejects)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The history (a copy), including the assistant message as streamed so far."""
        history = copy.deepcopy(self._history)
        if self._assembler is not None and self._applied:
            self._place(history, self._assembler.message())
        return history

    @property
    def last_assistant_message(self) -> dict[str, Any] | None:
        """The assistant message if the history ends with one (live while streaming)."""
        messages = self.messages
        return messages[-1] if messages and messages[-1].get("role") == "assistant" else None

    def begin(self, new_message: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Start a turn (appending ``new_message``, if any); returns the messages to POST."""
        self.end()
        self.turn += 1
        if new_message is not None:
            self._history.append(copy.deepcopy(dict(new_message)))
        if not self._history:
            raise ValueError("nothing to send: the conversation is empty")
        last = self._history[-1]
        self._assembler = UIMessageAssembler(generate_id(), message=last if last.get("role") == "assistant" else None)
        self._applied = False
        self.run_id = self.finish_reason = self.error = None
        return copy.deepcopy(self._history)

    def apply(self, chunk: dict[str, Any]) -> None:
        """Apply one received chunk to the assistant message."""
        assembler = self._assembler
        if assembler is None:
            raise RuntimeError("apply() outside a turn")
        try:
            assembler.apply(chunk)
        except ProtocolError as exc:  # the Chat stops processing the stream on a reducer error
            assembler.error = assembler.error or str(exc)
        self._applied = True
        self.finish_reason = assembler.finish_reason
        self.error = assembler.error

    def end(self) -> None:
        """End the turn: the assistant message (if any chunk arrived) joins the history."""
        if self._assembler is not None and self._applied:
            self._place(self._history, self._assembler.message())
        self._assembler = None
        self._applied = False

    @staticmethod
    def _place(history: list[dict[str, Any]], message: dict[str, Any]) -> None:
        if history and history[-1].get("role") == "assistant" and history[-1].get("id") == message["id"]:
            history[-1] = message
        else:
            history.append(message)

    # --- approvals ----------------------------------------------------------------------------------

    def pending_approvals(self) -> list[dict[str, Any]]:
        """The tool calls of the last assistant message waiting for an answer:
        ``{"approvalId", "toolCallId", "toolName", "input"}`` each."""
        message = self.last_assistant_message
        if message is None:
            return []
        return [
            {"approvalId": part["approval"]["id"], "toolCallId": part["toolCallId"], "toolName": tool_name(part),
             "input": part.get("input")}
            for part in message["parts"]
            if is_tool_part(part) and part.get("state") == "approval-requested"
            and isinstance(part.get("approval"), dict)
        ]  # fmt: skip

    def add_approval_response(self, approval_id: str, approved: bool, reason: str | None = None) -> None:
        """``addToolApprovalResponse``: the requested part becomes ``approval-responded``; the
        approval keeps its ``signature`` and gains ``approved`` (and ``reason``)."""
        self.end()
        for message in self._history:
            for i, part in enumerate(message.get("parts", [])):
                approval = part.get("approval") if is_tool_part(part) else None
                if (
                    part.get("state") == "approval-requested"
                    and isinstance(approval, dict)
                    and approval.get("id") == approval_id
                ):
                    answer: dict[str, Any] = {"id": approval_id, "approved": approved}
                    if reason is not None:
                        answer["reason"] = reason
                    message["parts"][i] = {**part, "state": "approval-responded", "approval": approval | answer}
                    return
        raise ChatClientError(f"no tool call waits for approval {approval_id!r}")

    def ready_to_continue(self) -> bool:
        """``lastAssistantMessageIsCompleteWithApprovalResponses``: the last step has answered
        approvals and nothing it still waits for."""
        message = self.last_assistant_message
        if message is None:
            return False
        parts = message["parts"]
        last_step = max((i for i, p in enumerate(parts) if p.get("type") == "step-start"), default=-1)
        tools = [p for p in parts[last_step + 1 :] if is_tool_part(p)]
        done = ("output-error", "output-denied", "approval-responded")
        return any(p.get("state") == "approval-responded" for p in tools) and all(
            (p.get("state") == "output-available" and p.get("preliminary") is not True) or p.get("state") in done
            for p in tools
        )


ClientT = TypeVar("ClientT")
TurnT = TypeVar("TurnT")


class ConversationBase(Generic[ClientT, TurnT]):
    """A chat held like ``useChat`` holds it: the UI message history, the assistant message
    assembled as chunks arrive, and tool approvals that continue the same assistant message.

    Every turn POSTs the whole history (with ``chat_id`` as ``id`` and ``body``'s fields). The
    sync and async conversations differ only in the turn streams they return."""

    def __init__(
        self,
        client: ClientT,
        *,
        chat_id: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        """A conversation over ``client``, starting from ``messages`` (UI messages)."""
        self.client = client
        self.chat_id = chat_id
        self.body = dict(body or {})
        self.state = ConversationState(messages)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The UI message history, with the assistant message as streamed so far."""
        return self.state.messages

    @property
    def last_assistant_message(self) -> dict[str, Any] | None:
        """The last message, if it is the assistant's."""
        return self.state.last_assistant_message

    @property
    def run_id(self) -> str | None:
        """The latest turn's run."""
        return self.state.run_id

    def pending_approvals(self) -> list[dict[str, Any]]:
        """Tool calls waiting for an answer: ``{"approvalId", "toolCallId", "toolName", "input"}``."""
        return self.state.pending_approvals()

    def send(self, message: str | Mapping[str, Any]) -> TurnT:
        """Add a user message (a text, or a UI message) and stream the assistant's reply."""
        new = user_message(message) if isinstance(message, str) else message
        return self._turn(self.state.begin(new))

    def continue_turn(self) -> TurnT:
        """Send the history as it is (e.g. after :meth:`add_approval_response`)."""
        return self._turn(self.state.begin(None))

    def add_approval_response(self, approval_id: str, approved: bool, reason: str | None = None) -> None:
        """Answer an approval without sending anything yet (``addToolApprovalResponse``)."""
        self.state.add_approval_response(approval_id, approved, reason)

    def answer_approval(self, approval_id: str, approved: bool, reason: str | None = None) -> TurnT:
        """Answer an approval; once every approval of the last step is answered, send the history
        and stream the continuation into the same assistant message. While others are still
        unanswered nothing is sent and the returned stream is empty."""
        self.add_approval_response(approval_id, approved, reason)
        if not self.state.ready_to_continue():
            return self._empty_turn()
        return self.continue_turn()

    def _turn(self, messages: list[dict[str, Any]]) -> TurnT:
        raise NotImplementedError

    def _empty_turn(self) -> TurnT:
        raise NotImplementedError
