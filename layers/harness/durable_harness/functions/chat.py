"""The deployed chat function's composition root: its ASGI app over the AWS runtime, built from the
settings (``functions/chat/app.py``; locally :func:`durable_harness.server.local.local_kit`)."""

from __future__ import annotations

from ..aws.events import announce_slice
from ..aws.runtime import SAFETY_MARGIN_SECONDS, function_parts
from ..server.app import ChatApp
from ..server.auth import authenticator_from_env
from ..server.inline import InlineSlices
from ..server.notifier import CommitSignal
from ..server.service import ChatService, ServiceConfig
from ..server.static import web_page_dir
from ..settings import Settings
from ..telemetry.costs import DeployedFunctions

__all__ = ["chat_app"]


def chat_app(settings: Settings) -> ChatApp:
    """The deployed chat function's app: the AWS runtime, a first slice run in the function itself
    (decision D14, :mod:`durable_harness.server.inline`; ``INLINE_FIRST_SLICE=0`` leaves every
    slice to the slice function), streams followed from the commit signal or the log."""
    signal = CommitSignal()  # the commits of the first slices this function runs itself
    parts = function_parts(settings, on_commit=signal.notify)
    runtime, runner = parts.runtime, parts.runner
    # A run written elsewhere (by the slice function) is followed by reading the log's new items
    # with one Query when the writer's next flush is due, or every STREAM_POLL_SECONDS until it
    # knows, backing off to 1 s while the run is quiet.
    window = settings.stream_window_seconds
    inlined = settings.inline_first_slice and runtime.handover is not None
    # What the run API prices a run's cost with: this function's memory (Lambda sets it), the slice
    # function's is template.yaml's.
    functions = DeployedFunctions(
        chat_mb=settings.function_memory_mb, flush_seconds=settings.stream_flush_seconds, inline_first_slice=inlined
    )
    config = ServiceConfig(
        stream_window_seconds=window, poll_seconds=settings.stream_poll_seconds, idle_poll_seconds=1.0, cost=functions
    )
    events = runtime.events
    inline = None
    if inlined and runtime.handover is not None:
        # The slice must end before the response window does (a step may overrun the budget: the
        # same minute the slice function keeps back before its timeout).
        budget = max(0.0, min(settings.slice_seconds, window - SAFETY_MARGIN_SECONDS))
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
        authenticator=authenticator_from_env(settings.environ, default_mode="token"),
        static_dir=web_page_dir(settings.environ),  # the chat page at `/`, when built into the layer and enabled
        wake=runtime.waker.wake if runtime.waker is not None else None,  # a parked run's execution
    )
