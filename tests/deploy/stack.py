"""The SAM template "deployed" into moto, with the real handlers invoked in-process (aws-notes 9).

:class:`MotoStack` creates what ``template.yaml`` declares, through the AWS APIs, inside one
``mock_aws`` with moto's Step Functions interpreter switched on:

* the runs table and the chunk bucket with the template's properties;
* one Lambda function per ``AWS::Serverless::Function`` (names ``<stack>-<LogicalId>-<suffix>``
  like CloudFormation's), with its environment resolved from ``Globals`` and its own variables;
* the state machine from the real ``statemachine/run.asl.json`` with its
  ``DefinitionSubstitutions`` resolved (moto applies none);
* the trigger's EventBridge rule with the template's pattern, retry policy and dead-letter queue
  (an encrypted SQS queue), and the CloudWatch alarm on that queue's depth.

``LambdaFunction.invoke`` (where every moto path that runs a function ends) is patched to call
the function's real handler (``CodeUri`` + ``Handler``) in this process, with the function's
environment and a fake context whose remaining time follows its ``Timeout``.

Every AWS call a handler (or the state machine) makes is recorded with who made it, so that
:meth:`MotoStack.check_iam` can hold it against the IAM policies the template gives that function.

moto 5.2.5 gaps repaired or worked around here (see also tests/deploy/README in the report):

* the ``states:startExecution`` task integration passes the ASL's parameter names
  (``StateMachineArn``, ``Name``, ``Input``) to boto3 unchanged; moto's base
  ``_normalise_parameters`` is a no-op (LocalStack's converts them), so the call fails with
  ``KeyError: 'StateMachineArn'``. :func:`repair_sfn_start_execution` lower-cases them.
* a function error whose payload has no ``errorType`` (what Lambda returns for a sandbox it killed:
  a timeout, out of memory) is named ``Exception`` by moto's interpreter, where Step Functions
  reports ``Lambda.Unknown`` (Step Functions developer guide, "Handle Lambda service exceptions").
  :func:`repair_lambda_unknown` names it as AWS does. A handler raising :class:`SandboxKilled`
  makes the invoke patch answer like such a killed sandbox.
* no Lambda execution without Docker: the in-process invoke patch above.
* a stop that comes while a state is in flight (a task waiting for a callback, which moto ends
  only at its next heartbeat or its timeout; a task being entered) ends the execution ``FAILED``
  when that state then fails (AWS: ``ABORTED``, at once). :func:`repair_errors_after_stop` keeps
  it ``ABORTED``; a short heartbeat keeps the callback case quick.
* a callback (``SendTaskSuccess``/``Failure``/``Heartbeat``) that comes between a
  ``.waitForTaskToken`` task's call (which hands the token out: ``AwaitChatSlice`` writes it to
  the run record) and the task starting to wait is lost: moto makes the heartbeat wait after the
  call, and that wait ignores an outcome already given (a heartbeat then is ``InvalidToken``), so
  the task waits out its heartbeat timeout. On AWS the token is valid as soon as it exists.
  :func:`repair_early_callbacks` hands such a callback to the wait when it begins.
* EventBridge rules with Lambda targets are not delivered (``NotImplementedError`` in
  ``send_to_targets``): :mod:`.eventbridge` delivers to them as EventBridge does (retry policy,
  dead-letter queue). ``TestEventPattern`` is not implemented: tests match the sample event
  against the rule with moto's own ``EventPattern``, or put it on the bus.
* a bucket policy denying ``aws:SecureTransport: false`` denies every request in moto (its
  requests count as insecure), so the chunk bucket's TLS-only policy is checked statically instead.
* the Function URL, the schedule and the layer are not created (no moto support needed for
  the tests: the chat app is driven through a Function URL event, see ``chat.py``).
"""

from __future__ import annotations

import contextvars
import datetime
import fnmatch
import importlib.util
import json
import math
import os
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import boto3
import botocore.client
import botocore.exceptions
from moto import mock_aws
from moto.awslambda.exceptions import LambdaClientError
from moto.awslambda.models import LambdaFunction
from moto.secretsmanager.models import secretsmanager_backends
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEventException
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_aws_sdk,
    state_task_service_dynamodb,
    state_task_service_lambda,
    state_task_service_sfn,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.timestamp import Timestamp
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

from .cfn import NO_VALUE, ROOT, Resolver, function_properties, load_template
from .eventbridge import LambdaTargets

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK_NAME = "dh-test"
ASL_PATH = ROOT / "statemachine" / "run.asl.json"

ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("deploy_test_actor", default=None)
"""Who is making AWS calls in this context: a function's logical id, "harness" (the test), or None
(a thread of moto's interpreter, i.e. the state machine, or a worker pool of a handler)."""

_invoke_lock = threading.RLock()
_dynamodb_atomic = threading.Lock()


@dataclass
class FakeLambdaContext:
    """The parts of the Lambda context object that the handlers and Powertools use."""

    function_name: str
    invoked_function_arn: str
    timeout_s: float
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/test"
    log_stream_name: str = "test"
    _start: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        return max(0, int((self.timeout_s - (time.monotonic() - self._start)) * 1000))


@dataclass
class DeployedFunction:
    """One ``AWS::Serverless::Function`` as created in moto."""

    logical_id: str
    name: str
    arn: str
    env: dict[str, str]
    timeout: int
    memory: int
    code_dir: Path
    handler: str
    policies: list[dict[str, Any]]
    module: ModuleType | None = None

    def load_handler(self) -> Callable[[dict[str, Any], Any], Any]:
        """The real handler (``<CodeUri>/<module>.py``, attribute ``<function>``), loaded once per stack."""
        module_name, _, attribute = self.handler.rpartition(".")
        if self.module is None:
            path = self.code_dir / f"{module_name}.py"
            spec = importlib.util.spec_from_file_location(f"deployfn_{self.logical_id}_{uuid.uuid4().hex}", path)
            assert spec is not None and spec.loader is not None
            self.module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(self.module)
        handler: Callable[[dict[str, Any], Any], Any] = getattr(self.module, attribute)
        return handler


@dataclass
class Invocation:
    """One in-process invocation of a handler and how it ended."""

    logical_id: str
    event: dict[str, Any]
    result: Any = None
    error: str | None = None
    done: bool = False


@dataclass
class Call:
    """One AWS request: who, which IAM action(s), on which resource ARN(s)."""

    actor: str | None
    actions: list[str]
    resources: list[str]


def repair_sfn_start_execution() -> Any:
    """Patch moto's ``states:startExecution`` integration to pass boto3's parameter names."""
    original = state_task_service_sfn.StateTaskServiceSfn._normalise_parameters

    def normalise(
        self: Any, parameters: dict[str, Any], boto_service_name: Any = None, service_action_name: Any = None
    ):
        original(self, parameters, boto_service_name, service_action_name)
        for key in list(parameters):
            parameters[key[0].lower() + key[1:]] = parameters.pop(key)

    return mock.patch.object(state_task_service_sfn.StateTaskServiceSfn, "_normalise_parameters", normalise)


def repair_errors_after_stop() -> Any:
    """Patch moto so that a stopped execution ends ``ABORTED`` whatever its state was doing.

    moto's interpreter notices a stop between states; an error raised by the state in flight after
    the stop (a callback wait that ends with no outcome, a task entered just as the stop came)
    replaces the stopped state, and the execution ends ``FAILED``. On AWS a stopped execution is
    ``ABORTED``. Here an error after a stop leaves the stop as it is.
    """
    original = Environment.set_error

    def set_error(self: Any, error: Any) -> None:
        if isinstance(self._program_state, ProgramStopped):
            return
        original(self, error)

    return mock.patch.object(Environment, "set_error", set_error)


def repair_stop_during_callback() -> Any:
    """Patch moto so that a stop ends a callback wait (``.waitForTaskToken``) at once, as on AWS.

    moto's interpreter notices a stop only between states: a task that waits for its token (a
    parked run's ``AwaitEvent``, whose timeout is the wait's deadline) would go on waiting until
    its timeout. On AWS, StopExecution ends the waiting task immediately.
    """
    original = Environment.set_stop

    def set_stop(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for endpoint in list(self.callback_pool_manager._pool.values()):
            endpoint.interrupt_all()

    return mock.patch.object(Environment, "set_stop", set_stop)


def repair_wait_until_timestamp() -> Any:
    """Patch moto so that a ``Wait`` state with a timestamp ends at that time or after, as on AWS.

    moto waits ``int(seconds to the timestamp)``: up to a second early. A parked run's ``Sleep``
    would then wake before its sleep ended and park again (a second slice to wake it).
    """

    def wait_seconds(self: Any, env: Any) -> int:
        self.string.eval(env=env)
        text = env.stack.pop()
        timestamp = self._from_timestamp_string(timestamp=text)
        if timestamp is None:
            raise FailureEventException(self._create_failure_event(env, text))
        return max(0, math.ceil((timestamp - datetime.datetime.now()).total_seconds()))

    return mock.patch.object(Timestamp, "_get_wait_seconds", wait_seconds)


def attribute_sdk_tasks() -> Any:
    """Patch moto's AWS SDK integration (``arn:aws:states:::aws-sdk:...``) and its optimized DynamoDB
    integration (``arn:aws:states:::dynamodb:...``) so that the calls they make are recorded as the
    state machine's (its role's policies are what IAM holds them against)."""
    patches = ExitStack()
    services = (state_task_service_aws_sdk.StateTaskServiceAwsSdk, state_task_service_dynamodb.StateTaskServiceDynamoDB)
    for service in services:
        original = service._eval_service_task

        def evaluate(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            token = ACTOR.set("RunStateMachine")
            try:
                return _original(self, *args, **kwargs)
            finally:
                ACTOR.reset(token)

        patches.enter_context(mock.patch.object(service, "_eval_service_task", evaluate))
    return patches


def repair_early_callbacks() -> Any:
    """Patch moto so that a callback given before a ``.waitForTaskToken`` task waits is not lost.

    moto sets up a task's heartbeat wait only after the task's call returned; a ``SendTask*``
    in between (the token is out: whoever got it may answer at once) finds no wait to wake, and
    the wait that then begins sees neither the outcome nor the heartbeat. Here such a wait
    begins woken, so it takes the outcome (or counts the heartbeat) as AWS does.
    """
    setup, heartbeat = CallbackEndpoint.setup_heartbeat_endpoint, CallbackEndpoint.notify_heartbeat

    def setup_heartbeat_endpoint(self: Any, heartbeat_seconds: int) -> Any:
        endpoint = setup(self, heartbeat_seconds)
        # notify() sets the outcome before it looks for this endpoint; set here, then looked at:
        # one of the two sees the other.
        if self.get_outcome() is not None or getattr(self, "_early_heartbeat", False):
            endpoint.notify()
        return endpoint

    def notify_heartbeat(self: Any) -> bool:
        if self._heartbeat_endpoint is None:
            self._early_heartbeat = True  # the wait has not begun: it begins with this heartbeat
            return True
        return bool(heartbeat(self))

    return mock.patch.multiple(
        CallbackEndpoint, setup_heartbeat_endpoint=setup_heartbeat_endpoint, notify_heartbeat=notify_heartbeat
    )


class SandboxKilled(Exception):
    """Raised by a test agent to stand for Lambda killing the sandbox mid-invocation (a timeout or
    out of memory): the invoke patch then answers as Lambda does, a function error without an
    ``errorType``. (A real kill runs no ``finally`` blocks; this exception does. Chunks those blocks
    flush are committed under the dying slice's epoch, which the next attempt fences off anyway.)"""


def repair_lambda_unknown() -> Any:
    """Patch moto's lambda:invoke integration to name an error without ``errorType`` ``Lambda.Unknown``."""
    service = state_task_service_lambda.StateTaskServiceLambda
    original = service._from_error

    def from_error(self: Any, env: Any, ex: Exception) -> Any:
        if isinstance(ex, lambda_eval_utils.LambdaFunctionErrorException):
            try:
                payload = json.loads(ex.payload)
            except ValueError:
                payload = {"errorMessage": ex.payload}
            if not isinstance(payload, dict) or "errorType" not in payload:
                named = {"errorType": "Lambda.Unknown", "errorMessage": json.dumps(payload)}
                ex = lambda_eval_utils.LambdaFunctionErrorException(ex.function_error, json.dumps(named))
        return original(self, env, ex)

    return mock.patch.object(service, "_from_error", from_error)


class MotoStack:
    """The template's resources in moto, and the means to drive and inspect them."""

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        secrets: Mapping[str, tuple[str, str]] | None = None,
        stack_name: str = STACK_NAME,
        definition_edit: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``secrets`` maps a parameter to ``(name, value)``: a secret created before the stack,
        whose ARN becomes the parameter's value. ``definition_edit`` changes the parsed state
        machine definition before it is created (a test shortens retries that would wait minutes:
        moto sleeps them in real time)."""
        self.definition_edit = definition_edit
        self.template = load_template()
        self.secrets = dict(secrets or {})
        self.stack_name = stack_name
        self.resolver = Resolver(self.template, overrides, region=REGION, account=ACCOUNT, stack_name=stack_name)
        self.functions: dict[str, DeployedFunction] = {}
        self.by_name: dict[str, DeployedFunction] = {}
        self.calls: list[Call] = []
        self.invocations: list[Invocation] = []
        self.refused: list[tuple[str, str]] = []
        """``(function, error code)`` of every invocation an injected fault refused."""
        self.state_machine_arn = ""
        self.rule_pattern: dict[str, Any] = {}
        self.lambda_targets = LambdaTargets()
        self.invoke_faults: dict[str, list[str]] = {}
        """Per function: error codes its next synchronous invocations (the state machine's
        lambda:invoke tasks) fail with, as Lambda's answer to ``Invoke`` (a throttle: the handler
        never runs), one per invocation; ``""`` lets one through; a code ending in ``*`` stays
        (every later one fails)."""
        self.async_invoke_faults: dict[str, list[str]] = {}
        """Per function: error codes its next asynchronous invocations fail with (Lambda's answer
        to the ``Invoke`` call itself, e.g. a throttle), one per invocation."""
        self.api_faults: dict[tuple[str, str], list[str]] = {}
        """Per (actor, operation), e.g. ``("ChatFunction", "StartExecution")``: error codes its next
        calls fail with, one per call, after botocore's own retries (a code ending in ``*`` stays:
        every later call fails with it)."""
        self._suffix = uuid.uuid4().hex[:12].upper()

    # --- lifecycle -------------------------------------------------------------------------------

    @contextmanager
    def deployed(self) -> Iterator[MotoStack]:
        """Mock AWS, create the stack, patch Lambda invocation; stop every execution on exit."""
        with (
            mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
            mock.patch.object(LambdaFunction, "invoke", lambda fn, *args: self._invoke_in_process(fn, *args)),
            mock.patch.object(botocore.client.BaseClient, "_make_api_call", self._recording_api_call()),
            repair_sfn_start_execution(),
            repair_lambda_unknown(),
            attribute_sdk_tasks(),
            repair_errors_after_stop(),
            repair_stop_during_callback(),
            repair_wait_until_timestamp(),
            repair_early_callbacks(),
            self.lambda_targets.patched(),
        ):
            token = ACTOR.set("harness")
            try:
                for parameter, (name, value) in self.secrets.items():
                    created = self.client("secretsmanager").create_secret(Name=name, SecretString=value)
                    self.resolver.parameters[parameter] = created["ARN"]
                self._create()
                yield self
            finally:
                self._stop_executions()
                ACTOR.reset(token)

    def client(self, service: str) -> Any:
        """A boto3 client for the test's own calls."""
        return boto3.client(service, region_name=REGION)

    # --- creating the resources ------------------------------------------------------------------

    def _physical(self, logical_id: str) -> str:
        return f"{self.stack_name}-{logical_id}-{self._suffix}"

    def _create(self) -> None:
        resources = self.template["Resources"]
        r = self.resolver
        iam = self.client("iam")
        self.role_arn = iam.create_role(RoleName=f"{self.stack_name}-role", AssumeRolePolicyDocument="{}")["Role"][
            "Arn"
        ]

        if r.condition(resources["ApprovalSecret"]["Condition"]):
            # GenerateSecretString, as CloudFormation would do it.
            secret = self.client("secretsmanager").create_secret(
                Name=self._physical("ApprovalSecret"), SecretString=uuid.uuid4().hex + uuid.uuid4().hex
            )
            r.physical["ApprovalSecret"] = secret["ARN"]

        table = r.resolve(resources["RunsTable"]["Properties"])
        table_name = self._physical("RunsTable")
        ddb = self.client("dynamodb")
        ddb.create_table(
            TableName=table_name,
            BillingMode=table["BillingMode"],
            AttributeDefinitions=table["AttributeDefinitions"],
            KeySchema=table["KeySchema"],
            GlobalSecondaryIndexes=table["GlobalSecondaryIndexes"],
            SSESpecification={"Enabled": table["SSESpecification"]["SSEEnabled"]},
        )
        ddb.update_time_to_live(TableName=table_name, TimeToLiveSpecification=table["TimeToLiveSpecification"])
        ddb.update_continuous_backups(
            TableName=table_name, PointInTimeRecoverySpecification=table["PointInTimeRecoverySpecification"]
        )
        r.physical["RunsTable"] = table_name
        r.attributes[("RunsTable", "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table_name}"

        bucket = r.resolve(resources["ChunkBucket"]["Properties"])
        bucket_name = self._physical("ChunkBucket").lower()
        s3 = self.client("s3")
        s3.create_bucket(Bucket=bucket_name)
        s3.put_public_access_block(
            Bucket=bucket_name, PublicAccessBlockConfiguration=bucket["PublicAccessBlockConfiguration"]
        )
        s3.put_bucket_encryption(
            Bucket=bucket_name,
            ServerSideEncryptionConfiguration={
                "Rules": [
                    {
                        "ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                        "BucketKeyEnabled": rule["BucketKeyEnabled"],
                    }
                    for rule in bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
                ]
            },
        )
        s3.put_bucket_ownership_controls(Bucket=bucket_name, OwnershipControls=bucket["OwnershipControls"])
        rules = [
            {
                "ID": rule["Id"],
                "Status": rule["Status"],
                "Filter": {"Prefix": ""},
                "Expiration": {"Days": int(rule["ExpirationInDays"])},
                "AbortIncompleteMultipartUpload": rule["AbortIncompleteMultipartUpload"],
            }
            for rule in bucket["LifecycleConfiguration"]["Rules"]
        ]
        s3.put_bucket_lifecycle_configuration(Bucket=bucket_name, LifecycleConfiguration={"Rules": rules})
        r.physical["ChunkBucket"] = bucket_name
        r.attributes[("ChunkBucket", "Arn")] = f"arn:aws:s3:::{bucket_name}"
        # ChunkBucketPolicy (TLS only) is not applied: moto treats its in-process requests as
        # insecure transport, so the deny would refuse every request. test_template checks it.

        self._create_dead_letter_queue()

        r.physical["HarnessLayer"] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:{self.stack_name}-harness:1"
        r.physical["RunDataPolicy"] = f"arn:aws:iam::{ACCOUNT}:policy/{self._physical('RunDataPolicy')}"
        for logical_id in ("ChatLogGroup", "SliceLogGroup", "FinalizerLogGroup", "TriggerLogGroup"):
            r.physical[logical_id] = r.resolve(resources[logical_id]["Properties"]["LogGroupName"])

        lam = self.client("lambda")
        serverless = [k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"]
        for logical_id in serverless:  # names and ARNs first: environments may refer to them
            name = self._physical(logical_id)
            r.physical[logical_id] = name
            r.attributes[(logical_id, "Arn")] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
        # SAM's Function URL of the chat function (the slice function's PUBLIC_URL); moto serves none.
        r.attributes[("ChatFunctionUrl", "FunctionUrl")] = (
            f"https://{self._physical('ChatFunction').lower()}.lambda-url.{REGION}.on.aws/"
        )
        for logical_id in serverless:
            props = r.resolve(function_properties(self.template, logical_id))
            fn = DeployedFunction(
                logical_id=logical_id,
                name=r.physical[logical_id],
                arn=r.attributes[(logical_id, "Arn")],
                env={k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()},
                timeout=int(props["Timeout"]),
                memory=int(props["MemorySize"]),
                code_dir=ROOT / props["CodeUri"],
                handler=props["Handler"],
                policies=props.get("Policies", []),
            )
            lam.create_function(
                FunctionName=fn.name,
                Runtime=props["Runtime"],
                Role=self.role_arn,
                Handler=fn.handler,
                Code={"ZipFile": b"replaced by the in-process invoke patch"},
                Timeout=fn.timeout,
                MemorySize=fn.memory,
                Environment={"Variables": fn.env},
            )
            self.functions[logical_id] = fn
            self.by_name[fn.name] = fn

        sm = resources["RunStateMachine"]["Properties"]
        substitutions = {k: str(v) for k, v in r.resolve(sm["DefinitionSubstitutions"]).items()}
        definition = re.sub(r"\$\{(\w+)\}", lambda m: substitutions[m.group(1)], ASL_PATH.read_text())
        if self.definition_edit is not None:
            parsed = json.loads(definition)
            self.definition_edit(parsed)
            definition = json.dumps(parsed)
        self.state_machine_name = r.resolve(sm["Name"])
        self.state_machine_policies = r.resolve(sm["Policies"])
        self.state_machine_arn = self.client("stepfunctions").create_state_machine(
            name=self.state_machine_name, definition=definition, roleArn=self.role_arn, type=sm["Type"]
        )["stateMachineArn"]
        r.physical["RunStateMachine"] = self.state_machine_arn

        event = resources["TriggerFunction"]["Properties"]["Events"]["StartRun"]["Properties"]
        self.rule_pattern = r.resolve(event["Pattern"])
        events = self.client("events")
        rule_name = self._physical("TriggerFunctionStartRun")
        self.rule_arn = events.put_rule(
            Name=rule_name, EventBusName=r.resolve(event["EventBusName"]), EventPattern=json.dumps(self.rule_pattern)
        )["RuleArn"]
        r.attributes[("TriggerFunctionStartRun", "Arn")] = self.rule_arn
        target = {
            "Id": "TriggerFunction",
            "Arn": self.functions["TriggerFunction"].arn,
            "RetryPolicy": r.resolve(event["RetryPolicy"]),
            "DeadLetterConfig": r.resolve(event["DeadLetterConfig"]),
        }
        events.put_targets(Rule=rule_name, EventBusName=r.resolve(event["EventBusName"]), Targets=[target])
        policy = r.resolve(resources["StartRunDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"])
        # Kept for the record: moto enforces no queue policies (test_template checks this one).
        queue_policy = {"Policy": json.dumps(policy)}
        self.client("sqs").set_queue_attributes(QueueUrl=self.dead_letter_queue_url, Attributes=queue_policy)

    def _create_dead_letter_queue(self) -> None:
        """The dead-letter queue of undeliverable starts, and the alarm on its depth."""
        r, resources = self.resolver, self.template["Resources"]
        props = r.resolve(resources["StartRunDeadLetterQueue"]["Properties"])
        sqs = self.client("sqs")
        name = self._physical("StartRunDeadLetterQueue")
        attributes = {"SqsManagedSseEnabled": str(props["SqsManagedSseEnabled"]).lower(),
                      "MessageRetentionPeriod": str(props["MessageRetentionPeriod"])}  # fmt: skip
        self.dead_letter_queue_url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.dead_letter_queue_url, AttributeNames=["QueueArn"])
        r.physical["StartRunDeadLetterQueue"] = self.dead_letter_queue_url
        r.attributes[("StartRunDeadLetterQueue", "Arn")] = arn["Attributes"]["QueueArn"]
        r.attributes[("StartRunDeadLetterQueue", "QueueName")] = name
        alarm = r.resolve(resources["StartRunDeadLetterAlarm"]["Properties"])
        alarm_name = self._physical("StartRunDeadLetterAlarm")
        self.client("cloudwatch").put_metric_alarm(AlarmName=alarm_name, **alarm)
        r.physical["StartRunDeadLetterAlarm"] = alarm_name

    # --- invoking the real handlers --------------------------------------------------------------

    def _invoke_in_process(
        self, fn_model: LambdaFunction, body: Any, request_headers: Any, response_headers: Any
    ) -> bytes:
        fn = self.by_name[fn_model.function_name]
        faults = self.async_invoke_faults.get(fn.logical_id)
        if faults and str(request_headers.get("x-amz-invocation-type")) == "Event":
            code = faults.pop(0)  # Lambda refused the invocation itself: the handler never runs
            raise LambdaClientError(code, f"simulated {code} from Lambda's Invoke API")
        faults = self.invoke_faults.get(fn.logical_id)
        if faults and str(request_headers.get("x-amz-invocation-type")) != "Event":
            code = faults[0].rstrip("*") if faults[0].endswith("*") else faults.pop(0)
            if code:  # "" lets one invocation through
                self.refused.append((fn.logical_id, code))
                raise LambdaClientError(code, f"simulated {code} from Lambda's Invoke API")
        event = json.loads(body) if body else {}
        context = FakeLambdaContext(
            function_name=fn.name, invoked_function_arn=fn.arn, timeout_s=fn.timeout, memory_limit_in_mb=fn.memory
        )
        with _invoke_lock, mock.patch.dict(os.environ, fn.env):
            token = ACTOR.set(fn.logical_id)
            invocation = Invocation(fn.logical_id, event)
            self.invocations.append(invocation)
            try:
                invocation.result = fn.load_handler()(event, context)
                return json.dumps(invocation.result).encode()
            except SandboxKilled:  # what Lambda answers for a sandbox it killed: no errorType
                invocation.error = "SandboxKilled"
                response_headers["x-amz-function-error"] = "Unhandled"
                timed_out = f"{context.aws_request_id} Error: Task timed out after {fn.timeout}.00 seconds"
                return json.dumps({"errorMessage": timed_out}).encode()
            except Exception as exc:  # the managed runtime's error envelope
                invocation.error = type(exc).__name__
                response_headers["x-amz-function-error"] = "Unhandled"
                envelope = {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_tb(exc.__traceback__),
                }
                return json.dumps(envelope).encode()
            finally:
                invocation.done = True
                ACTOR.reset(token)

    def calls_of(self, logical_id: str, run_id: str | None = None) -> list[Invocation]:
        """The invocations of a function (for one run)."""
        return [
            i
            for i in self.invocations
            if i.logical_id == logical_id and (run_id is None or i.event.get("runId") == run_id)
        ]

    def invoke(self, logical_id: str, event: Mapping[str, Any], *, asynchronous: bool = False) -> Any:
        """Invoke a function through the Lambda API (as EventBridge or a test would); its payload."""
        response = self.client("lambda").invoke(
            FunctionName=self.functions[logical_id].name,
            InvocationType="Event" if asynchronous else "RequestResponse",
            Payload=json.dumps(event).encode(),
        )
        payload = response["Payload"].read()
        return json.loads(payload) if payload else None

    @contextmanager
    def function_env(self, logical_id: str) -> Iterator[dict[str, str]]:
        """The process environment of a function (to build its app or runtime in the test)."""
        fn = self.functions[logical_id]
        with _invoke_lock, mock.patch.dict(os.environ, fn.env):
            yield fn.env

    def secret_arn(self, secret_id: str) -> str:
        """The full ARN IAM authorizes a request on ``secret_id`` (a name, partial or full ARN) against."""
        secret = secretsmanager_backends[ACCOUNT][REGION].secrets.get(secret_id)
        return str(secret.arn) if secret is not None else secret_id

    def functions_by_name_arn(self, name: str) -> str:
        """The ARN of a function given its name."""
        return self.by_name[name].arn if name in self.by_name else f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"

    # --- executions ------------------------------------------------------------------------------

    def executions(self) -> list[dict[str, Any]]:
        """Every execution of the state machine, oldest first, described."""
        sfn = self.client("stepfunctions")
        listed = sfn.list_executions(stateMachineArn=self.state_machine_arn)["executions"]
        described = [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]
        return sorted(described, key=lambda d: d["startDate"])

    def wait_for_executions(self, run_id: str, *, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until ``count`` executions of the run exist and none is running; they, in order."""
        deadline = time.monotonic() + timeout
        while True:
            # Named <run>-<incarnation>[-c<generation>] (or <run>[-c<generation>] without an incarnation).
            mine = [e for e in self.executions() if e["name"] == run_id or e["name"].startswith(f"{run_id}-")]
            if len(mine) >= count and all(e["status"] != "RUNNING" for e in mine):
                return mine
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"executions of {run_id} still running: {[(e['name'], e['status']) for e in mine]}"
                )
            time.sleep(0.05)

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        """The execution's history events."""
        events: list[dict[str, Any]] = self.client("stepfunctions").get_execution_history(
            executionArn=execution_arn, maxResults=1000
        )["events"]
        return events

    def _stop_executions(self) -> None:
        """Executions run on daemon threads: stop any still running before the mock goes away."""
        if not self.state_machine_arn:
            return
        sfn = self.client("stepfunctions")
        for execution in sfn.list_executions(stateMachineArn=self.state_machine_arn, statusFilter="RUNNING")[
            "executions"
        ]:
            sfn.stop_execution(executionArn=execution["executionArn"])

    # --- IAM: every call made must be allowed by the template -----------------------------------

    def _recording_api_call(self) -> Callable[..., Any]:
        original = botocore.client.BaseClient._make_api_call
        stack = self

        def recording(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            actor = ACTOR.get()
            if actor != "harness":
                prefix = client.meta.service_model.signing_name
                stack.calls.append(Call(actor, *iam_request(prefix, operation_name, api_params, stack)))
            faults = stack.api_faults.get((actor or "", operation_name))
            if faults:
                code = faults[0].rstrip("*") if faults[0].endswith("*") else faults.pop(0)
                metadata = {"HTTPStatusCode": 400, "RequestId": "simulated"}  # what moto's integrations read
                error = {"Error": {"Code": code, "Message": f"simulated {code}"}, "ResponseMetadata": metadata}
                # The service's modeled exception where it has one (as botocore raises it): Step
                # Functions' AWS SDK integration names the error after its class.
                raise client.exceptions.from_code(code)(error, operation_name)
            if client.meta.service_model.service_name == "dynamodb":
                # moto's backends take no locks: a transaction deep-copies the table while another
                # thread writes it ("dictionary changed size during iteration"), and two conditional
                # writes can interleave. DynamoDB applies each request atomically: so does this.
                with _dynamodb_atomic:
                    return original(client, operation_name, api_params)
            return original(client, operation_name, api_params)

        return recording

    def recording_lite(self, client: Any) -> Any:
        """``client`` (a lite client of ``durable_harness.aws.lite``, which botocore's
        ``_make_api_call`` never sees) with its calls recorded for :meth:`check_iam` as botocore's are."""
        return RecordedLiteClient(client, self) if client is not None else None

    def policy_statements(self, logical_id: str) -> list[dict[str, Any]]:
        """The Allow statements of a function's (or the state machine's) policies, resolved."""
        policies = (
            self.state_machine_policies if logical_id == "RunStateMachine" else self.functions[logical_id].policies
        )
        statements: list[dict[str, Any]] = []
        data_policy = self.resolver.resolve(self.template["Resources"]["RunDataPolicy"]["Properties"])
        for policy in policies:
            if policy is NO_VALUE:
                continue
            if isinstance(policy, str):  # a managed policy: only our own is known
                assert policy == self.resolver.physical["RunDataPolicy"], policy
                statements += data_policy["PolicyDocument"]["Statement"]
            elif "Statement" in policy:
                statements += policy["Statement"]
            else:
                ((name, args),) = policy.items()
                statements.append(policy_template_statement(name, args))
        return statements

    def check_iam(self) -> None:
        """Assert that every recorded call is allowed to whoever made it."""
        data_only = self.policy_statements("SliceFunction")  # includes the shared RunDataPolicy
        denied = []
        for call in self.calls:
            if call.actor is None:
                # moto's interpreter threads (the state machine) or a handler's worker pool
                # (the chunk log reads segments on threads that do not carry the context).
                statements = (
                    self.policy_statements("RunStateMachine")
                    if any(a.split(":")[0] in ("lambda", "states") for a in call.actions)
                    else [s for s in data_only if any(a.startswith(("s3:", "dynamodb:")) for a in _list(s["Action"]))]
                )
            else:
                statements = self.policy_statements(call.actor)
            for action in call.actions:
                for resource in call.resources:
                    if not allowed(statements, action, resource):
                        denied.append((call.actor, action, resource))
        assert not denied, f"calls the template's IAM policies do not allow: {sorted(set(denied))}"


def _list(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    """True when an Allow statement matches the action and the resource (IAM wildcards)."""
    for statement in statements:
        if statement.get("Effect", "Allow") != "Allow":
            continue
        if not any(fnmatch.fnmatchcase(action, pattern) for pattern in _list(statement["Action"])):
            continue
        if any(fnmatch.fnmatchcase(resource, pattern) for pattern in _list(statement["Resource"])):
            return True
    return False


def policy_template_statement(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The statement a SAM policy template expands to (the templates the template uses)."""
    arn = f"arn:aws:{{}}:{REGION}:{ACCOUNT}:"
    if name == "StepFunctionsExecutionPolicy":
        return {
            "Action": "states:StartExecution",
            "Resource": arn.format("states") + f"stateMachine:{args['StateMachineName']}",
        }
    if name == "EventBridgePutEventsPolicy":
        return {"Action": "events:PutEvents", "Resource": arn.format("events") + f"event-bus/{args['EventBusName']}"}
    if name == "LambdaInvokePolicy":
        return {
            "Action": "lambda:InvokeFunction",
            "Resource": arn.format("lambda") + f"function:{args['FunctionName']}*",
        }
    if name == "AWSSecretsManagerGetSecretValuePolicy":
        return {"Action": "secretsmanager:GetSecretValue", "Resource": args["SecretArn"]}
    raise AssertionError(f"policy template {name} is not modelled by the deploy tests")


class RecordedLiteClient:
    """A lite client whose calls :class:`MotoStack` records (``put_item(...)`` as ``PutItem``)."""

    def __init__(self, client: Any, stack: MotoStack) -> None:
        self.client, self._stack = client, stack

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if name.startswith("_") or not callable(method):
            return method
        operation = "".join(part.title() for part in name.split("_"))  # list_objects_v2 -> ListObjectsV2

        def call(**params: Any) -> Any:
            actor = ACTOR.get()
            if actor != "harness":
                request = iam_request(self.client._signing_name, operation, params, self._stack)
                self._stack.calls.append(Call(actor, *request))
            return method(**params)

        return call


def iam_request(
    prefix: str, operation: str, params: Mapping[str, Any], stack: MotoStack
) -> tuple[list[str], list[str]]:
    """The IAM action(s) and resource ARN(s) an API request is authorized against."""
    s3_actions = {"ListObjectsV2": "s3:ListBucket", "ListObjects": "s3:ListBucket", "HeadObject": "s3:GetObject"}
    action = s3_actions.get(operation, f"{prefix}:{operation}")
    if prefix == "lambda" and operation == "Invoke":
        action = "lambda:InvokeFunction"
    if prefix == "dynamodb" and operation == "TransactWriteItems":
        # Authorized as the actions it contains, on their tables (DynamoDB developer guide,
        # "Using IAM with DynamoDB transactions"; a ConditionCheck needs dynamodb:ConditionCheckItem).
        kinds = {
            "Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"
        }  # fmt: skip
        items = [next(iter(entry.items())) for entry in params.get("TransactItems", [])]
        actions = sorted({f"dynamodb:{kinds[kind]}" for kind, _ in items})
        tables = sorted({f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{op['TableName']}" for _, op in items})
        return actions, tables
    if prefix == "dynamodb":
        resource = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{params.get('TableName', '*')}"
        if params.get("IndexName"):  # a Query of an index is authorized on the index's ARN
            resource += f"/index/{params['IndexName']}"
        return [action], [resource]
    if prefix == "s3":
        bucket = params.get("Bucket", "*")
        key = params.get("Key")
        return [action], [f"arn:aws:s3:::{bucket}/{key}" if key is not None else f"arn:aws:s3:::{bucket}"]
    if prefix == "states":
        arn = params.get("stateMachineArn") or params.get("executionArn") or "*"
        return [action], [arn]
    if prefix == "events" and operation == "PutEvents":
        buses = {e.get("EventBusName", "default") for e in params.get("Entries", [])}
        return [action], [
            b if b.startswith("arn:") else f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{b}" for b in sorted(buses)
        ]
    if prefix == "lambda":
        name = str(params.get("FunctionName", "*"))
        fn = name if name.startswith("arn:") else stack.functions_by_name_arn(name)
        return [action], [fn]
    if prefix == "secretsmanager":
        return [action], [stack.secret_arn(str(params.get("SecretId", "*")))]
    return [action], ["*"]
