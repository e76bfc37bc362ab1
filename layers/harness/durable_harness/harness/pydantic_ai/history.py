"""The conversation (AI SDK model messages) as a Pydantic AI message history.

* a user message is a ``ModelRequest`` with a ``UserPromptPart`` (text, and files: a ``data:`` URL
  as ``BinaryContent``, any other URL as ``ImageUrl`` / ``AudioUrl`` / ``VideoUrl`` /
  ``DocumentUrl`` by media type); a system message a ``SystemPromptPart``;
* an assistant message (one model step) is a ``ModelResponse`` with its ``TextPart``,
  ``ThinkingPart`` and ``ToolCallPart`` parts;
* tool results, in the assistant message (provider-executed calls: this adapter's own) or in a
  tool message, are ``ToolReturnPart`` parts of the request after that response. A result the
  client shows as an error (``error-text`` / ``error-json``) has ``outcome='failed'``, a denied
  call (``execution-denied``, or for a provider-executed call only its denied approval response)
  ``outcome='denied'`` with the reason as its content. (Pydantic AI 2 replaced ``RetryPromptPart``
  by these outcomes; a history cannot tell a retry request from a failure, so both are failures.)
* approval requests and responses otherwise carry nothing the model needs beyond the call and its
  result, so they are left out; so are parts the model cannot take back (provider-specific
  ``custom`` parts, file references).

Pydantic AI repairs what is left (a call without a result gets a synthesized one) before every
model request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_ai import messages as pm

from ... import messages as mm
from .steps import DENIED

Prompt = str | list[pm.UserContent]
"""A user prompt as Pydantic AI takes it."""


def conversation(messages: Sequence[mm.ModelMessage]) -> tuple[list[pm.ModelMessage], Prompt | None]:
    """The history before the new input, and the new input: the last message when it is the user's."""
    if messages and isinstance(messages[-1], mm.UserMessage):
        history = to_history(messages[:-1])
        # An earlier turn may have ended with calls that never got a result (an abandoned
        # approval): Pydantic AI refuses a new prompt after those unless they are closed out.
        return pm.repair_messages(history), user_prompt(messages[-1])
    return to_history(messages), None


def to_history(messages: Sequence[mm.ModelMessage]) -> list[pm.ModelMessage]:
    """AI SDK model messages as Pydantic AI messages (consecutive requests merged)."""
    history: list[pm.ModelMessage] = []
    calls = _Calls()
    for message in messages:
        if isinstance(message, mm.SystemMessage):
            _request(history, [pm.SystemPromptPart(content=message.content)])
        elif isinstance(message, mm.UserMessage):
            _request(history, [pm.UserPromptPart(content=user_prompt(message))])
        elif isinstance(message, mm.AssistantMessage):
            parts = [p for item in message.content if (p := _response_part(item)) is not None]
            calls.made(parts, message.content)
            if parts:
                history.append(pm.ModelResponse(parts=parts))
            _request(history, calls.results(message.content))
        else:
            _request(history, [*calls.results(message.content), *calls.denials(message.content)])
    return history


class _Calls:
    """The tool calls of a conversation, to match results and approval answers to them."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # tool call id -> tool name
        self.approvals: dict[str, str] = {}  # approval id -> tool call id
        self.answered: set[str] = set()  # calls with a result

    def made(self, parts: list[pm.ModelResponsePart], content: Sequence[Any]) -> None:
        """A model step's calls, and the approvals it asked for."""
        self.names.update({p.tool_call_id: p.tool_name for p in parts if isinstance(p, pm.ToolCallPart)})
        self.approvals.update(
            {a.approval_id: a.tool_call_id for a in content if isinstance(a, mm.ToolApprovalRequestContent)}
        )

    def results(self, content: Sequence[Any]) -> list[pm.ModelRequestPart]:
        """The tool results in a message."""
        results = [tool_return(r) for r in content if isinstance(r, mm.ToolResultContent)]
        self.answered.update(r.tool_call_id for r in results)
        return list(results)

    def denials(self, content: Sequence[Any]) -> list[pm.ModelRequestPart]:
        """Denials without a result: the AI SDK gives a provider-executed call the user denied no
        result (the provider hears of it through the approval response), so the model is told here."""
        denials: list[pm.ModelRequestPart] = []
        for response in content:
            if not isinstance(response, mm.ToolApprovalResponsePart) or response.approved:
                continue
            call_id = self.approvals.get(response.approval_id, "")
            if call_id in self.names and call_id not in self.answered:
                self.answered.add(call_id)
                reason = response.reason or DENIED
                denials.append(pm.ToolReturnPart(self.names[call_id], reason, call_id, outcome="denied"))
        return denials


def user_prompt(message: mm.UserMessage) -> Prompt:
    """A user message's content: its text, or a list when it has files."""
    content: list[pm.UserContent] = []
    for item in message.content:
        if isinstance(item, mm.TextPart):
            content.append(item.text)
        elif isinstance(item.data, mm.FileUrlData):
            content.append(_file(item.data.url, item.media_type))
    if all(isinstance(c, str) for c in content):
        return "\n".join(str(c) for c in content)
    return content


def tool_return(result: mm.ToolResultContent) -> pm.ToolReturnPart:
    """A tool result as the model is sent it."""
    output, name, call_id = result.output, result.tool_name, result.tool_call_id
    if isinstance(output, mm.ExecutionDeniedOutput):
        return pm.ToolReturnPart(name, output.reason or DENIED, call_id, outcome="denied")
    if isinstance(output, mm.ErrorTextOutput | mm.ErrorJsonOutput):
        return pm.ToolReturnPart(name, output.value, call_id, outcome="failed")
    return pm.ToolReturnPart(name, output.value, call_id)


def _response_part(item: Any) -> pm.ModelResponsePart | None:
    if isinstance(item, mm.TextPart) and item.text:
        return pm.TextPart(content=item.text)
    if isinstance(item, mm.ReasoningPart) and item.text:
        return pm.ThinkingPart(content=item.text)
    if isinstance(item, mm.ToolCallContent):
        args = item.input if isinstance(item.input, dict | str) else json.dumps(item.input)
        return pm.ToolCallPart(tool_name=item.tool_name, args=args, tool_call_id=item.tool_call_id)
    return None


def _request(history: list[pm.ModelMessage], parts: list[Any]) -> None:
    """Add request parts: to the last message when it is a request (results, then a prompt)."""
    if not parts:
        return
    last = history[-1] if history else None
    if isinstance(last, pm.ModelRequest):
        history[-1] = pm.ModelRequest(parts=[*last.parts, *parts])
    else:
        history.append(pm.ModelRequest(parts=parts))


def _file(url: str, media_type: str) -> pm.UserContent:
    if url.startswith("data:"):
        return pm.BinaryContent.from_data_uri(url)
    kind = media_type.split("/", 1)[0]
    if kind == "image":
        return pm.ImageUrl(url=url, media_type=media_type)
    if kind == "audio":
        return pm.AudioUrl(url=url, media_type=media_type)
    if kind == "video":
        return pm.VideoUrl(url=url, media_type=media_type)
    return pm.DocumentUrl(url=url, media_type=media_type)
