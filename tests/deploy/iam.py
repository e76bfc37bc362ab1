"""Who makes each AWS call of the deployed stack (:data:`ACTOR`), and whether the template's IAM
policies allow it (:func:`check_iam`, with the IAM action and resource of each request)."""

from __future__ import annotations

import contextvars
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cfn import NO_VALUE

if TYPE_CHECKING:
    from .stack import MotoStack

REGION = "us-east-1"
ACCOUNT = "123456789012"

ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("deploy_test_actor", default=None)
"""Who is making AWS calls in this context: a function's logical id, "harness" (the test), or None
(a thread of moto's interpreter, i.e. the state machine, or a worker pool of a handler)."""


@dataclass
class Call:
    """One AWS request: who, which IAM action(s), on which resource ARN(s)."""

    actor: str | None
    actions: list[str]
    resources: list[str]


def policy_statements(stack: MotoStack, logical_id: str) -> list[dict[str, Any]]:
    """The Allow statements of a function's (or the state machine's) policies in ``stack``, resolved."""
    policies = (
        stack.state_machine_policies if logical_id == "RunStateMachine" else stack.functions[logical_id].policies
    )
    statements: list[dict[str, Any]] = []
    data_policy = stack.resolver.resolve(stack.template["Resources"]["RunDataPolicy"]["Properties"])
    for policy in policies:
        if policy is NO_VALUE:
            continue
        if isinstance(policy, str):  # a managed policy: only our own are known
            if policy == stack.resolver.physical.get("SessionInvokePolicy"):
                invoke = stack.template["Resources"]["SessionInvokePolicy"]["Properties"]["PolicyDocument"]
                statements += stack.resolver.resolve(invoke)["Statement"]
                continue
            assert policy == stack.resolver.physical["RunDataPolicy"], policy
            statements += data_policy["PolicyDocument"]["Statement"]
        elif "Statement" in policy:
            statements += policy["Statement"]
        else:
            ((name, args),) = policy.items()
            statements.append(policy_template_statement(name, args))
    return statements

def check_iam(stack: MotoStack) -> None:
    """Assert that every call recorded in ``stack`` is allowed to whoever made it."""
    data_only = policy_statements(stack, "SliceFunction")  # includes the shared RunDataPolicy
    denied = []
    for call in stack.calls:
        if call.actor is None:
            # moto's interpreter threads (the state machine) or a handler's worker pool
            # (the chunk log reads segments on threads that do not carry the context).
            statements = (
                policy_statements(stack, "RunStateMachine")
                if any(a.split(":")[0] in ("lambda", "states") for a in call.actions)
                else [s for s in data_only if any(a.startswith(("s3:", "dynamodb:")) for a in _list(s["Action"]))]
            )
        else:
            statements = policy_statements(stack, call.actor)
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
