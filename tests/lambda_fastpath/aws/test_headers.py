"""The lite clients say who they are and carry the invocation's trace header on, as botocore does.

A loopback server (:mod:`tests.lambda_fastpath.aws.scripted`) records what a lite client and a botocore client
pointed at it send for the same call.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.config import Config
from durable_harness import __version__
from lambda_fastpath import aws as lite

from tests.lambda_fastpath.aws.conftest import REGION, lite_env
from tests.lambda_fastpath.aws.scripted import Reply, ScriptedServer

TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:0"
ANSWER = Reply(200, {"content-type": "application/x-amz-json-1.0"}, [b"{}"], chunked=False)


def listed(client: Any, server: ScriptedServer) -> dict[str, str]:
    """The headers of one SendTaskHeartbeat call made by ``client``."""
    server.script.append(ANSWER)
    client.send_task_heartbeat(taskToken="token")
    return server.requests[-1].headers


def clients(url: str) -> tuple[Any, Any]:
    """A lite Step Functions client and a botocore one, both pointed at ``url``."""
    ours = lite.client("stepfunctions", env=lite_env(url))
    theirs = boto3.client(
        "stepfunctions", region_name=REGION, endpoint_url=url, aws_access_key_id="AKIDLITE",
        aws_secret_access_key="secret", config=Config(retries={"total_max_attempts": 1}),
    )  # fmt: skip
    return ours, theirs


def test_in_a_traced_invocation_each_request_carries_its_trace_header_as_botocores_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "durable-harness-slice")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE)
    with ScriptedServer() as server:
        ours, theirs = clients(server.url)
        mine, botocores = listed(ours, server), listed(theirs, server)
        assert mine["x-amzn-trace-id"] == botocores["x-amzn-trace-id"]
        assert mine["x-amzn-trace-id"].startswith("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=")
        # Lambda sets a new one for each invocation: the next request of the same client carries it.
        monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE.replace("Parent=53995c3f42cd8ad8", "Parent=0123456789abcdef"))
        assert "Parent=0123456789abcdef" in listed(ours, server)["x-amzn-trace-id"]
        # Outside Lambda (or untraced), neither sends one.
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
        assert "x-amzn-trace-id" not in listed(ours, server) and "x-amzn-trace-id" not in listed(theirs, server)


def test_every_request_says_who_sends_it_in_botocores_user_agent_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    with ScriptedServer() as server:
        ours, theirs = clients(server.url)
        mine, botocores = listed(ours, server)["user-agent"], listed(theirs, server)["user-agent"]
    assert mine.startswith(f"durable-harness-lite/{__version__} ua/")
    # The fields botocore sends about the platform, with the same values.
    fields = ("ua/", "os/", "lang/python#", "md/pyimpl#", "md/arch#")
    assert [f for f in mine.split() if f.startswith(fields)] == [f for f in botocores.split() if f.startswith(fields)]
