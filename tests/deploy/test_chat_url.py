"""The chat function over the AWS runtime, driven with the sample Function URL events."""

from __future__ import annotations

import asyncio
import threading

from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.server.resume import NOTHING_TO_RESUME

from . import agents
from .chat import Response, call, load_chat_app, sample_event, with_path
from .helpers import log_of, start_run, state_of, wait_until
from .stack import MotoStack


async def test_a_chat_post_streams_the_whole_run_and_a_get_resumes_it(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    response = await call(app, sample_event("chat-post.json"))
    assert response.status == 200, response.body
    assert response.headers["content-type"].startswith("text/event-stream")
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    # The POST streamed the first slice it ran itself, then followed the run through the slice
    # function's (several Step Functions tasks) to finish.
    assert chunks[-1]["type"] == "finish"
    assert chunks == log_of(stack, run_id)
    assert assemble_ui_message(chunks)["parts"][-1]["text"] == agents.ANSWER
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED"
    state = state_of(stack, run_id)
    assert (state.status, state.chat_id, state.principal) == ("finished", "chat-example-1", "tester")
    assert len(stack.calls_of("SliceFunction", run_id)) == state.slices - 1 == 2

    # Resume from an absolute index, as WorkflowChatTransport does after a drop.
    get = with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", "startIndex=3")
    resumed = await call(app, get)
    assert resumed.status == 200
    assert resumed.chunks() == chunks[3:]
    assert resumed.headers["x-workflow-stream-tail-index"] == str(len(chunks) - 1)


async def test_the_run_list_reads_the_callers_runs_from_the_tables_index(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    post = await call(app, sample_event("chat-post.json"))
    run_id = post.headers["x-workflow-run-id"]
    stack.wait_for_executions(run_id)
    listed = await call(app, with_path(sample_event("chat-get.json"), "/api/runs", "limit=5"))
    assert listed.status == 200, listed.body
    [run] = listed.json()["runs"]
    assert (run["runId"], run["status"], run["chatId"]) == (run_id, "finished", "chat-example-1")
    assert listed.json()["nextCursor"] is None
    # The Query is on the index, which only the chat function's policy grants (check_iam at teardown).
    assert any("/index/by-principal" in arn for call_ in stack.calls for arn in call_.resources)


async def test_a_get_by_chat_id_follows_the_chats_run_in_progress_and_then_has_nothing(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    agents.CONTROL.gate = gate = threading.Event()
    # The chat's run, created as the chat function creates a POST's (its chat and principal) and
    # driven by the state machine; its second step waits at the gate.
    run_id = start_run(stack, chat_id="chat-example-1", principal="tester")
    await asyncio.to_thread(wait_until, agents.CONTROL.entered_gate.is_set, what="the second step to start")
    # useChat({resume: true}) after a reload: the transport's reconnect names the chat, not the run.
    get = with_path(sample_event("chat-get.json"), "/api/chat/chat-example-1/stream", "startIndex=0")
    headers = Response()
    following = asyncio.get_running_loop().create_task(call(app, get, response=headers))
    await asyncio.to_thread(wait_until, lambda: headers.status != 0, what="the follower's response to start")
    gate.set()  # it follows the run in progress; now let the run end
    followed = await following
    assert followed.status == 200 and followed.headers["x-workflow-run-id"] == run_id
    assert followed.chunks() == log_of(stack, run_id) and followed.chunks()[-1]["type"] == "finish"
    ended = await call(app, get)  # the chat's run has ended: nothing to resume
    assert ended.status == 200 and ended.body == NOTHING_TO_RESUME


async def test_the_chat_url_requires_a_token_in_token_mode(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    event = sample_event("chat-post.json")
    del event["headers"]["authorization"]
    response = await call(app, event)
    assert response.status == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert stack.executions() == []
    health = await call(app, with_path(sample_event("chat-get.json"), "/health"))
    assert health.status == 200  # the Lambda Web Adapter's readiness check needs no token
