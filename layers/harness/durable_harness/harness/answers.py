"""Approval answers in a conversation: the responses of its last ``tool`` message, each matched with
the request and the tool call it answers (like the AI SDK's ``collectToolApprovals``).

Which of them the server really issued is the approval ledger's business, not this module's: any
approval id a harness chose is accepted here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ToolError
from ..messages import (
    AssistantMessage,
    ModelMessage,
    ToolApprovalRequestContent,
    ToolApprovalResponsePart,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
)


@dataclass(frozen=True)
class AnsweredApproval:
    """An approval response in the last tool message, matched with the request and call it answers."""

    response: ToolApprovalResponsePart
    request: ToolApprovalRequestContent
    call: ToolCallContent
    result: ToolResultContent | None
    """The call's result already in the history (a denial's ``execution-denied``, or an earlier run's)."""

    @property
    def pending(self) -> bool:
        """True when this answer still has to be acted on (executed, or shown as denied)."""
        if self.result is None:
            return True
        return not self.response.approved and self.result.output.type == "execution-denied"


def match_approvals(messages: list[ModelMessage]) -> list[AnsweredApproval]:
    """The approval responses of a last ``tool`` message, each with its request and tool call.

    Raises :class:`ToolError` for a response whose request, or whose request's tool call, is not
    in the history.
    """
    last = messages[-1] if messages else None
    if not isinstance(last, ToolMessage):
        return []
    responses = [p for p in last.content if isinstance(p, ToolApprovalResponsePart)]
    if not responses:
        return []
    requests: dict[str, ToolApprovalRequestContent] = {}
    calls: dict[str, ToolCallContent] = {}
    for message in messages[:-1]:
        if isinstance(message, AssistantMessage):
            for part in message.content:
                if isinstance(part, ToolApprovalRequestContent):
                    requests[part.approval_id] = part
                elif isinstance(part, ToolCallContent):
                    calls[part.tool_call_id] = part
    results = {p.tool_call_id: p for p in last.content if isinstance(p, ToolResultContent)}
    matched = []
    for response in responses:
        request = requests.get(response.approval_id)
        call = calls.get(request.tool_call_id) if request else None
        if request is None or call is None:
            raise ToolError(f"approval response {response.approval_id!r} answers no approval request in the history")
        matched.append(AnsweredApproval(response, request, call, results.get(call.tool_call_id)))
    return matched
