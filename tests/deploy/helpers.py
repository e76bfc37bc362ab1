"""Helpers of the deploy tests: start runs as the chat function does, read what they left behind."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from durable_harness.aws.runtime import AwsRuntime, build_runtime
from durable_harness.messages import TextPart, UserMessage
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState

from . import agents
from .stack import MotoStack


def runtime_of(stack: MotoStack, logical_id: str = "ChatFunction") -> AwsRuntime:
    """The AWS runtime a function builds from its environment."""
    with stack.function_env(logical_id):
        return build_runtime()


def start_run(stack: MotoStack, text: str = "Check alpha and beta.", **fields: Any) -> str:
    """Create a run and start its execution, as the chat function does for a POST; its id.
    ``fields`` go to ``Runner.create_run`` (``chat_id=``, ``principal=``)."""
    runtime = runtime_of(stack)
    runner = Runner(agents.build_agent(), runtime.store, runtime.log)
    run_id = runner.create_run([UserMessage(content=[TextPart(text=text)])], **fields).run_id
    runtime.orchestrator.start(run_id)
    return run_id


def log_of(stack: MotoStack, run_id: str) -> list[dict[str, Any]]:
    """Every chunk of the run's log in S3, parsed."""
    return [json.loads(chunk) for chunk in runtime_of(stack).log.read(run_id, 0)]


def state_of(stack: MotoStack, run_id: str) -> RunState:
    """The run's checkpoint in DynamoDB."""
    return RunState.model_validate_json(runtime_of(stack).store.load(run_id).state)


def types(chunks: list[dict[str, Any]]) -> list[str]:
    """The chunk types, in order."""
    return [c["type"] for c in chunks]


def assert_complete_turn(chunks: list[dict[str, Any]]) -> None:
    """The whole scripted turn, once: two tool steps and the answer, ``finish`` last."""
    names = types(chunks)
    assert names[0] == "start" and names.count("start") == 1
    assert names[-1] == "finish" and chunks[-1].get("finishReason") == "stop"
    assert names.count("finish") == 1
    message = assemble_ui_message(chunks)
    tools = [(p["toolCallId"], p["state"]) for p in message["parts"] if p["type"].startswith("tool-")]
    assert tools == [("c1", "output-available"), ("c2", "output-available")]
    assert message["parts"][-1]["type"] == "text" and message["parts"][-1]["text"] == agents.ANSWER


def wait_until(condition: Any, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition()`` until it is true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def lifecycle_listener(stack: MotoStack) -> Callable[[], list[dict[str, Any]]]:
    """Subscribe an SQS queue to the runs' lifecycle events on the default bus (EventBridge
    delivers to SQS in moto); returns a function that drains what arrived so far."""
    sqs, events = stack.client("sqs"), stack.client("events")
    queue = sqs.create_queue(QueueName="lifecycle")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="lifecycle", EventPattern=json.dumps({"source": ["durable-harness"]}))
    events.put_targets(Rule="lifecycle", Targets=[{"Id": "q", "Arn": queue_arn}])

    def received() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while batch := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", []):
            out += [json.loads(m["Body"]) for m in batch]
        return out

    return received
