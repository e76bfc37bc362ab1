"""Client construction: botocore clients from one shared session, no boto3; every client but
DynamoDB's made on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore
import pytest
from durable_harness.aws import runtime
from durable_harness.aws.clients import LazyClient, make_client
from durable_harness.ports import StoredRun
from durable_harness.runner.state import RunState
from lambda_fastpath import botocore_session

from tests.aws.conftest import BUCKET, REGION, TABLE
from tests.aws.signing import signed_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {"RUNS_TABLE": TABLE, "CHUNK_BUCKET": BUCKET, "AWS_REGION": REGION,
       "STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:123456789012:stateMachine:runs"}  # fmt: skip


def test_clients_without_a_session_share_one_botocore_session(aws: None) -> None:
    first, second = make_client("dynamodb", region=REGION), make_client("s3", region=REGION)
    assert type(first).__module__ == "botocore.client"
    assert first is not second
    # One loader: the endpoint data and the models each client needs are parsed once per process.
    assert first._loader is second._loader is botocore_session._sessions[False].get_component("data_loader")
    assert True not in botocore_session._sessions  # outside the built layer there is no trimmed endpoint data


def test_in_the_layer_the_harness_services_read_the_trimmed_endpoint_data_and_any_other_the_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x")):
        monkeypatch.setenv(name, value)
    full = json.loads((Path(botocore.__file__).parent / "data" / "endpoints.json").read_text())
    trimmed = json.loads(json.dumps(full))
    for partition in trimmed["partitions"]:
        partition["services"] = {k: v for k, v in partition["services"].items() if k == "dynamodb"}
    (tmp_path / "endpoints.json").write_text(json.dumps(trimmed))
    monkeypatch.setattr(botocore_session, "_TRIMMED_DATA", str(tmp_path))  # as the layer build writes it
    monkeypatch.setattr(botocore_session, "_trimmed_services", frozenset({"dynamodb"}))
    monkeypatch.setattr(botocore_session, "_sessions", {})

    ddb, iam = make_client("dynamodb", region="eu-west-1"), make_client("iam", region="eu-west-1")

    assert Path(ddb._loader.load_data_with_path("endpoints")[1]).parent == tmp_path
    assert Path(iam._loader.load_data_with_path("endpoints")[1]).parent == Path(botocore.__file__).parent / "data"
    assert make_client("dynamodb", region="us-east-1")._loader is ddb._loader  # one session each
    url, scope = signed_for(ddb, lambda c: c.list_tables())
    assert (url, scope) == ("https://dynamodb.eu-west-1.amazonaws.com/", "eu-west-1/dynamodb")
    # IAM is global, which only its endpoint entry says: from the trimmed data it would sign for eu-west-1.
    assert signed_for(iam, lambda c: c.list_users())[1] == "us-east-1/iam"


def test_a_lazy_client_is_made_on_first_use_only_and_once() -> None:
    made: list[str] = []

    class Client:
        def put_events(self, **kwargs: Any) -> dict[str, Any]:
            return {"FailedEntryCount": 0, "Entries": [kwargs]}

    def make() -> Client:
        made.append("client")
        return Client()

    lazy = LazyClient(make)
    assert made == []
    assert lazy.put_events(Entries=1)["Entries"] == [{"Entries": 1}]
    lazy.put_events(Entries=2)
    assert made == ["client"]


def record_clients(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The services the runtime makes clients for, in order, from now on."""
    services: list[str] = []
    real = runtime.client_for

    def recording(service: str, **kwargs: Any) -> Any:
        services.append(service)
        return real(service, **kwargs)

    monkeypatch.setattr(runtime, "client_for", recording)
    return services


def test_the_runtime_makes_only_the_dynamodb_client_until_another_is_used(
    ddb: Any, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = record_clients(monkeypatch)
    built = runtime.build_runtime({**ENV, "EVENT_BUS_NAME": "default"})
    assert services == ["dynamodb"]  # S3, Step Functions and EventBridge: on first use
    assert built.events is not None
    state = RunState(run_id="wrun_0123456789abcdefghjkmnpqrs", session_id="s", message_id="m", status="finished")
    built.events.publish(state, "Run Started")  # moto's EventBridge accepts both
    built.events.publish(state, "Run Finished")
    assert services.count("events") == 1  # made by the first publish, then kept
    built.store.create(StoredRun(run_id=state.run_id, state="{}", status="running"))
    assert services.count("dynamodb") == 1 and "stepfunctions" not in services
    built.orchestrator.cancel(state.run_id)  # no execution to stop, but it asks Step Functions
    assert services.count("stepfunctions") == 1


def test_without_inline_slices_the_runtime_makes_the_step_functions_client_at_once(
    ddb: Any, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = record_clients(monkeypatch)
    runtime.build_runtime({**ENV, "INLINE_FIRST_SLICE": "0"})
    # Every POST then starts its run's execution before its first chunk: the client is ready for it.
    assert services == ["dynamodb", "stepfunctions"]


def test_the_runtime_imports_no_boto3() -> None:
    code = (
        "import json, sys\n"
        "from durable_harness.aws.runtime import build_runtime\n"
        f"build_runtime({ENV!r} | {{'EVENT_BUS_NAME': 'bus'}})\n"
        "print(json.dumps([m for m in ('boto3', 's3transfer') if m in sys.modules]))\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert json.loads(done.stdout) == []


def test_in_lambda_the_runtime_is_built_from_lite_clients_without_botocore_session_or_config() -> None:
    """With ``AWS_LAMBDA_FUNCTION_NAME`` and credentials in the environment (Lambda's), build_runtime
    and the first DynamoDB client leave ``botocore.session`` / ``botocore.config`` unloaded."""
    code = (
        "import json, sys\n"
        "from durable_harness.aws.runtime import build_runtime\n"
        f"built = build_runtime({ENV!r} | {{'EVENT_BUS_NAME': 'bus'}})\n"
        "print(json.dumps([type(built.store._ddb).__module__,\n"
        "  [m for m in ('boto3', 'botocore.session', 'botocore.config', 'botocore.client') if m in sys.modules]]))\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION,
           "AWS_LAMBDA_FUNCTION_NAME": "chat"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert json.loads(done.stdout) == ["lambda_fastpath.aws.dynamodb", []]


def test_make_client_in_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lite where a lite client serves (with a given Config's timeouts and attempts), else botocore;
    a caller's session always gets botocore; outside Lambda nothing changes."""
    import boto3
    from botocore.config import Config
    from lambda_fastpath.aws import LiteClient

    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x"), ("AWS_LAMBDA_FUNCTION_NAME", "f")):
        monkeypatch.setenv(name, value)
    ddb = make_client("dynamodb", runtime.client_config, region=REGION)
    assert isinstance(ddb, LiteClient)
    assert (ddb._connect_timeout, ddb._read_timeout, ddb._max_attempts) == (3.0, 10.0, 5)
    once = make_client("stepfunctions", Config(retries={"total_max_attempts": 1}, read_timeout=600), region=REGION)
    assert (once._read_timeout, once._max_attempts) == (600.0, 1)
    assert type(make_client("sqs", region=REGION)).__module__ == "botocore.client"  # no lite client for it
    session = boto3.Session(region_name=REGION)
    assert type(make_client("dynamodb", region=REGION, session=session)).__module__ == "botocore.client"
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    assert type(make_client("dynamodb", region=REGION)).__module__ == "botocore.client"


def test_a_functions_root_gives_the_core_lite_clients_for_the_bedrock_model_and_the_secret_check() -> None:
    """``function_parts`` installs the core's AWS clients (the core imports no AWS adapter): in Lambda the
    Bedrock model's default client is the lite one with the model's settings, and the approval secret's
    start-up read goes through the runtime's lite ``secretsmanager`` client; botocore's client stays unloaded."""
    code = (
        "import json, sys\n"
        "from durable_harness import secretsmanager\n"
        "from durable_harness.aws.runtime import function_parts\n"
        "from durable_harness.models.bedrock import BedrockConverseModel\n"
        "from durable_harness.settings import Settings\n"
        f"function_parts(Settings.from_env({ENV!r}), check_secret=False)\n"
        "model = BedrockConverseModel('amazon.nova-lite-v1:0').client\n"
        "secrets = secretsmanager._client_factory()\n"
        "print(json.dumps([type(model).__module__, model._max_attempts, model._read_timeout, type(secrets).__name__,\n"
        "  [m for m in ('boto3', 'botocore.session', 'botocore.config', 'botocore.client') if m in sys.modules]]))\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION,
           "AWS_LAMBDA_FUNCTION_NAME": "chat"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "lambda_fastpath.aws.bedrock",
        1,
        600.0,
        "SecretsManagerClient",
        [],
    ]
