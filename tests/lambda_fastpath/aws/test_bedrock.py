"""The lite ``bedrock-runtime`` client against a real botocore client, over HTTP on loopback.

Bedrock cannot run here (no account, no network), so a scripted loopback server
(:mod:`tests.lambda_fastpath.aws.scripted`) plays it: it answers with the recorded-shape event streams of
``tests/models/test_bedrock.py``, cut into HTTP chunks at awkward places, or with Bedrock's error
responses. A real boto3 ``bedrock-runtime`` client (``endpoint_url`` = the server) and the lite
client make the same call against the same replies; what they return or raise must be equal, and
so must the requests they send (path, body, signed headers, signature at the same time).
"""

from __future__ import annotations

import base64
import datetime
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EventStreamError,
    ParamValidationError,
    ReadTimeoutError,
)
from lambda_fastpath.aws import _eventstream
from lambda_fastpath.aws._transport import Credentials
from lambda_fastpath.aws.bedrock import BedrockRuntimeClient

from tests.lambda_fastpath.aws.frames import event, exception
from tests.lambda_fastpath.aws.scripted import Reply, ScriptedServer, split
from tests.lambda_fastpath.aws.test_converse_events import SYNTHETIC
from tests.models.test_bedrock import REASONING_STREAM, START, TEXT_STREAM, TEXT_THEN, TOOLS_STREAM

REGION = "us-east-1"
KEY, SECRET, TOKEN = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "session-token/with+chars="
HAIKU = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
PROFILE_ARN = f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{HAIKU}"
STREAM_HEADERS = {"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "5d1c6ffe-0b2c-4f9e"}
AWKWARD = [1, 7, 12, 13, 50, 3, 101, 2]  # HTTP chunk sizes: frames split inside preludes, headers, CRCs


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture(autouse=True)
def no_botocore_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's retries without their random waits, as the lite client's (``conftest._no_backoff``)."""
    import botocore.retries.standard

    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


def botocore_client(server: ScriptedServer, attempts: int = 5) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name=REGION,
        endpoint_url=server.url,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
        config=Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
    )


def lite_client(server: ScriptedServer, attempts: int = 5) -> BedrockRuntimeClient:
    credentials = Credentials(access_key=KEY, secret_key=SECRET, token=TOKEN)
    return BedrockRuntimeClient(region=REGION, credentials=credentials, endpoint_url=server.url, max_attempts=attempts)


def streamed(data: bytes, sizes: list[int] = AWKWARD) -> Reply:
    return Reply(200, dict(STREAM_HEADERS), split(data, sizes))


def failed(status: int, code: str | None, body: bytes, **headers: str) -> Reply:
    all_headers = {"content-type": "application/json", "x-amzn-requestid": "0a7f1c2e-1111", **headers}
    if code is not None:
        all_headers["x-amzn-errortype"] = f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    return Reply(status, all_headers, [body], chunked=False)


ARGUMENTS: dict[str, Any] = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"text": "What is in this picture? Answer in ünïcode ✓"},
                {"image": {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n\x00\xff"}}},
            ],
        }
    ],
    "system": [{"text": "You are terse."}],
    "inferenceConfig": {"maxTokens": 512, "temperature": 0.25, "stopSequences": ["\n\nHuman:"]},
    "toolConfig": {"tools": [{"toolSpec": {"name": "look", "inputSchema": {"json": {"type": "object"}}}}]},
}


def without_date(metadata: dict[str, Any]) -> dict[str, Any]:
    """ResponseMetadata without the server's ``date`` header (the two calls may straddle a second)."""
    headers = {k: v for k, v in metadata["HTTPHeaders"].items() if k != "date"}
    return {**metadata, "HTTPHeaders": headers}


def call(client: Any, data_or_replies: list[Reply], server: ScriptedServer, **arguments: Any) -> dict[str, Any]:
    server.script[:] = data_or_replies
    return dict(client.converse_stream(**{"modelId": HAIKU, **ARGUMENTS, **arguments}))


def outcome(client: Any, replies: list[Reply], server: ScriptedServer) -> tuple[Any, list[dict[str, Any]], Any]:
    """(metadata or the error before the stream, events, the error during it) of one call."""
    try:
        response = call(client, list(replies), server)
    except ClientError as error:
        return ("error", error.operation_name, error.response, str(error)), [], None
    events: list[dict[str, Any]] = []
    failure = None
    try:
        for item in response["stream"]:
            events.append(item)
    except Exception as error:  # compared whatever it is
        failure = (type(error).__name__, str(error), getattr(error, "response", None))
    finally:
        response["stream"].close()
    metadata = without_date(response["ResponseMetadata"])
    assert set(response) == {"ResponseMetadata", "stream"}
    return metadata, events, failure


def test_an_invalid_argument_fails_before_any_request(server: ScriptedServer) -> None:
    client = lite_client(server)
    with pytest.raises(TypeError, match="modelID"):
        client.converse_stream(modelID=HAIKU, messages=[])
    with pytest.raises(ParamValidationError) as theirs:
        botocore_client(server).converse_stream(messages=[])
    with pytest.raises(ParamValidationError) as ours:
        client.converse_stream(messages=[])
    assert str(ours.value) == str(theirs.value)
    assert server.requests == []


@pytest.mark.parametrize("name", ["text", "reasoning", "tools", "synthetic"])
def test_streams_what_botocore_streams(server: ScriptedServer, name: str) -> None:
    data = {"text": TEXT_STREAM, "reasoning": REASONING_STREAM, "tools": TOOLS_STREAM, "synthetic": SYNTHETIC}[name]
    theirs = outcome(botocore_client(server), [streamed(data)], server)
    ours = outcome(lite_client(server), [streamed(data)], server)
    assert ours == theirs
    assert theirs[2] is None and len(theirs[1]) >= 6


def test_events_are_yielded_as_they_arrive(server: ScriptedServer) -> None:
    # The server sends messageStart and the first delta, then holds the rest back until the test
    # has received that delta: a client that read ahead would wait forever (the server gives up
    # after 10 s and the test fails).
    for client in (botocore_client(server), lite_client(server)):
        gate = threading.Event()
        rest = TEXT_STREAM[len(START) :]  # the frames after messageStart
        first = split(TEXT_THEN, [9, 40])
        server.script[:] = [Reply(200, dict(STREAM_HEADERS), [*first, rest], wait={len(first): gate})]
        response = client.converse_stream(modelId=HAIKU, **ARGUMENTS)
        events = iter(response["stream"])
        assert "messageStart" in next(events)
        assert next(events)["contentBlockDelta"]["delta"] == {"text": "Once upon"}
        gate.set()
        assert "metadata" in list(events)[-1]


@pytest.mark.parametrize(
    "failure",
    [
        exception("throttlingException", {"message": "Too many tokens, please wait before trying again."}),
        exception("modelStreamErrorException", {"message": "Model stream error", "originalStatusCode": 500}),
        exception("validationException", {"message": "The model returned an invalid response"}),
        exception("serviceUnavailableException", {}),
    ],
)
def test_an_exception_mid_stream_is_botocores(server: ScriptedServer, failure: bytes) -> None:
    data = TEXT_THEN + failure + event("messageStop", {"stopReason": "end_turn"})
    theirs = outcome(botocore_client(server), [streamed(data)], server)
    ours = outcome(lite_client(server), [streamed(data)], server)
    assert ours == theirs
    assert theirs[2] is not None and theirs[2][0] == EventStreamError.__name__ and len(theirs[1]) == 2


def test_a_bad_checksum_mid_stream_fails_as_botocore_does(server: ScriptedServer) -> None:
    delta = event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x"}})
    corrupt = delta[:-1] + bytes([delta[-1] ^ 0xFF])
    data = START + corrupt + TEXT_STREAM[len(START) :]
    theirs = outcome(botocore_client(server), [streamed(data)], server)
    ours = outcome(lite_client(server), [streamed(data)], server)
    assert ours == theirs
    assert ours[2][0] == _eventstream.ChecksumMismatch.__name__ and "Checksum mismatch" in ours[2][1]


@pytest.mark.parametrize(
    "reply",
    [
        failed(400, "ValidationException", b'{"message":"The provided model identifier is invalid."}'),
        failed(403, "AccessDeniedException", b'{"Message":"You don\'t have access to the model."}'),
        failed(424, "ModelErrorException", b'{"message":"boom","originalStatusCode":"500","resourceName":"m","x":1}'),
        failed(404, None, b'{"code":"ResourceNotFoundException","message":"no such model"}'),
        failed(409, None, b'{"__type":"com.amazon.bedrock#ConflictException","message":"busy"}'),
        failed(400, None, b"not json"),
    ],
)
def test_an_error_before_the_stream_is_botocores(server: ScriptedServer, reply: Reply) -> None:
    theirs = outcome(botocore_client(server), [reply], server)
    ours = outcome(lite_client(server), [reply], server)
    assert ours[0][0] == "error"
    assert (ours[0][2]["Error"], ours[0][3]) == (theirs[0][2]["Error"], theirs[0][3])
    assert {**ours[0][2], "ResponseMetadata": None} == {**theirs[0][2], "ResponseMetadata": None}
    assert without_date(ours[0][2]["ResponseMetadata"]) == without_date(theirs[0][2]["ResponseMetadata"])
    assert len(server.requests) == 2  # one each: not retried


RETRIED = [
    failed(429, "ThrottlingException", b'{"message":"Too many requests, please wait before trying again."}'),
    failed(503, "ServiceUnavailableException", b'{"message":"Bedrock is unable to process your request."}'),
    failed(500, "InternalServerException", b'{"message":"internal"}'),
    failed(429, "ModelNotReadyException", b'{"message":"The model is not ready yet."}'),  # modelled retryable
    Reply(503, {"content-type": "text/html"}, [b"<html>Service Unavailable</html>"], chunked=False),
]


@pytest.mark.parametrize("reply", RETRIED)
def test_throttling_and_unavailable_are_retried_as_botocore_retries(server: ScriptedServer, reply: Reply) -> None:
    # Twice, then the stream: both succeed after 2 retries.
    for client in (botocore_client(server), lite_client(server)):
        server.requests.clear()
        metadata, events, failure = outcome(client, [reply, reply, streamed(TEXT_STREAM)], server)
        assert metadata["RetryAttempts"] == 2 and len(server.requests) == 3 and failure is None
        assert len(events) == 6
    # Every attempt: the same error after 5 attempts.
    results = []
    for client in (botocore_client(server), lite_client(server)):
        server.requests.clear()
        results.append(outcome(client, [reply] * 5, server)[0])
        assert len(server.requests) == 5
    theirs, ours = results
    assert ours[2]["ResponseMetadata"]["RetryAttempts"] == theirs[2]["ResponseMetadata"]["RetryAttempts"] == 4
    assert ours[2]["Error"] == theirs[2]["Error"]


def test_the_error_after_the_last_retry_says_so_as_botocores(server: ScriptedServer) -> None:
    reply = RETRIED[0]
    theirs = outcome(botocore_client(server), [reply] * 5, server)[0]
    ours = outcome(lite_client(server), [reply] * 5, server)[0]
    assert "(reached max retries: 4)" in theirs[3]
    assert (ours[3], without_date(ours[2]["ResponseMetadata"])) == (
        theirs[3],
        without_date(theirs[2]["ResponseMetadata"]),
    )


@pytest.mark.parametrize("model_id", [HAIKU, PROFILE_ARN])
def test_the_request_is_botocores(server: ScriptedServer, model_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    call(lite_client(server), [streamed(TEXT_STREAM)], server, modelId=model_id)["stream"].close()
    ours = server.requests[-1]
    when = datetime.datetime.strptime(ours.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: when)  # the same time
    call(botocore_client(server), [streamed(TEXT_STREAM)], server, modelId=model_id)["stream"].close()
    theirs = server.requests[-1]
    assert ours.path == theirs.path == f"/model/{model_id.replace(':', '%3A').replace('/', '%2F')}/converse-stream"
    assert ours.body == theirs.body
    assert base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode() in ours.body.decode()
    signed = ["host", "content-type", "x-amz-date", "x-amz-security-token", "authorization"]
    assert {h: ours.headers[h] for h in signed} == {h: theirs.headers[h] for h in signed}
    assert ours.method == theirs.method == "POST"


def test_a_connection_lost_mid_stream_is_botocores_transport_error(server: ScriptedServer) -> None:
    # botocore (through urllib3) raises urllib3's ProtocolError here, which the Bedrock adapter maps
    # to a retryable error as it maps these: what matters is a botocore class it knows, after the
    # events that arrived.
    pieces = split(TEXT_THEN + TEXT_STREAM[len(START) : len(START) + 30], AWKWARD)
    _, events, failure = outcome(lite_client(server), [Reply(200, dict(STREAM_HEADERS), pieces, cut=True)], server)
    assert [next(iter(e)) for e in events] == ["messageStart", "contentBlockDelta"]
    assert failure is not None and failure[0] == ConnectionClosedError.__name__ and server.url in failure[1]


def test_a_stream_that_stalls_past_the_read_timeout_is_a_read_timeout(server: ScriptedServer) -> None:
    never = threading.Event()  # the rest of the stream is never sent
    pieces = [*split(TEXT_THEN, [64]), TEXT_STREAM[len(START) :]]
    server.script[:] = [Reply(200, dict(STREAM_HEADERS), pieces, wait={len(pieces) - 1: never})]
    credentials = Credentials(access_key=KEY, secret_key=SECRET, token=TOKEN)
    client = BedrockRuntimeClient(region=REGION, credentials=credentials, endpoint_url=server.url, read_timeout=0.3)
    response = client.converse_stream(modelId=HAIKU, **ARGUMENTS)
    events = iter(response["stream"])
    assert "messageStart" in next(events) and "contentBlockDelta" in next(events)
    with pytest.raises(ReadTimeoutError):
        next(events)
    never.set()


def test_a_closed_stream_leaves_the_client_usable(server: ScriptedServer) -> None:
    client = lite_client(server)
    response = call(client, [streamed(TOOLS_STREAM)], server)
    assert "messageStart" in next(iter(response["stream"]))
    response["stream"].close()  # stopped early: that connection is dropped, not reused
    metadata, events, failure = outcome(client, [streamed(TEXT_STREAM)], server)
    assert failure is None and len(events) == 6 and metadata["HTTPStatusCode"] == 200
