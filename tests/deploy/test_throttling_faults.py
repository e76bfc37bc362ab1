"""A fault suite under moto (issue 22): 50 concurrent chat runs through throttling and 5xx.

The real state machine and handlers (:class:`~tests.deploy.stack.MotoStack`); chats POSTed to
the chat function's app as the Function URL delivers them. While the fault window is open, a
seeded schedule (:class:`FaultSchedule`: the n-th call to a target fails or not by the seed
alone) refuses Lambda invocations of the slice and finalizer functions
(``TooManyRequestsException``, ``ServiceException``), Step Functions calls
(``ThrottlingException``) and DynamoDB calls of the functions and of the state machine
(``ProvisionedThroughputExceededException``, ``InternalServerError``), each refused after
botocore's own retries. The state machine's retriers are shortened (moto sleeps them in real time;
their lengths on AWS are checked in test_template.py); nothing else changes.

Every run must end with exactly one ``finish``, last; what each chat's client got (its POST, then
resumed GETs) is its log, chunk for chunk, indexes contiguous; no tool whose result was recorded
ran again. A new chat during the fault, whose run record cannot be written, gets a 503 with
``Retry-After`` and a JSON error, and the same POST retried after the fault streams its turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from durable_harness.protocol.assemble import assemble_ui_message

from . import agents
from .chat import Response, call, load_chat_app, sample_event, with_path
from .conftest import DEFAULT_OVERRIDES
from .helpers import log_of, runtime_of, types
from .iam import ACTOR
from .stack import MotoStack

RUNS = int(os.environ.get("FAULT_RUNS", "50"))
SEED = 22
HANG = 900.0
"""Seconds a chat's request may take before the test calls it hung."""
THROTTLE, FIVE_XX = "TooManyRequestsException", "ServiceException"
DYNAMODB = ("ProvisionedThroughputExceededException", "InternalServerError")
# A slice makes about ten DynamoDB calls and one invocation: the rates make about one slice in
# three meet a fault of some kind.
TARGETS: dict[tuple[str, str], tuple[float, tuple[str, ...]]] = {
    **{(fn, "Invoke"): (0.2, (THROTTLE, THROTTLE, FIVE_XX)) for fn in ("SliceFunction", "FinalizerFunction")},
    **{(actor, op): (0.1, ("ThrottlingException",)) for actor in ("ChatFunction", "SliceFunction")
       for op in ("SendTaskHeartbeat", "SendTaskSuccess", "StartExecution")},
    **{(actor, op): (0.02, DYNAMODB) for actor in ("SliceFunction", "FinalizerFunction", "RunStateMachine")
       for op in ("GetItem", "Query", "UpdateItem", "PutItem", "TransactWriteItems")},
}  # fmt: skip
"""What the schedule refuses, by (who calls, operation): the rate, and the error codes it draws from."""


@dataclass
class FaultSchedule:
    """Refuses calls to :data:`TARGETS` at their rates while open: the n-th call to a target fails or
    not, and with which code, by ``seed`` alone; at most ``per_target`` calls of each target are
    drawn for (the window's length in calls). ``refuse_creates`` refuses every write that creates
    a run record (a new chat) with a throttle, whatever the rate."""

    seed: int
    per_target: int = 400
    open: bool = False
    refuse_creates: bool = False
    drawn: Counter[tuple[str, str]] = field(default_factory=Counter)
    injected: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, actor: str, operation: str, params: Mapping[str, Any]) -> str | None:
        """The error code this call fails with, or None."""
        if self.refuse_creates and actor == "ChatFunction" and _creates_run(params):
            return "ProvisionedThroughputExceededException"
        target = TARGETS.get((actor, operation))
        if not self.open or target is None:
            return None
        with self._lock:
            n = self.drawn[(actor, operation)]
            if n >= self.per_target:
                return None
            self.drawn[(actor, operation)] += 1
            draw = random.Random(f"{self.seed}:{actor}:{operation}:{n}")
            rate, codes = target
            if draw.random() >= rate:
                return None
            code = draw.choice(codes)
            self.injected[(actor, operation, code)] += 1
            return code


def _creates_run(params: Mapping[str, Any]) -> bool:
    puts = [params, *(w.get("Put", {}) for w in params.get("TransactItems", []))]
    return any(str(p.get("ConditionExpression", "")).startswith("attribute_not_exists(#pk)") for p in puts)


def shorten_retries(definition: dict[str, Any]) -> None:
    """Every retrier of every state: 1 s apart, no growth, at most 1 s (same attempt counts)."""
    for state in definition["States"].values():
        for retrier in state.get("Retry", []):
            retrier.update(IntervalSeconds=1, BackoffRate=1.0)
            if "MaxDelaySeconds" in retrier:
                retrier["MaxDelaySeconds"] = 1


@pytest.fixture
def faulty(aws_environment: None) -> Iterator[tuple[MotoStack, FaultSchedule]]:
    """The stack with the fault agent, shortened retriers and the schedule; IAM checked at the end."""
    agents.reset()
    agents.FAULT_EXECUTIONS.clear()
    agents.FAULT_RESULTS.clear()
    agents.FAULT_REPEATS.clear()
    # A chat slice whose hand-over was throttled away is taken over after the heartbeat timeout:
    # 20 s rather than 90 (a heartbeat a second keeps live slices, slowed by the load of 50 runs
    # in one process, from being taken over).
    overrides = {**DEFAULT_OVERRIDES, "Agent": "tests.deploy.agents:build_fault_agent",
                 "ChatSliceHeartbeatInterval": "1", "ChatSliceHeartbeatTimeout": "20"}  # fmt: skip
    made = MotoStack(overrides, definition_edit=shorten_retries)
    schedule = FaultSchedule(SEED)
    made.fault_injector = schedule
    with made.deployed():
        agents.FAULT_STORED = stored_state(made)
        yield made, schedule
        agents.FAULT_STORED = None
        schedule.open = False
        made.check_iam()


def stored_state(stack: MotoStack) -> Any:
    """The run's first user text -> its stored checkpoint's text, for the fault agent's tool (which
    knows its run only by its messages): the run found by its chat id once, then read as stored."""
    runtime = runtime_of(stack)
    ddb, table = stack.client("dynamodb"), runtime.store.table_name
    found: dict[str, str] = {}

    def stored(text: str) -> str:
        token = ACTOR.set("harness")  # the test's own reads: not the function's, not faulted
        try:
            return read(text)
        finally:
            ACTOR.reset(token)

    def read(text: str) -> str:
        chat_id = "chat-" + text.rsplit(" ", 1)[-1].rstrip(".")
        if chat_id not in found:
            scan = ddb.get_paginator("scan").paginate(
                TableName=table, FilterExpression="chat_id = :c AND sk = :s",
                ExpressionAttributeValues={":c": {"S": chat_id}, ":s": {"S": "run"}},
            )  # fmt: skip
            items = [item for page in scan for item in page["Items"]]
            if not items:
                return ""
            found[chat_id] = items[0]["pk"]["S"]
        return runtime.store.load(found[chat_id]).state or ""

    return stored


def chat_event(n: int) -> dict[str, Any]:
    """A chat POST of its own (its own chat id and first user text)."""
    event = sample_event("chat-post.json")
    text = f"Check alpha and beta, chat {n}."
    event["body"] = json.dumps({"id": f"chat-{n}", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]})  # fmt: skip
    return event


async def stream_to_finish(app: Any, event: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """POST the chat, then resume with GET from the chunks received, as the client does, until
    ``finish``; the run id and every chunk received.

    The bound is for a hang, not a pace: 50 runs in one process take about a minute on an idle
    2-core machine, and more than 240 s per POST on one loaded by two busy loops and other work."""
    response = await call(app, event, timeout=HANG)
    assert response.status == 200, response.body
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    for _ in range(20):
        if chunks and chunks[-1]["type"] == "finish":
            break
        get = with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", f"startIndex={len(chunks)}")
        resumed = await call(app, get, timeout=HANG)
        assert resumed.status == 200, resumed.body
        chunks += resumed.chunks()
    return run_id, chunks


async def test_fifty_runs_through_throttling_and_5xx_end_once_with_every_chunk_and_no_tool_twice(
    faulty: tuple[MotoStack, FaultSchedule],
) -> None:
    stack, schedule = faulty
    # One process serves all 50 chats (on AWS: 50 environments): enough threads for their
    # storage calls, and followers that poll the log every 0.25 s rather than every 50 ms.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=4 * RUNS))
    stack.functions["ChatFunction"].env["STREAM_POLL_SECONDS"] = "0.25"
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    schedule.open = True
    chats = (stream_to_finish(app, chat_event(n)) for n in range(RUNS))
    outcomes = await asyncio.gather(*chats, return_exceptions=True)
    failed = [(n, repr(o)) for n, o in enumerate(outcomes) if isinstance(o, BaseException)]
    assert not failed, f"chats that did not stream to their end: {failed}"
    results = [o for o in outcomes if not isinstance(o, BaseException)]

    # A new chat while the fault goes on: its run record cannot be written.
    schedule.refuse_creates = True
    refused: Response = await call(app, chat_event(RUNS))
    schedule.refuse_creates = False
    schedule.open = False
    assert refused.status == 503, refused.body
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "storage_unavailable" and refused.json()["error"]["message"]
    # The same POST, retried once the fault is over, streams its turn.
    late_id, late = await stream_to_finish(app, chat_event(RUNS))
    results.append((late_id, late))

    # Faults of every kind were injected.
    kinds = {code for (_, _, code) in schedule.injected}
    assert {THROTTLE, FIVE_XX, "ThrottlingException", *DYNAMODB} <= kinds, schedule.injected
    assert {fn for fn, _ in stack.refused} == {"SliceFunction", "FinalizerFunction"} or stack.refused

    ended: Counter[str] = Counter()
    errors: list[str] = []
    for n, (run_id, received) in enumerate(results):
        log = log_of(stack, run_id)
        # What the client got is the log: nothing lost, nothing twice, in order.
        assert received == log, f"run {n} ({run_id}): the stream differs from its log"
        names = types(log)
        assert names.count("finish") == 1 and names[-1] == "finish", (run_id, names)
        assert names[0] == "start" and names.count("start") == 1, (run_id, names)
        ended[str(log[-1].get("finishReason"))] += 1
        # Each tool result the client shows (a reset-step drops a failed attempt's chunks) is one
        # of that tool's executions, and the one the checkpoint recorded. A tool may have run
        # more often: before its result was recorded, a failed write lost it.
        text = f"Check alpha and beta, chat {n}."
        parts = [p for p in assemble_ui_message(log)["parts"] if p["type"] == "tool-lookup"]
        done = [(p["toolCallId"], p["state"]) for p in parts]
        whole = [("c1", "output-available"), ("c2", "output-available")]
        if log[-1].get("finishReason") == "stop":
            assert done == whole, (run_id, parts)
        else:  # a run that failed after its retries ends with its error, its finished steps kept
            assert "error" in names and done == whole[: len(done)], (run_id, names, parts)
            errors.append(next(c["errorText"] for c in log if c["type"] == "error"))
        stored = agents.FAULT_STORED(text)
        for part in parts:
            mark = part["output"]["execution"]
            assert mark in agents.FAULT_RESULTS[(text, part["input"]["name"])] and mark in stored, (run_id, part)
    # No tool ran again once the checkpoint held its result.
    assert agents.FAULT_REPEATS == [], agents.FAULT_REPEATS
    reruns = {key: count for key, count in agents.FAULT_EXECUTIONS.items() if count > 1}
    assert sum(ended.values()) == RUNS + 1
    assert ended["stop"] >= RUNS // 2, ended
    print(
        f"fault suite: finish reasons {dict(ended)}; {sum(schedule.injected.values())} faults injected; "
        f"tools run again before their result was recorded: {reruns}; errors: {errors}"
    )
