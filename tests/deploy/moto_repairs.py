"""The moto 5.2.5 gaps the deploy tests repair or work around (:meth:`.stack.MotoStack.deployed`
applies :func:`repaired`; see also tests/deploy/README in the report):

* the ``states:startExecution`` task integration passes the ASL's parameter names
  (``StateMachineArn``, ``Name``, ``Input``) to boto3 unchanged; moto's base
  ``_normalise_parameters`` is a no-op (LocalStack's converts them), so the call fails with
  ``KeyError: 'StateMachineArn'``. :func:`repair_sfn_start_execution` lower-cases them.
* a function error whose payload has no ``errorType`` (what Lambda returns for a sandbox it killed:
  a timeout, out of memory) is named ``Exception`` by moto's interpreter, where Step Functions
  reports ``Lambda.Unknown`` (Step Functions developer guide, "Handle Lambda service exceptions").
  :func:`repair_lambda_unknown` names it as AWS does. A handler raising :class:`.stack.SandboxKilled`
  makes the invoke patch answer like such a killed sandbox.
* no Lambda execution without Docker: the in-process invoke patch of :class:`.stack.MotoStack`.
* a stop that comes while a state is in flight (a task waiting for a callback, which moto ends
  only at its next heartbeat or its timeout; a task being entered) ends the execution ``FAILED``
  when that state then fails (AWS: ``ABORTED``, at once). :func:`repair_errors_after_stop` keeps
  it ``ABORTED``; a short heartbeat keeps the callback case quick.
* a stop that comes right after the start, before the interpreter's thread has parsed the
  definition, fails inside moto (``AttributeError`` on the worker's environment, a 500 for the
  caller); on AWS it stops the execution. :func:`repair_stop_before_start` waits for the
  environment first.
* moto's DynamoDB backend is not thread-safe: ``TransactWriteItems`` deep-copies the table while
  other threads' writes change it (``RuntimeError: dictionary changed size during iteration``, a
  500 for the caller), which many concurrent runs hit. :func:`repair_dynamodb_threads` serves one
  DynamoDB request at a time (each is atomic on AWS too).
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
* moto has no AgentCore data plane: with ``SessionRuntime=agentcore`` the runtime is not created,
  only its ARN and its invoke policy are given out; a test puts :mod:`.agentcore_emulator` at
  that ARN and records its requests with :meth:`.stack.MotoStack.record_agentcore` for :func:`.iam.check_iam`.
"""

from __future__ import annotations

import datetime
import json
import math
import threading
import time
from contextlib import ExitStack
from typing import Any
from unittest import mock

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
from moto.stepfunctions.parser.backend import execution_worker

from .iam import ACTOR


def repaired() -> ExitStack:
    """Every repair below, entered (the caller's ``with`` undoes them)."""
    patches = ExitStack()
    for repair in (
        repair_sfn_start_execution,
        repair_lambda_unknown,
        attribute_sdk_tasks,
        repair_errors_after_stop,
        repair_stop_before_start,
        repair_dynamodb_threads,
        repair_stop_during_callback,
        repair_wait_until_timestamp,
        repair_early_callbacks,
    ):
        patches.enter_context(repair())
    return patches


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


def repair_stop_before_start() -> Any:
    """Patch moto so that stopping an execution whose worker has not made its environment yet
    (it parses the definition first, on its own thread) waits for it, then stops it."""
    original = execution_worker.ExecutionWorker.stop

    def stop(self: Any, stop_date: Any, error: Any, cause: Any) -> None:
        deadline = time.monotonic() + 30
        while self.env is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the worker's thread sets it within milliseconds
        original(self, stop_date, error, cause)

    return mock.patch.object(execution_worker.ExecutionWorker, "stop", stop)


def repair_dynamodb_threads() -> Any:
    """Patch moto's DynamoDB handler to serve one request at a time (see the module docstring)."""
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.call_action
    lock = threading.RLock()  # re-entrant: a request moto serves by calling DynamoDB again

    def call_action(self: Any) -> Any:
        with lock:
            return original(self)

    return mock.patch.object(DynamoHandler, "call_action", call_action)


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
