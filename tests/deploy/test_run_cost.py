"""``GET /api/runs/{id}`` of the deployed chat function carries the run's cost estimate.

Everything as deployed, in moto (the chat function's app with its environment from template.yaml,
the real state machine and slice handler): the estimate is priced from what the run recorded, and
what it says about the run's slices, invocations and state transitions is checked against what
the stack actually did.
"""

from __future__ import annotations

import pytest
from durable_harness.telemetry.costs import PRICE_DATE, sfn_dollars

from .chat import call, load_chat_app, sample_event, with_path
from .helpers import runtime_of, state_of
from .stack import MotoStack


async def test_a_deployed_runs_status_has_its_cost_from_what_the_stack_ran(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    post = await call(app, sample_event("chat-post.json"))
    assert post.status == 200, post.body
    run_id = post.headers["x-workflow-run-id"]
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution

    status = await call(app, with_path(sample_event("chat-get.json"), f"/api/runs/{run_id}"))
    assert status.status == 200, status.body
    cost = status.json()["cost"]
    assert cost["priceDate"] == PRICE_DATE
    assert set(cost["parts"]) == {"lambda", "stepFunctions", "dynamodb", "s3", "logsAndTracing"}
    assert all(v > 0 for v in cost["parts"].values()), cost["parts"]
    assert cost["usd"] == pytest.approx(sum(cost["parts"].values()))

    # What it is derived from is what the run recorded in its record and log.
    state = state_of(stack, run_id)
    recorded = cost["basis"]["recorded"]
    assert recorded["slices"] == state.slices > 1  # SliceSeconds 0: a slice per step
    assert recorded["chunks"] == status.json()["chunkCount"] == len(runtime_of(stack).log.read(run_id, 0))
    assert recorded["recordWrites"] == runtime_of(stack).store.load(run_id).version
    # Its estimates match the stack: the chat function ran the first slice, the slice function the
    # others, and the execution took the transitions priced.
    estimated = cost["basis"]["estimated"]
    slice_calls = len(stack.calls_of("SliceFunction", run_id))
    assert estimated["invocations"] == {"ChatFunction": 1, "SliceFunction": slice_calls}
    entered = [e for e in stack.history(execution["executionArn"]) if e["type"].endswith("StateEntered")]
    assert estimated["stateTransitions"] == len(entered)
    assert cost["parts"]["stepFunctions"] == pytest.approx(sfn_dollars(len(entered)))
