"""Which harness checkpoints the runner writes: deferrable ones are held until the next supersedes
them (or the grace period runs out), and a held one still fences the slice before tools run."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from durable_harness import Agent
from durable_harness.errors import FencedError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step
from durable_harness.ports import CheckpointStore, StoredRun
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from durable_harness.tools import tool
from pydantic import BaseModel

from tests.support import SimulatedCrash, log_chunks, message_of


class Item(BaseModel):
    name: str


class SeenStore:
    """A store that keeps the turn of every state it wrote, and signals each write."""

    def __init__(self, inner: CheckpointStore) -> None:
        self.inner = inner
        self.turns: list[dict[str, Any]] = []
        self.wrote = threading.Condition()

    def create(self, checkpoint: StoredRun) -> StoredRun:
        return self.inner.create(checkpoint)

    def load(self, run_id: str) -> StoredRun:
        return self.inner.load(run_id)

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        return self.inner.claim(run_id, expected_version)

    def version(self, run_id: str) -> int:
        return self.inner.version(run_id)

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        saved = self.inner.save(checkpoint, expected_version)
        with self.wrote:
            self.turns.append(json.loads(checkpoint.state)["turn"] or {})
            self.wrote.notify_all()
        return saved

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> bool:
        with self.wrote:
            return self.wrote.wait_for(lambda: any(predicate(t) for t in self.turns), timeout)


def model_call_checkpoint(turn: dict[str, Any]) -> bool:
    """The state written right after a model call asked for tools (none of them has run)."""
    return turn.get("phase") == "tools" and not turn.get("step_outcomes")


def prompt() -> list[Any]:
    return [UserMessage(content=[TextPart(text="look it up")])]


async def test_a_step_whose_tools_are_quick_writes_its_model_call_and_results_with_its_end() -> None:
    @tool
    def lookup(input: Item) -> str:
        """Look up."""
        return f"{input.name}: found"

    model = ScriptedModel([tool_calls_step(("c1", "lookup", {"name": "a"}), ("c2", "lookup", {"name": "b"})),
                           text_step("Both found.")])  # fmt: skip
    store = SeenStore(MemoryCheckpointStore())
    runner = Runner(Agent(model=model, tools=[lookup], tool_call_concurrency=1), store, MemoryChunkLog(),
                    checkpoint_grace=None)  # fmt: skip
    state = await runner.run(runner.create_run(prompt()).run_id)
    assert state.status == "finished"
    assert not any(model_call_checkpoint(t) for t in store.turns)  # superseded, never written
    # c1's result was written on its own (c2 was still to run); c2's with the step's end.
    assert [o["tool_call_id"] for o in store.turns[0]["step_outcomes"]] == ["c1"]
    assert store.turns[1]["phase"] == "model" and store.turns[1]["step"] == 1
    results = [p["toolCallId"] for m in store.turns[1]["messages"] if m["role"] == "tool" for p in m["content"]]
    assert results == ["c1", "c2"]


async def test_a_tool_slower_than_the_grace_period_runs_with_its_model_call_durable() -> None:
    """The model call's checkpoint is written while the tool runs; a crash then (the slice dies in
    the tool) redoes only the tool, not the model call."""
    store = SeenStore(MemoryCheckpointStore())
    crashes = [1]

    @tool
    def lookup(input: Item) -> str:
        """Look up (slowly: until the model call's checkpoint is written)."""
        assert store.wait_for(model_call_checkpoint), "the held checkpoint was never written"
        if crashes[0]:
            crashes[0] -= 1
            raise SimulatedCrash("the slice died while the tool ran")
        return f"{input.name}: found"

    model = ScriptedModel([tool_calls_step(("c1", "lookup", {"name": "a"})), text_step("Found.")])
    log = MemoryChunkLog()
    runner = Runner(Agent(model=model, tools=[lookup]), store, log, flush_interval=0, checkpoint_grace=0.05)
    run_id = runner.create_run(prompt()).run_id
    with pytest.raises(SimulatedCrash):
        await runner.run_slice(run_id)
    assert len(model.requests) == 1 and runner.load(run_id).turn["phase"] == "tools"
    state = await runner.run_slice(run_id)
    assert state.status == "finished"
    assert len(model.requests) == 2  # the answer step only: the first model call was not repeated
    parts = message_of(log_chunks(log, run_id))["parts"]
    assert [(p["toolCallId"], p["state"]) for p in parts if p["type"] == "tool-lookup"] == [("c1", "output-available")]


async def test_a_slice_fenced_off_after_its_model_call_runs_no_tool() -> None:
    """Nothing is written after the model call when the tools are quick, but the slice still checks
    that it holds the run before they start: a cancel (or a newer slice) that claimed it meanwhile
    stops it there."""
    ran: list[str] = []
    inner = MemoryCheckpointStore()

    @tool
    def lookup(input: Item) -> str:
        """Look up."""
        ran.append(input.name)
        return "found"

    created: list[str] = []

    def claim_meanwhile(request: Any, index: int) -> Any:
        run_id = created[0]
        inner.claim(run_id, inner.version(run_id))  # another slice (or a cancel) takes the run
        return tool_calls_step(("c1", "lookup", {"name": "a"}))

    runner = Runner(Agent(model=FunctionModel(claim_meanwhile), tools=[lookup]), inner, MemoryChunkLog(),
                    checkpoint_grace=None)  # fmt: skip
    run_id = runner.create_run(prompt()).run_id
    created.append(run_id)
    with pytest.raises(FencedError):
        await runner.run_slice(run_id)
    assert ran == []
