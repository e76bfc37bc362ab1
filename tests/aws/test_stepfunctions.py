"""StepFunctionsOrchestrator against moto's executing Step Functions interpreter."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from durable_harness.aws import AwsRequestError, StepFunctionsOrchestrator, execution_name
from durable_harness.errors import StorageError
from moto import mock_aws

from tests.aws.conftest import REGION, Fault

# A slice loop stand-in: the executions stay RUNNING (in a long Wait) until they are stopped.
ASL = {
    "StartAt": "Slice",
    "States": {
        "Slice": {"Type": "Pass", "Next": "Wait"},
        "Wait": {"Type": "Wait", "Seconds": 600, "End": True},
    },
}


@pytest.fixture
def sfn(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        client = boto3.client("stepfunctions", region_name=REGION)
        yield client
        # Executions run on daemon threads: stop them before the mock goes away.
        for machine in client.list_state_machines()["stateMachines"]:
            for ex in client.list_executions(stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING")[
                "executions"
            ]:
                client.stop_execution(executionArn=ex["executionArn"])


@pytest.fixture
def machine(sfn: Any) -> str:
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    arn: str = sfn.create_state_machine(name="runs", definition=json.dumps(ASL), roleArn=role["Role"]["Arn"])[
        "stateMachineArn"
    ]
    return arn


def executions(sfn: Any, machine: str, expected: dict[str, str] | None = None) -> dict[str, str]:
    """Name -> status; waits (up to 30 s) for ``expected``: moto applies StopExecution asynchronously."""
    deadline = time.monotonic() + 30
    while True:
        found = {e["name"]: e["status"] for e in sfn.list_executions(stateMachineArn=machine)["executions"]}
        if expected is None or found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_start_names_the_execution_after_the_run_and_passes_only_the_id(sfn: Any, machine: str) -> None:
    orchestrator = StepFunctionsOrchestrator(machine, client=sfn)
    orchestrator.start("wrun_1")
    described = sfn.describe_execution(executionArn=orchestrator.execution_arn("wrun_1"))
    assert described["status"] == "RUNNING"
    assert json.loads(described["input"]) == {"runId": "wrun_1"}


def test_start_is_idempotent_while_running_and_after_the_execution_closed(sfn: Any, machine: str) -> None:
    orchestrator = StepFunctionsOrchestrator(machine, client=sfn)
    orchestrator.start("wrun_1")
    orchestrator.start("wrun_1")  # same name, same input, running: the same execution
    assert executions(sfn, machine) == {"wrun_1": "RUNNING"}
    sfn.stop_execution(executionArn=orchestrator.execution_arn("wrun_1"))
    orchestrator.start("wrun_1")  # ExecutionAlreadyExists: the run was driven; not driven again
    # Another input (a different slice budget) for the same running name is also not a second run.
    orchestrator.start("wrun_2")
    StepFunctionsOrchestrator(machine, client=sfn, slice_seconds=60).start("wrun_2")
    expected = {"wrun_1": "ABORTED", "wrun_2": "RUNNING"}
    assert executions(sfn, machine, expected) == expected


def test_cancel_stops_every_generation_of_the_run(sfn: Any, machine: str) -> None:
    orchestrator = StepFunctionsOrchestrator(machine, client=sfn)
    orchestrator.start("wrun_1")
    orchestrator.start("wrun_other")
    # Continue-as-new generations, as the state machine would start them.
    sfn.start_execution(stateMachineArn=machine, name=execution_name("wrun_1", 1), input='{"runId":"wrun_1"}')
    sfn.start_execution(stateMachineArn=machine, name=execution_name("wrun_1", 2), input='{"runId":"wrun_1"}')
    sfn.stop_execution(executionArn=orchestrator.execution_arn("wrun_1", 1))
    orchestrator.cancel("wrun_1")
    expected = {"wrun_1": "ABORTED", "wrun_1-c1": "ABORTED", "wrun_1-c2": "ABORTED", "wrun_other": "RUNNING"}
    assert executions(sfn, machine, expected) == expected
    orchestrator.cancel("wrun_1")  # nothing left running: no error
    orchestrator.cancel("wrun_never_started")


def test_execution_arns_are_derived_from_the_state_machine_arn() -> None:
    orchestrator = StepFunctionsOrchestrator(
        "arn:aws:states:eu-west-1:111122223333:stateMachine:runs:prod", client=None
    )
    assert orchestrator.execution_arn("wrun_x", 3) == "arn:aws:states:eu-west-1:111122223333:execution:runs:wrun_x-c3"
    assert orchestrator.execution_input("wrun_x") == '{"runId":"wrun_x"}'
    with pytest.raises(ValueError):
        StepFunctionsOrchestrator("arn:aws:lambda:us-east-1:1:function:f", client=None)
    for bad in ("has space", "a/b", "x" * 81, ""):
        with pytest.raises(ValueError):
            execution_name(bad)


def test_errors_are_mapped(sfn: Any, machine: str) -> None:
    missing = StepFunctionsOrchestrator(machine.replace(":runs", ":missing"), client=sfn)
    with pytest.raises(AwsRequestError):
        missing.start("wrun_1")
    orchestrator = StepFunctionsOrchestrator(machine, client=sfn)
    Fault(sfn, "StartExecution", 400, b'{"__type":"ThrottlingException","message":"slow down"}')
    with pytest.raises(StorageError):
        orchestrator.start("wrun_1")
