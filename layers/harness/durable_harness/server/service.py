"""The chat service behind the HTTP app: start turns, follow a run's chunk log.

It knows only the ports (checkpoint store, chunk log, orchestrator) and the runner, so the same
service runs locally (SQLite, files, in-process orchestrator) and in Lambda (DynamoDB, S3, Step
Functions).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..agent.execution import answered_approvals
from ..errors import InvalidRequestError, ProtocolError, ToolError
from ..ids import new_id
from ..messages import ModelMessage
from ..ports import Orchestrator
from ..protocol.ui_messages import UIMessage, convert_to_model_messages, parse_ui_messages
from ..runner.runner import Runner
from ..runner.state import RunState
from .notifier import CommitSignal

_FINISH_PREFIX = '{"type":"finish"'
KEEPALIVE = None
"""Yielded by :meth:`ChatService.follow` when the run is idle, so the edge can send a keep-alive."""


@dataclass
class ServiceConfig:
    """Tunables of the chat service."""

    allow_system_messages: bool | None = None
    """Accept client-sent system messages; None follows the agent's ``allow_system_in_messages``."""
    stream_window_seconds: float = 840.0
    """How long one response follows a run before ending without ``finish`` (the client
    reconnects); just under the Lambda timeout when deployed."""
    keepalive_seconds: float = 15.0
    poll_seconds: float = 0.25
    """How often to look at the log when no in-process commit signal arrives."""
    read_batch: int = 512
    max_messages: int = 1000


class ChatService:
    """Starts runs for chat turns and streams their logs."""

    def __init__(
        self,
        runner: Runner,
        orchestrator: Orchestrator,
        *,
        signal: CommitSignal | None = None,
        config: ServiceConfig | None = None,
    ) -> None:
        self.runner = runner
        self.orchestrator = orchestrator
        self.signal = signal
        self.config = config or ServiceConfig()

    async def start_turn(self, body: Any, *, principal: str | None = None) -> RunState:
        """Validate a chat POST body, create its run and start driving it."""
        messages, chat_id = self._parse_body(body)
        model_messages = self._to_model_messages(messages)
        last = messages[-1]
        # A continuation (after an approval) streams into the existing assistant message.
        message_id = last.id if last.role == "assistant" and last.id else new_id("msg")
        state = await asyncio.to_thread(
            self.runner.create_run, model_messages, chat_id=chat_id, principal=principal, message_id=message_id
        )
        self.orchestrator.start(state.run_id)
        return state

    async def load(self, run_id: str) -> RunState:
        """The run's checkpointed state (``RunNotFoundError`` when there is no such run)."""
        return await asyncio.to_thread(self.runner.load, run_id)

    async def count(self, run_id: str) -> int:
        """Chunks currently in the run's log."""
        return await asyncio.to_thread(self.runner.log.count, run_id)

    async def follow(self, run_id: str, start: int) -> AsyncIterator[list[str] | None]:
        """Batches of chunks from ``start`` until ``finish`` or the response window ends.

        Yields ``None`` (:data:`KEEPALIVE`) after a quiet ``keepalive_seconds``.
        """
        cfg = self.config
        deadline = time.monotonic() + cfg.stream_window_seconds
        index, quiet_since = start, time.monotonic()
        while True:
            chunks = await asyncio.to_thread(self.runner.log.read, run_id, index, cfg.read_batch)
            if chunks:
                index += len(chunks)
                quiet_since = time.monotonic()
                for i, chunk in enumerate(chunks):
                    if chunk.startswith(_FINISH_PREFIX):
                        yield chunks[: i + 1]
                        return
                yield chunks
                continue
            now = time.monotonic()
            if now >= deadline:
                return
            if now - quiet_since >= cfg.keepalive_seconds:
                quiet_since = now
                yield KEEPALIVE
            timeout = min(deadline - now, cfg.poll_seconds, cfg.keepalive_seconds)
            if self.signal is not None:
                await self.signal.wait(run_id, index, timeout)
            else:
                await asyncio.sleep(timeout)

    # --- validation ------------------------------------------------------------------------------

    def _parse_body(self, body: Any) -> tuple[list[UIMessage], str | None]:
        if not isinstance(body, dict):
            raise InvalidRequestError("The request body must be a JSON object with a 'messages' array.")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise InvalidRequestError("'messages' must be a non-empty array of UI messages.")
        if len(raw) > self.config.max_messages:
            raise InvalidRequestError(f"'messages' has {len(raw)} items; at most {self.config.max_messages}.")
        chat_id = body.get("id")
        if chat_id is not None and (not isinstance(chat_id, str) or not 0 < len(chat_id) <= 200):
            raise InvalidRequestError("'id' (the chat id) must be a string of 1 to 200 characters.")
        try:
            messages = parse_ui_messages(raw)
        except ProtocolError as exc:
            raise InvalidRequestError(f"Invalid messages: {exc}", code="invalid_messages") from exc
        allow = self.config.allow_system_messages
        if allow is None:
            allow = bool(getattr(self.runner.agent, "allow_system_in_messages", False))
        if not allow:
            for i, message in enumerate(messages):
                if message.role == "system":
                    raise InvalidRequestError(
                        f"messages[{i}] has role 'system'; system messages are not accepted from clients "
                        "(set the agent's instructions instead).",
                        code="system_message_not_allowed",
                    )
        if messages[-1].role not in ("user", "assistant"):
            raise InvalidRequestError(
                "The last message must be a user message (or an assistant message carrying tool approval responses)."
            )
        return messages, chat_id

    def _to_model_messages(self, messages: list[UIMessage]) -> list[ModelMessage]:
        try:
            converted = convert_to_model_messages(messages)
        except (ProtocolError, ValueError) as exc:
            raise InvalidRequestError(f"Invalid messages: {exc}", code="invalid_messages") from exc
        try:
            answered_approvals(converted, None, {})  # every answer must match a request in the history
        except ToolError as exc:
            raise InvalidRequestError(f"Invalid approval: {exc}.", code="unknown_approval") from exc
        return converted
