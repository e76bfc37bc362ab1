"""The durable runner against the DynamoDB + S3 adapters (moto): whole turns, slices, finalize."""

from __future__ import annotations

import json
from typing import Any

from durable_harness import Agent, tool
from durable_harness.aws import DynamoCheckpointStore, DynamoChunkLog
from durable_harness.demo import build_demo_agent
from durable_harness.messages import ModelMessage, TextPart, UserMessage
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.runner import LocalOrchestrator, Runner
from pydantic import BaseModel

from tests.aws.conftest import BUCKET, TABLE, new_log
from tests.aws.test_dynamodb import item_bytes, records
from tests.support import message_of


class Page(BaseModel):
    page: int


PROMPT: list[ModelMessage] = [UserMessage(content=[TextPart(text="What is the weather in Paris?")])]


def parsed(log: DynamoChunkLog, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(chunk) for chunk in log.read(run_id, 0)]


async def test_a_full_turn_ends_with_finish_in_the_deployed_log(
    store: DynamoCheckpointStore, log: DynamoChunkLog, ddb: Any, s3: Any
) -> None:
    runner = Runner(build_demo_agent(delay=0), store, log)
    state = runner.create_run(PROMPT, chat_id="chat-1")
    final = await runner.run(state.run_id)
    assert final.status == "finished"
    chunks = parsed(new_log(ddb, s3), state.run_id)  # as another process (the chat function) sees it
    assert chunks[0]["type"] == "start" and chunks[-1]["type"] == "finish"
    assert [c for c in chunks if c["type"] == "tool-output-available"]
    assert store.load(state.run_id).status == "finished"
    assert final.stream.chunk_count == len(chunks) == log.count(state.run_id)
    message = message_of(chunks)
    assert any(part["type"] == "tool-get_weather" for part in message["parts"])


async def test_time_sliced_run_gives_the_same_stream_across_claims(
    store: DynamoCheckpointStore, log: DynamoChunkLog, ddb: Any, s3: Any
) -> None:
    whole = Runner(build_demo_agent(delay=0), store, log)
    reference = whole.create_run(PROMPT, message_id="msg_1").run_id
    await whole.run(reference)

    # Each slice in a fresh "Lambda": new adapter objects, cold caches, a new claim and epoch.
    run_id = whole.create_run(PROMPT, message_id="msg_1").run_id
    slices = 0
    while True:
        fresh = Runner(build_demo_agent(delay=0), DynamoCheckpointStore(store.table_name, client=ddb), new_log(ddb, s3))
        state = await fresh.run_slice(run_id, budget_seconds=0)
        slices += 1
        if state.terminal:
            break
    assert slices > 1 and state.status == "finished"
    assert store.load(run_id).epoch == slices

    def comparable(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # The demo model's tool call ids and timings are deterministic; only token counts may vary.
        return [{k: v for k, v in c.items() if k not in ("messageMetadata", "usage")} for c in chunks]

    assert comparable(parsed(log, run_id)) == comparable(parsed(log, reference))


async def test_cancel_through_the_local_orchestrator_ends_the_log_with_finish(
    store: DynamoCheckpointStore, log: DynamoChunkLog
) -> None:
    runner = Runner(build_demo_agent(delay=0), store, log)
    orchestrator = LocalOrchestrator(runner, slice_seconds=0)
    run_id = runner.create_run(PROMPT).run_id
    await runner.run_slice(run_id, budget_seconds=0)  # one step in, then cancelled
    finalized = await runner.finalize(run_id, status="cancelled")
    assert finalized.status == "cancelled"
    chunks = parsed(log, run_id)
    assert chunks[-1]["type"] == "finish"
    assert [c["type"] for c in chunks].count("finish") == 1
    # A slice that starts after the cancel sees a terminal run and writes nothing.
    count = log.count(run_id)
    await orchestrator.drive(run_id)
    assert log.count(run_id) == count


async def test_a_run_whose_history_outgrows_a_dynamodb_item_checkpoints_every_step(
    ddb: Any, s3: Any, log: DynamoChunkLog
) -> None:
    """Twelve tool steps of 40 KB results: the history (about 500 KB) is more than one DynamoDB item
    holds (400 KB). Each step writes its own record and the head; no item holds the history, and
    nothing needs offloading to S3 (the whole state used to be rewritten in one item every time)."""

    @tool
    def fetch(input: Page) -> str:
        """Fetch a page."""
        return f"page {input.page}: " + "x" * 40_000

    steps = [tool_calls_step((f"c{i}", "fetch", {"page": i})) for i in range(12)]
    agent = Agent(model=ScriptedModel([*steps, text_step("Read them all.")]), tools=[fetch])
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET)
    runner = Runner(agent, store, log, flush_interval=0)
    run_id = runner.create_run(PROMPT).run_id
    state = await runner.run(run_id)
    assert state.status == "finished"
    loaded = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET).load(run_id)
    assert len(loaded.state) > 480_000 and json.loads(loaded.state)["turn"]["step"] == 13  # 12 tool steps, 1 answer
    found = records(ddb, run_id)
    assert len(found) >= 12 and max(item_bytes(r) for r in found.values()) < 50_000
    assert not s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/state/").get("KeyCount")
    assert parsed(log, run_id)[-1]["type"] == "finish"
