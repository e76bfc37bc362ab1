"""Every provider deployable: ``openai:`` and ``anthropic:`` models get their API keys from Secrets
Manager secrets named by template parameters, which only the functions that run slices may read: the
slice function, and the chat function (it runs each chat run's first slice itself, decision D14).

The deployed run talks to a real HTTP server on loopback that replays recorded Chat Completions
streams (the ones of tests/models/test_openai.py) and records each request's headers: no OpenAI
account or network is available here, and nothing of ours is replaced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.aws.chunklog.items import unpacked_text
from durable_harness.protocol.assemble import assemble_ui_message

from tests.models.test_openai import TEXT_STREAM, TOOLS_STREAM
from tests.support import serve

from .cfn import load_template
from .chat import call, load_chat_app, sample_event
from .conftest import deployed_stack
from .helpers import log_of, runtime_of
from .iam import ACCOUNT, ACTOR, REGION, allowed
from .stack import MotoStack

KEY = "sk-proj-deployed-0123456789abcdefSECRETKEY"
TEMPLATE = load_template()
SLICE_ENV = TEMPLATE["Resources"]["SliceFunction"]["Properties"]["Environment"]["Variables"]
CHAT_ENV = TEMPLATE["Resources"]["ChatFunction"]["Properties"]["Environment"]["Variables"]
RUNS_SLICES = ("ChatFunction", "SliceFunction")

# The recorded tool-call stream, with only its get_weather call (the agent has no get_time tool).
WEATHER_STREAM = b"\n\n".join(e for e in TOOLS_STREAM.split(b"\n\n") if b'"tool_calls":[{"index":1' not in e)


class RecordedProvider:
    """An ASGI app answering each POST with the next recorded stream (the last one repeats)."""

    def __init__(self, *streams: bytes) -> None:
        self.streams = streams
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.requests.append({"path": scope["path"], "headers": headers, "body": json.loads(body)})
        stream = self.streams[min(len(self.requests), len(self.streams)) - 1]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for start in range(0, len(stream), 97):  # in pieces, so events straddle reads
            await send({"type": "http.response.body", "body": stream[start : start + 97], "more_body": True})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def provider() -> Iterator[tuple[RecordedProvider, str]]:
    """The recorded OpenAI-compatible server and its base URL: a weather tool call, then the answer."""
    app = RecordedProvider(WEATHER_STREAM, TEXT_STREAM)
    with serve(app) as url:
        yield app, f"{url}/v1"


@pytest.fixture
def openai_stack(aws_environment: None, provider: tuple[RecordedProvider, str]) -> Iterator[MotoStack]:
    """The stack with the library's default agent on an ``openai:`` model whose key is in a secret."""
    overrides = {"Agent": "", "ModelId": "openai:gpt-4o-mini", "OpenAIBaseUrl": provider[1]}
    with deployed_stack(overrides, {"OpenAIApiKeySecretArn": ("durable-harness/openai-key", KEY)}) as made:
        yield made


async def test_a_deployed_openai_run_sends_the_key_it_read_from_secrets_manager(
    openai_stack: MotoStack,
    provider: tuple[RecordedProvider, str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack, (server, _) = openai_stack, provider
    secret_arn = stack.resolver.parameters["OpenAIApiKeySecretArn"]
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    # This process stands for the chat function while it serves the POST (whose first slice calls
    # the model, which reads the secret's ARN from the environment): its environment, as Lambda
    # gives it. (The slice function's invocations overlay theirs meanwhile.)
    for name, value in stack.functions["ChatFunction"].env.items():
        monkeypatch.setenv(name, value)
    response = await call(app, sample_event("chat-post.json"))  # "What is the weather in Paris?"
    assert response.status == 200, response.body
    run_id = response.headers["x-workflow-run-id"]
    chunks = response.chunks()
    assert chunks[-1]["type"] == "finish" and chunks == log_of(stack, run_id)
    message = assemble_ui_message(chunks)
    assert [p["type"] for p in message["parts"] if p["type"] != "step-start"] == ["text", "tool-get_weather", "text"]
    assert message["parts"][-1]["text"] == "Hello there été!"

    # Two model calls, in two slices (SliceSeconds=0: the chat function's, then the slice function's),
    # each with the secret's value as its bearer token.
    assert len(server.requests) == 2 and len(stack.calls_of("SliceFunction", run_id)) >= 1
    for request in server.requests:
        assert request["path"] == "/v1/chat/completions"
        assert request["headers"]["authorization"] == f"Bearer {KEY}"
        assert request["body"]["model"] == "gpt-4o-mini"
    assert server.requests[1]["body"]["messages"][-1]["role"] == "tool"

    # Read by a function that ran a slice, from exactly that secret; no other function read it. (Here
    # both run in this one process, whose five-minute cache of the key serves the second.)
    readers = {c.actor for c in stack.calls if c.resources == [secret_arn]}
    assert readers and readers <= set(RUNS_SLICES)
    assert all("secretsmanager:GetSecretValue" in c.actions for c in stack.calls if c.resources == [secret_arn])

    # The key is in no environment, no chunk, no checkpoint and no log line; the ARN is all they hold.
    for fn in stack.functions.values():
        assert KEY not in json.dumps(fn.env)
    for name in RUNS_SLICES:
        assert stack.functions[name].env["OPENAI_API_KEY_SECRET_ARN"] == secret_arn
        assert "OPENAI_API_KEY" not in stack.functions[name].env
    assert KEY not in json.dumps(chunks) + runtime_of(stack).store.load(run_id).state
    stored = everything_stored(stack)
    assert b"Hello there" in stored and secret_arn.encode() not in stored  # (what the scan sees)
    assert KEY.encode() not in stored
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err + caplog.text
    # (on exit, deployed_stack holds every call, this secret's reads included, against the IAM policies)


def _readable(value: Any) -> Any:
    """Scanned items with their compressed texts (``{"B": zlib bytes}``: chunk data, checkpoint
    record bodies) decompressed, so that the scan sees what they hold."""
    if isinstance(value, dict):
        if set(value) == {"B"}:
            return {"S": unpacked_text(value).decode("utf-8")}
        return {key: _readable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_readable(item) for item in value]
    return value


def everything_stored(stack: MotoStack) -> bytes:
    """The raw bytes of every S3 object, DynamoDB item and execution history of the stack."""
    s3, ddb = stack.client("s3"), stack.client("dynamodb")
    bucket, table = stack.resolver.physical["ChunkBucket"], stack.resolver.physical["RunsTable"]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    stored = [s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys]
    stored.append(json.dumps(_readable(ddb.scan(TableName=table)["Items"])).encode())
    for execution in stack.executions():
        stored.append(json.dumps([execution, stack.history(execution["executionArn"])], default=str).encode())
    return b"\n".join(stored)


def test_iam_lets_only_the_functions_that_run_slices_read_only_that_secret(openai_stack: MotoStack) -> None:
    stack = openai_stack
    secret_arn = stack.resolver.parameters["OpenAIApiKeySecretArn"]
    read = "secretsmanager:GetSecretValue"
    for name in RUNS_SLICES:
        assert allowed(stack.policy_statements(name), read, secret_arn), name
    for other in ("FinalizerFunction", "TriggerFunction", "RunStateMachine"):
        assert not allowed(stack.policy_statements(other), read, secret_arn), other

    other_arn = stack.client("secretsmanager").create_secret(Name="someone-elses-key", SecretString="x" * 20)["ARN"]
    secrets = stack.client("secretsmanager")
    token = ACTOR.set("SliceFunction")
    try:
        secrets.get_secret_value(SecretId="durable-harness/openai-key")  # by name: IAM sees the full ARN
        stack.check_iam()
        secrets.get_secret_value(SecretId=other_arn)
        with pytest.raises(AssertionError, match="someone-elses-key") as refused:
            stack.check_iam()
        assert f"('SliceFunction', '{read}', '{other_arn}')" in str(refused.value)
        assert secret_arn not in str(refused.value)
    finally:
        ACTOR.reset(token)
        stack.calls = [c for c in stack.calls if c.resources != [other_arn]]  # the fixture checks the rest


def test_without_the_parameters_no_function_gets_a_provider_secret_or_setting(
    aws_environment: None,
) -> None:
    with deployed_stack() as stack:
        for name in RUNS_SLICES:
            env = stack.functions[name].env
            assert not {"OPENAI_API_KEY_SECRET_ARN", "ANTHROPIC_API_KEY_SECRET_ARN", "OPENAI_BASE_URL"} & set(env)
        statements = stack.policy_statements("SliceFunction")
        secret_reads = [s for s in statements if s["Action"] == "secretsmanager:GetSecretValue"]
        assert [s["Resource"] for s in secret_reads] == [stack.resolver.physical["ApprovalSecret"]]
        chat_reads = [s["Resource"] for s in stack.policy_statements("ChatFunction")
                      if s["Action"] == "secretsmanager:GetSecretValue"]  # fmt: skip
        assert chat_reads == [stack.resolver.physical["ApprovalSecret"]]  # (AuthTokenHashes: no token secret)


def test_the_anthropic_key_secret_is_passed_and_granted_the_same_way(aws_environment: None) -> None:
    secrets = {"AnthropicApiKeySecretArn": ("durable-harness/anthropic-key", KEY)}
    with deployed_stack({"ModelId": "anthropic:claude-sonnet-4-5"}, secrets) as stack:
        secret_arn = stack.resolver.parameters["AnthropicApiKeySecretArn"]
        for name in RUNS_SLICES:
            assert stack.functions[name].env["ANTHROPIC_API_KEY_SECRET_ARN"] == secret_arn
            assert "OPENAI_API_KEY_SECRET_ARN" not in stack.functions[name].env
            assert allowed(stack.policy_statements(name), "secretsmanager:GetSecretValue", secret_arn)
        for other in ("FinalizerFunction", "TriggerFunction"):
            assert not allowed(stack.policy_statements(other), "secretsmanager:GetSecretValue", secret_arn)


def test_no_function_environment_carries_a_key_and_secret_parameters_take_full_arns() -> None:
    for name in ("OPENAI_API_KEY_SECRET_ARN", "ANTHROPIC_API_KEY_SECRET_ARN", "OPENAI_BASE_URL"):
        assert name in SLICE_ENV and CHAT_ENV[name] == SLICE_ENV[name]
    every_env = [TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]] + [
        r["Properties"].get("Environment", {}).get("Variables", {})
        for r in TEMPLATE["Resources"].values()
        if r["Type"] == "AWS::Serverless::Function"
    ]
    assert not any(name.endswith("_API_KEY") for env in every_env for name in env)
    arn = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:durable-harness/openai-key-"
    for parameter in ("OpenAIApiKeySecretArn", "AnthropicApiKeySecretArn"):
        pattern = TEMPLATE["Parameters"][parameter]["AllowedPattern"]
        assert _matches(pattern, "") and _matches(pattern, arn + "Ab12Cd")
        assert not _matches(pattern, arn[:-1])  # a partial ARN: IAM would never match the real one
        assert not _matches(pattern, "sk-proj-0123456789")  # a key pasted where its secret's ARN goes
    url = TEMPLATE["Parameters"]["OpenAIBaseUrl"]["AllowedPattern"]
    assert _matches(url, "") and _matches(url, "https://openrouter.ai/api/v1") and not _matches(url, "openrouter.ai")


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None
