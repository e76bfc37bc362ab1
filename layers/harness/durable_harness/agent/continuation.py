"""Answering a paused turn's approvals without a chat client (an event-triggered run, say).

A chat client answers approvals by POSTing the whole history. A run that nobody is chatting with
is answered through the run API instead: the runner verifies the answers and hands them to the
loop with the paused turn's checkpoint; here they become the same model messages a client would
have sent, built from the paused turn's own messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InvalidRequestError
from ..harness.interface import ApprovalDecision
from ..messages import (
    AssistantMessage,
    ExecutionDeniedOutput,
    ModelMessage,
    ToolApprovalRequestContent,
    ToolApprovalResponsePart,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
)
from .state import LoopTurnState


def pending_approvals(turn: Any) -> list[dict[str, Any]]:
    """The approval requests a paused turn waits for: approval id, tool call id, tool name, input
    (and ``providerExecuted: true`` for a call the provider runs once approved)."""
    state = turn if isinstance(turn, LoopTurnState) else LoopTurnState.model_validate(turn)
    calls = _calls(state.messages)
    waiting = {*state.pending_approvals, *state.provider_approvals}
    pending = []
    for part in _requests(state.messages):
        if part.tool_call_id in waiting and part.tool_call_id in calls:
            call = calls[part.tool_call_id]
            item = {
                "approvalId": part.approval_id,
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "input": call.input,
            }
            if call.provider_executed:
                item["providerExecuted"] = True
            pending.append(item)
    return pending


def continuation_messages(turn: Any, answers: Sequence[ApprovalDecision]) -> list[ModelMessage]:
    """The conversation of a paused turn with these (verified) answers appended."""
    state = LoopTurnState.model_validate(turn)
    pending = {p["approvalId"]: p for p in pending_approvals(turn)}
    unknown = [a.approval_id for a in answers if a.approval_id not in pending]
    if unknown:
        raise InvalidRequestError(
            f"Unknown approval ids: {unknown}; pending: {sorted(pending)}.", code="unknown_approval"
        )
    messages = list(state.messages)
    content: list[ToolResultContent | ToolApprovalResponsePart] = []
    for answer in answers:
        call = pending[answer.approval_id]
        content.append(
            ToolApprovalResponsePart(
                approval_id=answer.approval_id, approved=answer.approved, reason=answer.reason,
                provider_executed=True if call.get("providerExecuted") else None,
            )
        )  # fmt: skip
        if not answer.approved:
            content.append(
                ToolResultContent(
                    tool_call_id=call["toolCallId"],
                    tool_name=call["toolName"],
                    output=ExecutionDeniedOutput(reason=answer.reason),
                )
            )
    if isinstance(messages[-1], ToolMessage):
        messages[-1] = ToolMessage(content=[*messages[-1].content, *content])
    else:
        messages.append(ToolMessage(content=content))
    return messages


def _requests(messages: Sequence[ModelMessage]) -> list[ToolApprovalRequestContent]:
    return [
        p
        for m in messages
        if isinstance(m, AssistantMessage)
        for p in m.content
        if isinstance(p, ToolApprovalRequestContent)
    ]


def _calls(messages: Sequence[ModelMessage]) -> dict[str, ToolCallContent]:
    return {
        p.tool_call_id: p
        for m in messages
        if isinstance(m, AssistantMessage)
        for p in m.content
        if isinstance(p, ToolCallContent)
    }
