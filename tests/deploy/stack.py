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
:meth:`MotoStack.check_iam` can hold it against the IAM policies the template gives that function
(:mod:`.iam`). The resources are made by :mod:`.resources`; the moto gaps repaired or worked
around are listed in :mod:`.moto_repairs`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock
from urllib.parse import unquote

import boto3
import botocore.client
from moto import mock_aws
from moto.awslambda.exceptions import LambdaClientError
from moto.awslambda.models import LambdaFunction
from moto.secretsmanager.models import secretsmanager_backends

from .cfn import Resolver, load_template
from .eventbridge import LambdaTargets
from .iam import ACCOUNT, ACTOR, REGION, Call, RecordedLiteClient, check_iam, iam_request, policy_statements
from .moto_repairs import repaired
from .resources import DeployedFunction, create_resources

STACK_NAME = "dh-test"
_invoke_lock = threading.RLock()
_dynamodb_atomic = threading.Lock()

SERVER_ERRORS = frozenset({"InternalServerError", "ServiceUnavailable", "ServiceException", "InternalFailure"})
"""Error codes an injected fault answers with HTTP 500 (the others: 400, as throttles are modelled)."""


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
class Invocation:
    """One in-process invocation of a handler and how it ended."""

    logical_id: str
    event: dict[str, Any]
    result: Any = None
    error: str | None = None
    done: bool = False


class SandboxKilled(Exception):
    """Raised by a test agent to stand for Lambda killing the sandbox mid-invocation (a timeout or
    out of memory): the invoke patch then answers as Lambda does, a function error without an
    ``errorType``. (A real kill runs no ``finally`` blocks; this exception does. Chunks those blocks
    flush are committed under the dying slice's epoch, which the next attempt fences off anyway.)"""


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
        self.fault_injector: Callable[[str, str, Mapping[str, Any]], str | None] | None = None
        """Asked before every call: ``(actor, operation, parameters)`` for an API call (the actor
        as in :attr:`api_faults`), ``(function, "Invoke", event)`` for a synchronous invocation; an
        error code it returns fails the call as the faults above do (a 5xx code with status 500)."""
        self.suffix = uuid.uuid4().hex[:12].upper()

    # --- lifecycle -------------------------------------------------------------------------------

    @contextmanager
    def deployed(self) -> Iterator[MotoStack]:
        """Mock AWS, create the stack, patch Lambda invocation; stop every execution on exit."""
        with (
            mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
            mock.patch.object(LambdaFunction, "invoke", lambda fn, *args: self._invoke_in_process(fn, *args)),
            mock.patch.object(botocore.client.BaseClient, "_make_api_call", self._recording_api_call()),
            repaired(),
            self.lambda_targets.patched(),
        ):
            token = ACTOR.set("harness")
            try:
                for parameter, (name, value) in self.secrets.items():
                    created = self.client("secretsmanager").create_secret(Name=name, SecretString=value)
                    self.resolver.parameters[parameter] = created["ARN"]
                create_resources(self)
                yield self
            finally:
                self._stop_executions()
                ACTOR.reset(token)

    def client(self, service: str) -> Any:
        """A boto3 client for the test's own calls."""
        return boto3.client(service, region_name=REGION)

    def physical_name(self, logical_id: str) -> str:
        """The name CloudFormation would give the resource (``<stack>-<LogicalId>-<suffix>``)."""
        return f"{self.stack_name}-{logical_id}-{self.suffix}"

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
        synchronous = str(request_headers.get("x-amz-invocation-type")) != "Event"
        injector = self.fault_injector
        injected = injector(fn.logical_id, "Invoke", json.loads(body or "{}")) if injector is not None else None
        if injected and synchronous:
            self.refused.append((fn.logical_id, injected))
            refusal = LambdaClientError(injected, f"simulated {injected} from Lambda's Invoke API")
            refusal.code = 500 if injected in SERVER_ERRORS else refusal.code
            raise refusal
        if faults and synchronous:
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

    def policy_statements(self, logical_id: str) -> list[dict[str, Any]]:
        """The Allow statements of a function's (or the state machine's) policies, resolved."""
        return policy_statements(self, logical_id)

    def check_iam(self) -> None:
        """Assert that every recorded call is allowed to whoever made it."""
        check_iam(self)

    def _recording_api_call(self) -> Callable[..., Any]:
        original = botocore.client.BaseClient._make_api_call
        stack = self

        def recording(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            actor = ACTOR.get()
            if actor != "harness":
                prefix = client.meta.service_model.signing_name
                stack.calls.append(Call(actor, *iam_request(prefix, operation_name, api_params, stack)))
            faults = stack.api_faults.get((actor or "", operation_name))
            injector = stack.fault_injector
            injected = injector(actor or "", operation_name, api_params) if injector is not None else None
            if faults or injected:
                code = injected or (faults[0].rstrip("*") if faults[0].endswith("*") else faults.pop(0))
                # moto's AWS SDK integration cannot map a 500 (AttributeError): the state machine's get 400.
                status = 500 if code in SERVER_ERRORS and actor != "RunStateMachine" else 400
                metadata = {"HTTPStatusCode": status, "RequestId": "simulated"}  # what moto's integrations read
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
        """``client`` (a lite client of ``lambda_fastpath.aws``, which botocore's
        ``_make_api_call`` never sees) with its calls recorded for :meth:`check_iam` as botocore's are."""
        return RecordedLiteClient(client, self) if client is not None else None

    def record_agentcore(self, actor: str, paths: list[str]) -> None:
        """Record requests to the (emulated) AgentCore data plane, by their URL paths, as ``actor``'s calls."""
        actions = {"invocations": "InvokeAgentRuntime", "stopruntimesession": "StopRuntimeSession"}
        for path in paths:
            _, _, arn, operation = path.split("/")
            self.calls.append(Call(actor, [f"bedrock-agentcore:{actions[operation]}"], [unquote(arn)]))
