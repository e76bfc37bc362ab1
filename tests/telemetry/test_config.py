"""Which telemetry an environment gets, what it tells about the harness, and what it costs at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from durable_harness import Agent
from durable_harness.harness import PydanticAIHarness
from durable_harness.models.scripted import ScriptedModel
from durable_harness.telemetry import NO_TELEMETRY, AgentInfo, RunTelemetry, agent_info, telemetry_from_env
from durable_harness.telemetry.metrics import MetricsExporter
from durable_harness.telemetry.otel import OpenTelemetryExporter
from durable_harness.telemetry.xray import XRayExporter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.test import TestModel

ROOT = Path(__file__).resolve().parents[2]
LAMBDA = {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"}
AGENT = Agent(model="demo")


def exporters(env: dict[str, str]) -> list[type]:
    telemetry = telemetry_from_env(AGENT, env)
    return [type(e) for e in telemetry.exporters] if isinstance(telemetry, RunTelemetry) else []


def test_opentelemetry_is_on_when_its_sdk_is_installed_unless_disabled() -> None:
    assert exporters({}) == [OpenTelemetryExporter]  # the dev install has the SDK
    assert telemetry_from_env(AGENT, {"OTEL_SDK_DISABLED": "true"}) is NO_TELEMETRY


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (LAMBDA, []),  # the template's defaults without a namespace
        ({**LAMBDA, "POWERTOOLS_METRICS_NAMESPACE": "DurableHarness"}, [MetricsExporter]),
        ({**LAMBDA, "POWERTOOLS_TRACE_DISABLED": "false"}, [XRayExporter]),
        ({"POWERTOOLS_TRACE_DISABLED": "false", "POWERTOOLS_METRICS_NAMESPACE": "DurableHarness"}, []),  # not Lambda
    ],
)
def test_xray_and_metrics_are_for_lambda(env: dict[str, str], expected: list[type]) -> None:
    assert exporters({**env, "OTEL_SDK_DISABLED": "true"}) == expected


def test_what_telemetry_says_about_each_harness() -> None:
    assert agent_info(AGENT, {}) == AgentInfo("ToolLoopAgent", "demo")
    assert agent_info(AGENT, {"AGENT": "my_agent:build_agent"}).name == "my_agent:build_agent"
    builtin = agent_info(Agent(model="bedrock:eu.anthropic.claude-x"), {})
    assert (builtin.model, builtin.provider, builtin.request_model) == (
        "bedrock:eu.anthropic.claude-x", "aws.bedrock", "eu.anthropic.claude-x"
    )  # fmt: skip
    scripted = agent_info(Agent(model=ScriptedModel([])), {})
    assert (scripted.provider, scripted.request_model) == ("scripted", "scripted")
    named = agent_info(PydanticAIHarness(PydanticAgent(TestModel(), name="support")), {"AGENT": "x:y"})
    assert (named.name, named.model) == ("support", "test:test")
    by_spec = PydanticAIHarness(PydanticAgent("openai:gpt-4o-mini", defer_model_check=True))
    assert agent_info(by_spec, {}).provider == "openai"
    assert AgentInfo("program").provider == "_OTHER" and AgentInfo("program").request_model is None


COLD = """
import json, sys
sys.path.insert(0, "functions/slice")
import app
runner = app.function.parts().runner
from durable_harness.telemetry import telemetry_from_env
telemetry = telemetry_from_env(runner.agent)
print(json.dumps({"exporters": [type(e).__name__ for e in getattr(telemetry, "exporters", [])],
                  "loaded": sorted(m for m in ("opentelemetry", "aws_xray_sdk") if m in sys.modules)}))
"""


@pytest.mark.parametrize(
    ("env", "exporters", "loaded"),
    [
        ({"POWERTOOLS_TRACE_DISABLED": "true", "OTEL_SDK_DISABLED": "true"}, ["MetricsExporter"], []),
        ({"POWERTOOLS_TRACE_DISABLED": "false", "OTEL_SDK_DISABLED": "true"}, ["XRayExporter", "MetricsExporter"],
         ["aws_xray_sdk"]),
    ],
)  # fmt: skip
def test_the_slice_function_loads_no_tracing_sdk_unless_tracing_is_on(
    env: dict[str, str], exporters: list[str], loaded: list[str]
) -> None:
    # A fresh interpreter, as Lambda starts one: this process has loaded both SDKs already.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_", "OTEL_"))}
    base |= {"LAMBDA_TASK_ROOT": str(ROOT), "AWS_REGION": "us-east-1", "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
             "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "RUNS_TABLE": "runs", "CHUNK_BUCKET": "chunks",
             "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:run", "MODEL_ID": "demo",
             "POWERTOOLS_METRICS_NAMESPACE": "DurableHarness", "TOOL_APPROVAL_SECRET": "x" * 32,
             "PYTHONPATH": str(ROOT / "layers" / "harness")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", COLD], cwd=ROOT, env=base | env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"exporters": exporters, "loaded": loaded}
