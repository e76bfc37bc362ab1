"""X-Ray tracing of the handlers: on only where Powertools would trace, the SDK loaded only then."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from durable_harness.aws import AwsConfigError
from durable_harness.aws.tracing import capture_lambda_handler, tracing_enabled

ROOT = Path(__file__).resolve().parents[2]
IN_LAMBDA = {"LAMBDA_TASK_ROOT": "/var/task"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({**IN_LAMBDA}, True),  # Powertools' default: traced in Lambda
        ({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "false"}, True),
        ({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "0"}, True),
        ({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "true"}, False),  # the template's default
        ({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": " TRUE "}, False),
        ({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "1"}, False),
        ({"POWERTOOLS_TRACE_DISABLED": "false"}, False),  # not in Lambda: no X-Ray daemon
        ({**IN_LAMBDA, "AWS_SAM_LOCAL": "true", "POWERTOOLS_TRACE_DISABLED": "false"}, False),
    ],
)
def test_tracing_is_on_only_where_powertools_would_trace(env: dict[str, str], expected: bool) -> None:
    assert tracing_enabled(env) is expected


def test_a_bad_switch_value_names_the_variable() -> None:
    with pytest.raises(AwsConfigError, match="POWERTOOLS_TRACE_DISABLED must be true or false"):
        tracing_enabled({**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "maybe"})


def test_without_tracing_the_handler_is_left_as_it_is() -> None:
    def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
        return event

    assert capture_lambda_handler(handler, {**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "true"}) is handler


def test_tracing_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aws_xray_sdk", None)  # makes `import aws_xray_sdk` fail

    with pytest.raises(AwsConfigError, match=r"aws-lambda-powertools\[tracer\]"):
        capture_lambda_handler(lambda event, context: event, {**IN_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "false"})


IMPORT_HANDLERS = """
import importlib.util, json, sys
names = {}
for fn in ("slice", "finalizer", "trigger"):
    spec = importlib.util.spec_from_file_location(f"{fn}_app", f"functions/{fn}/app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names[fn] = callable(module.handler)
print(json.dumps({"handlers": names, "xray": "aws_xray_sdk" in sys.modules}))
"""


@pytest.mark.parametrize(("disabled", "xray"), [("true", False), ("false", True)])
def test_the_handlers_load_the_xray_sdk_only_when_tracing_is_on(disabled: str, xray: bool) -> None:
    # A fresh interpreter: this test process may have imported the SDK already, and a real Tracer
    # patches botocore for good.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "POWERTOOLS_"))}
    env |= {"LAMBDA_TASK_ROOT": str(ROOT), "POWERTOOLS_TRACE_DISABLED": disabled, "AWS_REGION": "us-east-1",
            "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR", "PYTHONPATH": str(ROOT / "layers" / "harness")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_HANDLERS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"handlers": {"slice": True, "finalizer": True, "trigger": True}, "xray": xray}
