"""Signed approvals: request, approve, deny, tampering, and survival across slices and crashes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from durable_harness import Agent, ApprovalSecret
from durable_harness.approvals import sign_tool_approval, verify_tool_approval
from durable_harness.demo import DEMO_TOOLS, SAVED_NOTES
from durable_harness.errors import ApprovalSecretError, InvalidRequestError
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.protocol.ui_messages import convert_to_model_messages, parse_ui_messages
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

from tests.support import log_chunks, message_of, user_message

SECRET = "topsecret-0123456789abcdefghijklmn"
REFERENCE_SECRET = "topsecret"
"""The secret of the reference's signature vectors (the signing function checks no length)."""
NEW_SECRET = "new-secret-0123456789abcdefghijklm"
NOTE = {"title": "shopping", "text": "milk"}


@pytest.mark.parametrize(
    ("approval_id", "call_id", "name", "tool_input", "signature"),
    [
        ("approval-abc", "call_2", "del", {"path": "notes/draft.txt"}, "U2fOlljdXD-YhaTPK-P_cqLn9uzhW2ACrfSNjMHgIEE"),
        ("approval-call_2", "call_2", "del", {"path": "notes/draft.txt"},
         "teb6WHqttRiaa8nPLCnkHCfaZrhmfiFA99j7It6GDbs"),
        ("approval-call_11", "call_11", "deleteFile", {"path": "notes/draft.txt"},
         "FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s"),
        ("approval-call_7", "call_7", "writeFile",
         {"path": "docs/ü.md", "opts": {"mode": "w", "lines": [1, 2.5, None, True]}, "a": "x\ny"},
         "H6Fz1d84bCBB2N4b9xTX9KCoKTB0RlbZnkoEBxdVByM"),
    ],
)  # fmt: skip
def test_signature_vectors_of_the_reference(
    approval_id: str, call_id: str, name: str, tool_input: Any, signature: str
) -> None:
    assert sign_tool_approval(REFERENCE_SECRET, approval_id, call_id, name, tool_input) == signature
    assert verify_tool_approval(REFERENCE_SECRET, signature, approval_id, call_id, name, tool_input)
    assert not verify_tool_approval(REFERENCE_SECRET, signature, approval_id, call_id, name, {**tool_input, "x": 1})
    assert not verify_tool_approval("other", signature, approval_id, call_id, name, tool_input)


def test_the_secret_never_shows_in_repr() -> None:
    assert SECRET not in repr(ApprovalSecret.from_value(SECRET))
    assert "TOOL_APPROVAL_SECRET" in repr(ApprovalSecret())


class Turns:
    """Runs turns of one conversation the way the chat service does (UI messages in, chunks out)."""

    def __init__(self, answer: str = "Done.", *, budget: float | None = None) -> None:
        SAVED_NOTES.clear()
        self.model = ScriptedModel([])
        self.answer = answer
        self.log, self.store = MemoryChunkLog(), MemoryCheckpointStore()
        self.agent = Agent(model=self.model, tools=DEMO_TOOLS, approval_secret=ApprovalSecret.from_value(SECRET))
        self.runner = Runner(self.agent, self.store, self.log, flush_interval=0)
        self.budget = budget

    async def run(self, ui_messages: list[dict[str, Any]], message_id: str) -> tuple[list[dict[str, Any]], Any]:
        messages = convert_to_model_messages(parse_ui_messages(ui_messages))
        run_id = self.runner.create_run(messages, message_id=message_id).run_id
        while True:
            state = await self.runner.run_slice(run_id, budget_seconds=self.budget)
            if state.terminal:
                return log_chunks(self.log, run_id), state


async def first_turn(turns: Turns) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    turns.model.steps = [
        tool_calls_step(("c1", "save_note", NOTE), ("c2", "get_weather", {"city": "Oslo"})),
        text_step(turns.answer),
    ]
    user = user_message("save a note and tell me the weather")
    chunks, state = await turns.run([user], "msg_a")
    return user, chunks, state


async def test_a_call_that_needs_approval_pauses_the_turn_with_a_signed_request() -> None:
    turns = Turns()
    _, chunks, state = await first_turn(turns)
    assert state.status == "awaiting_tool_approval"
    request = next(c for c in chunks if c["type"] == "tool-approval-request")
    assert request == {
        "type": "tool-approval-request",
        "approvalId": "approval-c1",
        "toolCallId": "c1",
        "signature": sign_tool_approval(SECRET, "approval-c1", "c1", "save_note", NOTE),
    }
    types = [c["type"] for c in chunks]
    assert types[-2:] == ["finish-step", "finish"] and chunks[-1]["finishReason"] == "tool-calls"
    assert {
        "type": "tool-output-available",
        "toolCallId": "c2",
        "output": turns.agent.tools["get_weather"].execute(turns.agent.tools["get_weather"].validate({"city": "Oslo"})),
    } in chunks  # type: ignore[misc]
    assert SAVED_NOTES == {}  # not executed before approval
    assert len(turns.model.requests) == 1
    assert SECRET not in str(state.model_dump()) and SECRET not in str(chunks)


def answered(user: dict[str, Any], chunks: list[dict[str, Any]], approved: bool, **change: Any) -> list[dict[str, Any]]:
    """The history the client POSTs after answering the approval (addToolApprovalResponse)."""
    assistant = copy.deepcopy(message_of(chunks))
    part = next(p for p in assistant["parts"] if p.get("toolCallId") == "c1")
    part["state"] = "approval-responded"
    part["approval"] = {**part["approval"], "approved": approved, **({} if approved else {"reason": "not now"})}
    for key, value in change.items():
        if key == "signature":
            part["approval"]["signature"] = value
        else:
            part[key] = value
    return [user, assistant]


async def test_approved_call_executes_in_the_same_message_and_the_model_continues() -> None:
    turns = Turns("Saved your note.")
    user, chunks, _ = await first_turn(turns)
    history = answered(user, chunks, True)
    more, state = await turns.run(history, history[1]["id"])
    assert state.status == "finished"
    assert SAVED_NOTES == {"shopping": "milk"}
    assert more[0] == {"type": "start", "messageId": "msg_a"}
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": {"saved": "shopping", "notes": 1}} in more
    tool_message = turns.model.requests[-1].messages[-1].to_dict()
    assert [p["type"] for p in tool_message["content"]] == ["tool-approval-response", "tool-result", "tool-result"]
    assert [p.get("toolCallId") for p in tool_message["content"]] == [None, "c2", "c1"]
    final = message_of(chunks + more[1:])
    assert next(p for p in final["parts"] if p.get("toolCallId") == "c1")["state"] == "output-available"


async def test_denied_call_is_not_executed_and_the_model_sees_the_denial() -> None:
    turns = Turns("OK, I did not save it.")
    user, chunks, _ = await first_turn(turns)
    more, state = await turns.run(answered(user, chunks, False), "msg_a")
    assert state.status == "finished" and SAVED_NOTES == {}
    assert {"type": "tool-output-denied", "toolCallId": "c1"} in more
    outputs = [
        p["output"] for p in turns.model.requests[-1].messages[-1].to_dict()["content"] if p["type"] == "tool-result"
    ]
    assert {"type": "execution-denied", "reason": "not now"} in outputs


@pytest.mark.parametrize(
    "tamper",
    [
        {"signature": "AAAA" + "x" * 39},
        {"signature": None},
        {"input": {"title": "shopping", "text": "rm -rf /"}},
    ],
)
async def test_a_tampered_approval_never_executes(tamper: dict[str, Any]) -> None:
    turns = Turns("I could not save it.")
    user, chunks, _ = await first_turn(turns)
    history = answered(user, chunks, True, **tamper)
    if tamper.get("signature", "x") is None:
        del next(p for p in history[1]["parts"] if p.get("toolCallId") == "c1")["approval"]["signature"]
    more, state = await turns.run(history, "msg_a")
    assert state.status == "finished" and SAVED_NOTES == {}
    assert not [c for c in more if c.get("toolCallId") == "c1"]  # the client gets no tool chunk
    results = [p for p in turns.model.requests[-1].messages[-1].to_dict()["content"] if p["type"] == "tool-result"]
    bad = next(p for p in results if p["toolCallId"] == "c1")
    assert bad["output"]["type"] == "error-text" and "signature" in bad["output"]["value"]


async def test_an_answer_to_an_unknown_approval_is_rejected() -> None:
    turns = Turns()
    user, chunks, _ = await first_turn(turns)
    history = answered(user, chunks, True)
    next(p for p in history[1]["parts"] if p.get("toolCallId") == "c1")["approval"]["id"] = "approval-forged"
    with pytest.raises(InvalidRequestError, match="never asked for") as raised:
        await turns.run(history, "msg_a")
    assert raised.value.code == "unknown_approval" and SAVED_NOTES == {}


async def test_a_pending_approval_survives_slices_and_its_continuation_too() -> None:
    sliced = Turns("Saved.", budget=0)  # every slice ends at the first boundary it can
    user, chunks, state = await first_turn(sliced)
    # A pausing step goes on to its `finish` in the same slice (no slice ends with approvals pending).
    assert state.status == "awaiting_tool_approval" and state.slices == 1
    whole = Turns("Saved.")
    _, expected, _ = await first_turn(whole)
    assert message_of(chunks) == message_of(expected)
    _, state = await sliced.run(answered(user, chunks, True), "msg_a")
    assert state.status == "finished" and SAVED_NOTES == {"shopping": "milk"}
    assert state.slices >= 2  # the approved call's step, then the answer


def test_a_secret_under_32_bytes_is_refused_saying_where_it_came_from_never_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for value in ("x" * 32, "é" * 16, "k" * 40 + "\n" + "l" * 32):  # bytes, not characters, count
        ApprovalSecret.from_value(value).check()
    short = "s3cret-" + "é" * 12  # 19 characters, 31 bytes
    with pytest.raises(ApprovalSecretError) as raised:
        ApprovalSecret.from_value(short).check()
    assert "is 31 bytes; it must be at least 32" in str(raised.value) and short not in str(raised.value)
    with pytest.raises(ApprovalSecretError):  # nothing is signed (or verified) with it either
        ApprovalSecret.from_value(short).sign("approval-c1", "c1", "save_note", NOTE)
    monkeypatch.setenv("TOOL_APPROVAL_SECRET", SECRET + "\nold-key")
    with pytest.raises(ApprovalSecretError, match=r"\(line 2 of TOOL_APPROVAL_SECRET\) is 7 bytes"):
        ApprovalSecret().check()


def test_rotation_signs_with_the_first_secret_and_verifies_with_any() -> None:
    old = ApprovalSecret.from_value(SECRET)
    rotated = ApprovalSecret.from_value(NEW_SECRET + "\n" + SECRET)
    issued_before = old.sign("approval-c1", "c1", "save_note", NOTE)
    assert rotated.verify(issued_before, "approval-c1", "c1", "save_note", NOTE)
    assert rotated.sign("approval-c1", "c1", "save_note", NOTE) == sign_tool_approval(
        NEW_SECRET, "approval-c1", "c1", "save_note", NOTE
    )
    assert not ApprovalSecret.from_value(NEW_SECRET).verify(issued_before, "approval-c1", "c1", "save_note", NOTE)
