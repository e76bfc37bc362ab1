"""ChatClient / AsyncChatClient / Conversation against the real local server on loopback."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_harness.client import (
    AsyncChatClient,
    ChatClient,
    ChatClientError,
    NetworkError,
    ResponseError,
    StreamError,
)
from durable_harness.demo import SAVED_NOTES
from durable_harness.protocol.assemble import UIMessageAssembler
from durable_harness.protocol.ui_chunks import FinishChunk, StartChunk, TextDeltaChunk, UIChunkModel
from durable_harness.server.auth import TokenAuth
from durable_harness.server.local import LocalKit

from tests.client.conftest import make_kit
from tests.support import log_chunks, message_of, serve, user_message

WEATHER = "What is the weather in Paris?"
HELLO = "hello there"


def dicts(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in chunks]


def continued(previous: dict[str, Any], chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the client ends with when ``chunks`` continue ``previous``."""
    assembler = UIMessageAssembler(message=previous)
    assembler.apply_all(chunks)
    return assembler.message()


# --- send -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [HELLO, WEATHER])
def test_sync_send_yields_the_runs_chunks_typed(url: str, kit: LocalKit, text: str) -> None:
    with ChatClient(url) as client:
        stream = client.send(text)
        chunks = list(stream)
    assert all(isinstance(c, UIChunkModel) for c in chunks)
    assert isinstance(chunks[0], StartChunk) and isinstance(chunks[-1], FinishChunk)
    assert stream.run_id is not None and stream.run_id.startswith("wrun_")
    assert stream.finished and stream.finish_reason == "stop" and stream.reconnects == 0
    logged = log_chunks(kit.log, stream.run_id)
    assert dicts(chunks) == logged and stream.index == len(logged)
    if text == WEATHER:
        assert {"tool-input-available", "tool-output-available", "reasoning-delta"} <= {c.type for c in chunks}


@pytest.mark.parametrize("text", [HELLO, WEATHER])
def test_sync_conversation_assembles_the_message_like_the_ai_sdk(url: str, kit: LocalKit, text: str) -> None:
    with ChatClient(url) as client:
        chat = client.conversation()
        turn = chat.send(text)
        seen = []
        for chunk in turn:
            seen.append(chunk)
            if isinstance(chunk, TextDeltaChunk):  # the message grows while the chunks arrive
                assert chat.last_assistant_message is not None
        assert chat.run_id == turn.run_id
    expected = message_of(log_chunks(kit.log, turn.run_id or ""))
    assert chat.last_assistant_message == expected
    (user, assistant) = chat.messages
    assert user["role"] == "user" and user["parts"] == [{"type": "text", "text": text}]
    assert assistant["id"].startswith("msg_") and assistant["parts"][-1]["state"] == "done"
    assert chat.state.finish_reason == "stop" and chat.state.error is None


@pytest.mark.parametrize("text", [HELLO, WEATHER])
async def test_async_send_and_conversation(url: str, kit: LocalKit, text: str) -> None:
    async with AsyncChatClient(url) as client:
        stream = client.send([user_message(text, "u-async")], chat_id="chat-async-" + str(len(text)))
        chunks = [chunk async for chunk in stream]
        assert stream.run_id is not None
        assert dicts(chunks) == log_chunks(kit.log, stream.run_id)
        chat = client.conversation()
        await chat.send(text).collect()
    assert chat.run_id is not None
    assert chat.last_assistant_message == message_of(log_chunks(kit.log, chat.run_id))


def test_a_second_turn_sends_the_whole_history(url: str, kit: LocalKit) -> None:
    with ChatClient(url) as client:
        chat = client.conversation(chat_id="history-chat")
        chat.send(WEATHER).collect()
        chat.send(HELLO).collect()
    roles = [m["role"] for m in chat.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert chat.messages[-1] == message_of(log_chunks(kit.log, chat.run_id or ""))


def test_body_fields_and_chat_id_reach_the_server(url: str) -> None:
    with ChatClient(url) as client:
        first = client.send([user_message(HELLO, "u-same")], chat_id="chat-x")
        first.collect()
        again = client.send([user_message(HELLO, "u-same")], chat_id="chat-x")
        again.collect()
        assert first.run_id == again.run_id  # an identical retried POST gets the same run
        status = client.run_status(first.run_id or "")
    assert status["chatId"] == "chat-x" and status["status"] == "finished"


# --- resume ---------------------------------------------------------------------------------------


def test_resume_from_any_index_and_from_the_tail(url: str, kit: LocalKit) -> None:
    with ChatClient(url) as client:
        stream = client.send("What is the weather in Rome?")
        stream.collect()
        run_id = stream.run_id or ""
        logged = log_chunks(kit.log, run_id)
        assert dicts(client.resume(run_id).collect()) == logged
        five = client.resume(run_id, 5)
        assert dicts(five.collect()) == logged[5:] and five.index == len(logged)
        tail = client.resume(run_id, -3, drop_orphans=False)
        assert dicts(tail.collect()) == logged[-3:] and tail.index == len(logged)
        assert logged[-3]["type"] == "text-end"  # its text-start is before the window: an orphan
        assert dicts(client.resume(run_id, -3).collect()) == logged[-2:]
        # From the middle of a tool call's input: its deltas are orphans the transport drops (the
        # complete input in tool-input-available brings the call back) ...
        start = next(i for i, c in enumerate(logged) if c["type"] == "tool-input-delta") + 1
        window = logged[start:]
        kept = dicts(client.resume(run_id, start - len(logged)).collect())
        assert kept == [c for c in window if c["type"] != "tool-input-delta"]
        assert any(c["type"] == "tool-input-delta" for c in window)
        # ... unless asked not to.
        assert dicts(client.resume(run_id, start - len(logged), drop_orphans=False).collect()) == window


# --- errors ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    digest = hashlib.sha256(b"good-token").hexdigest()
    kit = make_kit(tmp_path_factory.mktemp("auth"), authenticator=TokenAuth.from_entries(f"alice:{digest}"))
    with serve(kit.app) as base:
        yield base


def test_401_surfaces_the_servers_message(auth_url: str) -> None:
    for token in (None, "bad-token"):
        with ChatClient(auth_url, token=token) as client, pytest.raises(ResponseError) as caught:
            list(client.send(HELLO))
        error = caught.value
        assert error.status == 401 and error.code == "unauthorized" and error.message
        assert str(error).startswith("HTTP 401 (unauthorized): ")
    with ChatClient(auth_url, token="good-token") as client:
        stream = client.send(HELLO)
        assert stream.collect()[-1].type == "finish"
        assert client.run_status(stream.run_id or "")["status"] == "finished"
    with ChatClient(auth_url, headers={"authorization": "Bearer good-token"}) as client:
        assert client.send(HELLO).collect()[-1].type == "finish"


async def test_401_async(auth_url: str) -> None:
    async with AsyncChatClient(auth_url) as client:
        with pytest.raises(ResponseError, match="HTTP 401"):
            await client.send(HELLO).collect()
        with pytest.raises(ResponseError, match="HTTP 401"):
            await client.run_status("wrun_" + "0" * 26)


def test_404_and_400_surface_the_servers_message(url: str) -> None:
    unknown = "wrun_" + "0" * 26
    with ChatClient(url) as client:
        with pytest.raises(ResponseError) as caught:
            client.resume(unknown).collect()
        assert caught.value.status == 404 and caught.value.code == "run_not_found"
        assert unknown in caught.value.message
        with pytest.raises(ResponseError, match=r"HTTP 404 \(run_not_found\)"):
            client.run_status(unknown)
        with pytest.raises(ResponseError, match=r"HTTP 400 \(invalid_run_id\)"):
            client.cancel("not-a-run")
        with pytest.raises(ResponseError, match=r"HTTP 400 \(system_message_not_allowed\)"):
            system = {"id": "s", "role": "system", "parts": [{"type": "text", "text": "x"}]}
            client.send([system, user_message(HELLO)]).collect()


def test_network_and_url_errors_are_clear() -> None:
    with pytest.raises(ChatClientError, match="invalid URL"):
        ChatClient("not a url")
    with pytest.raises(ChatClientError, match="invalid URL"):
        ChatClient("ftp://example.com")
    with ChatClient("http://127.0.0.1:1") as client:
        with pytest.raises(NetworkError, match=r"cannot connect to http://127\.0\.0\.1:1/api/chat"):
            client.send(HELLO).collect()
        with pytest.raises(NetworkError, match="cannot connect"):
            client.run_status("wrun_" + "0" * 26)


def test_a_200_without_a_run_id_is_a_stream_error(tmp_path: Path) -> None:
    async def not_a_chat_server(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<html>hello</html>"})

    with (
        serve(not_a_chat_server) as base,  # type: ignore[arg-type]
        ChatClient(base) as client,
        pytest.raises(StreamError, match="no x-workflow-run-id header"),
    ):
        client.send(HELLO).collect()


# --- approvals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("approved", [True, False])
def test_approvals_continue_the_same_assistant_message(url: str, kit: LocalKit, approved: bool) -> None:
    SAVED_NOTES.clear()
    with ChatClient(url) as client:
        chat = client.conversation()
        chat.send("Save a note: buy milk").collect()
        paused_run = chat.run_id or ""
        paused = chat.last_assistant_message
        assert paused == message_of(log_chunks(kit.log, paused_run))
        (pending,) = chat.pending_approvals()
        assert pending["toolName"] == "save_note" and pending["input"] == {"title": "buy milk", "text": "buy milk"}
        assert client.run_status(paused_run)["status"] == "awaiting_tool_approval"
        turn = chat.answer_approval(pending["approvalId"], approved, None if approved else "not now")
        turn.collect()
    assert chat.run_id != paused_run
    messages = chat.messages
    assert [m["role"] for m in messages] == ["user", "assistant"]  # the same assistant message, continued
    assert messages[-1]["id"] == paused["id"]
    # The continuation replaces the message exactly as the AI SDK client would assemble it.
    sent = dict(paused)
    sent["parts"] = [
        {**p, "state": "approval-responded",
         "approval": {**p["approval"], "approved": approved, **({} if approved else {"reason": "not now"})}}
        if p.get("toolCallId") == pending["toolCallId"] else p
        for p in paused["parts"]
    ]  # fmt: skip
    assert messages[-1] == continued(sent, log_chunks(kit.log, chat.run_id or ""))
    tool = next(p for p in messages[-1]["parts"] if p["type"] == "tool-save_note")
    assert tool["approval"]["signature"] == paused["parts"][1]["approval"]["signature"]
    assert tool["approval"]["approved"] is approved
    if approved:
        assert tool["state"] == "output-available" and SAVED_NOTES == {"buy milk": "buy milk"}
    else:
        assert tool["state"] == "output-denied" and tool["approval"]["reason"] == "not now" and SAVED_NOTES == {}
    assert messages[-1]["parts"][-1]["type"] == "text"


async def test_async_approval(url: str, kit: LocalKit) -> None:
    async with AsyncChatClient(url) as client:
        chat = client.conversation()
        await chat.send("Save a note: async note").collect()
        (pending,) = chat.pending_approvals()
        await chat.answer_approval(pending["approvalId"], True).collect()
    tool = next(p for p in chat.messages[-1]["parts"] if p["type"] == "tool-save_note")
    assert tool["state"] == "output-available" and chat.pending_approvals() == []


def test_answering_an_unknown_approval_is_an_error(url: str) -> None:
    with ChatClient(url) as client:
        chat = client.conversation()
        chat.send(HELLO).collect()
        with pytest.raises(ChatClientError, match="no tool call waits for approval"):
            chat.answer_approval("approval-nope", True)


def test_run_api_status_approve_and_resume(url: str, kit: LocalKit) -> None:
    SAVED_NOTES.clear()
    with ChatClient(url) as client:
        paused = client.send("Save a note: from the run api")
        paused.collect()
        run_id = paused.run_id or ""
        status = client.run_status(run_id)
        (pending,) = status["pendingApprovals"]
        started = client.approve_run(run_id, {pending["approvalId"]: True})
        assert started["stream"] == f"/api/chat/{started['runId']}/stream?startIndex=0"
        chunks = client.resume(started["runId"]).collect()
        assert chunks[0].to_dict()["messageId"] == status["messageId"] and chunks[-1].type == "finish"
        with pytest.raises(ResponseError) as caught:
            client.approve_run(run_id, [{"approvalId": pending["approvalId"], "approved": False, "reason": "late"}])
        assert caught.value.status == 409
    assert SAVED_NOTES == {"from the run api": "from the run api"}


def test_cancel_a_live_run_through_the_client(tmp_path: Path) -> None:
    kit = make_kit(tmp_path / "slow", delay=0.05)
    with serve(kit.app) as base, ChatClient(base) as client:
        stream = client.send("tell me something")
        first = next(stream)
        assert first.type == "start"
        result = client.cancel(stream.run_id or "")
        assert result == {"runId": stream.run_id, "status": "cancelled"}
        rest = stream.collect()
        assert client.cancel(stream.run_id or "") == result  # idempotent
    assert rest[-1].to_dict() == {"type": "finish", "finishReason": "other"}
    assert stream.finish_reason == "other"
