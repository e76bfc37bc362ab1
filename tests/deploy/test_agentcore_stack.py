"""The stack deployed into moto with ``SessionRuntime=agentcore``: the functions' own environment
reaches the session runtime through the AgentCore transport, within their IAM policies.

moto has no AgentCore data plane: :mod:`.agentcore_emulator` serves the invoke route at the ARN the
stack gives out, in front of the real bridge (a subprocess per session, ``--agentcore`` mode); its
requests are recorded as the function's calls, so that the stack's IAM check holds them against the
template's policies.
"""

from __future__ import annotations

import pytest
from durable_harness.aws.agentcore import AgentCoreConnection
from durable_harness.aws.runtime import build_runtime
from durable_harness.harness.bridge import transport
from lambda_fastpath.aws import _client

from tests.harness.bridge_support import FINISH, PROGRAM, collect, delta

from .agentcore_emulator import agentcore_emulator, bridge_argv
from .iam import allowed
from .stack import MotoStack

AGENTCORE = {"SessionRuntime": "agentcore", "SessionCodeBucket": "code-bucket", "SessionCodeKey": "s/session-1.zip"}


@pytest.mark.stack_parameters(**AGENTCORE)
@pytest.mark.parametrize("logical_id", ["SliceFunction", "ChatFunction"])
async def test_a_function_drives_a_session_through_the_invoke_route_its_policy_allows(
    stack: MotoStack, logical_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)
    monkeypatch.setattr(transport, "_factory", None)  # (build_runtime installs the deployed one)
    runtime_arn = stack.resolver.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")]
    with agentcore_emulator(runtime_arn, bridge_argv(PROGRAM)) as emulator:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", emulator.url)
        with stack.function_env(logical_id) as env:
            assert (env["SESSION_RUNTIME"], env["AGENTCORE_RUNTIME_ARN"]) == ("agentcore", runtime_arn)
            build_runtime()
            spec = transport.SessionSpec("chat_stack_0001", ["ignored: the runtime's program runs"])
            connection = await transport.transport_factory("/unused")(spec)
            assert isinstance(connection, AgentCoreConnection)
            boot = await connection.start()
            await connection.send({"type": "start", "lines": [delta(0), FINISH]}, boot)
            lines = await collect(connection.attach(boot, 0, deadline_seconds=30))
            assert [line.line for line in lines] == [delta(0), FINISH]
            await connection.destroy()
        paths = [request.path for request in emulator.requests]
    assert paths[-1].endswith("/stopruntimesession") and len(paths) == 5
    stack.record_agentcore(logical_id, paths)  # checked against its policies when the stack ends
    # Only the slice and chat functions hold the invoke policy.
    for other in ("FinalizerFunction", "TriggerFunction"):
        assert not allowed(stack.policy_statements(other), "bedrock-agentcore:InvokeAgentRuntime", runtime_arn)
