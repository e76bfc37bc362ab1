"""What ``template.yaml`` declares, created in moto through the AWS APIs (see :mod:`.stack`)."""

from __future__ import annotations

import importlib.util
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .cfn import ROOT, function_properties
from .iam import ACCOUNT, REGION

if TYPE_CHECKING:
    from .stack import MotoStack

ASL_PATH = ROOT / "statemachine" / "run.asl.json"


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


def create_resources(stack: MotoStack) -> None:
    """Create what the template declares in ``stack`` (mocked AWS), as CloudFormation would."""
    resources = stack.template["Resources"]
    r = stack.resolver
    iam = stack.client("iam")
    stack.role_arn = iam.create_role(RoleName=f"{stack.stack_name}-role", AssumeRolePolicyDocument="{}")["Role"][
        "Arn"
    ]

    if r.condition(resources["ApprovalSecret"]["Condition"]):
        # GenerateSecretString, as CloudFormation would do it.
        secret = stack.client("secretsmanager").create_secret(
            Name=stack.physical_name("ApprovalSecret"), SecretString=uuid.uuid4().hex + uuid.uuid4().hex
        )
        r.physical["ApprovalSecret"] = secret["ARN"]

    table = r.resolve(resources["RunsTable"]["Properties"])
    table_name = stack.physical_name("RunsTable")
    ddb = stack.client("dynamodb")
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
    bucket_name = stack.physical_name("ChunkBucket").lower()
    s3 = stack.client("s3")
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

    _create_dead_letter_queue(stack)

    r.physical["HarnessLayer"] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:layer:{stack.stack_name}-harness:1"
    r.physical["RunDataPolicy"] = f"arn:aws:iam::{ACCOUNT}:policy/{stack.physical_name('RunDataPolicy')}"
    if r.condition(resources["HarnessSessionRuntime"]["Condition"]):  # (see the module's docstring)
        runtime_name = r.resolve(resources["HarnessSessionRuntime"]["Properties"]["AgentRuntimeName"])
        runtime_arn = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/{runtime_name}-{stack.suffix[:10]}"
        r.physical["HarnessSessionRuntime"] = runtime_arn
        r.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")] = runtime_arn
        invoke_policy = stack.physical_name("SessionInvokePolicy")
        r.physical["SessionInvokePolicy"] = f"arn:aws:iam::{ACCOUNT}:policy/{invoke_policy}"
    for logical_id in ("ChatLogGroup", "SliceLogGroup", "FinalizerLogGroup", "TriggerLogGroup"):
        r.physical[logical_id] = r.resolve(resources[logical_id]["Properties"]["LogGroupName"])

    lam = stack.client("lambda")
    serverless = [k for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"]
    for logical_id in serverless:  # names and ARNs first: environments may refer to them
        name = stack.physical_name(logical_id)
        r.physical[logical_id] = name
        r.attributes[(logical_id, "Arn")] = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
    # SAM's Function URL of the chat function (the slice function's PUBLIC_URL); moto serves none.
    r.attributes[("ChatFunctionUrl", "FunctionUrl")] = (
        f"https://{stack.physical_name('ChatFunction').lower()}.lambda-url.{REGION}.on.aws/"
    )
    for logical_id in serverless:
        props = r.resolve(function_properties(stack.template, logical_id))
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
            Role=stack.role_arn,
            Handler=fn.handler,
            Code={"ZipFile": b"replaced by the in-process invoke patch"},
            Timeout=fn.timeout,
            MemorySize=fn.memory,
            Environment={"Variables": fn.env},
        )
        stack.functions[logical_id] = fn
        stack.by_name[fn.name] = fn

    sm = resources["RunStateMachine"]["Properties"]
    substitutions = {k: str(v) for k, v in r.resolve(sm["DefinitionSubstitutions"]).items()}
    definition = re.sub(r"\$\{(\w+)\}", lambda m: substitutions[m.group(1)], ASL_PATH.read_text())
    if stack.definition_edit is not None:
        parsed = json.loads(definition)
        stack.definition_edit(parsed)
        definition = json.dumps(parsed)
    stack.state_machine_name = r.resolve(sm["Name"])
    stack.state_machine_policies = r.resolve(sm["Policies"])
    stack.state_machine_arn = stack.client("stepfunctions").create_state_machine(
        name=stack.state_machine_name, definition=definition, roleArn=stack.role_arn, type=sm["Type"]
    )["stateMachineArn"]
    r.physical["RunStateMachine"] = stack.state_machine_arn

    event = resources["TriggerFunction"]["Properties"]["Events"]["StartRun"]["Properties"]
    stack.rule_pattern = r.resolve(event["Pattern"])
    events = stack.client("events")
    rule_name = stack.physical_name("TriggerFunctionStartRun")
    stack.rule_arn = events.put_rule(
        Name=rule_name, EventBusName=r.resolve(event["EventBusName"]), EventPattern=json.dumps(stack.rule_pattern)
    )["RuleArn"]
    r.attributes[("TriggerFunctionStartRun", "Arn")] = stack.rule_arn
    target = {
        "Id": "TriggerFunction",
        "Arn": stack.functions["TriggerFunction"].arn,
        "RetryPolicy": r.resolve(event["RetryPolicy"]),
        "DeadLetterConfig": r.resolve(event["DeadLetterConfig"]),
    }
    events.put_targets(Rule=rule_name, EventBusName=r.resolve(event["EventBusName"]), Targets=[target])
    policy = r.resolve(resources["StartRunDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"])
    # Kept for the record: moto enforces no queue policies (test_template checks this one).
    queue_policy = {"Policy": json.dumps(policy)}
    stack.client("sqs").set_queue_attributes(QueueUrl=stack.dead_letter_queue_url, Attributes=queue_policy)

def _create_dead_letter_queue(stack: MotoStack) -> None:
    """The dead-letter queue of undeliverable starts, and the alarm on its depth."""
    r, resources = stack.resolver, stack.template["Resources"]
    props = r.resolve(resources["StartRunDeadLetterQueue"]["Properties"])
    sqs = stack.client("sqs")
    name = stack.physical_name("StartRunDeadLetterQueue")
    attributes = {"SqsManagedSseEnabled": str(props["SqsManagedSseEnabled"]).lower(),
                  "MessageRetentionPeriod": str(props["MessageRetentionPeriod"])}  # fmt: skip
    stack.dead_letter_queue_url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=stack.dead_letter_queue_url, AttributeNames=["QueueArn"])
    r.physical["StartRunDeadLetterQueue"] = stack.dead_letter_queue_url
    r.attributes[("StartRunDeadLetterQueue", "Arn")] = arn["Attributes"]["QueueArn"]
    r.attributes[("StartRunDeadLetterQueue", "QueueName")] = name
    alarm = r.resolve(resources["StartRunDeadLetterAlarm"]["Properties"])
    alarm_name = stack.physical_name("StartRunDeadLetterAlarm")
    stack.client("cloudwatch").put_metric_alarm(AlarmName=alarm_name, **alarm)
    r.physical["StartRunDeadLetterAlarm"] = alarm_name
