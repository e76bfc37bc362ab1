"""Call options: what a client (or an event) may pass per run, and how ``prepare_call`` /
``prepare_step`` see and change a turn's settings.

A client sends call options as extra fields of the chat POST body (the AI SDK's ``body`` option:
``{messages, ...body}``); an event sends them as ``detail.callOptions``. They reach the agent only
through the pydantic model it declares (``Agent(call_options=MyOptions)``): validated, dumped to
JSON (they are checkpointed with the run) and handed to the hooks as a ``MyOptions`` instance.
Without such a model they are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .calls import json_ready, maybe_await
from .control import CallOptions, PrepareHook
from .state import CallOverrides, LoopTurnState

RESERVED_BODY_FIELDS = frozenset({"messages", "id", "trigger", "messageId"})
"""Fields of a chat POST body that belong to the transport, not to the call options."""


def body_call_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The call options of a chat POST body: every field the transport itself does not use."""
    return {k: v for k, v in body.items() if k not in RESERVED_BODY_FIELDS}


def call_options_value(model: type[BaseModel] | None, stored: dict[str, Any] | None) -> Any:
    """The call options handed to the hooks: an instance of ``model`` (None without one)."""
    if model is None or stored is None:
        return None
    return model.model_validate(stored)


@dataclass(eq=False, kw_only=True)
class Preparation:
    """Runs ``prepare_call`` (once per run) and ``prepare_step`` (before each model call)."""

    instructions: str | None
    tool_choice: Any
    active_tools: list[str] | None
    settings: dict[str, Any]
    call_options_model: type[BaseModel] | None
    prepare_call: PrepareHook | None
    prepare_step: PrepareHook | None

    async def call(self, state: LoopTurnState) -> None:
        """Run ``prepare_call``; what it decides is checkpointed in ``state.prepared``."""
        options = self.options(state, CallOverrides())
        if self.prepare_call is not None:
            options = (await maybe_await(self.prepare_call(options))) or options
            state.messages = list(options.messages)
            _take_runtime_context(state, options)
        state.prepared = CallOverrides(
            model=options.model, instructions=options.instructions, tool_choice=options.tool_choice,
            active_tools=options.active_tools, settings=options.settings,
        )  # fmt: skip

    async def step(self, state: LoopTurnState) -> CallOptions:
        """The options of the next model call, after ``prepare_step``.

        A ``runtime_context`` it returns replaces the turn's, for this step and the next ones.
        """
        options = self.options(state, state.prepared or CallOverrides())
        if self.prepare_step is not None:
            options = (await maybe_await(self.prepare_step(options))) or options
            _take_runtime_context(state, options)
        return options

    def options(self, state: LoopTurnState, prepared: CallOverrides) -> CallOptions:
        """The turn's current options, with what ``prepare_call`` decided applied."""
        return CallOptions(
            step_number=state.step,
            messages=list(state.messages),
            instructions=prepared.instructions if prepared.instructions is not None else self.instructions,
            model=prepared.model,
            tool_choice=prepared.tool_choice if prepared.tool_choice is not None else self.tool_choice,
            active_tools=prepared.active_tools if prepared.active_tools is not None else self.active_tools,
            settings={**self.settings, **prepared.settings},
            steps=list(state.steps),
            runtime_context=state.runtime_context,
            call_options=call_options_value(self.call_options_model, state.call_options),
        )


def _take_runtime_context(state: LoopTurnState, options: CallOptions) -> None:
    if options.runtime_context is not state.runtime_context:
        state.runtime_context = json_ready(options.runtime_context, "runtime_context")
