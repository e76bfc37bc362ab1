"""The conversation's AI SDK model messages as a Pydantic AI history (harness/pydantic_ai/history.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is part of the dev install")

from durable_harness.harness.pydantic_ai.history import conversation
from durable_harness.messages import parse_messages
from pydantic_ai import messages as pm


def test_failed_and_denied_results_keep_their_outcome_and_files_reach_the_model() -> None:
    history, prompt = conversation(
        parse_messages([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "file", "mediaType": "image/png", "data": {"type": "url", "url": "https://x.test/a.png"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "reasoning", "text": "Two calls."},
                {"type": "tool-call", "toolCallId": "c1", "toolName": "fetch", "input": {"id": 1}},
                {"type": "tool-call", "toolCallId": "c2", "toolName": "delete", "input": {"id": 1}},
                {"type": "tool-call", "toolCallId": "c3", "toolName": "fetch", "input": {"id": 2},
                 "providerExecuted": True},
                {"type": "tool-result", "toolCallId": "c3", "toolName": "fetch",
                 "output": {"type": "error-json", "value": "timeout"}},
            ]},
            {"role": "tool", "content": [
                {"type": "tool-result", "toolCallId": "c1", "toolName": "fetch",
                 "output": {"type": "error-text", "value": "not found"}},
                {"type": "tool-result", "toolCallId": "c2", "toolName": "delete",
                 "output": {"type": "execution-denied"}},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "And this?"},
                {"type": "file", "mediaType": "text/plain",
                 "data": {"type": "url", "url": "data:text/plain;base64,aGk="}},
            ]},
        ])
    )  # fmt: skip
    system_and_user, response, results = history
    assert isinstance(system_and_user, pm.ModelRequest) and isinstance(results, pm.ModelRequest)
    assert [type(p) for p in system_and_user.parts] == [pm.SystemPromptPart, pm.UserPromptPart]
    text, image = system_and_user.parts[1].content
    assert text == "Look at this" and image == pm.ImageUrl(url="https://x.test/a.png", media_type="image/png")
    assert isinstance(response, pm.ModelResponse)
    assert [p.part_kind for p in response.parts] == ["thinking", "tool-call", "tool-call", "tool-call"]
    outcomes = [(p.tool_call_id, p.content, p.outcome) for p in results.parts if isinstance(p, pm.ToolReturnPart)]
    assert outcomes == [
        ("c3", "timeout", "failed"),
        ("c1", "not found", "failed"),
        ("c2", "The user denied this tool call.", "denied"),
    ]
    assert isinstance(prompt, list) and prompt[0] == "And this?"
    assert isinstance(prompt[1], pm.BinaryContent) and prompt[1].data == b"hi"


def test_a_call_left_without_a_result_is_closed_out_before_the_new_prompt() -> None:
    history, prompt = conversation(
        parse_messages([
            {"role": "user", "content": "Delete it"},
            {"role": "assistant", "content": [
                {"type": "tool-call", "toolCallId": "c1", "toolName": "delete", "input": {}},
            ]},
            {"role": "user", "content": "Never mind"},
        ])
    )  # fmt: skip
    assert prompt == "Never mind"
    closing = history[-1]
    assert isinstance(closing, pm.ModelRequest)
    (result,) = closing.parts
    assert isinstance(result, pm.ToolReturnPart) and result.tool_call_id == "c1" and result.outcome == "interrupted"


def test_a_conversation_that_does_not_end_with_the_user_has_no_prompt() -> None:
    history, prompt = conversation(
        parse_messages([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    )
    assert prompt is None
    assert [type(m) for m in history] == [pm.ModelRequest, pm.ModelResponse]
