"""The chat app over real HTTP on loopback, with embedded storage and the demo agent: served by uvicorn (the
local server) and by the deployed chat function's server (:mod:`lambda_fastpath.httpd`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Agent
from durable_harness.demo import build_demo_agent
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step
from durable_harness.protocol.sse import SSEParser
from durable_harness.server.local import LocalKit, build_local_kit
from durable_harness.server.resume import NOTHING_TO_RESUME

from tests.support import gated_agent, message_of, parse_sse_body, serve, user_message

WEATHER = user_message("What is the weather in Paris?")


@pytest.fixture
def kit(tmp_path: Path) -> LocalKit:
    return build_local_kit(build_demo_agent(delay=0), tmp_path / "data")


@pytest.fixture(params=["uvicorn", "httpd"])
def server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def base_url(kit: LocalKit, server: str) -> Iterator[str]:
    with serve(kit.app, server=server) as url:
        yield url


def post_chat(base_url: str, body: Any, **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.post(f"{base_url}/api/chat", content=content, timeout=10, **kwargs)


def test_health(base_url: str) -> None:
    response = httpx.get(f"{base_url}/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_post_streams_the_turn_as_sse_with_the_run_id(base_url: str) -> None:
    response = post_chat(base_url, {"messages": [WEATHER]}, headers={"content-type": "text/plain;charset=UTF-8"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    run_id = response.headers["x-workflow-run-id"]
    assert run_id.startswith("wrun_")
    assert response.content.endswith(b"data: [DONE]\n\n")
    chunks = parse_sse_body(response.content)
    assert chunks[0]["type"] == "start" and chunks[0]["messageId"].startswith("msg_")
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    message = message_of(chunks)
    tool_part = next(p for p in message["parts"] if p["type"] == "tool-get_weather")
    assert tool_part["state"] == "output-available" and tool_part["input"] == {"city": "Paris"}
    assert message["parts"][-1]["type"] == "text" and "Paris" in message["parts"][-1]["text"]


def test_get_replays_from_any_index_and_from_the_tail(base_url: str) -> None:
    post = post_chat(base_url, {"messages": [WEATHER]})
    run_id, chunks = post.headers["x-workflow-run-id"], parse_sse_body(post.content)
    count = len(chunks)
    for start in (0, 1, 5, count - 1):
        get = httpx.get(f"{base_url}/api/chat/{run_id}/stream", params={"startIndex": start}, timeout=10)
        assert get.status_code == 200
        assert get.headers["x-workflow-stream-tail-index"] == str(count - 1)
        assert get.headers["x-workflow-run-id"] == run_id  # as the seed's GET handler sends it
        assert parse_sse_body(get.content) == chunks[start:]
    get = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex=-3", timeout=10)
    assert parse_sse_body(get.content) == chunks[-3:]
    get = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex=-1000", timeout=10)
    assert parse_sse_body(get.content) == chunks


def test_a_post_cut_after_k_chunks_resumes_to_the_same_message(base_url: str) -> None:
    whole = parse_sse_body(post_chat(base_url, {"messages": [WEATHER]}).content)
    for k in (1, 4, len(whole) // 2, len(whole) - 1):
        received: list[dict[str, Any]] = []
        parser = SSEParser()
        with httpx.stream("POST", f"{base_url}/api/chat", content=json.dumps({"messages": [WEATHER]})) as response:
            run_id = response.headers["x-workflow-run-id"]
            for data in (d for raw in response.iter_raw() for d in parser.feed(raw)):
                received.append(json.loads(data))
                if len(received) == k:
                    break  # the connection drops here
        get = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex={k}", timeout=10)
        rest = parse_sse_body(get.content)
        assert rest[-1]["type"] == "finish"
        assert message_of(received + rest)["parts"] == message_of(whole)["parts"]


def test_a_finished_run_asked_from_its_length_is_an_empty_stream(base_url: str) -> None:
    post = post_chat(base_url, {"messages": [WEATHER]})
    run_id, count = post.headers["x-workflow-run-id"], len(parse_sse_body(post.content))
    response = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex={count}", timeout=10)
    assert response.status_code == 200 and response.content == b"data: [DONE]\n\n"
    assert response.headers["x-workflow-stream-tail-index"] == str(count - 1)
    past = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex={count + 1}", timeout=10)
    assert past.status_code == 400 and past.json()["error"]["code"] == "invalid_start_index"


def test_a_chat_id_resumes_its_run_in_progress_and_nothing_after_it_ended(tmp_path: Path, server: str) -> None:
    gate = threading.Event()
    kit = build_local_kit(gated_agent(gate), tmp_path / "live", static_dir=None)
    body = json.dumps({"id": "chat-7", "messages": [WEATHER]})
    with (
        serve(kit.app, server=server) as url,
        httpx.stream("POST", f"{url}/api/chat", content=body, timeout=10) as post,
        # useChat({resume: true}): the transport's reconnect names the chat, not the run
        httpx.stream("GET", f"{url}/api/chat/chat-7/stream?startIndex=0", timeout=10) as follower,
    ):
        run_id = post.headers["x-workflow-run-id"]
        gate.set()  # the follower is connected while the run is in progress; now let it end
        posted, followed = parse_sse_body(post.read()), parse_sse_body(follower.read())
        assert follower.status_code == 200 and follower.headers["x-workflow-run-id"] == run_id
        assert followed == posted and posted[-1]["type"] == "finish"
        # After the run ended: nothing to resume, as each AI SDK transport reads it.
        ended = httpx.get(f"{url}/api/chat/chat-7/stream?startIndex=0", timeout=10)
        assert ended.status_code == 200 and ended.content == NOTHING_TO_RESUME  # WorkflowChatTransport
        assert httpx.get(f"{url}/api/chat/chat-7/stream", timeout=10).status_code == 204  # DefaultChatTransport
        # A reconnect of a client that was following it (startIndex > 0) still gets the rest.
        rest = httpx.get(f"{url}/api/chat/chat-7/stream?startIndex=3", timeout=10)
        assert parse_sse_body(rest.content) == posted[3:]
        other = httpx.get(f"{url}/api/chat/chat-8/stream?startIndex=0", timeout=10)
        assert other.content == NOTHING_TO_RESUME  # a chat with no run at all


def test_a_live_run_is_followed_until_finish(tmp_path: Path, server: str) -> None:
    kit = build_local_kit(build_demo_agent(delay=0.002), tmp_path / "live")
    with (
        serve(kit.app, server=server) as url,
        httpx.stream("POST", f"{url}/api/chat", content=json.dumps({"messages": [WEATHER]}), timeout=10) as post,
    ):
        run_id = post.headers["x-workflow-run-id"]
        # while the POST is still streaming, a second reader follows the same run from the start
        follower = httpx.get(f"{url}/api/chat/{run_id}/stream?startIndex=0", timeout=10)
        posted = parse_sse_body(post.read())
    assert parse_sse_body(follower.content) == posted
    assert posted[-1]["type"] == "finish"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        ({"messages": []}, 400, "bad_request"),
        ({"nothing": 1}, 400, "bad_request"),
        ([1, 2], 400, "bad_request"),
        ({"messages": [{"id": "u", "role": "user", "parts": [{"type": "nope"}]}]}, 400, "invalid_messages"),
        (
            {"messages": [{"id": "s", "role": "system", "parts": [{"type": "text", "text": "x"}]}, WEATHER]},
            400,
            "system_message_not_allowed",
        ),
        ({"messages": [WEATHER], "id": 5}, 400, "bad_request"),
    ],
)
def test_bad_post_bodies_get_a_clear_400(base_url: str, body: Any, status: int, code: str) -> None:
    response = post_chat(base_url, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code and error["message"]


def test_oversized_body_gets_413(base_url: str) -> None:
    response = post_chat(base_url, b'{"messages":"' + b"x" * (5 * 1024 * 1024) + b'"}')
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"


def test_stream_errors(base_url: str) -> None:
    unknown = "wrun_" + "0" * 26
    response = httpx.get(f"{base_url}/api/chat/{unknown}/stream?startIndex=0")
    assert response.status_code == 404 and response.json()["error"]["code"] == "run_not_found"
    response = httpx.get(f"{base_url}/api/chat/{'c' * 201}/stream?startIndex=0")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_chat_id"
    # Any other text is a chat id (used only as a key): this one has nothing to resume.
    response = httpx.get(f"{base_url}/api/chat/..%2Fetc%2Fpasswd/stream?startIndex=0")
    assert response.status_code == 200 and response.content == NOTHING_TO_RESUME
    run_id = post_chat(base_url, {"messages": [WEATHER]}).headers["x-workflow-run-id"]
    for bad in ("abc", "1.5", ""):
        response = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex={bad}")
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_start_index"
    response = httpx.get(f"{base_url}/api/chat/{run_id}/stream?startIndex=100000")
    assert response.status_code == 400 and "past the end" in response.json()["error"]["message"]
    assert httpx.get(f"{base_url}/api/nothing").status_code == 404
    assert httpx.get(f"{base_url}/api/chat").status_code == 405


@pytest.mark.parametrize("bad", ["1_0", "+3", "\u0661\u0662", " 7", "7 ", "0x1", "--1", "1e2", "9" * 19])
def test_start_index_is_an_ascii_integer_only(base_url: str, bad: str) -> None:
    run_id = post_chat(base_url, {"messages": [WEATHER]}).headers["x-workflow-run-id"]
    # int() takes "1_0", "+3", surrounding spaces and Arabic-Indic digits; the API does not.
    response = httpx.get(f"{base_url}/api/chat/{run_id}/stream", params={"startIndex": bad}, timeout=10)
    assert response.status_code == 400, bad
    error = response.json()["error"]
    assert error["code"] == "invalid_start_index" and "ASCII digits" in error["message"]
    assert httpx.get(f"{base_url}/api/chat/{run_id}/stream", params={"startIndex": "-2"}, timeout=10).status_code == 200


def test_a_post_ending_with_a_plain_assistant_message_is_refused(base_url: str, kit: LocalKit) -> None:
    assistant = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "It is sunny."}]}
    response = post_chat(base_url, {"messages": [WEATHER, assistant]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_last_message" and "approval" in error["message"]
    assert kit.store.list_runs() == []  # no run was created


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_anywhere_in_a_body_are_refused(base_url: str, constant: str) -> None:
    text = json.dumps({"messages": [WEATHER]})
    for body in (
        text[:-1] + f', "x": {constant}}}',  # at the top level
        text.replace('"text": "What', f'"n": [{constant}], "text": "What'),  # deep inside a message part
    ):
        response = post_chat(base_url, body)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["code"] == "invalid_json" and constant.lstrip("-") in error["message"]
    # The run API's body too.
    response = httpx.post(
        f"{base_url}/api/runs/wrun_{'0' * 26}/approvals", content=f'{{"approvals": [{constant}]}}', timeout=10
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"


def test_a_retried_post_gets_the_run_it_already_started(base_url: str, kit: LocalKit) -> None:
    from durable_harness.demo import SAVED_NOTES

    SAVED_NOTES.clear()
    body = {"id": "chat-1", "messages": [user_message("What is the weather in Oslo?", "u-retry")]}
    first, second = post_chat(base_url, body), post_chat(base_url, body)
    assert first.headers["x-workflow-run-id"] == second.headers["x-workflow-run-id"]
    assert parse_sse_body(first.content) == parse_sse_body(second.content)
    other = post_chat(base_url, {"id": "chat-2", "messages": body["messages"]})
    assert other.headers["x-workflow-run-id"] != first.headers["x-workflow-run-id"]


def test_a_regenerate_starts_a_new_run_and_a_retried_regenerate_gets_it_again(tmp_path: Path) -> None:
    # The AI SDK's regenerate sends the same history as the submit it answers again (the last
    # assistant message removed), with `trigger` and the replaced message's `messageId`.
    calls: list[int] = []

    def answer(request: ModelRequest, step: int) -> list[ModelStreamPart]:
        calls.append(step)
        return text_step(f"Answer number {len(calls)}.")

    kit = build_local_kit(Agent(model=FunctionModel(answer)), tmp_path / "data")
    with serve(kit.app) as base_url:
        history = [user_message("Tell me a joke", "u-joke")]
        submit = post_chat(base_url, {"id": "chat-r", "messages": history, "trigger": "submit-message"})
        first = parse_sse_body(submit.content)
        assert "Answer number 1." in message_of(first)["parts"][-1]["text"]
        replaced = first[0]["messageId"]

        body = {"id": "chat-r", "messages": history, "trigger": "regenerate-message", "messageId": replaced}
        regenerated = post_chat(base_url, body)
        assert regenerated.status_code == 200
        chunks = parse_sse_body(regenerated.content)
        assert regenerated.headers["x-workflow-run-id"] != submit.headers["x-workflow-run-id"]
        assert len(calls) == 2 and message_of(chunks)["parts"][-1]["text"] == "Answer number 2."
        assert chunks[0]["messageId"] != replaced  # a new assistant message replaces the old one

        retried = post_chat(base_url, body)  # the same regenerate again: the run it started
        assert retried.headers["x-workflow-run-id"] == regenerated.headers["x-workflow-run-id"]
        again = post_chat(base_url, {"id": "chat-r", "messages": history, "trigger": "submit-message"})
        assert again.headers["x-workflow-run-id"] == submit.headers["x-workflow-run-id"]
        assert len(calls) == 2

        # regenerate() with no argument sends no messageId: each one is a new run.
        bare = {"id": "chat-r", "messages": history, "trigger": "regenerate-message"}
        ids = {post_chat(base_url, bare).headers["x-workflow-run-id"] for _ in range(2)}
        assert len(ids) == 2 and len(calls) == 4


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"trigger": "resume-stream"}, "invalid_trigger"),
        ({"trigger": 3}, "invalid_trigger"),
        ({"trigger": "regenerate-message", "messageId": ""}, "bad_request"),
        ({"trigger": "regenerate-message", "messageId": ["m"]}, "bad_request"),
    ],
)
def test_a_bad_trigger_or_message_id_is_a_400_that_says_what_to_send(
    base_url: str, extra: dict[str, Any], code: str
) -> None:
    response = post_chat(base_url, {"messages": [WEATHER], **extra})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code and ("'trigger'" in error["message"] or "'messageId'" in error["message"])
