"""Static checks of template.yaml, the state machine definition, samconfig.toml and events/.

The offline SAM / cfn-lint / sam build checks need the SAM CLI and run in ``make deploy-checks``;
these need nothing but the repository.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.aws.events import parse_start_run_event
from durable_harness.aws.table import PRINCIPAL_INDEX

from tests.motoserver import principal_index

from .cfn import ROOT, Resolver, function_properties, load_template
from .chat import sample_event

TEMPLATE = load_template()
RESOURCES = TEMPLATE["Resources"]
ASL_TEXT = (ROOT / "statemachine" / "run.asl.json").read_text()
ASL = json.loads(ASL_TEXT)
FUNCTIONS = [k for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function"]


def resolved(overrides: dict[str, str] | None = None) -> Resolver:
    """A resolver with placeholder physical names, for condition and intrinsic checks."""
    r = Resolver(TEMPLATE, overrides)
    for logical_id in RESOURCES:
        r.physical[logical_id] = f"phys-{logical_id}"
        r.attributes[(logical_id, "Arn")] = f"arn:aws:test:::{logical_id}"
    r.attributes[("ChatFunctionUrl", "FunctionUrl")] = "https://chat.lambda-url.us-east-1.on.aws/"  # SAM makes it
    r.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")] = "arn:aws:test:::HarnessSessionRuntime"
    return r


# --- functions -----------------------------------------------------------------------------------


def test_functions_share_one_runtime_architecture_and_layer() -> None:
    function = TEMPLATE["Globals"]["Function"]
    assert (function["Runtime"], function["Architectures"], function["Tracing"]) == ("python3.12", ["arm64"], "Active")
    assert function["Layers"] == [{"Ref": "HarnessLayer"}]
    layer = RESOURCES["HarnessLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/harness/"
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.12"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}  # layers/harness/Makefile
    env = function["Environment"]["Variables"]
    for name in ("RUNS_TABLE", "CHUNK_BUCKET", "EVENT_BUS_NAME", "MODEL_ID", "RUN_TTL_DAYS", "STATE_MACHINE_ARN"):
        assert name in env
    for name in ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"):
        assert name in env


@pytest.mark.parametrize("logical_id", FUNCTIONS)
def test_every_function_has_its_code_requirements_and_log_group(logical_id: str) -> None:
    props = function_properties(TEMPLATE, logical_id)
    folder = ROOT / props["CodeUri"]
    assert (folder / "requirements.txt").is_file()
    module, _, attribute = props["Handler"].rpartition(".")
    if props["Handler"] != "run.sh":
        tree = ast.parse((folder / f"{module}.py").read_text())
        assert attribute in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    log_group = props["LoggingConfig"]["LogGroup"]["Ref"]
    assert RESOURCES[log_group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_the_layer_installs_every_runtime_dependency() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r.strip(), maxsplit=1)[0].lower() for r in requirements}

    lines = (ROOT / "layers" / "harness" / "requirements.txt").read_text().splitlines()
    layer = [line for line in lines if line.strip() and not line.startswith("#")]
    # uvicorn serves `make dev` only: the chat function serves with h11 (lambda_fastpath.httpd)
    local_only = {"uvicorn"}
    # The layer is the library with its `aws` extra (the functions' AWS adapters and Bedrock).
    runtime = pyproject["project"]["dependencies"] + pyproject["project"]["optional-dependencies"]["aws"]
    assert names(runtime) - local_only <= names(layer)
    assert not names(layer) & local_only and "h11" in names(layer)
    assert any(line.startswith("aws-lambda-powertools[tracer]") for line in layer)  # Tracer needs the X-Ray SDK


FIRST_BOTOCORE_WITH_PUT_OBJECT_IF_MATCH = (1, 35, 69)
"""botocore's S3 model gained PutObject's IfNoneMatch in 1.35.2 and its IfMatch in 1.35.69 (read
from the model files of the botocore repository's release tags); the chunk log uses both."""


def test_the_sdk_floor_has_the_conditional_writes_the_chunk_log_uses() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layer = (ROOT / "layers" / "harness" / "requirements.txt").read_text().splitlines()
    aws = pyproject["project"]["optional-dependencies"]["aws"]
    for source, requirements in (("pyproject.toml [aws]", aws), ("layer", layer)):
        for package in ("boto3", "botocore"):
            [floor] = [r for r in requirements if re.match(rf"{package}\s*>=", r)]
            version = tuple(int(x) for x in floor.split(">=")[1].split(",")[0].strip().split("."))
            assert version >= FIRST_BOTOCORE_WITH_PUT_OBJECT_IF_MATCH, (source, floor)
    # And the installed SDK (at or above the floor) does send them.
    import botocore.session

    members = botocore.session.get_session().get_service_model("s3").operation_model("PutObject").input_shape.members
    assert {"IfNoneMatch", "IfMatch"} <= set(members)


def test_the_chat_function_streams_through_the_lambda_web_adapter() -> None:
    props = RESOURCES["ChatFunction"]["Properties"]
    assert props["Handler"] == "run.sh" and props["Timeout"] == 900
    assert resolved().resolve(props["Layers"]) == [
        "arn:aws:lambda:us-east-1:753240598075:layer:LambdaAdapterLayerArm64:26"
    ]
    env = props["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_PORT"] == "8000"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/health"
    assert float(env["STREAM_WINDOW_SECONDS"]) < props["Timeout"]
    url = props["FunctionUrlConfig"]
    assert url["InvokeMode"] == "RESPONSE_STREAM"
    assert url["Cors"]["ExposeHeaders"] == ["x-workflow-run-id", "x-workflow-stream-tail-index"]
    assert url["Cors"]["AllowHeaders"] == ["content-type", "authorization"]
    assert url["Cors"]["AllowOrigins"] == {"Ref": "AllowedOrigins"}
    script = (ROOT / "functions" / "chat" / "run.sh").read_bytes()
    assert b"\r" not in script and script.startswith(b"#!/bin/bash\n")
    assert (ROOT / "functions" / "chat" / "run.sh").stat().st_mode & 0o111
    assert b"exec python -m serve" in script and b"/opt/python" in script


@pytest.mark.parametrize(
    ("mode", "auth_type", "public"), [("token", "NONE", True), ("none", "NONE", True), ("iam", "AWS_IAM", False)]
)
def test_auth_mode_sets_the_url_auth_type_and_its_public_permissions(mode: str, auth_type: str, public: bool) -> None:
    r = resolved({"AuthMode": mode})
    assert r.resolve(RESOURCES["ChatFunction"]["Properties"]["FunctionUrlConfig"]["AuthType"]) == auth_type
    permissions = ["ChatFunctionUrlPublicAccess", "ChatFunctionUrlInvokeAccess"]
    assert [r.exists(p) for p in permissions] == [public, public]
    assert RESOURCES["ChatFunctionUrlInvokeAccess"]["Properties"]["InvokedViaFunctionUrl"] is True


@pytest.mark.parametrize("choice", ["caller", "role"])
def test_iam_principal_reaches_the_chat_function_as_a_value_its_authenticator_takes(choice: str) -> None:
    from durable_harness.server.auth import IamAuth, authenticator_from_env

    assert TEMPLATE["Parameters"]["IamPrincipal"]["AllowedValues"] == ["caller", "role"]
    env = resolved({"IamPrincipal": choice}).resolve(function_properties(TEMPLATE, "ChatFunction")["Environment"])
    authenticator = authenticator_from_env({**env["Variables"], "AUTH_MODE": "iam"})
    assert isinstance(authenticator, IamAuth) and authenticator.by_role is (choice == "role")


def test_token_mode_needs_tokens() -> None:
    [assertion] = TEMPLATE["Rules"]["TokenAuthNeedsTokens"]["Assertions"]
    for secret, hashes, ok in [("", "", False), ("", "a:" + "0" * 64, True), ("arn:aws:secretsmanager:x", "", True)]:
        r = resolved({"AuthTokensSecretArn": secret, "AuthTokenHashes": hashes})
        assert bool(r.resolve(assertion["Assert"])) is ok


# --- storage -------------------------------------------------------------------------------------


def test_the_runs_table() -> None:
    props = RESOURCES["RunsTable"]["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    attributes = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert attributes == {"pk": "S", "sk": "S", "principal": "S", "created_at": "S"}
    # The runs inspector's index, as the store queries it and moto's tables have it (tests/motoserver.py).
    assert props["GlobalSecondaryIndexes"] == [principal_index()]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}


def test_only_the_chat_function_may_query_the_principal_index_and_only_that() -> None:
    index_arn = {"Fn::Sub": "${RunsTable.Arn}/index/" + PRINCIPAL_INDEX}
    granted = []
    for logical_id, resource in RESOURCES.items():
        for policy in resource.get("Properties", {}).get("Policies", []) or []:
            for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
                if statement.get("Resource") == index_arn:
                    granted.append((logical_id, statement["Effect"], statement["Action"]))
    assert granted == [("ChatFunction", "Allow", "dynamodb:Query")]
    # The shared policy grants the table itself, never its indexes.
    for statement in RESOURCES["RunDataPolicy"]["Properties"]["PolicyDocument"]["Statement"]:
        assert "index" not in json.dumps(statement["Resource"])


def test_the_chunk_bucket_is_private_encrypted_tls_only_and_expires() -> None:
    props = RESOURCES["ChunkBucket"]["Properties"]
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    [rule] = props["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == {"Ref": "ChunkRetentionDays"} and rule["Status"] == "Enabled"
    [deny] = RESOURCES["ChunkBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:*")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [{"Fn::GetAtt": ["ChunkBucket", "Arn"]}, {"Fn::Sub": "${ChunkBucket.Arn}/*"}]


# --- the state machine ---------------------------------------------------------------------------


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_the_definition_is_jsonpath_only_so_moto_can_run_it() -> None:
    keys = {key for key, _ in _walk(ASL)}
    assert not keys & {"QueryLanguage", "Assign", "Arguments", "Output"}
    assert not any(isinstance(v, str) and v.startswith("{%") for _, v in _walk(ASL))


def test_the_definition_is_wired() -> None:
    states = ASL["States"]
    targets = {v for k, v in _walk(ASL) if k in ("Next", "Default", "StartAt")}
    assert targets <= set(states)
    assert set(states) - targets == set()  # no unreachable state
    placeholders = set(re.findall(r"\$\{(\w+)\}", ASL_TEXT))
    substitutions = RESOURCES["RunStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert placeholders == set(substitutions)
    assert RESOURCES["RunStateMachine"]["Properties"]["Type"] == "STANDARD"
    assert RESOURCES["RunStateMachine"]["Properties"]["Tracing"] == {"Enabled": True}


def test_the_slice_task_retries_the_slice_functions_retryable_error_and_catches_everything() -> None:
    task = ASL["States"]["RunSlice"]
    assert task["Resource"] == "arn:aws:states:::lambda:invoke"
    retried = {name for retry in task["Retry"] for name in retry["ErrorEquals"]}
    # The slice function's body (functions/slice/app.py names it) holds its retryable error.
    slice_app = ast.parse((ROOT / "layers" / "harness" / "durable_harness" / "functions" / "handlers.py").read_text())
    [error_class] = [n.name for n in slice_app.body if isinstance(n, ast.ClassDef) and n.name.endswith("Error")]
    assert error_class in retried
    assert {"Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException"} <= retried
    assert {"Lambda.TooManyRequestsException", "Sandbox.Timedout", "States.Timeout"} <= retried
    # Lambda reports a timed-out or out-of-memory invocation as Lambda.Unknown: redo it from the checkpoint.
    assert "Lambda.Unknown" in retried
    [throttle] = [r for r in task["Retry"] if "Lambda.TooManyRequestsException" in r["ErrorEquals"]]
    others = [r for r in task["Retry"] if r is not throttle]
    assert all(retry["MaxAttempts"] <= 6 and retry["BackoffRate"] >= 2 for retry in others)  # bounded
    _assert_retries_a_throttle_for_minutes(throttle)
    assert task["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Finalize"}]
    assert set(task["ResultSelector"]) == {"status.$", "slices.$", "wait.$"}  # only the small result travels


def test_a_chat_run_first_waits_for_the_chat_functions_slice_and_falls_back_to_the_slice_function() -> None:
    from durable_harness.aws.table import Head

    states = ASL["States"]
    inline = [rule for rule in states["Init"]["Choices"] if rule.get("Variable") == "$.inline"]
    assert [rule["Next"] for rule in inline] == ["InlineDefaults"]
    assert states["InlineDefaults"]["Next"] == "AwaitChatSlice"
    task = states["AwaitChatSlice"]
    # An AWS SDK integration with a callback: no Lambda invocation just to hand out the token.
    assert task["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken"
    params = task["Parameters"]
    assert params["TableName"] == "${RunsTableName}"
    assert params["ExpressionAttributeNames"] == {"#token": Head.INLINE_TOKEN}
    assert params["ExpressionAttributeValues"][":token"] == {"S.$": "$$.Task.Token"}
    assert params["ConditionExpression"] == "attribute_exists(pk)"  # never creates a record
    # Its heartbeat is what the chat function promises; whatever goes wrong, the slice function takes over.
    assert task["HeartbeatSecondsPath"] == "$.heartbeat"
    assert states["InlineDefaults"]["Parameters"]["heartbeat.$"] == "$.inline.heartbeatSeconds"
    assert task["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.handover", "Next": "RunSlice"}]
    assert task["Next"] == "Route" and task["ResultPath"] == "$.result"
    assert task["TimeoutSeconds"] >= RESOURCES["ChatFunction"]["Properties"]["Timeout"]


def test_only_the_chat_and_trigger_functions_answer_callbacks_and_only_the_state_machine_records_tokens() -> None:
    callbacks = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}

    def statements(props: dict[str, Any]) -> list[dict[str, Any]]:
        return [s for p in props.get("Policies", []) if isinstance(p, dict) for s in p.get("Statement", [])]

    granted = {}
    for name in FUNCTIONS:
        for statement in statements(RESOURCES[name]["Properties"]):
            actions = set(_as_list(statement["Action"]))
            if actions & callbacks or any(a in ("states:*", "*") for a in actions):
                granted[name] = statement
    assert list(granted) == ["ChatFunction", "TriggerFunction"]
    # The trigger function only wakes a parked run for a "Run Event" (AwaitEvent's token).
    assert _as_list(granted["TriggerFunction"]["Action"]) == ["states:SendTaskSuccess"]
    assert granted["TriggerFunction"]["Resource"] == "*"
    statement = granted["ChatFunction"]
    # Exactly the three callbacks, nothing else in the statement. They take no resource ARN in IAM
    # (no resource type in the Service Authorization Reference): the token is the capability.
    assert set(_as_list(statement["Action"])) == callbacks and statement["Resource"] == "*"
    machine = statements(RESOURCES["RunStateMachine"]["Properties"])
    [record] = [s for s in machine if s.get("Sid") == "RecordChatSliceTaskToken"]
    assert record["Action"] == "dynamodb:UpdateItem" and record["Resource"] == {"Fn::GetAtt": ["RunsTable", "Arn"]}
    env = RESOURCES["ChatFunction"]["Properties"]["Environment"]["Variables"]
    assert env["SLICE_SECONDS"] == {"Ref": "SliceSeconds"}
    assert env["INLINE_HEARTBEAT_SECONDS"] == {"Ref": "ChatSliceHeartbeatTimeout"}
    assert env["INLINE_HEARTBEAT_INTERVAL"] == {"Ref": "ChatSliceHeartbeatInterval"}


def test_heartbeats_stay_under_send_task_heartbeats_quota_at_10000_runs() -> None:
    params = TEMPLATE["Parameters"]
    interval, timeout = params["ChatSliceHeartbeatInterval"]["Default"], params["ChatSliceHeartbeatTimeout"]["Default"]
    # Each run's interval is jittered down by up to a fifth (aws/handover.py): on average 0.9 of it.
    # 10,000 first slices in the chat function at once send 10,000 / (0.9 * interval) a second,
    # under SendTaskHeartbeat's 500 a second refill of the largest Regions, with headroom.
    assert 10_000 / (0.9 * interval) <= 0.8 * 500
    # The state machine waits three intervals: one lost (throttled) heartbeat hands nothing over.
    assert timeout >= 3 * interval


def _longest_wait(retrier: dict[str, Any]) -> float:
    """The seconds a retrier waits in all before it gives up, without jitter (the most it waits)."""
    interval, rate, cap = retrier["IntervalSeconds"], retrier["BackoffRate"], retrier.get("MaxDelaySeconds")
    delays = [interval * rate**i for i in range(retrier["MaxAttempts"])]
    return sum(min(d, cap) if cap else d for d in delays)


def _assert_retries_a_throttle_for_minutes(retrier: dict[str, Any]) -> None:
    # A sustained throttle (the account's concurrency used up by open streams) lasts minutes: the
    # retrier outlasts 10 of them, backs off, jitters (FULL: on average half of it, about 8).
    assert set(retrier["ErrorEquals"]) == {"Lambda.TooManyRequestsException", "Lambda.EC2ThrottledException"}
    assert retrier["BackoffRate"] >= 2 and retrier["JitterStrategy"] == "FULL"
    assert 600 <= _longest_wait(retrier) <= 1200 and retrier["MaxDelaySeconds"] <= 60


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_every_status_a_slice_returns_is_routed() -> None:
    routed = {c.get("StringEquals") for rule in ASL["States"]["Route"]["Choices"] for c in [rule, *rule.get("And", [])]}
    statuses = {"ready_for_next_step", "finished", "awaiting_tool_approval", "failed", "cancelled", "fenced"}
    assert statuses <= routed


# --- parameters, outputs, samconfig, events -----------------------------------------------------


def test_parameter_defaults_satisfy_their_own_constraints() -> None:
    for name, spec in TEMPLATE["Parameters"].items():
        default = str(spec.get("Default"))
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], default), name
        if "AllowedValues" in spec:
            assert default in [str(v) for v in spec["AllowedValues"]], name
        if "MinValue" in spec:
            assert spec["MinValue"] <= float(default) <= spec["MaxValue"], name


def test_the_outputs_tell_how_to_use_the_stack() -> None:
    outputs = TEMPLATE["Outputs"]
    assert outputs["ChatUrl"]["Value"] == {"Fn::GetAtt": ["ChatFunctionUrl", "FunctionUrl"]}
    for name in ("StateMachineArn", "RunsTableName", "ChunkBucketName", "EventBusName", "LayerArn"):
        assert name in outputs
    assert (outputs["StartRunEventSource"]["Value"], outputs["StartRunDetailType"]["Value"]) == (
        "durable-harness.client",
        "Start Run",
    )


def test_the_optional_schedule_exists_only_with_an_expression() -> None:
    assert not resolved().exists("StartRunSchedule")
    r = resolved({"ScheduleExpression": "rate(1 day)", "SchedulePrompt": "Summarize the day"})
    assert r.exists("StartRunSchedule") and r.exists("StartRunScheduleRole")
    event = json.loads(r.resolve(RESOURCES["StartRunSchedule"]["Properties"]["Target"]["Input"]))
    request = parse_start_run_event(event, source="durable-harness.schedule")
    assert request.messages[0].parts[0].text == "Summarize the day"  # type: ignore[union-attr]


def test_undeliverable_starts_go_to_an_encrypted_dead_letter_queue_with_an_alarm() -> None:
    rule = RESOURCES["TriggerFunction"]["Properties"]["Events"]["StartRun"]["Properties"]
    schedule = RESOURCES["StartRunSchedule"]["Properties"]["Target"]
    dead_letter = {"Arn": {"Fn::GetAtt": ["StartRunDeadLetterQueue", "Arn"]}}
    for target in (rule, schedule):
        assert target["DeadLetterConfig"] == dead_letter
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 3600}
    queue = RESOURCES["StartRunDeadLetterQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True and queue["MessageRetentionPeriod"] == 14 * 86400
    # Only the rule may send to it (as EventBridge), and only over TLS.
    allow, deny = RESOURCES["StartRunDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert (allow["Principal"], allow["Action"]) == ({"Service": "events.amazonaws.com"}, "sqs:SendMessage")
    assert allow["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["TriggerFunctionStartRun", "Arn"]}}}
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})
    # The schedule sends its dead letters with its own role.
    role = RESOURCES["StartRunScheduleRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": dead_letter["Arn"]} in role
    alarm = RESOURCES["StartRunDeadLetterAlarm"]["Properties"]
    queue_name = {"Fn::GetAtt": ["StartRunDeadLetterQueue", "QueueName"]}
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": queue_name}]
    assert resolved().resolve({"AlarmActions": alarm["AlarmActions"]}) == {}  # no topic: no action
    topic = "arn:aws:sns:us-east-1:123456789012:ops"
    assert resolved({"AlarmTopicArn": topic}).resolve(alarm["AlarmActions"]) == [topic]
    outputs = TEMPLATE["Outputs"]
    assert outputs["StartRunDeadLetterQueueUrl"]["Value"] == {"Ref": "StartRunDeadLetterQueue"}
    assert outputs["StartRunDeadLetterQueueArn"]["Value"] == dead_letter["Arn"]
    assert outputs["StartRunDeadLetterAlarmName"]["Value"] == {"Ref": "StartRunDeadLetterAlarm"}


def test_samconfig_deploys_the_template_parameters() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert config["version"] == 0.1
    deploy = config["default"]["deploy"]["parameters"]
    assert set(deploy["capabilities"].split()) == {"CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"}
    assert deploy["resolve_s3"] is True and deploy["confirm_changeset"] is True
    names = set(re.findall(r'(\w+)="', deploy["parameter_overrides"]))
    assert names and names <= set(TEMPLATE["Parameters"])
    assert config["default"]["build"]["parameters"] == {"cached": True, "parallel": True}


def test_the_sample_events_have_the_shapes_lambda_sends() -> None:
    for name in ("chat-post.json", "chat-get.json"):
        event = sample_event(name)
        assert event["version"] == "2.0" and event["requestContext"]["http"]["path"] == event["rawPath"]
    post = sample_event("chat-post.json")
    assert json.loads(post["body"])["messages"][0]["role"] == "user"
    assert sample_event("chat-get.json")["rawQueryString"] == "startIndex=0"
    assert set(sample_event("slice.json")) >= {"runId"}
    assert set(sample_event("finalizer.json")["error"]) == {"Error", "Cause"}
    start = sample_event("start-run.json")
    assert parse_start_run_event(start).messages[0].role == "user"


# --- monitoring ----------------------------------------------------------------------------------


def test_detailed_tracing_switches_the_handlers_xray_subsegments() -> None:
    variable = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"]
    assert resolved().resolve(variable) == "true"  # the default: no X-Ray SDK at cold start
    assert resolved({"DetailedTracing": "true"}).resolve(variable) == "false"


def dashboard_metrics(body: dict[str, Any]) -> Iterator[list[Any]]:
    for widget in body["widgets"]:
        yield from widget["properties"]["metrics"]


def test_the_optional_dashboard_shows_the_run_metrics_and_the_stacks_own_resources() -> None:
    from durable_harness.telemetry.metrics import DIMENSIONS, METRIC_NAMES

    assert not resolved().exists("OperationsDashboard")
    assert TEMPLATE["Outputs"]["DashboardUrl"]["Condition"] == RESOURCES["OperationsDashboard"]["Condition"]
    r = resolved({"Dashboard": "true"})
    r.attributes[("StartRunDeadLetterQueue", "QueueName")] = "phys-dead-letters"
    assert r.exists("OperationsDashboard")
    body = json.loads(r.resolve(RESOURCES["OperationsDashboard"]["Properties"]["DashboardBody"]))
    assert all(w["x"] + w["width"] <= 24 and w["properties"]["region"] == "us-east-1" for w in body["widgets"])

    env = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    namespace, service = env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"]
    searched, plain = set(), []
    for metric in dashboard_metrics(body):
        if isinstance(metric[0], dict):  # a SEARCH over the telemetry's dimensions
            match = re.fullmatch(r"SEARCH\('\{([^}]*)\} MetricName=\"(\w+)\"', '\w+', 300\)", metric[0]["expression"])
            assert match, metric
            assert match.group(1).split(",") == [namespace, *sorted([*DIMENSIONS, "service"])]
            searched.add(match.group(2))
        else:
            plain.append(metric[:4])
    assert searched == set(METRIC_NAMES)  # every metric the runs emit, and nothing they do not
    functions = {f"phys-{f}" for f in FUNCTIONS}
    for metric_name in ("Errors", "Duration"):
        assert {m[3] for m in plain if m[:3] == ["AWS/Lambda", metric_name, "FunctionName"]} == functions
    state_machine = {m[1] for m in plain if m[:3] == ["AWS/States", m[1], "StateMachineArn"]}
    assert "ExecutionsFailed" in state_machine
    assert all(m[3] == "phys-RunStateMachine" for m in plain if m[0] == "AWS/States")
    assert ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "phys-dead-letters"] in plain
    assert [namespace, "RunsFailed", "service", service] in plain  # the finalizer's own metric
    assert {m[0] for m in plain} <= {"AWS/Lambda", "AWS/States", "AWS/SQS", namespace}


# --- issue 22: scale, throttling, model access, partitions ------------------------------------------

NONDEFAULT = json.loads((ROOT / "tests" / "deploy" / "nondefault-parameters.json").read_text())
ISSUE_22_PARAMETERS = {
    "SliceReservedConcurrency", "FinalizerReservedConcurrency", "ChatConcurrencyLimit",
    "TableWarmReadUnitsPerSecond", "TableWarmWriteUnitsPerSecond", "ChatSliceHeartbeatInterval",
    "ChatSliceHeartbeatTimeout", "MarketplaceProductIds", "AuthTokensSecretArn", "ApprovalSecretArn",
}  # fmt: skip


def test_make_deploy_checks_lints_every_new_parameter_at_a_value_other_than_its_default() -> None:
    # `make deploy-checks` runs sam validate --lint and cfn-lint on the template with these values as
    # its defaults (tests/deploy/sam_to_cfn.py --parameters); here: they are real, valid choices.
    assert set(NONDEFAULT) >= ISSUE_22_PARAMETERS
    for name, value in NONDEFAULT.items():
        spec = TEMPLATE["Parameters"][name]
        assert value != str(spec.get("Default")), name
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], value), name
        if "MinValue" in spec:
            assert spec["MinValue"] <= float(value) <= spec["MaxValue"], name
    assert "--parameters $(NONDEFAULT)" in (ROOT / "Makefile").read_text()


def test_reserved_concurrency_and_warm_throughput_are_off_by_default_and_set_by_their_parameters() -> None:
    functions = {"SliceFunction": "SliceReservedConcurrency", "FinalizerFunction": "FinalizerReservedConcurrency",
                 "ChatFunction": "ChatConcurrencyLimit"}  # fmt: skip
    off, on = resolved(), resolved(NONDEFAULT)
    for logical_id, parameter in functions.items():
        props = RESOURCES[logical_id]["Properties"]
        assert "ReservedConcurrentExecutions" not in off.resolve(props)
        assert on.resolve(props)["ReservedConcurrentExecutions"] == NONDEFAULT[parameter]
        # Reserving needs headroom a new account does not have (Lambda keeps 100 unreserved).
        assert "new account" in TEMPLATE["Parameters"][parameter]["Description"] or (
            "new-account caveat" in TEMPLATE["Parameters"][parameter]["Description"]
        )
    table = RESOURCES["RunsTable"]["Properties"]
    assert "WarmThroughput" not in off.resolve(table)
    assert on.resolve(table)["WarmThroughput"] == {"ReadUnitsPerSecond": "24000", "WriteUnitsPerSecond": "14000"}
    writes_only = resolved({"TableWarmWriteUnitsPerSecond": "8000"}).resolve(table)["WarmThroughput"]
    assert writes_only == {"WriteUnitsPerSecond": "8000"}


@pytest.mark.parametrize("logical_id", ["ChatFunction", "SliceFunction"])
def test_the_roles_that_call_models_may_start_their_marketplace_subscription(logical_id: str) -> None:
    def statements(overrides: dict[str, str] | None) -> dict[str, dict[str, Any]]:
        policies = resolved(overrides).resolve(RESOURCES[logical_id]["Properties"]["Policies"])
        found = [s for p in policies if isinstance(p, dict) and "Statement" in p for s in p["Statement"]]
        return {s["Sid"]: s for s in found if "Sid" in s}

    default = statements(None)
    subscribe, view = default["SubscribeToModels"], default["ViewModelSubscriptions"]
    assert set(subscribe["Action"]) == {"aws-marketplace:Subscribe", "aws-marketplace:Unsubscribe"}
    # No resource type exists for these actions; Subscribe and Unsubscribe take the product id.
    assert subscribe["Resource"] == view["Resource"] == "*" and "Condition" not in subscribe
    assert view["Action"] == "aws-marketplace:ViewSubscriptions"
    scoped = statements(NONDEFAULT)["SubscribeToModels"]
    assert scoped["Condition"] == {
        "ForAnyValue:StringEquals": {"aws-marketplace:ProductId": ["prod-abcdefghijklm", "prod-nopqrstuvwxyz"]}
    }
    for other in ("FinalizerFunction", "TriggerFunction"):  # they call no model
        assert "aws-marketplace" not in json.dumps(RESOURCES[other]["Properties"].get("Policies", []))


def test_only_the_aws_partition_deploys_and_elsewhere_the_template_says_so() -> None:
    layers = RESOURCES["ChatFunction"]["Properties"]["Layers"]
    assert Resolver(TEMPLATE, partition="aws").resolve(layers)
    for partition in ("aws-cn", "aws-us-gov"):
        with pytest.raises(KeyError, match=f"AwsPartitionOnly::{partition}::WebAdapterLayerAccount"):
            Resolver(TEMPLATE, partition=partition).resolve(layers)
    assert set(TEMPLATE["Mappings"]["AwsPartitionOnly"]) == {"aws"}


def test_secret_parameters_take_only_full_arns() -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:durable-harness/tokens"
    for name in [p for p in TEMPLATE["Parameters"] if p.endswith("SecretArn")]:
        pattern = TEMPLATE["Parameters"][name]["AllowedPattern"]
        assert re.fullmatch(pattern, "") and re.fullmatch(pattern, arn + "-Ab12Cd"), name
        assert not re.fullmatch(pattern, arn), name  # partial: IAM never matches the real one
        assert "full ARN" in TEMPLATE["Parameters"][name]["ConstraintDescription"], name


def test_throttles_and_failed_executions_raise_alarms_that_notify_the_topic() -> None:
    r = resolved({"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops"})
    throttles = r.resolve(RESOURCES["ThrottlesAlarm"]["Properties"])
    watched = {m["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for m in throttles["Metrics"] if "MetricStat" in m}
    assert watched == {f"phys-{f}" for f in FUNCTIONS}
    assert {m["MetricStat"]["Metric"]["MetricName"] for m in throttles["Metrics"] if "MetricStat" in m} == {
        "Throttles"
    }
    failed = r.resolve(RESOURCES["FailedExecutionsAlarm"]["Properties"])
    metrics = {m["MetricStat"]["Metric"]["MetricName"] for m in failed["Metrics"] if "MetricStat" in m}
    assert metrics == {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionThrottled"}
    for alarm in (throttles, failed):
        assert [m["Id"] for m in alarm["Metrics"] if m.get("ReturnData")] and alarm["Threshold"] == 0
        assert alarm["AlarmActions"] == alarm["OKActions"] == ["arn:aws:sns:us-east-1:123456789012:ops"]


def test_await_chat_slice_retries_its_own_dynamodb_call_and_nothing_else() -> None:
    task = ASL["States"]["AwaitChatSlice"]
    retried = {name for retry in task["Retry"] for name in retry["ErrorEquals"]}
    assert {"DynamoDb.ProvisionedThroughputExceededException", "DynamoDb.ThrottlingException",
            "DynamoDb.InternalServerErrorException"} <= retried  # fmt: skip
    # Not the task's outcome: a missed heartbeat, the timeout and the chat function's failure hand
    # the run over at once (the catch), and a run record that is gone is not retried either.
    assert not retried & {"States.ALL", "States.Timeout", "States.HeartbeatTimeout", "States.TaskFailed",
                          "ChatSliceFailed", "DynamoDb.ConditionalCheckFailedException"}  # fmt: skip
    assert all(r["BackoffRate"] >= 2 and r["JitterStrategy"] == "FULL" for r in task["Retry"])


def test_the_finalizer_retries_a_throttle_for_minutes_then_ends_the_run_without_lambda() -> None:
    states = ASL["States"]
    finalize = states["Finalize"]
    [throttle] = [r for r in finalize["Retry"] if "Lambda.TooManyRequestsException" in r["ErrorEquals"]]
    _assert_retries_a_throttle_for_minutes(throttle)
    catch = {"ErrorEquals": ["States.ALL"], "ResultPath": "$.finalizer", "Next": "EndWithoutLambda"}
    assert finalize["Catch"] == [catch]
    # Every state of that path is a DynamoDB call of the state machine itself, a Pass or a Choice.
    path = ["EndWithoutLambda", "FindLogEnd", "AppendErrorAndFinish"]
    assert [states[s]["Resource"] for s in path] == [
        "arn:aws:states:::dynamodb:updateItem", "arn:aws:states:::aws-sdk:dynamodb:query",
        "arn:aws:states:::dynamodb:putItem",
    ]  # fmt: skip
    # The claim and the append are fenced as Runner.finalize's: the record only if the run has not
    # ended; the chunks only where no chunks are, with the chunk log's own condition.
    assert "#epoch = #epoch + :one" in states["EndWithoutLambda"]["Parameters"]["UpdateExpression"]
    assert "#status IN (:not_started, :ready)" in states["EndWithoutLambda"]["Parameters"]["ConditionExpression"]
    from durable_harness.aws.chunklog import log

    append = states["AppendErrorAndFinish"]["Parameters"]
    assert append["ConditionExpression"] == log._CONDITION
    # The chunks are what the finalizer's encoder writes, and no cause ever goes in.
    from durable_harness.protocol.ui_chunks import ErrorChunk, FinishChunk, encode_ui_chunk
    from durable_harness.runner.state import ENDED_WITHOUT_LAMBDA

    expected = [ErrorChunk(error_text=ENDED_WITHOUT_LAMBDA), FinishChunk(finish_reason="error")]
    assert append["Item"]["d"]["S"] == "".join(encode_ui_chunk(c) + "\n" for c in expected)
    policies = RESOURCES["RunStateMachine"]["Properties"]["Policies"]
    machine = {s.get("Sid"): s for p in policies if isinstance(p, dict) for s in p.get("Statement", [])}
    assert set(machine["EndRunsWithoutLambda"]["Action"]) == {"dynamodb:Query", "dynamodb:PutItem"}


def test_the_deploying_doc_lists_every_parameter_and_output() -> None:
    doc = (ROOT / "docs" / "deploying.md").read_text()
    table_text = doc[doc.index("| parameter | default | meaning |") : doc.index("### 4. The outputs")]
    rows = [line.strip() for line in table_text.splitlines()[2:] if line.strip().startswith("|")]
    named = set(re.findall(r"`(\w+)`", "\n".join(row.split("|")[1] for row in rows)))
    assert set(TEMPLATE["Parameters"]) <= named, set(TEMPLATE["Parameters"]) - named
    outputs = doc[doc.index("### 4. The outputs") : doc.index("### 5. Check it")]
    assert all(f"`{name}`" in outputs for name in TEMPLATE["Outputs"]), [
        n for n in TEMPLATE["Outputs"] if f"`{n}`" not in outputs
    ]
