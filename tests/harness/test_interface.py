"""The runner's rules for any harness, with a scripted harness (lists of events per slice)."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

from durable_harness.harness import (
    CancelNotice,
    Checkpoint,
    ContinueTurn,
    GeneratorTurn,
    Harness,
    HarnessEvent,
    HarnessOptions,
    StartTurn,
    TurnRequest,
)
from durable_harness.protocol import harness_parts as hp

from tests.harness.support import Turns, parts_of

USAGE = hp.Usage(input_tokens=hp.InputTokens(), output_tokens=hp.OutputTokens())
STOP = hp.FinishReason(unified="stop")


def text(step: int) -> list[HarnessEvent]:
    pid = f"t{step}"
    return [hp.TextStartPart(id=pid), hp.TextDeltaPart(id=pid, delta=f"step {step}. "), hp.TextEndPart(id=pid)]


class Scripted:
    """Step ``n`` of the turn is ``text(n)``, ``finish-step`` and a checkpoint ``{"step": n + 1}``;
    ``last`` steps, then ``finish``. ``tail`` is yielded after ``finish``. Records every request."""

    def __init__(self, last: int = 3, tail: list[HarnessEvent] | None = None) -> None:
        self.last, self.tail = last, tail or []
        self.requests: list[TurnRequest] = []
        self.options = HarnessOptions()

    def create_session(self, session_id: str | None = None) -> str:
        return session_id or "s"

    def open(self, request: TurnRequest) -> GeneratorTurn:
        self.requests.append(request)
        return GeneratorTurn(self._turn(request))

    async def on_cancel(self, notice: CancelNotice) -> None:
        pass

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def run_result(self, state: Any) -> dict[str, Any]:
        return {"lastState": state}

    async def _turn(self, request: TurnRequest) -> AsyncGenerator[HarnessEvent, None]:
        step = 0 if isinstance(request, StartTurn) else int(request.state["step"])  # type: ignore[index]
        while step < self.last:
            for event in text(step):
                yield event
            yield hp.FinishStepPart(finish_reason=STOP, usage=USAGE)
            step += 1
            if step < self.last:  # the last step's checkpoint would stand in front of `finish`
                yield Checkpoint({"step": step})
        yield hp.FinishPart(finish_reason=STOP, total_usage=USAGE)
        for event in self.tail:
            yield event


async def test_a_slice_ends_only_at_a_finish_step_followed_by_a_checkpoint() -> None:
    harness = Scripted()
    assert isinstance(harness, Harness)
    chunks, state = await Turns(harness, slice_seconds=0).ask("go")
    assert state.status == "finished" and state.slices == 3
    assert [type(r).__name__ for r in harness.requests] == ["StartTurn", "ContinueTurn", "ContinueTurn"]
    assert [r.state for r in harness.requests if isinstance(r, ContinueTurn)] == [{"step": 1}, {"step": 2}]
    whole, _ = await Turns(Scripted()).ask("go")
    assert parts_of(chunks) == parts_of(whole)


async def test_a_checkpoint_after_finish_is_the_turns_last_state_and_output() -> None:
    harness = Scripted(tail=[Checkpoint({"step": "done"}, output={"answer": 42})])
    turns = Turns(harness)
    _, state = await turns.ask("go")
    assert state.status == "finished" and state.turn == {"step": "done"}
    assert state.final_result is not None and state.final_result.output == {"answer": 42}
    assert turns.runner.result(state)["lastState"] == {"step": "done"}


async def test_a_part_after_finish_fails_the_run_with_error_and_finish() -> None:
    chunks, state = await Turns(Scripted(tail=text(9))).ask("go")
    assert state.status == "failed" and "after 'finish'" in (state.error or "")
    assert [c["type"] for c in chunks][-2:] == ["error", "finish"]


async def test_an_approval_request_for_an_unknown_call_fails_the_run() -> None:
    request = hp.ToolApprovalRequestPart(approval_id="a1", tool_call_id="nope")
    harness = Scripted(last=1)
    original = harness._turn

    async def with_request(request_: TurnRequest) -> AsyncGenerator[HarnessEvent, None]:
        yield request
        async for event in original(request_):
            yield event

    harness._turn = with_request  # type: ignore[method-assign]
    chunks, state = await Turns(harness).ask("go")
    assert state.status == "failed" and "unknown tool call 'nope'" in (state.error or "")
    assert [c["type"] for c in chunks][-1] == "finish"


async def test_the_minimal_harness_of_the_reference_works() -> None:
    source = (Path(__file__).resolve().parents[2] / "docs" / "harness.md").read_text()
    code = re.search(r"A minimal harness:\n\n```python\n(.*?)```", source, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)
    assert isinstance(namespace["agent"], Harness)
    chunks, state = await Turns(namespace["agent"]).ask("hello there")
    assert state.status == "finished" and parts_of(chunks)[-1]["text"] == "hello there"
