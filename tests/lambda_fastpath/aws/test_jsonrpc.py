"""The lite Step Functions and EventBridge clients return and raise what boto3 does (moto over HTTP)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.lambda_fastpath.aws.conftest import REGION

ASL = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 600, "End": True}}}


def without_metadata(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if key != "ResponseMetadata"}


def error_of(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call()
    return without_metadata(caught.value.response)


@pytest.fixture
def machine(make_lite: Callable[[str], Any]) -> str:
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn: str = sfn.create_state_machine(name="runs", definition=json.dumps(ASL), roleArn=role["Role"]["Arn"])[
        "stateMachineArn"
    ]
    return arn


def test_step_functions_operations(machine: str, make_lite: Callable[[str], Any]) -> None:
    """start/describe/stop as boto3 gives them (timestamps tz-aware datetimes); errors alike."""
    boto, lite = boto3.client("stepfunctions", region_name=REGION), make_lite("stepfunctions")
    started = {"boto3": boto.start_execution(stateMachineArn=machine, name="a", input="{}"),
               "lite": lite.start_execution(stateMachineArn=machine, name="b", input='{"x": 1}')}  # fmt: skip
    assert set(started["lite"]) == set(started["boto3"])
    assert isinstance(started["lite"]["startDate"], datetime) and started["lite"]["startDate"].tzinfo is not None
    for result in started.values():  # one execution described by both clients: identical
        arn = result["executionArn"]
        assert without_metadata(lite.describe_execution(executionArn=arn)) == without_metadata(
            boto.describe_execution(executionArn=arn)
        )
    stopped = lite.stop_execution(executionArn=started["lite"]["executionArn"], error="Cancelled", cause="why")
    assert stopped["stopDate"] <= datetime.now(UTC)
    assert lite.describe_execution(executionArn=started["lite"]["executionArn"])["status"] == "ABORTED"
    missing = f"{machine.replace(':stateMachine:', ':execution:')}:nope"
    assert error_of(lambda: lite.describe_execution(executionArn=missing)) == error_of(
        lambda: boto.describe_execution(executionArn=missing)
    )
    assert error_of(lambda: lite.describe_execution(executionArn=missing))["Error"]["Code"] == "ExecutionDoesNotExist"
    with pytest.raises(TypeError, match="Name"):
        lite.start_execution(stateMachineArn=machine, Name="c")


@pytest.mark.parametrize(
    ("operation", "kwargs"),
    [("send_task_success", {"output": "{}"}), ("send_task_failure", {"error": "E", "cause": "c"}),
     ("send_task_heartbeat", {})],
)  # fmt: skip
def test_task_token_operations(operation: str, kwargs: dict[str, Any], make_lite: Callable[[str], Any]) -> None:
    """A callback call with an unknown token: the same outcome as boto3's."""
    boto, lite = boto3.client("stepfunctions", region_name=REGION), make_lite("stepfunctions")

    def outcome(client: Any) -> Any:
        try:
            return without_metadata(getattr(client, operation)(taskToken="no-such-token", **kwargs))
        except ClientError as exc:
            return without_metadata(exc.response)

    assert outcome(lite) == outcome(boto)


def test_put_events(make_lite: Callable[[str], Any]) -> None:
    """PutEvents with a datetime Time (sent as epoch seconds): the same shape as boto3's answer."""
    boto, lite = boto3.client("events", region_name=REGION), make_lite("events")
    boto.create_event_bus(Name="bus")
    entry = {"Source": "harness", "DetailType": "run.finished", "Detail": json.dumps({"run": "r"}),
             "EventBusName": "bus", "Time": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)}  # fmt: skip
    ours, theirs = lite.put_events(Entries=[entry, entry]), boto.put_events(Entries=[entry, entry])
    assert ours["FailedEntryCount"] == theirs["FailedEntryCount"] == 0
    assert [set(e) for e in ours["Entries"]] == [set(e) for e in theirs["Entries"]] == [{"EventId"}] * 2
    assert ours["ResponseMetadata"]["HTTPStatusCode"] == 200
    with pytest.raises(TypeError, match="EndpointId"):
        lite.put_events(Entries=[entry], EndpointId="x")


def test_accepted_arguments_are_botocore_models() -> None:
    """Each method accepts exactly its operation's input members (EventBridge's EndpointId aside)."""
    from lambda_fastpath.aws import jsonrpc

    model = boto3.client("stepfunctions", region_name=REGION).meta.service_model
    for operation, members in jsonrpc._SFN_OPERATIONS.values():
        assert members == set(model.operation_model(operation).input_shape.members), operation
    events = boto3.client("events", region_name=REGION).meta.service_model
    assert set(events.operation_model("PutEvents").input_shape.members) - {"EndpointId"} == jsonrpc._PUT_EVENTS


def test_get_secret_value(make_lite: Callable[[str], Any]) -> None:
    """A string and a binary secret as boto3 gives them (bytes decoded, dates tz-aware); errors alike."""
    from lambda_fastpath.aws import jsonrpc

    boto, lite = boto3.client("secretsmanager", region_name=REGION), make_lite("secretsmanager")
    text = boto.create_secret(Name="text", SecretString="a" * 40)["ARN"]
    binary = boto.create_secret(Name="binary", SecretBinary=b"\x00\xffkey")["ARN"]
    for arn in (text, binary, "text"):
        assert without_metadata(lite.get_secret_value(SecretId=arn)) == without_metadata(
            boto.get_secret_value(SecretId=arn)
        )
    assert lite.get_secret_value(SecretId=binary)["SecretBinary"] == b"\x00\xffkey"
    missing = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nowhere-AbCdEf"
    # The error as botocore has it (the lite client keeps the body's unmodeled `message` as well).
    assert error_of(lambda: lite.get_secret_value(SecretId=missing))["Error"] == error_of(
        lambda: boto.get_secret_value(SecretId=missing)
    )["Error"]
    model = boto.meta.service_model.operation_model("GetSecretValue")
    assert set(model.input_shape.members) == jsonrpc._GET_SECRET_VALUE
