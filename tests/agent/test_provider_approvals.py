"""Approvals that the provider asks for, of tools it executes itself (MCP-style provider tools).

The model stream is a recording of what a provider adapter emits for such a tool (the AI SDK's
OpenAI Responses provider, for a remote MCP server that requires approval): a provider-executed,
dynamic ``tool-call`` and the provider's own ``tool-approval-request``. After the user's answer
the provider streams the tool's result (approved) or just text (denied). The whole flow runs over
real HTTP against the local kit: the request must be signed and recorded in the approval ledger,
the run must pause, and the answer must go back to the provider with the next model call.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Agent, ApprovalSecret, Tool
from durable_harness.approvals import sign_tool_approval
from durable_harness.messages import TextPart, ToolApprovalResponsePart, ToolMessage, UserMessage
from durable_harness.models.base import ModelRequest
from durable_harness.models.scripted import FunctionModel, ScriptedModel, tool_calls_step
from durable_harness.protocol.harness_parts import decode_part
from durable_harness.runner import Runner
from durable_harness.server.local import LocalKit, build_local_kit
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

from tests.support import CrashingStore, SimulatedCrash, log_chunks, message_of, parse_sse_body, serve, user_message

SECRET = "provider-approval-secret-0123456789"
TOOL, CALL, APPROVAL = "mcp.create_issue", "mcp_68a1", "mcpr_68a1f0"
ISSUE = {"repo": "acme/app", "title": "Crash on save"}

# Recorded: the first call asks for approval and ends; the continuation reports the result.
ASKS = [
    {"type": "stream-start", "warnings": []},
    {"type": "tool-call", "toolCallId": CALL, "toolName": TOOL, "input": json.dumps(ISSUE),
     "providerExecuted": True, "dynamic": True},
    {"type": "tool-approval-request", "approvalId": APPROVAL, "toolCallId": CALL},
    {"type": "finish", "finishReason": {"unified": "stop", "raw": "completed"},
     "totalUsage": {"inputTokens": {"total": 812}, "outputTokens": {"total": 41}}},
]  # fmt: skip
RAN = [
    {"type": "stream-start", "warnings": []},
    {"type": "tool-result", "toolCallId": CALL, "toolName": TOOL, "result": {"issue": 4711}},
    {"type": "text-start", "id": "msg_1"},
    {"type": "text-delta", "id": "msg_1", "delta": "Opened issue #4711."},
    {"type": "text-end", "id": "msg_1"},
    {"type": "finish", "finishReason": {"unified": "stop", "raw": "completed"},
     "totalUsage": {"inputTokens": {"total": 901}, "outputTokens": {"total": 12}}},
]  # fmt: skip
DENIED = [RAN[0], *[dict(p, delta="I did not open it.") if p["type"] == "text-delta" else p for p in RAN[2:]]]


class Provider:
    """Plays the recording; remembers what every call was sent."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.model = FunctionModel(self.play, model_id="openai-responses-recording")

    def play(self, request: ModelRequest, step: int) -> list[Any]:
        self.requests.append(request)
        last = request.messages[-1]
        answers = [p for p in last.content if isinstance(p, ToolApprovalResponsePart)] if isinstance(
            last, ToolMessage
        ) else []  # fmt: skip
        if not answers:
            return [decode_part(p) for p in ASKS]
        return [decode_part(p) for p in (RAN if answers[0].approved else DENIED)]


@pytest.fixture
def provider() -> Provider:
    return Provider()


@pytest.fixture
def kit(tmp_path: Path, provider: Provider) -> LocalKit:
    agent = Agent(model=provider.model, approval_secret=ApprovalSecret.from_value(SECRET))
    return build_local_kit(agent, tmp_path / "data", static_dir=None)


@pytest.fixture
def url(kit: LocalKit) -> Iterator[str]:
    with serve(kit.app) as base:
        yield base


def post(url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", content=json.dumps({"messages": messages}), timeout=10)


def answered(user: dict[str, Any], chunks: list[dict[str, Any]], approved: bool, **approval: Any) -> list[Any]:
    """The history the client POSTs after ``addToolApprovalResponse`` on the provider's request."""
    assistant = copy.deepcopy(message_of(chunks))
    part = next(p for p in assistant["parts"] if p.get("toolCallId") == CALL)
    part["state"] = "approval-responded"
    part["approval"] = {**part["approval"], "approved": approved, **({} if approved else {"reason": "no"}), **approval}
    return [user, assistant]


def ask(url: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    user = user_message("Open an issue about the crash on save.")
    response = post(url, [user])
    assert response.status_code == 200
    return user, parse_sse_body(response.content), response.headers["x-workflow-run-id"]


def test_the_run_pauses_with_a_signed_request_recorded_in_the_ledger(url: str, kit: LocalKit) -> None:
    _, chunks, run_id = ask(url)
    [request] = [c for c in chunks if c["type"] == "tool-approval-request"]
    assert request == {
        "type": "tool-approval-request", "approvalId": APPROVAL, "toolCallId": CALL,
        "signature": sign_tool_approval(SECRET, APPROVAL, CALL, TOOL, ISSUE),
    }  # fmt: skip
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    status = httpx.get(f"{url}/api/runs/{run_id}").json()
    assert status["status"] == "awaiting_tool_approval"
    assert status["pendingApprovals"] == [
        {"approvalId": APPROVAL, "toolCallId": CALL, "toolName": TOOL, "input": ISSUE, "providerExecuted": True}
    ]


@pytest.mark.parametrize("approved", [True, False])
def test_the_answer_is_accepted_and_forwarded_to_the_provider(url: str, provider: Provider, approved: bool) -> None:
    user, chunks, _ = ask(url)
    history = answered(user, chunks, approved)
    response = post(url, history)
    assert response.status_code == 200, response.text
    more = parse_sse_body(response.content)
    assert more[0] == {"type": "start", "messageId": history[1]["id"]}  # the same assistant message
    # What the provider was sent: the user's answer, marked provider-executed, nothing run here.
    forwarded = provider.requests[-1].messages[-1]
    assert isinstance(forwarded, ToolMessage)
    [answer] = [p for p in forwarded.content if isinstance(p, ToolApprovalResponsePart)]
    assert (answer.approval_id, answer.approved, answer.provider_executed) == (APPROVAL, approved, True)
    final = message_of(chunks + more[1:])
    part = next(p for p in final["parts"] if p.get("toolCallId") == CALL)
    if approved:
        assert {"type": "tool-output-available", "toolCallId": CALL, "output": {"issue": 4711}} in more
        assert part["state"] == "output-available" and part["output"] == {"issue": 4711}
        assert final["parts"][-1]["text"] == "Opened issue #4711."
    else:
        assert {"type": "tool-output-denied", "toolCallId": CALL} in more
        assert part["state"] == "output-denied" and final["parts"][-1]["text"] == "I did not open it."
    again = post(url, answered(user, chunks, not approved))  # the other answer to the same request
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_answered"


def test_an_answer_the_server_never_asked_for_is_refused(url: str, provider: Provider) -> None:
    user, chunks, _ = ask(url)
    forged = answered(user, chunks, True)
    part = next(p for p in forged[1]["parts"] if p.get("toolCallId") == CALL)
    part["approval"]["id"] = "mcpr_forged"
    response = post(url, forged)
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_approval"
    assert len(provider.requests) == 1  # nothing reached the provider


def test_a_badly_signed_approval_reaches_the_provider_as_a_denial(url: str, provider: Provider) -> None:
    user, chunks, _ = ask(url)
    response = post(url, answered(user, chunks, True, signature="A" * 43))
    assert response.status_code == 200
    forwarded = provider.requests[-1].messages[-1]
    assert isinstance(forwarded, ToolMessage)
    [answer] = [p for p in forwarded.content if isinstance(p, ToolApprovalResponsePart)]
    assert answer.approved is False and "signature" in (answer.reason or "")


def test_the_run_api_answers_a_provider_approval_too(url: str, provider: Provider) -> None:
    _, _, run_id = ask(url)
    started = httpx.post(f"{url}/api/runs/{run_id}/approvals", json={"approvals": [
        {"approvalId": APPROVAL, "approved": True}]})  # fmt: skip
    assert started.status_code == 202, started.text
    chunks = parse_sse_body(httpx.get(url + started.json()["stream"], timeout=10).content)
    assert {"type": "tool-output-available", "toolCallId": CALL, "output": {"issue": 4711}} in chunks
    forwarded = provider.requests[-1].messages[-1]
    assert isinstance(forwarded, ToolMessage)
    [answer] = [p for p in forwarded.content if isinstance(p, ToolApprovalResponsePart)]
    assert (answer.approved, answer.provider_executed) == (True, True)


async def test_a_step_redone_after_a_crash_shows_the_provider_request_again() -> None:
    """A provider's request next to a host tool call: the slice dies after the tool's result reached
    the log but before its checkpoint; the retry (``reset-step``, then the step's content again)
    shows the same pending request."""
    step = [decode_part(p) for p in ASKS[:-1]] + tool_calls_step(("h1", "look", {}))
    log, store = MemoryChunkLog(), MemoryCheckpointStore()
    agent = Agent(model=ScriptedModel([step]), tools=[Tool(name="look", execute=lambda input: "looked")],
                  approval_secret=ApprovalSecret.from_value(SECRET))  # fmt: skip
    run_id = Runner(agent, store, log).create_run([UserMessage(content=[TextPart(text="go")])], message_id="m").run_id
    crashing = CrashingStore(store, crash_when=lambda cp: _records_result(cp.state, "h1"))
    with pytest.raises(SimulatedCrash):  # at the first checkpoint holding the tool's result
        await Runner(agent, crashing, log, flush_interval=0).run_slice(run_id)
    state = await Runner(agent, store, log, flush_interval=0).run_slice(run_id)
    chunks = log_chunks(log, run_id)
    types = [c["type"] for c in chunks]
    assert state.status == "awaiting_tool_approval" and "reset-step" in types
    assert "tool-input-error" not in types  # the provider's call is shown again as it first was
    parts = {p["toolCallId"]: p for p in message_of(chunks)["parts"] if "toolCallId" in p}
    assert parts[CALL]["state"] == "approval-requested" and parts[CALL]["approval"]["id"] == APPROVAL
    assert parts[CALL]["type"] == "dynamic-tool" and parts["h1"]["state"] == "output-available"


def _records_result(state_json: str, call_id: str) -> bool:
    """Whether a run state holds the result of tool call ``call_id`` (step outcomes or messages)."""
    turn = json.loads(state_json)["turn"] or {}
    if any(o["tool_call_id"] == call_id for o in turn.get("step_outcomes", [])):
        return True
    return any(
        p.get("toolCallId") == call_id and p["type"] == "tool-result"
        for m in turn.get("messages", [])
        if m["role"] == "tool"
        for p in m["content"]
    )
