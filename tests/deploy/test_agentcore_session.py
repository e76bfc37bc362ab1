"""The AgentCore session transport against a loopback emulation of ``InvokeAgentRuntime``.

moto has no AgentCore data plane, so these tests put :mod:`.agentcore_emulator` (a stand-in for
the AWS service only) in front of the real bridge, run in ``--agentcore`` mode as a real
subprocess per session over the bridge tests' program; the transport under test is the real
:class:`AgentCoreConnection` on the lite AWS client, over real HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import boto3
import pytest
from durable_harness.aws import agentcore as transport
from durable_harness.aws.agentcore import (
    AgentCoreConnection,
    SessionConfigError,
    SessionUnavailableError,
    runtime_session_id,
)
from durable_harness.errors import FatalError, RetryableError
from durable_harness.harness.bridge import BridgeError, SessionLostError
from lambda_fastpath.aws import _client

from tests.aws.signing import signed_for
from tests.harness.bridge_support import FINISH, PROGRAM, collect, delta

from .agentcore_emulator import AgentCoreEmulator, agentcore_emulator, bridge_argv

RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/durable_harness_sessions-AbC123dEf4"
SESSION = "chat_0123"  # shorter than AgentCore's 33: the transport pads it


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentCoreEmulator]:
    """The emulation, the lite client's endpoint and fake credentials pointed at it, no backoff waits."""
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)
    with agentcore_emulator(RUNTIME_ARN, bridge_argv(PROGRAM)) as served:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_SESSION_TOKEN", "token-of-the-function")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", served.url)
        monkeypatch.setenv(transport.RUNTIME_ARN_ENV, RUNTIME_ARN)
        yield served


def test_a_session_id_gets_a_runtime_session_id_of_33_to_256_characters() -> None:
    assert runtime_session_id("x" * 40) == "x" * 40
    padded = runtime_session_id(SESSION)
    assert padded.startswith(SESSION + "-") and 33 <= len(padded) <= 256
    assert padded == runtime_session_id(SESSION) and padded != runtime_session_id(SESSION + "x")
    assert 33 <= len(runtime_session_id("y" * 300)) <= 256


def test_the_invoke_is_the_request_botocore_would_send(emulator: AgentCoreEmulator) -> None:
    """Same URL (the ARN percent-encoded as a URI label, the qualifier) and the same SigV4 scope."""
    botocore_client = boto3.client("bedrock-agentcore", region_name="us-east-1", endpoint_url=emulator.url)
    url, scope = signed_for(botocore_client, lambda c: c.invoke_agent_runtime(
        agentRuntimeArn=RUNTIME_ARN, runtimeSessionId="s" * 40, qualifier="DEFAULT", payload=b"{}"))  # fmt: skip
    assert scope == "us-east-1/bedrock-agentcore"
    connection = AgentCoreConnection.from_env("s" * 40)
    connection.invoke({"action": "status"}).close()
    request = emulator.requests[-1]
    assert url == f"{emulator.url}{request.path}?qualifier=DEFAULT"


async def test_commands_and_an_attach_go_through_the_invoke_signed_for_the_session(
    emulator: AgentCoreEmulator,
) -> None:
    connection = AgentCoreConnection.from_env(SESSION)
    boot = await connection.start()
    assert await connection.start() == boot  # idempotent: the program runs
    await connection.send({"type": "start", "lines": [delta(0), delta(1), FINISH]}, boot)
    attachment = connection.attach(boot, 0, deadline_seconds=30)
    lines = await collect(attachment)
    assert [line.line for line in lines] == [delta(0), delta(1), FINISH]
    assert (attachment.reason, attachment.cursor) == ("turn-end", 3)
    status = await connection.status()
    assert (status["bootId"], status["running"], status["busy"], status["cursor"]) == (boot, True, False, 3)
    assert await connection.ping() == {"status": "Healthy"}
    # Every request: SigV4 for bedrock-agentcore with the function's session token, the padded
    # session id in AgentCore's header, the DEFAULT endpoint, one microVM for the session.
    assert len(emulator.requests) == 6 and emulator.microvms_started == 1
    for request in emulator.requests:
        headers = {name.lower(): value for name, value in request.headers.items()}
        assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
        assert "/us-east-1/bedrock-agentcore/aws4_request" in headers["authorization"]
        assert headers["x-amz-security-token"] == "token-of-the-function" and "x-amz-date" in headers
        assert request.session_id == runtime_session_id(SESSION) and request.qualifier == "DEFAULT"
        assert request.path == "/runtimes/arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A123456789012%3Aruntime%2F" \
            "durable_harness_sessions-AbC123dEf4/invocations"  # fmt: skip
    actions = [request.payload["action"] for request in emulator.requests]
    assert actions == ["start", "start", "send", "attach", "status", "status"]  # (ping: a status)


async def test_an_attach_streams_lines_as_they_come_and_ends_at_its_deadline(emulator: AgentCoreEmulator) -> None:
    connection = AgentCoreConnection.from_env(SESSION)
    boot = await connection.start()
    await connection.send({"type": "start", "lines": [delta(0)]}, boot)  # a turn that goes on
    attachment = connection.attach(boot, 0, deadline_seconds=2)
    seen = []
    async with asyncio.timeout(60):
        async for line in attachment:
            seen.append(line.line)
            if len(seen) == 1:  # the stream is open: a line written now arrives on it
                await connection.send({"type": "say", "lines": [delta(1)]}, boot)
    assert seen == [delta(0), delta(1)]
    assert (attachment.reason, attachment.cursor) == ("deadline", 2)
    # The next slice reattaches from the cursor: nothing is read twice.
    await connection.send({"type": "say", "lines": [FINISH]}, boot)
    rest = await collect(connection.attach(boot, attachment.cursor, deadline_seconds=30))
    assert [(line.seq, line.line) for line in rest] == [(2, FINISH)]


async def test_an_invoke_kept_open_past_the_deadline_is_dropped_by_the_client(
    emulator: AgentCoreEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AgentCore may hold an invoke for an hour: the attach ends inside the slice's budget anyway."""
    monkeypatch.setattr(transport, "ATTACH_MARGIN_SECONDS", 0.5)
    connection = AgentCoreConnection.from_env(SESSION)
    boot = await connection.start()
    await connection.send({"type": "start", "lines": [delta(0)]}, boot)
    released = threading.Event()
    emulator.state.hold = released
    try:
        attachment = connection.attach(boot, 0, deadline_seconds=0.5)
        lines = await asyncio.wait_for(collect(attachment), 60)  # the emulation holds it for ever
    finally:
        released.set()
    assert lines == [] and (attachment.reason, attachment.cursor) == ("deadline", 0)


async def test_a_replaced_microvm_is_a_lost_session_never_an_empty_restart(emulator: AgentCoreEmulator) -> None:
    connection = AgentCoreConnection.from_env(SESSION)
    boot = await connection.start()
    await connection.send({"type": "start", "lines": [delta(0)]}, boot)
    emulator.lose(runtime_session_id(SESSION))  # idle timeout, maxLifetime or a crash: a new microVM
    with pytest.raises(SessionLostError) as lost:
        await collect(connection.attach(boot, 1, deadline_seconds=30))
    assert (lost.value.boot_id, lost.value.expected) == (None, boot)
    with pytest.raises(SessionLostError):
        await connection.send({"type": "continue"}, boot)
    new_boot = await connection.start()
    assert new_boot != boot and emulator.microvms_started == 2


async def test_aws_errors_are_retryable_or_fatal_and_the_bridges_refusals_are_bridge_errors(
    emulator: AgentCoreEmulator,
) -> None:
    connection = AgentCoreConnection.from_env(SESSION)
    emulator.fail(429, "ThrottlingException", times=1)
    assert (await connection.status())["status"] == "ok"  # retried as botocore does
    emulator.fail(429, "ThrottlingException", times=5)
    with pytest.raises(SessionUnavailableError) as throttled:
        await connection.status()
    assert isinstance(throttled.value, RetryableError) and "ThrottlingException" in str(throttled.value)
    # A send is not retried: it may have reached the program.
    before = len(emulator.requests)
    emulator.fail(503, "ServiceUnavailableException", times=1)
    with pytest.raises(SessionUnavailableError):
        await connection.send({"type": "start"})
    assert len(emulator.requests) == before + 1
    emulator.fail(403, "AccessDeniedException", times=1)
    with pytest.raises(SessionConfigError) as denied:
        await connection.start()
    assert isinstance(denied.value, FatalError) and "AccessDeniedException" in str(denied.value)
    with pytest.raises(SessionConfigError, match="ResourceNotFoundException"):
        await AgentCoreConnection(RUNTIME_ARN + "-other", SESSION).status()
    # The bridge's own 400 (relayed as RuntimeClientError) says what to fix, and is neither kind.
    with pytest.raises(BridgeError, match='"cursor" must be an integer') as refused:
        await connection.command({"action": "attach", "bootId": "b", "cursor": -1, "deadlineSeconds": 1})
    assert not isinstance(refused.value, RetryableError | FatalError)


async def test_destroy_ends_the_program_and_stops_the_runtime_session(emulator: AgentCoreEmulator) -> None:
    connection = AgentCoreConnection.from_env(SESSION)
    await connection.start()
    await connection.destroy()
    assert [r.path.rsplit("/", 1)[1] for r in emulator.requests[-2:]] == ["invocations", "stopruntimesession"]
    assert emulator.requests[-2].payload == {"action": "destroy"}
    assert emulator.microvm(runtime_session_id(SESSION)) is None


def test_without_a_runtime_arn_the_transport_refuses_with_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(transport.RUNTIME_ARN_ENV, raising=False)
    with pytest.raises(SessionConfigError, match="AGENTCORE_RUNTIME_ARN"):
        AgentCoreConnection.from_env(SESSION)
