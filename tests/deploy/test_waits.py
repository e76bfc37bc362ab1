"""Durable waits on the deployed stack (issue 21, D16): under moto, with the real state machine, a
waiting run parks at no compute (no slice function invocation while it waits), and an event through
the run API or an EventBridge "Run Event", or a sleep's end, resumes it; a cancel ends it.

The handlers run in this process (tests/deploy/stack.py), their AWS calls checked against the
template's IAM policies.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.aws.table import Head

from . import agents
from .chat import call, load_chat_app, sample_event, with_path
from .helpers import log_of, runtime_of, start_run, state_of, types, wait_until
from .stack import MotoStack
from .test_inline_slice import chat_app, finish, started_post, wait_for

pytestmark = pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_wait_agent")


def parked_token(stack: MotoStack, run_id: str) -> str | None:
    """The task token AwaitEvent left on the run record (it is parked), or None."""
    item = stack.client("dynamodb").get_item(
        TableName=runtime_of(stack).store.table_name, Key={"pk": {"S": run_id}, "sk": {"S": "run"}}
    )["Item"]
    token = item.get(Head.EVENT_TOKEN, {}).get("S")
    return token if isinstance(token, str) else None


def park(stack: MotoStack, text: str = "Build acme.") -> tuple[str, int]:
    """Start a run whose tool waits for ``build-done``; its id and slice count once it is parked."""
    run_id = start_run(stack, text)
    wait_until(lambda: parked_token(stack, run_id) is not None, what="the run to park in AwaitEvent")
    assert state_of(stack, run_id).status == "awaiting_event"
    [execution] = [e for e in stack.executions() if e["name"].startswith(run_id)]
    assert execution["status"] == "RUNNING"
    return run_id, len(stack.calls_of("SliceFunction", run_id))


def assert_resumed(stack: MotoStack, run_id: str, slices_parked: int) -> list[dict[str, Any]]:
    """The run went on after its park, with no slice while it waited, and finished."""
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert state_of(stack, run_id).status == "finished"
    # Nothing ran while it waited: a slice invoked then would have found the run not due and
    # returned awaiting_event again. After the park: the woken slice (the tool's step) and the answer.
    statuses = [s.result["status"] for s in stack.calls_of("SliceFunction", run_id)]
    assert statuses == ["awaiting_event"] * slices_parked + ["ready_for_next_step", "finished"]
    chunks = log_of(stack, run_id)
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish"
    return chunks


async def post_event(stack: MotoStack, run_id: str, payload: Any) -> tuple[Any, dict[str, Any]]:
    """POST ``build-done`` to the run API of a chat function (it resumes the parked run); the app
    and the request, for a repeat."""
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    post = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/events/build-done")
    post["body"] = json.dumps(payload)
    response = await call(app, post)
    assert response.status == 202 and response.json()["outcome"] == "resumed", response.body
    return app, post


async def test_an_event_through_the_run_api_resumes_a_parked_run(stack: MotoStack) -> None:
    run_id, parked = park(stack)
    app, post = await post_event(stack, run_id, {"status": "green"})
    chunks = assert_resumed(stack, run_id, parked)
    [result] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert result["output"] == {"build": "b-1", "status": "green"}
    assert agents.CONTROL.executions == {"start:acme": 1}  # the recorded step ran once
    again = await call(app, post)
    assert again.status == 409 and again.json()["outcome"] == "resumed"


@pytest.mark.stack_secrets(ApprovalSecretArn=("approval-signing-key", "k" * 40))
async def test_the_signed_event_url_of_a_slice_resumes_the_run_through_the_chat_function(stack: MotoStack) -> None:
    agents.CONTROL.hooks = hooks = []
    run_id, parked = park(stack)
    [hook] = hooks
    chat_url = stack.functions["SliceFunction"].env["PUBLIC_URL"].rstrip("/")
    assert hook.startswith(f"{chat_url}/hooks/events/")  # the chat function's URL
    post = with_path(sample_event("chat-post.json"), hook.removeprefix(chat_url))
    post["headers"].pop("authorization", None)  # the token in the URL is the only credential
    post["body"] = json.dumps({"status": "signed"})
    with stack.function_env("ChatFunction"):  # (its secret's ARN is read from the environment)
        response = await call(load_chat_app(), post)
    assert response.status == 202 and response.json()["outcome"] == "resumed", response.body
    [result] = [c for c in assert_resumed(stack, run_id, parked) if c["type"] == "tool-output-available"]
    assert result["output"]["status"] == "signed"


def test_a_run_event_through_eventbridge_resumes_a_parked_run(stack: MotoStack) -> None:
    run_id, parked = park(stack)
    event = {"version": "0", "id": "e-1", "source": "durable-harness.client", "detail-type": "Run Event",
             "detail": {"runId": run_id, "name": "build-done", "payload": {"status": "from the bus"}}}  # fmt: skip
    assert stack.invoke("TriggerFunction", event) == {"runId": run_id, "outcome": "resumed", "duplicate": False}
    chunks = assert_resumed(stack, run_id, parked)
    [result] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert result["output"]["status"] == "from the bus"
    assert stack.invoke("TriggerFunction", event)["duplicate"] is True  # a redelivery changes nothing


@pytest.mark.parametrize("detail", [{"runId": 7, "name": "build-done"}, {"runId": ["wrun_x"], "name": "x"}, "text"])
def test_a_run_event_whose_run_id_is_not_a_string_is_rejected_not_a_crash(stack: MotoStack, detail: object) -> None:
    event = {"version": "0", "id": "e-2", "source": "durable-harness.client", "detail-type": "Run Event",
             "detail": detail}  # fmt: skip
    # Dropped with its reason (a redelivery cannot fix it), not an error EventBridge would retry.
    assert stack.invoke("TriggerFunction", event) == {"error": "A Run Event needs detail {runId, name, payload}."}
    assert stack.calls_of("TriggerFunction")[-1].error is None


def test_a_sleep_parks_in_a_wait_state_and_resumes_the_run(stack: MotoStack) -> None:
    run_id = start_run(stack, "Take a nap.")
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution
    history = stack.history(execution["executionArn"])
    assert [e["stateEnteredEventDetails"]["name"] for e in history if e["type"] == "WaitStateEntered"] == ["Sleep"]
    slices = stack.calls_of("SliceFunction", run_id)
    assert [s.result["status"] for s in slices] == ["awaiting_event", "ready_for_next_step", "finished"]
    assert agents.CONTROL.executions == {"nap:acme": 1}
    [result] = [c for c in log_of(stack, run_id) if c["type"] == "tool-output-available"]
    assert result["output"] == {"slept": "acme"}


async def test_a_cancel_ends_a_parked_run_with_one_finish(stack: MotoStack) -> None:
    run_id, parked = park(stack)
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    cancel = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/cancel")
    cancel["body"] = ""
    response = await call(app, cancel)
    assert response.status == 200 and response.json()["status"] == "cancelled", response.body
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "ABORTED"
    assert len(stack.calls_of("SliceFunction", run_id)) == parked
    chunks = log_of(stack, run_id)
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish"
    assert state_of(stack, run_id).status == "cancelled"


@pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_wait_agent", SliceSeconds="600")
async def test_a_chat_run_that_parks_in_the_chat_functions_own_slice_streams_on_to_its_finish(stack: MotoStack) -> None:
    post, response, _ = await started_post(chat_app(stack))
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(lambda: parked_token(stack, run_id) is not None, "the run to park in AwaitEvent")
    await wait_for(lambda: "data-wait" in types(response.chunks()), "the client to see the wait")
    event = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/events/build-done")
    event["body"] = json.dumps({"status": "green"})
    delivered = await call(chat_app(stack), event)
    assert delivered.status == 202, delivered.body
    await finish(post)  # the POST's stream followed the parked run to its finish
    chunks = response.chunks()
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish"
    assert chunks == log_of(stack, run_id)
    [result] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert result["output"] == {"build": "b-1", "status": "green"}
    # The chat function parked it; the slice function ran only to park it in AwaitEvent, then the
    # slice the event woke.
    assert [s.result["status"] for s in stack.calls_of("SliceFunction", run_id)] == ["awaiting_event", "finished"]


@pytest.mark.stack_secrets(ApprovalSecretArn=("approval-signing-key", "k" * 40))
@pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_wait_agent", SliceSeconds="600")
async def test_the_chat_functions_own_slice_hands_out_absolute_event_urls_of_its_function_url(
    stack: MotoStack,
) -> None:
    agents.CONTROL.hooks = hooks = []
    with stack.function_env("ChatFunction") as env:
        app = load_chat_app()
    # Deployed, the function's environment names the secret all its life; here the process's is
    # the function's only while the app is built, so the app keeps the ARN it was built with.
    app.service.runner.approval_secret.secret_id = env["TOOL_APPROVAL_SECRET_ARN"]
    post, response, _ = await started_post(app)
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(lambda: parked_token(stack, run_id) is not None, "the run to park in AwaitEvent")
    # The chat function ran the step that handed the URL out (the slice function only parked it).
    assert [s.result["status"] for s in stack.calls_of("SliceFunction", run_id)] == ["awaiting_event"]
    [hook] = hooks
    origin = "https://" + sample_event("chat-post.json")["headers"]["host"]  # the Function URL's domain
    assert hook.startswith(f"{origin}/hooks/events/"), hook
    event = with_path(sample_event("chat-post.json"), hook.removeprefix(origin))
    event["headers"].pop("authorization", None)  # the token in the URL is the only credential
    event["body"] = json.dumps({"status": "absolute"})
    delivered = await call(app, event)
    assert delivered.status == 202 and delivered.json()["outcome"] == "resumed", delivered.body
    await finish(post)
    [result] = [c for c in response.chunks() if c["type"] == "tool-output-available"]
    assert result["output"] == {"build": "b-1", "status": "absolute"}


async def test_a_parked_execution_that_continues_as_new_still_takes_the_event(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one thing not real: the execution's age. Nothing makes one 300 days old here, so the
    # slice function's first park reports it so (renew), as wait_of does for an old execution.
    from durable_harness.functions import handlers  # the slice function's body (functions/slice/app.py names it)

    wait_of, renewed = handlers.wait_of, []

    def old_once(state: Any, **kwargs: Any) -> dict[str, Any] | None:
        wait = wait_of(state, **kwargs)
        if wait is not None and not renewed:
            renewed.append(state.run_id)
            return {**wait, "renew": True}
        return wait

    monkeypatch.setattr(handlers, "wait_of", old_once)
    run_id = start_run(stack, "Build acme.")
    wait_until(lambda: parked_token(stack, run_id) is not None, what="the run to park in AwaitEvent")
    first, second = sorted((e for e in stack.executions() if e["name"].startswith(run_id)),
                           key=lambda e: e["startDate"])  # fmt: skip
    assert renewed == [run_id] and second["name"].endswith("-c1") and second["status"] == "RUNNING"
    assert first["status"] == "SUCCEEDED"  # "Continued": the first parked nowhere
    entered = [e["stateEnteredEventDetails"]["name"] for e in stack.history(first["executionArn"])
               if e["type"].endswith("StateEntered")]  # fmt: skip
    assert entered[-4:] == ["Park", "NextGeneration", "ContinueAsNew", "Continued"]
    assert "AwaitEvent" not in entered and state_of(stack, run_id).status == "awaiting_event"

    await post_event(stack, run_id, {"status": "after renewal"})
    executions = stack.wait_for_executions(run_id, count=2)
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert state_of(stack, run_id).status == "finished"
    # The first execution's slice parked the run; the new one's first slice found it not due and
    # parked it in AwaitEvent; the event woke the next (the tool's step replayed, not run again).
    statuses = [s.result["status"] for s in stack.calls_of("SliceFunction", run_id)]
    assert statuses == ["awaiting_event", "awaiting_event", "ready_for_next_step", "finished"]
    assert agents.CONTROL.executions == {"start:acme": 1}
    chunks = log_of(stack, run_id)
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish"
    [result] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert result["output"] == {"build": "b-1", "status": "after renewal"}
