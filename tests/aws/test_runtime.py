"""build_runtime: adapters from environment variables, clients made once, clear config errors."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest
from durable_harness.aws import AwsConfigError, AwsRuntime, build_runtime
from durable_harness.aws.runtime import client_for
from durable_harness.errors import StorageError
from durable_harness.ports import CheckpointStore, ChunkLog, Orchestrator

from tests.aws.conftest import BUCKET, REGION, TABLE, Fault

ARN = f"arn:aws:states:{REGION}:123456789012:stateMachine:runs"
DAY = 86400
ENV = {"RUNS_TABLE": TABLE, "CHUNK_BUCKET": BUCKET, "STATE_MACHINE_ARN": ARN, "AWS_REGION": REGION}


def test_the_runtime_has_working_adapters(ddb: Any, s3: Any) -> None:
    runtime = build_runtime({**ENV, "EVENT_BUS_NAME": "bus", "RUN_TTL_DAYS": "7"}, session=boto3.Session())
    assert isinstance(runtime, AwsRuntime)
    assert isinstance(runtime.store, CheckpointStore)
    assert isinstance(runtime.log, ChunkLog)
    assert isinstance(runtime.orchestrator, Orchestrator)
    assert runtime.events is not None and runtime.events.event_bus_name == "bus"
    assert runtime.orchestrator.state_machine_arn == ARN
    runtime.log.append("r1", 0, ["a"], 0)
    assert runtime.log.read("r1", 0) == ["a"]
    # A log without a run record (no incarnation) is of the timeless generation.
    key = {"pk": {"S": "r1"}, "sk": {"S": "c#0000000000000#0000000000000"}}
    item = ddb.get_item(TableName=TABLE, Key=key)["Item"]
    assert 6.9 * DAY < int(item["expires_at"]["N"]) - time.time() <= 7 * DAY


def test_clients_are_made_once_with_standard_retries_and_timeouts(ddb: Any, s3: Any) -> None:
    session = boto3.Session()
    client = client_for("dynamodb", session=session, region=REGION)
    assert client_for("dynamodb", session=session, region=REGION) is client
    assert client_for("dynamodb", region=REGION) is client_for("dynamodb", region=REGION)  # default session
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert (client.meta.config.connect_timeout, client.meta.config.read_timeout) == (3, 10)

    # Two runtimes built in one process use that very client: a fault on it reaches both stores,
    # and every failing call is tried five times before the store gives up.
    first, second = build_runtime(ENV, session=session), build_runtime(ENV, session=session)
    fault = Fault.dynamodb(client, "Query", "InternalServerError", 500)  # a load is one Query
    for runtime in (first, second):
        with pytest.raises(StorageError):
            runtime.store.load("r1")
    assert fault.attempts == 10
    assert first.events is None


@pytest.mark.parametrize("missing", ["RUNS_TABLE", "CHUNK_BUCKET", "STATE_MACHINE_ARN"])
def test_a_missing_variable_is_named(missing: str) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(AwsConfigError, match=missing):
        build_runtime(env, session=boto3.Session(region_name=REGION))
    with pytest.raises(AwsConfigError, match=missing):
        build_runtime({**env, missing: "  "}, session=boto3.Session(region_name=REGION))


def test_the_chat_slices_heartbeat_interval_and_timeout_come_from_the_environment() -> None:
    env = {**ENV, "INLINE_HEARTBEAT_SECONDS": "90", "INLINE_HEARTBEAT_INTERVAL": "30"}
    handover = build_runtime(env, session=boto3.Session(region_name=REGION)).handover
    assert handover is not None and (handover.timeout_seconds, handover.interval) == (90, 30.0)
    # Each in-process slice reads its own jittered heartbeat interval: between
    # four fifths of the interval and the interval, never past the timeout the state machine waits.
    periods = {handover.heartbeat_interval() for _ in range(200)}
    assert all(24.0 <= p <= 30.0 for p in periods) and len(periods) > 100
    # Without an interval: a third of the timeout, as before.
    handover = build_runtime({**ENV, "INLINE_HEARTBEAT_SECONDS": "30"}, session=boto3.Session()).handover
    assert handover is not None and handover.interval == 10.0


def test_a_heartbeat_interval_over_a_third_of_the_timeout_is_refused() -> None:
    env = {**ENV, "INLINE_HEARTBEAT_SECONDS": "60", "INLINE_HEARTBEAT_INTERVAL": "30"}
    with pytest.raises(AwsConfigError, match=r"INLINE_HEARTBEAT_INTERVAL .*ChatSliceHeartbeatTimeout"):
        build_runtime(env, session=boto3.Session(region_name=REGION))


@pytest.mark.parametrize(
    ("name", "value"), [("RUN_TTL_DAYS", "soon"), ("RUN_TTL_DAYS", "0"), ("STATE_MACHINE_ARN", "x")]
)
def test_an_invalid_variable_is_named(name: str, value: str) -> None:
    with pytest.raises(AwsConfigError, match=name):
        build_runtime({**ENV, name: value}, session=boto3.Session(region_name=REGION))


async def test_session_runtime_agentcore_installs_the_agentcore_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_harness.aws.agentcore import AgentCoreConnection, runtime_session_id
    from durable_harness.harness.bridge import transport

    monkeypatch.setattr(transport, "_factory", None)  # (restored after the test)
    runtime_arn = f"arn:aws:bedrock-agentcore:{REGION}:123456789012:runtime/sessions-AbC123dEf4"
    env = {**ENV, "SESSION_RUNTIME": "agentcore", "AGENTCORE_RUNTIME_ARN": runtime_arn,
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}  # fmt: skip
    build_runtime(env, session=boto3.Session(region_name=REGION))
    connection = await transport.transport_factory("/unused")(transport.SessionSpec("chat_1", ["prog"]))
    assert isinstance(connection, AgentCoreConnection)
    assert (connection.runtime_arn, connection.runtime_session_id) == (runtime_arn, runtime_session_id("chat_1"))
    # Without SESSION_RUNTIME (or with none) the local factory stays.
    monkeypatch.setattr(transport, "_factory", None)
    build_runtime({**ENV, "SESSION_RUNTIME": "none"}, session=boto3.Session(region_name=REGION))
    assert transport._factory is None


@pytest.mark.parametrize(
    ("setting", "named"),
    [({"SESSION_RUNTIME": "docker"}, "SESSION_RUNTIME"), ({"SESSION_RUNTIME": "agentcore"}, "AGENTCORE_RUNTIME_ARN")],
)
def test_a_bad_session_runtime_setting_is_named(setting: dict[str, str], named: str) -> None:
    with pytest.raises(AwsConfigError, match=named):
        build_runtime({**ENV, **setting}, session=boto3.Session(region_name=REGION))
