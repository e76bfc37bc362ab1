"""What the deployed functions import: only what they run (the local kit, SQLite, boto3, uvicorn and
the client-side reducer stay out of their cold start), while every public name still resolves; and the
chat function's process, started as the Lambda Web Adapter starts it."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from .cfn import ROOT, Resolver, function_properties, load_template

TEMPLATE = load_template()

LOCAL_ONLY = [
    "sqlite3",
    "boto3",
    "s3transfer",
    "uvicorn",
    "durable_harness.storage.sqlite",
    "durable_harness.storage.files",
    "durable_harness.runner.local",
    "durable_harness.server.local",
    "durable_harness.protocol.assemble",
    "durable_harness.harness.process",
]
"""Modules no deployed function needs at import."""


def function_env(logical_id: str) -> dict[str, str]:
    """The function's environment as the template sets it (dummy resource names, no AWS reached)."""
    resolver = Resolver(TEMPLATE, {"AuthTokenHashes": "t:" + hashlib.sha256(b"t").hexdigest()})
    resolver.physical |= {"RunsTable": "runs", "ChunkBucket": "chunks", "ApprovalSecret": "secret"}
    resolver.attributes[("ChatFunctionUrl", "FunctionUrl")] = "https://chat.lambda-url.us-east-1.on.aws/"
    props = function_properties(TEMPLATE, logical_id)
    variables = resolver.resolve(props.get("Environment", {}).get("Variables", {}))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return env | {k: str(v) for k, v in variables.items()} | {
        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x", "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DATA_PATH": "",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "functions" / function_dir(logical_id)),
                                       str(ROOT / "layers" / "harness")]),
    }  # fmt: skip


def function_dir(logical_id: str) -> str:
    return str(function_properties(TEMPLATE, logical_id)["CodeUri"]).rstrip("/").split("/")[-1]


@pytest.mark.parametrize("logical_id", ["ChatFunction", "SliceFunction", "FinalizerFunction", "TriggerFunction"])
def test_a_function_imports_nothing_of_the_local_kit_and_freezes_its_load(logical_id: str) -> None:
    load = "import serve; serve.load()" if logical_id == "ChatFunction" else "import app"  # as run.sh / Lambda do
    code = (
        "import gc, json, sys\n"
        f"{load}\n"
        "import app\n"
        "collector = [gc.isenabled(), gc.get_freeze_count()]  # the load ran without it, then was frozen\n"
        "getattr(app, 'function', None) and app.function.parts()  # the first invocation's setup too\n"
        f"print(json.dumps([[m for m in {LOCAL_ONLY!r} if m in sys.modules], collector]))\n"
    )
    env = function_env(logical_id)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    local, (enabled, frozen) = json.loads(done.stdout.splitlines()[-1])
    assert local == []
    assert enabled and frozen > 10_000  # the collector is back on for the invocations; the load is frozen


@pytest.mark.parametrize(
    "package",
    ["durable_harness", "durable_harness.aws", "durable_harness.harness", "durable_harness.protocol",
     "durable_harness.runner", "durable_harness.server", "durable_harness.storage", "durable_harness.telemetry",
     "lambda_fastpath", "lambda_fastpath.aws"],
)  # fmt: skip
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = [n for n in module.__all__ if n != "PydanticAIHarness" or importlib.util.find_spec("pydantic_ai")]
    for name in names:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_the_chat_process_starts_serves_and_stops_as_the_adapter_expects() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = function_env("ChatFunction") | {"AWS_LWA_PORT": str(port)}
    script = ROOT / "functions" / "chat" / "run.sh"
    env["LAMBDA_TASK_ROOT"] = str(script.parent)
    env["PYTHONPATH"] = str(ROOT / "layers" / "harness")  # run.sh puts the task root first, then /opt/python
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"  # `python` is this interpreter
    process = subprocess.Popen(["bash", str(script)], env=env, cwd=script.parent, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:  # the adapter's readiness check: GET /health until it answers
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the chat process did not start listening"
                time.sleep(0.05)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        with httpx.Client() as client:  # an API call without the token: the app's own 401, over keep-alive
            answers = [client.post(f"http://127.0.0.1:{port}/api/chat", content=b"{}") for _ in range(2)]
        assert [r.status_code for r in answers] == [401, 401]
        assert answers[0].json()["error"]["code"] == "unauthorized"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def short_approval_secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """moto over HTTP holding an approval secret of 20 bytes, and the environment of a function (in
    Lambda: its clients are lite ones) that names it."""
    import boto3
    from moto import mock_aws

    from tests.motoserver import MotoEndpoint

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws(), MotoEndpoint() as endpoint:
        arn = boto3.client("secretsmanager").create_secret(Name="approval", SecretString="twenty-bytes-secret!")["ARN"]
        yield {"AWS_ENDPOINT_URL": endpoint.url, "TOOL_APPROVAL_SECRET_ARN": arn, "AWS_LAMBDA_FUNCTION_NAME": "fn"}


def start_chat_process(extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The chat function's start script, run with the function's environment and ``extra``, to its end
    (for a start that must fail)."""
    env = function_env("ChatFunction") | {"AWS_LWA_PORT": "9"} | extra
    script = ROOT / "functions" / "chat" / "run.sh"
    env["LAMBDA_TASK_ROOT"] = str(script.parent)
    env["PYTHONPATH"] = str(ROOT / "layers" / "harness")
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(script)], env=env, cwd=script.parent, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_the_chat_process_refuses_a_short_approval_secret_at_start_up_in_one_line(
    short_approval_secret: dict[str, str],
) -> None:
    done = start_chat_process(short_approval_secret)
    assert done.returncode == 1
    arn = short_approval_secret["TOOL_APPROVAL_SECRET_ARN"]
    assert done.stderr.strip().splitlines() == [
        f"chat function: the approval secret ({arn}) is 20 bytes; it must be at least 32 random bytes "
        "(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    ]
    assert "twenty-bytes-secret" not in done.stderr + done.stdout


def test_the_chat_process_refuses_a_bad_setting_at_start_up_in_one_line_naming_it() -> None:
    done = start_chat_process({"RUN_TTL_DAYS": "soon"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["chat function: RUN_TTL_DAYS must be a number of days, got 'soon'"]


def test_the_slice_function_refuses_a_short_approval_secret_when_it_sets_up(
    short_approval_secret: dict[str, str],
) -> None:
    env = function_env("SliceFunction") | short_approval_secret
    code = (
        "import app, sys\n"
        "from durable_harness.errors import ApprovalSecretError\n"
        "try:\n    app.function.parts()\nexcept ApprovalSecretError as exc:\n    print(exc)\n    sys.exit(3)\n"
        "print(sorted(m for m in ('boto3', 'botocore.client') if m in sys.modules))\n"
    )
    arn = short_approval_secret["TOOL_APPROVAL_SECRET_ARN"]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.startswith(f"the approval secret ({arn}) is 20 bytes; it must be at least 32")
    # A good secret passes, read by the lite client: the check costs the cold start no botocore client.
    import boto3

    boto3.client("secretsmanager").put_secret_value(SecretId=arn, SecretString="k" * 32)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
