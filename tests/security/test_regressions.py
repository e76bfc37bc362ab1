"""Bugs the security suites found, one regression test each (all fixed since).

1. Approvals are replayable: the server keeps no record of an approval it has executed, and the
   signature binds only (approval id, tool call id, tool name, input), not the run, chat or
   principal. A signed, approved history posted again with any change to its last message (a new
   message id), or in another chat, or by another principal, or answered again through the run
   API after a chat POST answered it, executes the tool again.
2. Bodies that make the JSON parser or the validator fail in a way nobody catches get a 500
   instead of a 400: nesting deeper than the recursion limit, integers over 4300 digits, lone
   UTF-16 surrogates (``"\\ud800"``), and JSON nested a few hundred levels inside a message.
3. A run id followed by a newline (``%0A``) passes ``is_run_id`` (``$`` matches before a final
   newline) and reaches storage: 404 instead of the documented 400 for a malformed run id.
4. The OpenAI and Anthropic models copy a stream's non-JSON ``data:`` line into the error
   message without redacting the API key (every other error path redacts it), so the key ends in
   the run's ``error`` chunk, its checkpoint and the logs.
5. ``GET /api/chat/{run}/stream?startIndex=N`` on a live run with N past where the run ends
   never ends: it is neither refused nor closed when the run finishes, and holds the connection
   (and, deployed, a Lambda) for the whole stream window (840 s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from durable_harness.demo import build_demo_agent
from durable_harness.errors import ModelError
from durable_harness.models.anthropic import AnthropicModel
from durable_harness.models.base import ModelRequest
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.server.local import build_local_kit
from durable_harness.server.service import ServiceConfig

from tests.security.helpers import DemoChat, Notes, assert_error_response, serve_asgi
from tests.support import parse_sse_body, user_message

NOTE = "buy milk"
APPROVAL = "approval-call_demo_0"

# --- 1. approval replay ---------------------------------------------------------------------------


def test_an_executed_approval_posted_again_under_a_new_message_id_does_not_execute_again(
    alice: DemoChat, chat: str, notes: Notes
) -> None:
    paused = alice.ask_to_save(NOTE, chat)
    assert alice.post(paused.answered(True), chat).status_code == 200
    assert notes.writes == [(NOTE, NOTE)]
    replay = alice.post(paused.answered(True, message_id="msg_replayed"), chat)
    assert replay.status_code in (200, 400, 409)
    assert notes.writes == [(NOTE, NOTE)], "the approved call ran again"


def test_an_executed_approval_replayed_into_another_chat_does_not_execute_again(
    alice: DemoChat, chat: str, notes: Notes
) -> None:
    paused = alice.ask_to_save(NOTE, chat)
    assert alice.post(paused.answered(True), chat).status_code == 200
    replay = alice.post(paused.answered(True), chat + "-other")
    assert replay.status_code in (200, 400, 409)
    assert notes.writes == [(NOTE, NOTE)], "the approved call ran again in another conversation"


def test_an_approval_signed_for_alice_does_not_execute_for_bob(
    alice: DemoChat, bob: DemoChat, chat: str, notes: Notes
) -> None:
    paused = alice.ask_to_save(NOTE, chat)  # Alice never answers it
    stolen = bob.post(paused.answered(True), chat)  # Bob posts her signed request, approved, as his own history
    assert stolen.status_code in (200, 400, 404)
    assert notes.writes == [], "another principal executed an approval issued to alice"


def test_a_pause_answered_by_a_chat_post_cannot_be_answered_again_through_the_run_api(
    alice: DemoChat, chat: str, notes: Notes
) -> None:
    paused = alice.ask_to_save(NOTE, chat)
    assert alice.post(paused.answered(True), chat).status_code == 200
    assert notes.writes == [(NOTE, NOTE)]
    body = {"approvals": [{"approvalId": APPROVAL, "approved": True}]}
    again = alice.client.post(f"{alice.url}/api/runs/{paused.run_id}/approvals", json=body, headers=alice.headers)
    if again.status_code == 202:
        alice.client.get(alice.url + again.json()["stream"], headers=alice.headers)  # let it run to its end
    assert again.status_code == 409, again.text
    assert notes.writes == [(NOTE, NOTE)], "the approved call ran twice"


# --- 2. bodies that get a 500 ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kit = build_local_kit(build_demo_agent(delay=0), tmp_path_factory.mktemp("open"))
    with serve_asgi(kit.app) as url:
        yield url


def _message_with(metadata: bytes = b"null", text: bytes = b'"hi"', message_id: bytes = b'"u1"') -> bytes:
    return (
        b'{"messages":[{"id":' + message_id + b',"role":"user","metadata":' + metadata
        + b',"parts":[{"type":"text","text":' + text + b"}]}]}"
    )  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="arrays nested 100000 deep"),
        pytest.param(b'{"a":' * 5_000 + b"1" + b"}" * 5_000, id="objects nested 5000 deep"),
        pytest.param(_message_with(metadata=b"1" * 5_000), id="an integer of 5000 digits"),
        pytest.param(_message_with(text=b'"hi \\ud800"'), id="a lone surrogate in a text"),
        pytest.param(_message_with(message_id=b'"\\udfff"'), id="a lone surrogate in a message id"),
        pytest.param(b'{"id":"\\ud800",' + _message_with()[1:], id="a lone surrogate in the chat id"),
        pytest.param(_message_with(metadata=b"[" * 300 + b"]" * 300), id="metadata nested 300 deep"),
    ],
)
def test_a_body_the_parser_cannot_take_is_a_400_not_a_500(open_server: str, body: bytes) -> None:
    response = httpx.post(f"{open_server}/api/chat", content=body, timeout=30)
    assert response.status_code != 500, response.text
    assert_error_response(response, 400)


# --- 3. run ids with a trailing newline -----------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    ["/api/runs/{id}%0A", "/api/runs/{id}%0A/cancel", "/api/runs/{id}%0A/approvals", "/api/chat/{id}%0A/stream"],
)
def test_a_run_id_with_a_trailing_newline_is_malformed(open_server: str, target: str) -> None:
    run_id = "wrun_" + "0" * 26
    method = "GET" if target.endswith(("stream", "A")) else "POST"
    path = target.format(id=run_id).encode()
    with httpx.Client(timeout=10) as client:
        response = client.request(method, open_server + "/", extensions={"target": path}, content=b"{}")
    assert assert_error_response(response, {400, 404})["code"] == "invalid_run_id", response.text


# --- 4. the provider key in a stream's invalid-JSON error -----------------------------------------

API_KEY = "sk-proj-LEAKCANARY-0123456789abcdefABCDEF"


def _garbage_stream(request: httpx.Request) -> httpx.Response:
    # An OpenAI-compatible gateway answering 200 with a plain-text data line that echoes the key.
    body = f"data: upstream rejected key {API_KEY}\n\n".encode()
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_provider_stream_that_is_not_json_does_not_leak_the_api_key(provider: str) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(_garbage_stream))
    model = (
        OpenAIChatModel("m", api_key=API_KEY, base_url="http://127.0.0.1:9", client=client)
        if provider == "openai"
        else AnthropicModel("m", api_key=API_KEY, base_url="http://127.0.0.1:9", client=client)
    )
    request = ModelRequest(messages=[])
    with pytest.raises(ModelError) as raised:
        async for _ in model.stream(request):
            pass
    await client.aclose()
    assert API_KEY not in str(raised.value), str(raised.value)


# --- 5. following a live run from past its end ----------------------------------------------------


def test_a_stream_request_past_the_end_of_a_live_run_ends_when_the_run_ends(tmp_path: Path) -> None:
    window = 4.0
    config = ServiceConfig(stream_window_seconds=window)
    kit = build_local_kit(build_demo_agent(delay=0.01), tmp_path / "live", config=config)
    body = json.dumps({"messages": [user_message("tell me something")]})
    with serve_asgi(kit.app) as url, httpx.stream("POST", f"{url}/api/chat", content=body, timeout=30) as post:
        run_id = post.headers["x-workflow-run-id"]
        began = time.monotonic()
        past = httpx.get(f"{url}/api/chat/{run_id}/stream?startIndex=100000", timeout=30)
        elapsed = time.monotonic() - began
        posted = parse_sse_body(post.read())
    assert posted[-1]["type"] == "finish"  # the run itself ended within a second or so
    # Either refused (400) or closed once the run ended, but not held open for the whole window.
    assert elapsed < window - 1, f"held open {elapsed:.1f} s: status {past.status_code}, body {past.content!r}"
