"""The chat function runs a run's first slice itself and hands it over (decision D14).

Everything as deployed, in moto: the chat function's app with its environment from template.yaml,
the real state machine (its ``AwaitChatSlice`` callback task, then the ``RunSlice`` loop), the real
slice and finalizer handlers. The stack fixture holds every AWS call made against the template's
IAM policies. What must hold whatever happens: every chunk the client sees is in the log, once,
in order; one ``finish``, last; no tool whose result was recorded runs again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from durable_harness.aws.handover import StepFunctionsHandover
from durable_harness.server.inline import NOT_SCHEDULED
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint

from . import agents
from .chat import Response, call, load_chat_app, sample_event, with_path
from .helpers import assert_complete_turn, lifecycle_listener, log_of, state_of, types
from .stack import MotoStack

IN_ONE_SLICE = {"SliceSeconds": "600"}  # the whole scripted turn fits in the chat function's slice


def chat_app(stack: MotoStack) -> Any:
    """A chat function's app (a new one: another Lambda environment of the chat function)."""
    with stack.function_env("ChatFunction"):
        return load_chat_app()


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``condition`` without blocking the event loop (the chat function's slice runs on it)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def executions_of(stack: MotoStack, run_id: str) -> list[dict[str, Any]]:
    """The run's executions once none is running (waited for off the event loop)."""
    return await asyncio.to_thread(stack.wait_for_executions, run_id)


def task_states(stack: MotoStack, execution: dict[str, Any]) -> list[tuple[str, str]]:
    """``(state entered, how its task ended)`` for each task state of the execution, in order."""
    out: list[tuple[str, str]] = []
    for event in stack.history(execution["executionArn"]):
        if event["type"] == "TaskStateEntered":
            out.append((event["stateEnteredEventDetails"]["name"], ""))
        elif event["type"] in ("TaskSucceeded", "TaskFailed", "TaskTimedOut") and out:
            out[-1] = (out[-1][0], event["type"])
    return out


async def started_post(app: Any) -> tuple[asyncio.Task[Response], Response, asyncio.Event]:
    """A chat POST that streams while the test goes on: its task, its response so far, and the
    event that makes its client go away."""
    response, dropped = Response(), asyncio.Event()
    post = asyncio.get_running_loop().create_task(
        call(app, sample_event("chat-post.json"), response=response, disconnect=dropped)
    )
    await wait_for(lambda: "x-workflow-run-id" in response.headers, "the POST's response to start")
    return post, response, dropped


async def finish(task: Awaitable[Any]) -> None:
    await asyncio.wait_for(task, 30)


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_turn_that_fits_in_one_slice_is_served_in_process_by_the_chat_function(stack: MotoStack) -> None:
    listen = lifecycle_listener(stack)
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    assert response.status == 200, response.body
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    assert_complete_turn(chunks)
    assert chunks == log_of(stack, run_id)  # streamed in-process, and durable all the same
    assert response.body.endswith(b"data: [DONE]\n\n")
    assert "reset-step" not in types(chunks)
    # No second function: the slice function never ran; the state machine only waited for the
    # chat function's slice and routed its outcome.
    assert stack.calls_of("SliceFunction", run_id) == []
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskSucceeded")]
    state = state_of(stack, run_id)
    assert (state.status, state.slices) == ("finished", 1)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    # The chat function announced what a slice function would have.
    announced = [(e["detail-type"], e["detail"]["runId"], e["detail"]["status"]) for e in listen()]
    assert announced == [("Run Started", run_id, "finished"), ("Run Finished", run_id, "finished")]


async def test_a_turn_longer_than_the_chat_functions_slice_goes_on_in_the_slice_function(stack: MotoStack) -> None:
    # SliceSeconds=0: one step per slice. The chat function runs the first step and hands over.
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    assert_complete_turn(chunks)  # the POST went on following the log the slice function wrote
    assert chunks == log_of(stack, run_id)
    assert "reset-step" not in types(chunks)
    # The chat function ran slice 1; the slice function ran every later one, each once.
    slices = stack.calls_of("SliceFunction", run_id)
    total = state_of(stack, run_id).slices
    assert total > 1
    assert [s.result["slices"] for s in slices] == list(range(2, total + 1))
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    expected = [("AwaitChatSlice", "TaskSucceeded")] + [("RunSlice", "TaskSucceeded")] * (total - 1)
    assert task_states(stack, execution) == expected
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    assert dict(agents.CONTROL.model_calls) == {0: 1, 1: 1, 2: 1}


async def test_a_hand_over_that_comes_before_the_task_waits_is_not_lost(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step Functions takes a callback as soon as the token exists. Here the hand-over lands
    between ``AwaitChatSlice`` writing the token and the task starting to wait for it (moto's
    window, where it lost the outcome and waited out the heartbeat: issue 17, item 18)."""
    handed_over = threading.Event()
    notify, setup = CallbackEndpoint.notify, CallbackEndpoint.setup_heartbeat_endpoint

    def notified(self: CallbackEndpoint, outcome: Any) -> None:
        notify(self, outcome)
        handed_over.set()

    def late_setup(self: CallbackEndpoint, heartbeat_seconds: int) -> Any:
        assert handed_over.wait(20), "the chat function never handed the run over"
        return setup(self, heartbeat_seconds)

    monkeypatch.setattr(CallbackEndpoint, "notify", notified)
    monkeypatch.setattr(CallbackEndpoint, "setup_heartbeat_endpoint", late_setup)
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert_complete_turn(response.chunks())
    assert response.chunks() == log_of(stack, run_id)
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert task_states(stack, execution)[0] == ("AwaitChatSlice", "TaskSucceeded")  # not timed out


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_throttled_hand_over_is_tried_again_rather_than_left_to_the_heartbeat_timeout(
    stack: MotoStack,
) -> None:
    # Three throttles past the client's own retries: the callback task would otherwise wait out
    # its heartbeat timeout and the slice function would take over a run that had ended.
    stack.api_faults[("ChatFunction", "SendTaskSuccess")] = ["ThrottlingException"] * 3
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert_complete_turn(response.chunks())
    assert stack.api_faults[("ChatFunction", "SendTaskSuccess")] == []  # every throttle was met
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskSucceeded")]
    assert stack.calls_of("SliceFunction", run_id) == []


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_heartbeat_that_comes_before_the_task_waits_keeps_the_slice_in_process(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same window for a heartbeat: it counts (moto answered InvalidToken, so the chat function
    # stopped heartbeating and the slice function took a healthy slice over).
    env = stack.functions["ChatFunction"].env
    env["INLINE_HEARTBEAT_SECONDS"] = "3"
    env.pop("INLINE_HEARTBEAT_INTERVAL")  # beats every third of the timeout
    beats: list[bool] = []
    beaten = threading.Event()
    heartbeat, setup = CallbackEndpoint.notify_heartbeat, CallbackEndpoint.setup_heartbeat_endpoint

    def counted(self: CallbackEndpoint) -> bool:
        beats.append(heartbeat(self))
        beaten.set()
        return beats[-1]

    def late_setup(self: CallbackEndpoint, heartbeat_seconds: int) -> Any:
        assert beaten.wait(20), "the chat function sent no heartbeat"
        return setup(self, heartbeat_seconds)

    monkeypatch.setattr(CallbackEndpoint, "notify_heartbeat", counted)
    monkeypatch.setattr(CallbackEndpoint, "setup_heartbeat_endpoint", late_setup)
    agents.CONTROL.gate = gate = threading.Event()
    post, response, _ = await started_post(chat_app(stack))
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(agents.CONTROL.entered_gate.is_set, "step 2 to start")
    await wait_for(lambda: len(beats) >= 3, "the chat function to go on heartbeating")
    assert all(beats)  # every one of them reached the waiting task
    gate.set()
    await finish(post)
    assert_complete_turn(response.chunks())
    assert response.chunks() == log_of(stack, run_id)
    assert "reset-step" not in types(response.chunks())
    [execution] = await executions_of(stack, run_id)
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskSucceeded")]
    assert stack.calls_of("SliceFunction", run_id) == []


def short_heartbeat(stack: MotoStack, seconds: int = 1) -> None:
    """A heartbeat timeout of ``seconds`` (beats every third of it), below the template's bounds, for speed."""
    env = stack.functions["ChatFunction"].env
    env["INLINE_HEARTBEAT_SECONDS"] = str(seconds)
    env.pop("INLINE_HEARTBEAT_INTERVAL")


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_chat_function_that_dies_mid_slice_is_taken_over_by_the_slice_function(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    short_heartbeat(stack)
    # Dead: step 2 streams a part of itself, then the function neither writes nor heartbeats.
    monkeypatch.setattr(StepFunctionsHandover, "heartbeat", lambda self, run_id: True)
    agents.CONTROL.gate, agents.CONTROL.hang = threading.Event(), "ChatFunction"
    app = chat_app(stack)
    post, response, dropped = await started_post(app)
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(agents.CONTROL.entered_gate.is_set, "the chat function to die mid-step")
    dropped.set()  # its client's connection goes with it
    seen = response.chunks()
    assert "start-step" in types(seen) and "finish" not in types(seen)

    # No heartbeat for a second: the state machine hands the run to the slice function, whose
    # claim fences the dead function off; it redoes step 2 from the checkpoint.
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert task_states(stack, execution)[0] == ("AwaitChatSlice", "TaskTimedOut")
    assert {name for name, _ in task_states(stack, execution)[1:]} == {"RunSlice"}

    # The client reconnects (to another chat function) from where its stream stopped.
    get = with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", f"startIndex={len(seen)}")
    resumed = await call(chat_app(stack), get)
    chunks = seen + resumed.chunks()
    assert types(chunks).count("reset-step") == 1  # the client drops the dead function's partial step
    assert_complete_turn(chunks)
    assert chunks == log_of(stack, run_id)  # nothing lost, nothing twice
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}  # step 1's recorded tool did not run again
    assert agents.CONTROL.model_calls[0] == 1 and agents.CONTROL.model_calls[1] == 2

    # The dead function wakes up: its next write is fenced off, and it stops without a trace.
    log = log_of(stack, run_id)
    agents.CONTROL.gate.set()
    await wait_for(lambda: not app.service.inline.running(run_id), "the woken function's slice to stop")
    await finish(post)  # its request ends with its slice; its client had gone
    assert log_of(stack, run_id) == log  # nothing of the woken function reached the log
    # What its response sent after the client went (a disconnect is noticed on the next turn of the
    # event loop, when the log may already have more) is the log's, never the woken slice's own.
    sent = response.chunks()
    assert sent[: len(seen)] == seen and sent == log[: len(sent)]
    assert log_of(stack, run_id) == chunks
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    assert state_of(stack, run_id).status == "finished"


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_chat_slice_that_fails_hands_the_run_over_at_once(stack: MotoStack) -> None:
    agents.CONTROL.crash_in = "ChatFunction"  # step 2 fails in the chat function (a bug it survives)
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    # The POST's client sees the failed part dropped and the step redone by the slice function.
    assert types(chunks).count("reset-step") == 1
    assert_complete_turn(chunks)
    assert chunks == log_of(stack, run_id)
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    # No heartbeat timeout to wait out: the task failed, and its catch ran the slice function.
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskFailed"), ("RunSlice", "TaskSucceeded")]
    failed = [e for e in stack.history(execution["executionArn"]) if e["type"] == "TaskFailed"]
    assert [e["taskFailedEventDetails"]["error"] for e in failed] == ["ChatSliceFailed"]
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    assert agents.CONTROL.model_calls[1] == 2


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_client_that_drops_mid_stream_changes_nothing(stack: MotoStack) -> None:
    agents.CONTROL.gate = gate = threading.Event()
    post, response, dropped = await started_post(chat_app(stack))
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(agents.CONTROL.entered_gate.is_set, "step 2 to start")
    # Step 1's last chunks were written before step 2 began but may still be on their way out:
    # the client leaves once it has them, and step 2 goes on only once the app has seen it leave.
    await wait_for(lambda: types(response.chunks())[-1:] == ["finish-step"], "step 1's end to reach the client")
    dropped.set()
    await wait_for(lambda: response.disconnect_seen, "the app to see the client leave")
    seen = response.chunks()
    assert "finish" not in types(seen) and not post.done()
    gate.set()
    await finish(post)  # the response (the invocation) lasts until the slice is done
    assert state_of(stack, run_id).status == "finished"  # ...which ran to its end all the same
    assert response.chunks() == seen  # nothing was sent to the client that had gone
    assert stack.calls_of("SliceFunction", run_id) == []
    [execution] = await executions_of(stack, run_id)
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskSucceeded")]

    get = with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", f"startIndex={len(seen)}")
    chunks = seen + (await call(chat_app(stack), get)).chunks()
    assert_complete_turn(chunks)
    assert chunks == log_of(stack, run_id)
    assert "reset-step" not in types(chunks)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_cancel_during_the_in_process_slice_ends_the_run_once(stack: MotoStack) -> None:
    # moto ends a stopped execution only once its callback task stops waiting, at the next heartbeat
    # or its timeout (AWS stops it at once; see moto_repairs.repair_errors_after_stop): a short heartbeat
    # keeps that quick. Not 1 s: the chat function must not miss its timeout while the test waits to
    # cancel (a 1 s timeout beaten every 0.33 s was missed on a loaded 2-core machine, and the slice
    # function took over before the stop); beats every 1.33 s still end the stopped execution soon.
    short_heartbeat(stack, seconds=4)
    agents.CONTROL.gate = gate = threading.Event()
    post, response, _ = await started_post(chat_app(stack))
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(agents.CONTROL.entered_gate.is_set, "step 2 to start")
    # The execution is started beside the first slice: under load it may not exist yet, and a cancel
    # before it exists has nothing to stop (the late execution then ends as the run did, SUCCEEDED).
    # This test is about stopping a running one, so it cancels once there is one.
    await wait_for(lambda: any(e["name"].startswith(run_id) for e in stack.executions()), "the execution to start")
    # The cancel reaches another chat function (this one is busy with the POST).
    cancel = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/cancel")
    cancel["body"] = ""
    cancelled = await call(chat_app(stack), cancel)
    assert cancelled.status == 200 and cancelled.json()["status"] == "cancelled"
    # The POST's stream gets the cancel's finish from the log while the slice still waits.
    await wait_for(lambda: "finish" in types(response.chunks()), "the POST to see the cancel's finish")
    gate.set()  # the slice goes on, finds itself fenced off, and stops
    await finish(post)
    chunks = response.chunks()
    assert types(chunks)[-1] == "finish" and chunks[-1]["finishReason"] == "other"
    assert types(chunks).count("finish") == 1
    assert chunks == log_of(stack, run_id)
    assert state_of(stack, run_id).status == "cancelled"
    assert agents.CONTROL.executions == {"alpha": 1}  # beta's tool call never ran
    assert agents.CONTROL.aborted == [[0]]
    [execution] = await executions_of(stack, run_id)
    assert execution["status"] == "ABORTED"
    assert stack.calls_of("SliceFunction", run_id) == []


async def test_a_start_that_failed_is_tried_again_when_the_slice_hands_over(stack: MotoStack) -> None:
    stack.api_faults[("ChatFunction", "StartExecution")] = ["ThrottlingException"]
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert_complete_turn(response.chunks())  # the slice function took over from the late start
    assert response.chunks() == log_of(stack, run_id)
    [execution] = await executions_of(stack, run_id)
    assert task_states(stack, execution)[0] == ("AwaitChatSlice", "TaskSucceeded")
    assert len(stack.calls_of("SliceFunction", run_id)) == state_of(stack, run_id).slices - 1 > 0


def start_attempts(stack: MotoStack) -> int:
    """The chat function's ``StartExecution`` calls so far (each recorded before its fault is raised)."""
    return sum(call.actions == ["states:StartExecution"] for call in stack.calls if call.actor == "ChatFunction")


def quick_retries(app: Any, window: float | None = None) -> None:
    """Make the app's retries of a failed start quick (and its window of tries short)."""
    app.service.inline.backoff = lambda attempt: 0.02
    if window is not None:
        app.service.inline.start_window = window


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_throttled_start_is_tried_again_while_the_slice_runs(stack: MotoStack) -> None:
    stack.api_faults[("ChatFunction", "StartExecution")] = ["ThrottlingException*"]  # until lifted
    agents.CONTROL.gate = gate = threading.Event()
    app = chat_app(stack)
    quick_retries(app)
    post, response, _ = await started_post(app)
    run_id = response.headers["x-workflow-run-id"]
    await wait_for(agents.CONTROL.entered_gate.is_set, "step 2 to start")
    # The slice goes on; so do the tries, with backoff (three in all used to be the limit).
    await wait_for(lambda: start_attempts(stack) > 5, "the start to be tried again and again")
    del stack.api_faults[("ChatFunction", "StartExecution")]  # the throttling ends
    await wait_for(lambda: bool(stack.executions()), "the driver to be started during the slice")
    gate.set()
    await finish(post)
    assert_complete_turn(response.chunks())
    assert response.chunks() == log_of(stack, run_id)
    [execution] = await executions_of(stack, run_id)
    assert task_states(stack, execution) == [("AwaitChatSlice", "TaskSucceeded")]
    assert stack.calls_of("SliceFunction", run_id) == []


async def test_a_start_throttled_past_a_short_slice_is_tried_until_it_works(stack: MotoStack) -> None:
    # The first slice is one step; the throttling outlasts it and the three tries of old.
    stack.api_faults[("ChatFunction", "StartExecution")] = ["ThrottlingException"] * 8
    app = chat_app(stack)
    quick_retries(app)
    response = await call(app, sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert_complete_turn(response.chunks())  # the slice function took over from the late start
    assert "error" not in types(response.chunks())
    assert response.chunks() == log_of(stack, run_id)
    assert start_attempts(stack) == 9
    [execution] = await executions_of(stack, run_id)
    assert task_states(stack, execution)[0] == ("AwaitChatSlice", "TaskSucceeded")
    assert len(stack.calls_of("SliceFunction", run_id)) == state_of(stack, run_id).slices - 1 > 0


async def test_a_run_that_needs_more_slices_and_cannot_be_started_ends_failed(stack: MotoStack) -> None:
    stack.api_faults[("ChatFunction", "StartExecution")] = ["ServiceUnavailable*"]
    app = chat_app(stack)
    quick_retries(app, window=1.0)
    response = await call(app, sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    # Step 1 ran in the chat function; the start was tried until the window closed, and then,
    # since nothing could run the rest, the run ends: no client waits for a run nothing drives.
    assert types(chunks)[-2:] == ["error", "finish"] and types(chunks).count("finish") == 1
    assert chunks[-2]["errorText"] == NOT_SCHEDULED
    assert chunks == log_of(stack, run_id)
    state = state_of(stack, run_id)
    assert (state.status, state.error) == ("failed", NOT_SCHEDULED)
    assert stack.executions() == []
    assert start_attempts(stack) > 3
    assert agents.CONTROL.executions == {"alpha": 1}


async def test_a_start_refused_for_good_is_not_tried_again(stack: MotoStack) -> None:
    stack.api_faults[("ChatFunction", "StartExecution")] = ["AccessDeniedException*"]
    app = chat_app(stack)
    quick_retries(app)
    response = await call(app, sample_event("chat-post.json"))
    chunks = response.chunks()
    assert types(chunks)[-2:] == ["error", "finish"] and chunks[-2]["errorText"] == NOT_SCHEDULED
    assert start_attempts(stack) == 1  # a permission does not come back by waiting


@pytest.mark.stack_parameters(**IN_ONE_SLICE)
async def test_a_turn_that_ends_in_the_chat_function_needs_no_execution(stack: MotoStack) -> None:
    stack.api_faults[("ChatFunction", "StartExecution")] = ["ServiceUnavailable*"]
    response = await call(chat_app(stack), sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert_complete_turn(response.chunks())
    assert state_of(stack, run_id).status == "finished"
    assert stack.executions() == []


async def test_a_turn_over_the_lite_clients_as_in_lambda(stack: MotoStack) -> None:
    """The functions' clients as in Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set): lite clients of
    ``lambda_fastpath.aws`` over real HTTP (the same moto, served on loopback), botocore for
    a service without one. A whole turn over several slices keeps every invariant."""
    from durable_harness.aws import clients, runtime
    from lambda_fastpath.aws import LiteClient

    from tests.motoserver import MotoEndpoint

    # Undone before the stack goes (its teardown talks to moto in-process, as before).
    with MotoEndpoint() as endpoint, pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "harness")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.url)
        monkeypatch.setattr(runtime, "_clients", {})  # the process's clients: made afresh, then dropped
        lite = clients._lite_client  # every call recorded, so that the stack checks it against IAM at its end
        monkeypatch.setattr(clients, "_lite_client", lambda *args: stack.recording_lite(lite(*args)))
        app = chat_app(stack)
        assert isinstance(runtime.client_for("dynamodb", region="us-east-1").client, LiteClient)
        response = await call(app, sample_event("chat-post.json"))
        assert response.status == 200, response.body
        run_id = response.headers["x-workflow-run-id"]
        chunks = response.chunks()
        assert_complete_turn(chunks)  # one finish, last; the whole turn once
        assert chunks == log_of(stack, run_id)  # every chunk the client saw is in the log, once, in order
        total = state_of(stack, run_id).slices
        assert total > 1 and len(stack.calls_of("SliceFunction", run_id)) == total - 1
        [execution] = await executions_of(stack, run_id)
        assert execution["status"] == "SUCCEEDED", execution
        assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}  # no recorded tool ran again
        assert isinstance(runtime.client_for("stepfunctions", region="us-east-1").client, LiteClient)
        made = {(call.actor, action) for call in stack.calls for action in call.actions}
        # The lite clients' calls are recorded (and checked against the template's IAM at the end).
        assert {("ChatFunction", "dynamodb:PutItem"), ("ChatFunction", "states:StartExecution"),
                ("SliceFunction", "dynamodb:Query")} <= made, made  # fmt: skip


@pytest.mark.stack_parameters(LiteClients="false")
async def test_with_lite_clients_off_a_turn_runs_over_botocore_clients_in_lambda(stack: MotoStack) -> None:
    """``LiteClients=false`` sets ``AWS_LITE_CLIENTS=0`` on every function: in Lambda
    (``AWS_LAMBDA_FUNCTION_NAME`` set) their clients are then botocore's, and a whole turn over
    several slices keeps every invariant (the calls, botocore's, are checked against IAM)."""
    from durable_harness.aws import clients, runtime
    from lambda_fastpath.aws import LiteClient

    assert {fn.env["AWS_LITE_CLIENTS"] for fn in stack.functions.values()} == {"0"}
    lite_made: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "harness")
        # The functions' environment is their process's for as long as they live (clients made
        # later, on first use, see it too).
        monkeypatch.setenv("AWS_LITE_CLIENTS", stack.functions["ChatFunction"].env["AWS_LITE_CLIENTS"])
        monkeypatch.setattr(runtime, "_clients", {})  # the process's clients: made afresh, then dropped
        lite = clients._lite_client

        def asked(service: str, *args: Any) -> Any:
            lite_made.append(service)
            return lite(service, *args)

        monkeypatch.setattr(clients, "_lite_client", asked)
        app = chat_app(stack)
        response = await call(app, sample_event("chat-post.json"))
        assert response.status == 200, response.body
        run_id = response.headers["x-workflow-run-id"]
        chunks = response.chunks()
        assert_complete_turn(chunks)
        assert chunks == log_of(stack, run_id)
        total = state_of(stack, run_id).slices
        assert total > 1 and len(stack.calls_of("SliceFunction", run_id)) == total - 1
        [execution] = await executions_of(stack, run_id)
        assert execution["status"] == "SUCCEEDED", execution
        assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
        for service in ("dynamodb", "stepfunctions", "s3"):
            assert not isinstance(runtime.client_for(service, region="us-east-1"), LiteClient), service
    assert lite_made == []  # no lite client was even asked for
    made = {(call.actor, action) for call in stack.calls for action in call.actions}
    # botocore's calls, recorded by the stack (it sees no lite client's).
    assert {("ChatFunction", "dynamodb:PutItem"), ("ChatFunction", "states:StartExecution"),
            ("SliceFunction", "dynamodb:Query")} <= made, made  # fmt: skip


SIGNING_KEY = "s3cr3t-signing-key-0123456789abcdef"


@pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_approval_agent")
@pytest.mark.stack_secrets(ApprovalSecretArn=("approval-signing-key", SIGNING_KEY))
async def test_the_chat_function_reads_the_approval_secret_once_for_its_start_and_its_first_approval(
    stack: MotoStack,
) -> None:
    from durable_harness.approvals import verify_tool_approval

    from .stack import ACTOR

    token = ACTOR.set("ChatFunction")  # its start-up's calls are the chat function's (the stack records them)
    try:
        app = chat_app(stack)  # a cold start: the secret is checked (a short one stops it)
    finally:
        ACTOR.reset(token)
    response = await call(app, sample_event("chat-post.json"))
    [request] = [c for c in response.chunks() if c["type"] == "tool-approval-request"]
    signature = request["signature"]
    assert verify_tool_approval(SIGNING_KEY, signature, request["approvalId"], "c9", "remove", {"name": "gamma"})
    reads = [c for c in stack.calls if c.actor == "ChatFunction" and "secretsmanager:GetSecretValue" in c.actions]
    assert len(reads) == 1  # the start-up check's read signs the first approval too
