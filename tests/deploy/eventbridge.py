"""EventBridge's delivery of events to Lambda targets, which moto does not do, done as EventBridge does.

moto 5.2.5 matches a put event against the rules of its bus and delivers it to SQS, log-group,
archive and event-bus targets, but raises ``NotImplementedError`` for a Lambda target. This module
patches ``Rule.send_to_targets`` so that a Lambda target gets what EventBridge gives it, following
the EventBridge user guide ("Event retry policy and using dead-letter queues"):

* the event, as EventBridge sends it (``version``, ``id``, ``detail-type``, ``source``, ``account``,
  ``time``, ``region``, ``resources``, ``detail``), through an asynchronous ``Invoke`` of the
  function (moto's Lambda backend, so a missing function is moto's own ``ResourceNotFoundException``;
  the stack's in-process patch runs the real handler);
* a failed ``Invoke`` with a retriable error (throttling, a Lambda service error) is retried up to
  the target's ``RetryPolicy.MaximumRetryAttempts``; the backoff between attempts (and
  ``MaximumEventAgeInSeconds``) is not waited out;
* an error that retrying cannot fix (the function does not exist, permission denied) is not
  retried; the event goes straight to the target's ``DeadLetterConfig`` queue, as does an event
  whose retries ran out; the message body is the event, its attributes the ones EventBridge sets
  (``RULE_ARN``, ``TARGET_ARN``, ``ERROR_CODE``, ``ERROR_MESSAGE``, ``EXHAUSTED_RETRY_CONDITION``,
  ``RETRY_ATTEMPTS``). Without a dead-letter queue the event is dropped.

What is real: the bus, the rule and its pattern, the target's retry policy and dead-letter queue
as the template configures them, moto's Lambda API answering the ``Invoke``, moto's SQS queue
receiving the dead letter. What is simulated: EventBridge's side of the delivery, described above.
(EventBridge's permission to send to the queue, the queue policy, is checked statically in
test_template; moto enforces no queue policies.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from moto.awslambda.models import lambda_backends
from moto.core.exceptions import JsonRESTError
from moto.events.models import Rule
from moto.sqs.models import sqs_backends
from moto.utilities.arns import parse_arn

# Errors EventBridge does not retry: "missing permissions to a target, or a target resource that
# no longer exists". Their ERROR_CODE values are from the same page's list.
NOT_RETRIED = {"ResourceNotFoundException": "RESOURCE_NOT_FOUND", "AccessDeniedException": "NO_PERMISSIONS"}
RETRIED = {"TooManyRequestsException": "THROTTLING"}


@dataclass
class Delivery:
    """One event's delivery to one Lambda target, as it ended."""

    rule_arn: str
    target_arn: str
    event: dict[str, Any]
    attempts: int = 0
    error_code: str | None = None
    dead_lettered: bool = False


@dataclass
class LambdaTargets:
    """The patch, and what it delivered."""

    deliveries: list[Delivery] = field(default_factory=list)

    @contextmanager
    def patched(self) -> Iterator[LambdaTargets]:
        """Deliver to Lambda targets (every other target goes to moto's own delivery)."""
        original = Rule.send_to_targets
        targets = self

        def send_to_targets(rule: Rule, event: dict[str, Any], transform_input: bool = True) -> None:
            if not rule.event_pattern.matches_event(event):
                return
            lambdas = [t for t in rule.targets if parse_arn(t["Arn"]).service == "lambda"]
            for target in lambdas:
                targets.deliver(rule, target, event)
            others = [t for t in rule.targets if t not in lambdas]
            if others:
                saved, rule.targets = rule.targets, others
                try:
                    original(rule, event, transform_input)
                finally:
                    rule.targets = saved

        with mock.patch.object(Rule, "send_to_targets", send_to_targets):
            yield self

    def deliver(self, rule: Rule, target: dict[str, Any], event: dict[str, Any]) -> Delivery:
        """Invoke the target asynchronously, retrying as its policy says; dead-letter what fails."""
        sent = {k: v for k, v in event.items() if k != "ingestion-time"}  # moto's own bookkeeping
        if isinstance(sent.get("time"), int | float):
            sent["time"] = datetime.fromtimestamp(sent["time"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        delivery = Delivery(rule.arn, target["Arn"], sent)
        self.deliveries.append(delivery)
        retries = int(target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 185))
        arn = parse_arn(target["Arn"])
        backend = lambda_backends[arn.account][arn.region]
        while True:
            delivery.attempts += 1
            try:
                backend.invoke(arn.resource_id, None, json.dumps(sent), {"x-amz-invocation-type": "Event"}, {})
                return delivery
            except JsonRESTError as exc:
                code, message = exc.error_type, exc.message
            if code in NOT_RETRIED or delivery.attempts > retries:
                break
        delivery.error_code = NOT_RETRIED.get(code) or RETRIED.get(code) or "SDK_CLIENT_ERROR"
        dead_letter = target.get("DeadLetterConfig", {}).get("Arn")
        if dead_letter:
            queue = parse_arn(dead_letter)
            exhausted = {} if code in NOT_RETRIED else {"EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts"}
            attributes = {
                "RULE_ARN": rule.arn,
                "TARGET_ARN": target["Arn"],
                "ERROR_CODE": delivery.error_code,
                "ERROR_MESSAGE": message,
                "RETRY_ATTEMPTS": str(delivery.attempts - 1),
                **exhausted,
            }
            sqs_backends[queue.account][queue.region].send_message(
                queue_name=queue.resource_id,
                message_body=json.dumps(sent),
                message_attributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            )
            delivery.dead_lettered = True
        return delivery
