"""Entry point of the chat function: the ASGI app (served by serve.py, behind the Lambda Web Adapter).

Deployed (``RUNS_TABLE`` set by the template) it serves the AWS runtime: run records in DynamoDB,
the chunk log in S3, runs driven by the Step Functions state machine. A chat POST runs the new
run's first slice in this function and streams it from the commit signal, handing the run over to
the state machine at its end (decision D14, ``durable_harness.server.inline``;
``INLINE_FIRST_SLICE=0`` leaves every slice to the slice function). CORS is answered by the
Function URL (its ``Cors`` settings), so the app adds no CORS headers of its own there.

Locally (no ``RUNS_TABLE``) it serves the local kit: embedded storage in ``DATA_DIR``, the agent
named by ``AGENT``, in-process slices.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from durable_harness.cli import agent_spec, load_agent
from durable_harness.hardening import deny_proc_reads
from durable_harness.server.app import ChatApp
from durable_harness.server.auth import authenticator_from_env
from durable_harness.server.service import ServiceConfig
from durable_harness.server.static import web_page_dir
from durable_harness.telemetry.costs import DeployedFunctions

deny_proc_reads()  # the programs and subprocesses we start cannot read our environment or memory


def build_app(env: Mapping[str, str] = os.environ) -> ChatApp:
    """The chat app for this environment: the AWS runtime when ``RUNS_TABLE`` is set, else the local kit."""
    spec = agent_spec(env)
    agent = load_agent(spec)
    if not env.get("RUNS_TABLE"):
        from durable_harness.server.local import build_local_kit  # SQLite and files: not loaded when deployed

        kit = build_local_kit(
            agent,
            env.get("DATA_DIR", "/tmp/durable-harness"),
            slice_seconds=float(env.get("SLICE_SECONDS", "600")),
            authenticator=authenticator_from_env(env, default_mode="none", local=True),
            agent_id=spec,
        )
        kit.runner.approval_secret.check()  # a secret under 32 bytes stops the start, not an approval
        return kit.app

    from durable_harness.aws.events import announce_slice
    from durable_harness.aws.runtime import build_runtime
    from durable_harness.runner.runner import Runner
    from durable_harness.server.inline import InlineSlices
    from durable_harness.server.notifier import CommitSignal
    from durable_harness.server.service import ChatService

    runtime = build_runtime(env)
    signal = CommitSignal()  # the commits of the first slices this function runs itself
    flush = float(env.get("STREAM_FLUSH_SECONDS", "0.07"))
    runner = Runner(agent, runtime.store, runtime.log, flush_interval=flush, on_commit=signal.notify, agent_id=spec)
    runner.approval_secret.check()  # read now: a secret under 32 bytes fails the function's start-up
    # A run written elsewhere (by the slice function) is followed by reading the log's new items
    # with one Query when the writer's next flush is due, or every 50 ms until it knows, backing
    # off to 1 s while the run is quiet.
    window = float(env.get("STREAM_WINDOW_SECONDS", "840"))
    inlined = env.get("INLINE_FIRST_SLICE", "1") != "0" and runtime.handover is not None
    # What the run API prices a run's cost with: this function's memory (Lambda sets it), the slice
    # function's is template.yaml's.
    functions = DeployedFunctions(
        chat_mb=int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")), flush_seconds=flush, inline_first_slice=inlined
    )
    config = ServiceConfig(
        stream_window_seconds=window,
        poll_seconds=float(env.get("STREAM_POLL_SECONDS", "0.05")),
        idle_poll_seconds=1.0,
        cost=functions,
    )
    events = runtime.events
    inline = None
    if inlined:
        # The slice must end before the response window does (a step may overrun the budget: the
        # same minute the slice function keeps back before its timeout).
        budget = max(0.0, min(float(env.get("SLICE_SECONDS", "600")), window - 60.0))
        inline = InlineSlices(
            runner,
            runtime.handover,
            signal,
            budget_seconds=budget,
            on_slice=lambda before, state: announce_slice(events, before, state, runner.result),
        )
    # "Run Cancelled" is a lifecycle event the chat function causes; slices (its own first ones
    # included) announce the rest.
    announce = events.publish if events is not None else None
    service = ChatService(runner, runtime.orchestrator, signal=signal, config=config, announce=announce, inline=inline)
    return ChatApp(
        service,
        authenticator=authenticator_from_env(env, default_mode="token"),
        static_dir=web_page_dir(env),  # the chat page at `/`, when built into the layer and enabled
        wake=runtime.waker.wake if runtime.waker is not None else None,  # a parked run's execution
    )


app = build_app()
