"""What a slice appends, and what it takes from the run's past: the chunks a dead slice already
appended that a replaying harness sends again (``HarnessOptions.replays_tail``), and the state of
the chat's previous turn (``StartTurn.session_state``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from ..harness.interface import HarnessOptions
from ..ports import CheckpointStore, ChunkLog
from ..protocol.ui_chunks import ResetStepChunk, UIMessageChunk, encode_ui_chunk
from ..storage.writer import ChunkWriter
from .state import RunState, foreign, state_of

logger = logging.getLogger("durable_harness.runner.runner")  # the runner's own logger


def write_chunks(writer: ChunkWriter, tail: list[str] | None, chunks: Sequence[UIMessageChunk]) -> None:
    """Append ``chunks``; those a dead slice already appended (``tail``, in order) are skipped.
    A chunk that differs from the tail ends the matching: the client is sent ``reset-step`` first."""
    for chunk in chunks:
        encoded = encode_ui_chunk(chunk)
        if tail:
            if json.loads(tail[0]) == json.loads(encoded):
                tail.pop(0)
                continue
            logger.warning("the harness's replay differs from what the dead slice sent; resetting the step")
            tail.clear()
            if chunk.type != "reset-step":
                writer.write(encode_ui_chunk(ResetStepChunk()))
        writer.write(encoded)



async def replayed_tail(log: ChunkLog, options: HarnessOptions, state: RunState, count: int) -> list[str] | None:
    """What a dead slice appended after the checkpoint, when the harness replays it exactly
    (``replays_tail``): matched, not sent again. None: nothing to match (or no such harness)."""
    if not options.replays_tail or count <= state.stream.chunk_count:
        return None
    logger.info("run %s: previous attempt died mid-step; the harness replays what it sent", state.run_id)
    return list(await asyncio.to_thread(log.read, state.run_id, state.stream.chunk_count))


def previous_turn_state(store: CheckpointStore, chat_id: str | None, run_id: str, agent_id: str | None) -> Any:
    """The state of the last checkpoint of the chat's previous turn (None: a first turn, or a
    store that cannot list a chat's runs)."""
    list_runs = getattr(store, "list_runs", None)
    if chat_id is None or list_runs is None:
        return None
    for cp in list_runs(chat_id=chat_id, limit=5):
        previous = state_of(cp)
        if previous.run_id != run_id and previous.terminal and not foreign(previous.agent, agent_id):
            return previous.turn
    return None


__all__ = ["previous_turn_state", "replayed_tail", "write_chunks"]
