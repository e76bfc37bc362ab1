"""What the deployed functions import: only what they run (the local kit, SQLite, boto3 and the
client-side reducer stay out of their cold start), while every public name still resolves."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys

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
def test_a_function_imports_nothing_of_the_local_kit(logical_id: str) -> None:
    code = (
        "import json, sys\n"
        "import app\n"
        "getattr(app, '_runtime', lambda: None)()  # the first invocation's setup too\n"
        f"print(json.dumps([m for m in {LOCAL_ONLY!r} if m in sys.modules]))\n"
    )
    env = function_env(logical_id)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize(
    "package",
    ["durable_harness", "durable_harness.aws", "durable_harness.harness", "durable_harness.protocol",
     "durable_harness.runner", "durable_harness.server", "durable_harness.storage", "durable_harness.telemetry"],
)  # fmt: skip
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = [n for n in module.__all__ if n != "PydanticAIHarness" or importlib.util.find_spec("pydantic_ai")]
    for name in names:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018
