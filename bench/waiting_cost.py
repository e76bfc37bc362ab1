"""Waiting cost: what a run parked on an event costs per hour of waiting, deployed (issue 21, D16).

The real ``template.yaml`` in moto (``tests/deploy/stack.py``, through ``_deployed.Metered``): a run
whose tool records a step and waits for an event (``tests.deploy.agents:build_wait_agent``) parks in
the state machine's ``AwaitEvent`` task; the script watches it for ``--seconds`` of waiting, then
delivers the event through the chat function's run API and lets the run finish. Counted, during
the wait and for the park and the resume themselves: AWS requests of every function (by
operation), slice invocations and their Lambda time, and Step Functions state transitions (what
Standard bills). The figures per hour of waiting scale what the wait cost (nothing runs, so
nothing grows with it); the fixed cost of one park and resume is printed beside them, priced.

Target: zero Lambda time (and zero requests) while a run waits.

    .venv/bin/python bench/waiting_cost.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import time
from collections import Counter

from _common import PRICES, machine, price_banner, table
from _deployed import Metered
from _targets import report

WAIT_AGENT = "tests.deploy.agents:build_wait_agent"


def _transitions(metered: Metered, run_id: str) -> int:
    """State transitions so far (its executions' ``*StateEntered`` events)."""
    executions = [e for e in metered.stack.executions() if e["name"].startswith(run_id)]
    return sum(
        1 for e in executions for h in metered.stack.history(e["executionArn"]) if h["type"].endswith("StateEntered")
    )


def _parked(metered: Metered, run_id: str) -> bool:
    from durable_harness.aws.table import Head

    item = (
        metered.stack.client("dynamodb")
        .get_item(
            TableName=metered.stack.functions["SliceFunction"].env["RUNS_TABLE"],
            Key={"pk": {"S": run_id}, "sk": {"S": "run"}},
        )
        .get("Item", {})
    )
    return Head.EVENT_TOKEN in item


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the run waits (default 3)")
    args = parser.parse_args()
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "true"}.items():  # fmt: skip
        os.environ.setdefault(name, value)
    overrides = {"Agent": WAIT_AGENT, "ModelId": "demo", "AuthMode": "none", "SliceSeconds": "0"}
    with contextlib.redirect_stdout(io.StringIO()), Metered(overrides) as metered:  # the handlers log to stdout
        from tests.deploy.chat import call, sample_event, with_path
        from tests.deploy.helpers import start_run

        run_id = start_run(metered.stack, "Build acme.")
        deadline = time.monotonic() + 60
        while not _parked(metered, run_id):
            if time.monotonic() > deadline:
                raise SystemExit("the run never parked")
            time.sleep(0.02)
        parked_at = len(metered.meter.requests), len(metered.invocations), _transitions(metered, run_id)
        began = time.monotonic()
        time.sleep(args.seconds)  # the wait itself: what is measured is that nothing happens in it
        waited = time.monotonic() - began
        during = len(metered.meter.requests), len(metered.invocations), _transitions(metered, run_id)
        lambda_ms = 1000 * sum(s for _, s in metered.invocations[parked_at[1] :])
        app = metered.chat_app()
        post = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/events/build-done")
        post["body"] = json.dumps({"status": "green"})
        asyncio.run(call(app, post))
        metered.stack.wait_for_executions(run_id, timeout=60)
        after = len(metered.meter.requests), len(metered.invocations), _transitions(metered, run_id)
        resume_ops = Counter(r.op for r in metered.meter.requests[during[0] : after[0]])
    per_hour = 3600 / waited
    requests_wait = during[0] - parked_at[0]
    invocations_wait = during[1] - parked_at[1]
    transitions_wait = during[2] - parked_at[2]
    transitions_resume = after[2] - during[2]
    dollars = after[2] * PRICES["sfn_transition_per_1k"] / 1000
    print(machine())
    print(price_banner())
    print(
        table(
            ["while waiting", f"in {waited:.1f} s", "per hour of waiting"],
            [
                ["AWS requests (every function)", requests_wait, f"{requests_wait * per_hour:.0f}"],
                ["slice invocations", invocations_wait, f"{invocations_wait * per_hour:.0f}"],
                ["Lambda time (ms)", f"{lambda_ms:.0f}", f"{lambda_ms * per_hour:.0f}"],
                ["state transitions", transitions_wait, f"{transitions_wait * per_hour:.0f}"],
            ],
        )
    )
    print(
        f"\nThe whole run, whatever the wait's length (one park lasts up to 30 days): {parked_at[2]} state "
        f"transitions from its start to the park, {transitions_resume} from the event to its end (Step Functions "
        f"${dollars:.6f} in all); requests of the delivery and the resumed run: {dict(sorted(resume_ops.items()))}."
    )
    met = lambda_ms == 0 and requests_wait == 0 and invocations_wait == 0 and transitions_wait == 0
    report("waits.idle_cost", f"{lambda_ms:.0f} ms Lambda, {requests_wait} requests, {transitions_wait} transitions "
           f"in {waited:.1f} s of waiting", met,
           f"while parked: {invocations_wait} slice invocation(s), {requests_wait} AWS request(s), "
           f"{transitions_wait} state transition(s), {lambda_ms:.0f} ms of Lambda time")  # fmt: skip


if __name__ == "__main__":
    main()
