"""A persistent-session run under the real state machine in moto, its session in the emulated
AgentCore Runtime: the example program in ``--persistent`` mode as the deployed agent
(``Agent=tests.harness.agents:persistent``, ``SessionRuntime=agentcore``), a step longer than a
slice, several slices and a continue-as-new (``SlicesPerExecution=2``).

moto has no AgentCore data plane: :mod:`.agentcore_emulator` serves ``InvokeAgentRuntime`` at the
stack's runtime ARN in front of the real bridge (``--agentcore`` mode, a subprocess per session:
the "microVM"), running the example program; the slices reach it through the functions' own
AgentCore transport, and its requests are held against the slice function's IAM policy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from durable_harness.aws.lite import _client
from durable_harness.harness.bridge import transport
from durable_harness.messages import TextPart, UserMessage
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.runner.runner import Runner

from tests.harness import agents as harnesses

from .agentcore_emulator import agentcore_emulator, bridge_argv
from .helpers import log_of, runtime_of, state_of, types
from .stack import MotoStack

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = [sys.executable, str(ROOT / "examples" / "harness_program" / "notes_harness.py"), "--persistent"]
AGENTCORE = {"SessionRuntime": "agentcore", "SessionCodeBucket": "code-bucket", "SessionCodeKey": "s/session-1.zip"}


@pytest.mark.stack_parameters(Agent="tests.harness.agents:persistent", SlicesPerExecution="2", SliceSeconds="1",
                              **AGENTCORE)  # fmt: skip
def test_a_persistent_session_serves_every_slice_and_a_continue_as_new(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)
    monkeypatch.setattr(transport, "_factory", None)  # (the functions' build_runtime installs theirs)
    steps = tmp_path / "steps.log"
    runtime_arn = stack.resolver.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")]
    # The runtime's variables (the program reads them through the bridge's --pass-env).
    microvm_env = {"STEP_SECONDS": "2.5", "STEP_LOG": str(steps), "NOTES_DIR": str(tmp_path)}
    argv = bridge_argv(PROGRAM)
    argv[argv.index("--"):argv.index("--")] = [a for name in microvm_env for a in ("--pass-env", name)]
    with agentcore_emulator(runtime_arn, argv, microvm_env) as emulator:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", emulator.url)
        runtime = runtime_of(stack, "SliceFunction")
        runner = Runner(harnesses.persistent, runtime.store, runtime.log)
        run_id = runner.create_run([UserMessage(content=[TextPart(text="Run a long task in 3 parts")])]).run_id
        runtime.orchestrator.start(run_id)
        executions = stack.wait_for_executions(run_id, count=2, timeout=120)
        state = state_of(stack, run_id)
        assert state.status == "finished", (state.status, [e["status"] for e in executions])
        # One microVM (one bridge, one program) served every slice, across the continue-as-new.
        assert emulator.microvms_started == 1
        paths = [request.path for request in emulator.requests]
    slices = stack.calls_of("SliceFunction", run_id)
    # More slices than steps (three work steps and the answer): a step spanned slices.
    assert len(slices) > 4 and {s.event["generation"] for s in slices} >= {0, 1}
    assert all(e["status"] == "SUCCEEDED" for e in executions)
    # A 2.5 s step in 1 s slices: steps spanned slices, and none was redone.
    chunks = log_of(stack, run_id)
    assert "reset-step" not in types(chunks) and types(chunks).count("finish") == 1
    executed = [line.split(" ", 1) for line in steps.read_text().splitlines()]
    assert len({pid for pid, _ in executed}) == 1  # one process
    assert len([what for _, what in executed]) == len({what for _, what in executed})  # each step once
    message = assemble_ui_message(chunks)
    work = [(p["toolCallId"], p["state"]) for p in message["parts"] if p["type"] == "tool-work"]
    assert work == [(f"call_work_{i}", "output-available") for i in (1, 2, 3)]
    assert message["parts"][-1] == {"type": "text", "text": "All 3 parts are done.", "state": "done"}
    assert not stack.calls_of("FinalizerFunction")
    stack.record_agentcore("SliceFunction", paths)  # held against its policy when the stack ends
