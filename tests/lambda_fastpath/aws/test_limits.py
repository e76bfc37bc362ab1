"""An endpoint is not trusted with sizes or pace: the lite clients cap response bodies and give each
attempt a deadline (Bedrock's stream: each event), and fail with botocore's exception classes.

Real HTTP on loopback: the fault server of ``test_retries.py`` (a chunked body without end, a
response sent a byte at a time) for a DynamoDB client, the scripted server for Bedrock. The caps
and deadlines are the clients' settings, made small here so that the tests are quick; the pace
of the servers is far inside each read's timeout, so only the deadline can end an attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError, ResponseStreamingError
from durable_harness.models.bedrock import CLIENT_SETTINGS
from lambda_fastpath.aws import _client
from lambda_fastpath.aws import bedrock as lite_bedrock
from lambda_fastpath.aws._transport import Credentials
from lambda_fastpath.aws.bedrock import BedrockRuntimeClient
from lambda_fastpath.aws.dynamodb import DynamoDBClient
from lambda_fastpath.aws.s3 import S3Client

from tests.lambda_fastpath.aws.frames import event
from tests.lambda_fastpath.aws.scripted import Reply, ScriptedServer
from tests.lambda_fastpath.aws.test_retries import OK, FaultServer

KEY = {"pk": {"S": "a"}}
GENEROUS_READ = 10.0  # each read's timeout: far above the servers' pace, so it never fires here


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    made = FaultServer()
    yield made
    made.close()


def dynamodb(server: FaultServer, **settings: Any) -> DynamoDBClient:
    return DynamoDBClient(region="us-east-1", credentials=Credentials("a", "b"), endpoint_url=server.url,
                          signing_name="dynamodb", read_timeout=GENEROUS_READ, **settings)  # fmt: skip


def test_a_body_without_end_stops_at_the_limit(faults: FaultServer) -> None:
    """A chunked body sent for ever: each attempt stops reading past the limit, and after the last
    the call raises botocore's ResponseStreamingError (which the adapters treat as retryable)."""
    client = dynamodb(faults, max_body=256 * 1024)
    outcome = faults.run(["endless"], lambda: client.get_item(TableName="t", Key=KEY))
    assert outcome == (ResponseStreamingError.__name__, None, 5)


def test_a_declared_length_over_the_limit_is_refused_unread(faults: FaultServer) -> None:
    """A Content-Length over the limit fails the attempt before any of the body is read; a body
    of exactly the limit is read."""
    client = dynamodb(faults, max_body=len(OK) - 1)
    assert faults.run([(200, OK)], lambda: client.get_item(TableName="t", Key=KEY))[0] == "ResponseStreamingError"
    exact = dynamodb(faults, max_body=len(OK))
    assert faults.run([(200, OK)], lambda: exact.get_item(TableName="t", Key=KEY)) == ("ok", 0, 1)


def test_a_response_sent_a_byte_at_a_time_ends_at_the_attempts_deadline(faults: FaultServer) -> None:
    """Status line, headers and body one byte every 50 ms: no read times out, but each attempt ends
    at its deadline, and after the last the call raises botocore's ReadTimeoutError."""
    client = dynamodb(faults, attempt_timeout=0.5, max_attempts=2)
    outcome = faults.run(["trickle"], lambda: client.get_item(TableName="t", Key=KEY))
    assert outcome == (ReadTimeoutError.__name__, None, 2)
    assert faults.run([(200, OK)], lambda: client.get_item(TableName="t", Key=KEY)) == ("ok", 0, 1)


def test_the_limits_are_per_operation_and_far_above_aws_maxima() -> None:
    """Every operation's limit is well above what AWS sends for it (and an S3 object's, above what
    the harness writes), and none is unbounded."""
    assert _client.MAX_BODY >= 16 * 1024 * 1024  # a 400 KB item, a 1 MB Query page, 256 KiB SFN payloads
    assert DynamoDBClient._body_limits["TransactWriteItems"] >= 100 * 400 * 1024 * 2  # 100 items back, JSON
    assert S3Client._body_limits["GetObject"] >= 64 * 1024 * 1024  # segments are sealed at 4 MiB
    assert _client.ATTEMPT_TIMEOUT >= 3 * _client.READ_TIMEOUT


# --- Bedrock: the stream lives as long as the model writes; each event has a deadline -----------------

STREAM_HEADERS = {"content-type": "application/vnd.amazon.eventstream"}


def bedrock(server: ScriptedServer, **settings: Any) -> BedrockRuntimeClient:
    """The client as the model adapter's root makes it (its ``CLIENT_SETTINGS``: one attempt), on ``server``."""
    settings = {**CLIENT_SETTINGS, "read_timeout": GENEROUS_READ, **settings}
    return BedrockRuntimeClient(region="us-east-1", credentials=Credentials("a", "b"), endpoint_url=server.url,
                                **settings)  # fmt: skip


def delta(text: str) -> bytes:
    return event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}, "p": "abcd"})


def converse(client: BedrockRuntimeClient) -> Any:
    return client.converse_stream(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])["stream"]


def test_an_event_sent_a_byte_at_a_time_ends_the_stream_at_the_events_deadline() -> None:
    """The first event whole, the second a byte every 50 ms: the stream yields the first, then
    raises botocore's ReadTimeoutError once the second is past its deadline."""
    second = delta("slow")
    with ScriptedServer() as server:
        server.script = [Reply(200, STREAM_HEADERS, [delta("fast"), *(bytes([b]) for b in second)], pace=0.05)]
        stream = iter(converse(bedrock(server, event_timeout=0.5)))
        assert next(stream)["contentBlockDelta"]["delta"]["text"] == "fast"
        with pytest.raises(ReadTimeoutError):
            next(stream)


def test_a_stream_outlives_the_events_deadline_while_each_event_comes_in_time() -> None:
    """Twelve events 250 ms apart: three seconds in all, longer than both deadlines (2 s), yet each
    event comes well within its own: the stream is read to its end."""
    texts = [f"t{i}" for i in range(12)]
    with ScriptedServer() as server:
        server.script = [Reply(200, STREAM_HEADERS, [delta(text) for text in texts], pace=0.25)]
        stream = converse(bedrock(server, attempt_timeout=2.0, event_timeout=2.0))
        assert [e["contentBlockDelta"]["delta"]["text"] for e in stream] == texts


def test_an_error_body_without_end_is_cut_at_the_limit() -> None:
    """A streamed call's error body is read whole, so it has the limit too."""
    body = json.dumps({"message": "x" * 200_000}).encode()
    with ScriptedServer() as server:
        pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
        server.script = [Reply(400, {"x-amzn-errortype": "ValidationException"}, pieces)]
        with pytest.raises(ResponseStreamingError):
            converse(bedrock(server, max_body=64 * 1024))


def test_bedrock_deadlines_leave_a_model_minutes_to_think() -> None:
    """The defaults: a model may think for as long as the model adapter's read timeout before any event."""
    read_timeout = CLIENT_SETTINGS["read_timeout"]
    assert read_timeout <= lite_bedrock.EVENT_TIMEOUT
    assert read_timeout <= lite_bedrock.ATTEMPT_TIMEOUT
