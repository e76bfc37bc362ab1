"""Static checks of template.yaml's harness sessions: ``SessionRuntime`` none (nothing made, the
functions told so) and agentcore (the AgentCore runtime, its role, the functions' right to invoke it)."""

from __future__ import annotations

import json
from typing import Any

from .cfn import ROOT, Resolver, function_properties, load_template

TEMPLATE = load_template()
RESOURCES = TEMPLATE["Resources"]
SESSION_RESOURCES = {"HarnessSessionRuntime", "SessionRuntimeRole", "SessionInvokePolicy"}
AGENTCORE = {"SessionRuntime": "agentcore", "SessionCodeBucket": "code-bucket", "SessionCodeKey": "s/session-1.zip",
             "SessionIdleTimeout": "1200", "SessionMaxLifetime": "7200"}  # fmt: skip
RUNTIME_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/harness_sessions_0123abcd-Xy"


def resolved(overrides: dict[str, str] | None = None) -> Resolver:
    """A resolver with placeholder physical names and the runtime's ARN."""
    r = Resolver(TEMPLATE, overrides)
    for logical_id in RESOURCES:
        r.physical[logical_id] = f"phys-{logical_id}"
        r.attributes[(logical_id, "Arn")] = f"arn:aws:test:::{logical_id}"
    r.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")] = RUNTIME_ARN
    return r


def _env(r: Resolver, logical_id: str) -> dict[str, Any]:
    variables: dict[str, Any] = r.resolve(function_properties(TEMPLATE, logical_id)["Environment"]["Variables"])
    return variables


def _managed(r: Resolver, logical_id: str) -> list[Any]:
    return [p for p in r.resolve(RESOURCES[logical_id]["Properties"]["Policies"]) if not isinstance(p, dict)]


def test_by_default_no_session_runtime_is_made_and_the_functions_are_told_none() -> None:
    r = resolved()
    assert not any(r.exists(logical_id) for logical_id in SESSION_RESOURCES)
    for logical_id in ("ChatFunction", "SliceFunction"):
        env = _env(r, logical_id)
        assert env["SESSION_RUNTIME"] == "none" and "AGENTCORE_RUNTIME_ARN" not in env
        assert "phys-SessionInvokePolicy" not in _managed(r, logical_id)
    assert not r.condition(TEMPLATE["Outputs"]["SessionRuntimeArn"]["Condition"])


def test_agentcore_makes_a_runtime_of_the_session_zip_with_the_lifecycle_parameters() -> None:
    r = resolved(AGENTCORE)
    assert all(r.exists(logical_id) for logical_id in SESSION_RESOURCES)
    props = r.resolve(RESOURCES["HarnessSessionRuntime"]["Properties"])
    code = props["AgentRuntimeArtifact"]["CodeConfiguration"]
    assert code["Code"] == {"S3": {"Bucket": "code-bucket", "Prefix": "s/session-1.zip"}}
    assert code["Runtime"] == "PYTHON_3_12"
    # The entry point is the one the build script puts at the zip's root.
    assert code["EntryPoint"] == ["agentcore_main.py"]
    assert (ROOT / "layers" / "harness" / "session" / "agentcore_main.py").is_file()
    assert props["LifecycleConfiguration"] == {"IdleRuntimeSessionTimeout": "1200", "MaxLifetime": "7200"}
    assert props["ProtocolConfiguration"] == "HTTP" and props["RoleArn"] == "arn:aws:test:::SessionRuntimeRole"
    assert props["AgentRuntimeName"] == "harness_sessions_0123abcd"  # [a-zA-Z][a-zA-Z0-9_]{0,47}
    assert r.resolve(TEMPLATE["Outputs"]["SessionRuntimeArn"]["Value"]) == RUNTIME_ARN
    for parameter, limit in (("SessionIdleTimeout", 28800), ("SessionMaxLifetime", 28800)):
        assert (TEMPLATE["Parameters"][parameter]["MinValue"], TEMPLATE["Parameters"][parameter]["MaxValue"]) == (
            60, limit)  # fmt: skip


def test_the_runtimes_role_can_write_its_logs_and_metrics_and_reach_nothing_of_the_runner() -> None:
    r = resolved(AGENTCORE)
    props = r.resolve(RESOURCES["SessionRuntimeRole"]["Properties"])
    [trust] = props["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "bedrock-agentcore.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    actions = {a for p in props["Policies"] for s in p["PolicyDocument"]["Statement"] for a in _list(s["Action"])}
    assert all(a.startswith(("logs:", "cloudwatch:PutMetricData")) for a in actions)
    assert "ManagedPolicyArns" not in props


def test_only_the_slice_and_chat_functions_may_invoke_that_runtime_and_know_its_arn() -> None:
    r = resolved(AGENTCORE)
    [statement] = r.resolve(RESOURCES["SessionInvokePolicy"]["Properties"]["PolicyDocument"])["Statement"]
    assert statement["Action"] == ["bedrock-agentcore:InvokeAgentRuntime", "bedrock-agentcore:StopRuntimeSession"]
    assert statement["Resource"] == [RUNTIME_ARN, RUNTIME_ARN + "/*"]
    for logical_id in ("ChatFunction", "SliceFunction"):
        env = _env(r, logical_id)
        assert (env["SESSION_RUNTIME"], env["AGENTCORE_RUNTIME_ARN"]) == ("agentcore", RUNTIME_ARN)
        assert "phys-SessionInvokePolicy" in _managed(r, logical_id)
    for logical_id in ("FinalizerFunction", "TriggerFunction"):
        assert "phys-SessionInvokePolicy" not in json.dumps(r.resolve(RESOURCES[logical_id]["Properties"]))


def test_agentcore_without_the_session_zip_is_refused_before_anything_is_made() -> None:
    [assertion] = TEMPLATE["Rules"]["AgentCoreSessionsNeedCode"]["Assertions"]
    assert "build_session_zip.py" in assertion["AssertDescription"]
    for bucket, key, ok in [("", "", False), ("b", "", False), ("", "k", False), ("b", "k", True)]:
        r = resolved({"SessionRuntime": "agentcore", "SessionCodeBucket": bucket, "SessionCodeKey": key})
        assert bool(r.resolve(assertion["Assert"])) is ok


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
