"""The layer build (layers/harness/build_layer.py): what it prunes and how it compiles, and that the
botocore models it keeps are all the harness needs (any other service loads from the runtime's)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import marshal
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import botocore
import botocore.session
import pytest
from botocore.loaders import Loader, create_loader
from durable_harness.aws.runtime import build_runtime
from moto import mock_aws

from tests.aws.signing import signed_for

from .cfn import load_template

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(botocore.__file__).parent / "data"  # the full set, as the Lambda runtime's botocore has


def _load_build_layer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_layer", ROOT / "layers" / "harness" / "build_layer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_layer = _load_build_layer()


def touch(root: Path, *paths: str) -> None:
    for rel in paths:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n" if rel.endswith(".py") else "{}")


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_prune_keeps_the_used_services_models_and_drops_what_no_function_loads(tmp_path: Path) -> None:
    touch(tmp_path, "botocore/data/endpoints.json", "botocore/data/_retry.json",
          "botocore/data/s3/2006-03-01/service-2.json.gz", "botocore/data/s3/2006-03-01/examples-1.json",
          "botocore/data/dynamodb/2012-08-10/service-2.json.gz", "botocore/data/ec2/2016-11-15/service-2.json.gz",
          "botocore/data/sqs/2012-11-05/service-2.json.gz", "botocore/client.py",
          "botocore/__pycache__/client.cpython-311.pyc", "bin/uvicorn", "pydantic/v1/main.py",
          "aws_lambda_powertools/event_handler/openapi/swagger_ui/swagger-ui-bundle.min.js",
          "aws_lambda_powertools/event_handler/openapi/swagger_ui/html.py")  # fmt: skip

    removed = build_layer.prune(tmp_path, frozenset({"s3", "dynamodb"}))

    assert files(tmp_path) == {
        "botocore/data/endpoints.json", "botocore/data/_retry.json", "botocore/data/s3/2006-03-01/service-2.json.gz",
        "botocore/data/dynamodb/2012-08-10/service-2.json.gz", "botocore/client.py", "pydantic/v1/main.py",
        "aws_lambda_powertools/event_handler/openapi/swagger_ui/html.py",
    }  # fmt: skip
    assert "botocore/data/ec2" in removed and "botocore/__pycache__" in removed


def test_modules_compile_to_unchecked_hash_bytecode_except_those_no_function_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_layer, "RUNTIME", sys.version_info[:2])  # the real build insists on 3.12
    touch(tmp_path, "botocore/client.py", "durable_harness/runner/runner.py", "pydantic/v1/main.py",
          "aws_lambda_powertools/utilities/parameters/secrets.py", "aws_lambda_powertools/utilities/batch/base.py",
          "aws_xray_sdk/core/recorder.py")  # fmt: skip

    build_layer.compile_layer(tmp_path)

    def pyc(rel: str) -> Path:
        return Path(importlib.util.cache_from_source(str(tmp_path / rel)))

    for rel in ("botocore/client.py", "durable_harness/runner/runner.py",
                "aws_lambda_powertools/utilities/parameters/secrets.py"):  # fmt: skip
        data = pyc(rel).read_bytes()
        assert data[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(data[4:8], "little") == 0b01  # hash-based, source never checked
        assert marshal.loads(data[16:]).co_filename == f"/opt/python/{rel}"  # as Lambda's /opt lays it out
    for rel in ("pydantic/v1/main.py", "aws_lambda_powertools/utilities/batch/base.py",
                "aws_xray_sdk/core/recorder.py"):  # fmt: skip
        assert not pyc(rel).exists()


def test_bytecode_for_another_python_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_layer, "RUNTIME", (3, 99))
    with pytest.raises(SystemExit, match=r"compiled by the runtime's Python 3\.99"):
        build_layer.compile_layer(tmp_path)


def test_every_service_the_harness_calls_keeps_its_model() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "layers" / "harness" / "durable_harness").rglob("*.py"))
    called = set(re.findall(r"\b(?:make_)?client(?:_for)?\(\s*\"([a-z0-9-]+)\"", source))
    assert called == {"dynamodb", "s3", "stepfunctions", "events", "bedrock-runtime", "secretsmanager",
                      "bedrock-agentcore"}  # fmt: skip
    assert "get_secret" in source  # Powertools' get_secret: Secrets Manager too
    # The AgentCore session transport has the lite client only (it never falls back to botocore).
    assert called - {"bedrock-agentcore"} <= build_layer.BOTOCORE_SERVICES


@pytest.fixture
def pruned_models(tmp_path: Path) -> Path:
    """botocore's data folder as the layer ships it."""
    out = tmp_path / "python"

    def other_services(folder: str, names: list[str]) -> list[str]:  # not copied at all: prune would drop them
        if Path(folder) != MODELS:
            return []
        return [n for n in names if (MODELS / n).is_dir() and n not in build_layer.BOTOCORE_SERVICES]

    shutil.copytree(MODELS, out / "botocore" / "data", ignore=other_services)
    build_layer.prune(out)
    build_layer.compact_models(out)
    return out / "botocore" / "data"


def test_compacted_models_keep_every_operation_and_shape_but_no_documentation(pruned_models: Path) -> None:
    compact, full = Loader(extra_search_paths=[str(pruned_models)], include_default_search_paths=False), Loader()
    for service in sorted(build_layer.BOTOCORE_SERVICES):
        ours, theirs = compact.load_service_model(service, "service-2"), full.load_service_model(service, "service-2")
        assert ours["operations"].keys() == theirs["operations"].keys()
        assert {name: shape.get("members", {}).keys() for name, shape in ours["shapes"].items()} == {
            name: shape.get("members", {}).keys() for name, shape in theirs["shapes"].items()
        }
        assert ours == build_layer._without_documentation(theirs)
        kept = ours.pop("clientContextParams", {})  # botocore indexes their documentation: kept
        assert all("documentation" in param for param in kept.values())
        assert '"documentation"' not in json.dumps(ours)
        ruleset = "endpoint-rule-set-1"
        assert compact.load_service_model(service, ruleset) == full.load_service_model(service, ruleset)
    assert compact.load_data("endpoints") == full.load_data("endpoints")
    endpoints = pruned_models / "endpoints.json"
    assert b"\n" not in endpoints.read_bytes() and endpoints.stat().st_size < (MODELS / "endpoints.json").stat().st_size


def test_a_member_named_documentation_is_kept(tmp_path: Path) -> None:
    model = {"documentation": "<p>The service.</p>", "shapes": {
        "Doc": {"type": "structure", "documentation": "A shape.",
                "members": {"documentation": {"shape": "String", "documentation": "A member named so."}}},
        "documentation": {"type": "string"}}}  # fmt: skip
    path = tmp_path / "botocore" / "data" / "svc" / "2020-01-01" / "service-2.json.gz"
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(json.dumps(model, indent=2).encode()))
    assert build_layer.compact_models(tmp_path) > 0
    assert json.loads(gzip.decompress(path.read_bytes())) == {"shapes": {
        "Doc": {"type": "structure", "members": {"documentation": {"shape": "String"}}},
        "documentation": {"type": "string"}}}  # fmt: skip


def test_the_runtime_makes_its_clients_from_the_kept_models_alone(
    pruned_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    core = botocore.session.get_session()
    core.register_component("data_loader", Loader(extra_search_paths=[str(pruned_models)],
                                                  include_default_search_paths=False))  # fmt: skip
    session = boto3.Session(botocore_session=core, region_name="us-east-1")
    env = {"RUNS_TABLE": "t", "CHUNK_BUCKET": "b", "EVENT_BUS_NAME": "bus", "AWS_REGION": "us-east-1",
           "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:runs"}  # fmt: skip

    runtime = build_runtime(env, session=session)

    assert runtime.events is not None
    for service in ("bedrock-runtime", "secretsmanager", "sts"):
        assert session.client(service).meta.service_model.service_name == service
    with pytest.raises(botocore.exceptions.UnknownServiceError):
        session.client("sqs")  # really pruned
    with mock_aws():  # every client the harness makes works from these models: a call resolves its endpoint
        s3 = session.client("s3")
        s3.create_bucket(Bucket="chunks")
        s3.put_object(Bucket="chunks", Key="k", Body=b"{}")
        assert s3.get_object(Bucket="chunks", Key="k")["Body"].read() == b"{}"
        assert session.client("dynamodb").list_tables()["TableNames"] == []
        assert session.client("stepfunctions").list_state_machines()["stateMachines"] == []
        session.client("events").list_event_buses()


def test_other_services_load_from_the_runtimes_models_after_the_layers(pruned_models: Path) -> None:
    loader: Any = create_loader(os.pathsep.join([str(pruned_models), str(MODELS)]))  # as AWS_DATA_PATH lists them

    assert loader.load_service_model("sqs", "service-2")["metadata"]["serviceId"] == "SQS"
    _, path = loader.load_data_with_path("s3/2006-03-01/service-2")
    assert Path(path).is_relative_to(pruned_models)  # the layer's (newer) model wins


def test_the_template_puts_the_layers_models_before_the_runtimes() -> None:
    env = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AWS_DATA_PATH"].split(":") == [
        "/opt/python/botocore/data",  # the layer's python/ folder is mounted at /opt/python
        "/var/lang/lib/python3.12/site-packages/botocore/data",  # the python3.12 runtime's own botocore
    ]


def test_harness_programs_in_runtimes_ship_with_the_layer_executable(tmp_path: Path) -> None:
    root, out = tmp_path / "src", tmp_path / "out"
    touch(root, "durable_harness/__init__.py", "lambda_fastpath/__init__.py", "my_agent.py", "runtimes/my-runtime")
    (root / "runtimes" / "my-runtime").chmod(0o755)
    out.mkdir()
    build_layer.copy_library(out, root)
    assert (out / "runtimes" / "my-runtime").stat().st_mode & 0o111
    assert (out / "my_agent.py").exists() and (out / "durable_harness" / "__init__.py").exists()
    assert (out / "lambda_fastpath" / "__init__.py").exists()  # the functions' own AWS client and server
    without = tmp_path / "without"
    without.mkdir()
    (root / "runtimes" / "my-runtime").unlink()
    (root / "runtimes").rmdir()
    build_layer.copy_library(without, root)
    assert not (without / "runtimes").exists()


SERVICE_CALLS: dict[str, Any] = {
    "dynamodb": lambda c: c.list_tables(),
    "s3": lambda c: c.get_object(Bucket="chunks", Key="runs/k"),
    "stepfunctions": lambda c: c.list_state_machines(),
    "events": lambda c: c.list_event_buses(),
    "secretsmanager": lambda c: c.list_secrets(),
    "bedrock-runtime": lambda c: c.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}]),
    "sts": lambda c: c.get_caller_identity(),
}
"""A call of each service whose model the layer keeps (none is sent)."""


def test_trimmed_endpoint_data_keeps_every_partition_and_the_kept_services_entries_only(pruned_models: Path) -> None:
    out = pruned_models.parent.parent
    size = build_layer.trim_endpoints(out)

    path = out / build_layer.TRIMMED_ENDPOINTS
    trimmed, full = json.loads(path.read_bytes()), json.loads((pruned_models / "endpoints.json").read_bytes())
    assert size == path.stat().st_size < (pruned_models / "endpoints.json").stat().st_size / 10
    assert [p["partition"] for p in trimmed["partitions"]] == [p["partition"] for p in full["partitions"]]
    prefixes = {"dynamodb", "s3", "states", "events", "secretsmanager", "bedrock-runtime", "sts"}  # endpointPrefix
    assert "iam" in full["partitions"][0]["services"] and "iam" not in trimmed["partitions"][0]["services"]
    for ours, theirs in zip(trimmed["partitions"], full["partitions"], strict=True):
        assert ours["services"] == {k: v for k, v in theirs["services"].items() if k in prefixes}
        ours.pop("services"), theirs.pop("services")
        assert ours == theirs  # the partition: its Regions, DNS suffix, defaults


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1"])
def test_every_kept_service_signs_and_sends_as_with_the_full_endpoint_data(
    pruned_models: Path, region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x")):
        monkeypatch.setenv(name, value)
    for name in [n for n in os.environ if n.startswith("AWS_ENDPOINT_URL")]:
        monkeypatch.delenv(name)
    out = pruned_models.parent.parent
    build_layer.trim_endpoints(out)
    data_paths = {"trimmed": [str((out / build_layer.TRIMMED_ENDPOINTS).parent), str(pruned_models)],
                  "full": [str(pruned_models)]}  # fmt: skip
    sessions = {}
    for label, paths in data_paths.items():
        sessions[label] = botocore.session.get_session()
        sessions[label].set_config_variable("data_path", os.pathsep.join(paths))  # as aws/clients.py sets it

    _, used = sessions["trimmed"].get_component("data_loader").load_data_with_path("endpoints")
    assert Path(used).parent == (out / build_layer.TRIMMED_ENDPOINTS).parent
    for service, call in SERVICE_CALLS.items():
        got = {label: signed_for(session.create_client(service, region_name=region), call)
               for label, session in sessions.items()}  # fmt: skip
        assert got["trimmed"] == got["full"], service
