"""A run in flight across the upgrade from the S3 chunk log: its first slice ran on the previous
code (a head item and one S3 object per append), the next ones run on this code under the real
state machine. The log stays readable throughout, and the run ends whole (see
durable_harness/aws/_loglegacy.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from durable_harness.messages import TextPart, UserMessage
from durable_harness.runner.runner import Runner
from durable_harness.storage.memory import MemoryChunkLog

from . import agents
from .chat import call, load_chat_app, sample_event, with_path
from .helpers import log_of, runtime_of, state_of, types
from .stack import MotoStack
from .test_state_machine import assert_complete_turn


def as_previous_log(stack: MotoStack, run_id: str, chunks: list[str], epoch: int) -> None:
    """Leave ``chunks`` as the previous chunk log did: a head item and an object per append (here
    two appends), and no item of this log's layout (the record's creation wrote none then)."""
    runtime = runtime_of(stack)
    ddb, table = stack.client("dynamodb"), runtime.store.table_name
    bucket = stack.functions["ChatFunction"].env["CHUNK_BUCKET"]
    found = ddb.query(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": run_id}}
    )["Items"]
    for item in found:
        if item["sk"]["S"].startswith("c#"):
            ddb.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
    inc = runtime.store.incarnation(run_id)
    half = len(chunks) // 2
    for start, part in ((0, chunks[:half]), (half, chunks[half:])):
        key = f"runs/{run_id}/{inc}/seg/{10**12 - start:013d}-{10**12 - epoch:013d}"
        stack.client("s3").put_object(Bucket=bucket, Key=key, Body="".join(c + "\n" for c in part).encode())
    head = {"pk": {"S": run_id}, "sk": {"S": "log"}, "count": {"N": str(len(chunks))}, "epoch": {"N": str(epoch)},
            "writer": {"N": str(epoch)}, "writer_from": {"N": "0"}, "inc": {"S": inc}}  # fmt: skip
    ddb.put_item(TableName=table, Item=head)


async def test_a_run_whose_first_slice_wrote_the_previous_log_is_read_and_finished_on_the_new_one(
    stack: MotoStack,
) -> None:
    runtime = runtime_of(stack)
    # The first slice, as the previous code ran it: one step (SliceSeconds=0), its chunks kept aside.
    before = MemoryChunkLog()
    runner = Runner(agents.build_agent(), runtime.store, before)
    run_id = runner.create_run([UserMessage(content=[TextPart(text="Check alpha and beta.")])]).run_id
    state = await runner.run_slice(run_id, budget_seconds=0)
    assert state.status == "ready_for_next_step" and state.slices == 1
    first = before.read(run_id, 0)
    as_previous_log(stack, run_id, first, epoch=runtime.store.load(run_id).epoch)

    # Readers on the new code read it as it is.
    assert runtime_of(stack).log.read(run_id, 0) == first
    assert runtime_of(stack).log.tail(run_id, 3) == (len(first), first[-3:])

    # The next slices run on the new code, driven by the real state machine.
    await asyncio.to_thread(runtime.orchestrator.start, run_id)
    [execution] = await asyncio.to_thread(stack.wait_for_executions, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    assert state_of(stack, run_id).status == "finished"
    chunks = log_of(stack, run_id)
    assert [json.dumps(c, separators=(",", ":")) for c in chunks[: len(first)]] == first
    assert_complete_turn(chunks)
    assert "reset-step" not in types(chunks)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    # The previous log is fenced off, and the whole log is sealed in the new layout.
    ddb, table = stack.client("dynamodb"), runtime.store.table_name
    head = ddb.get_item(TableName=table, Key={"pk": {"S": run_id}, "sk": {"S": "log"}})["Item"]
    assert int(head["epoch"]["N"]) > 1
    index = index_item(ddb, table, run_id)
    assert int(index["sealed"]["N"]) == len(chunks) and int(index["ends"]["L"][0]["N"]) == len(first)

    # A client resuming it over the chat URL gets it whole, from any index.
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    for query, expected in (("startIndex=0", chunks), ("startIndex=2", chunks[2:]), ("startIndex=-5", chunks[-5:])):
        resumed = await call(app, with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", query))
        assert resumed.status == 200, resumed.body
        assert resumed.chunks() == expected, query


def index_item(ddb: Any, table: str, run_id: str) -> dict[str, Any]:
    """The run's (only) segment index item."""
    found = ddb.query(
        TableName=table,
        KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
        ExpressionAttributeValues={":p": {"S": run_id}, ":c": {"S": "c#"}},
    )["Items"]
    [index] = [item for item in found if item["sk"]["S"].endswith("#~")]
    return index
