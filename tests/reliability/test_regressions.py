"""Bugs the reliability suites found, one regression test each (all fixed since: a write token in
the DynamoDB store and a write id in the chunk log recognise a write whose reply was lost; a
retried cancel completes an unfinished cancel before answering).


1. An ambiguous DynamoDB write stops the run for good. DynamoDB may apply a conditional write and
   still answer 500 (``InternalServerError``) or time out; botocore then retries the request by
   itself, the retry fails its condition against the write that did land, and the adapter reports
   ``FencedError`` (``DynamoCheckpointStore.save``/``claim``) or ``LogConflictError``
   (the chunk log's commit). The runner takes that for "a newer slice owns the run",
   and the orchestrator (locally, and the state machine's ``fenced`` result when deployed) stops
   driving the run quietly: it never finishes and its log never gets ``finish`` (D2).

2. A cancel that dies between its terminal checkpoint and appending ``finish`` is never completed.
   ``ChatService.cancel`` answers a retried cancel of a run whose checkpoint says ``cancelled``
   with 409 and repairs nothing, while the orchestrator was already stopped by the first cancel:
   nothing appends the recorded terminal chunks, so followers of the run wait for ``finish``
   forever (D2). (``Runner.finalize`` itself would repair it; the service never calls it again.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.errors import InvalidRequestError
from durable_harness.runner import LocalOrchestrator, Runner
from durable_harness.server.service import ChatService
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from moto import mock_aws

from tests.aws.conftest import BUCKET, TABLE
from tests.reliability.backends import aws_clients
from tests.reliability.faults import FaultInjector, fast_client_backoff
from tests.reliability.scenario import PROMPT, CrashPlan, PlannedLog, PlannedStore, Timeline, make_agent
from tests.support import SimulatedCrash, log_chunks


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fast_client_backoff(monkeypatch)
    with mock_aws():
        yield


def aws_runner(store_ddb: Any, log_ddb: Any, s3: Any) -> tuple[Runner, Any, Any]:
    from durable_harness.aws import DynamoCheckpointStore, DynamoChunkLog

    store = DynamoCheckpointStore(TABLE, client=store_ddb, s3_client=s3, bucket=BUCKET)
    log = DynamoChunkLog(TABLE, dynamodb_client=log_ddb, s3_client=s3, bucket=BUCKET)
    return Runner(make_agent(Timeline(), 1), store, log, flush_interval=0), store, log


async def test_a_checkpoint_write_whose_reply_was_lost_does_not_stop_the_run(moto: None) -> None:
    store_ddb, s3 = aws_clients(max_attempts=5)
    log_ddb, _ = aws_clients(max_attempts=5)
    runner, _, log = aws_runner(store_ddb, log_ddb, s3)
    run_id = runner.create_run(PROMPT).run_id
    # The store's requests: Query (load), UpdateItem (claim), TransactWriteItems (the first save):
    # DynamoDB applies that save but its answer is lost (500); botocore retries it once.
    faults = FaultInjector(every=3, lost_reply=True, operations=frozenset({"TransactWriteItems"})).attach(store_ddb)
    state = await LocalOrchestrator(runner, slice_seconds=0, retry_delay=0).drive(run_id)
    faults.armed = False
    assert faults.total >= 1
    assert state is not None and state.status == "finished", state  # today: None (stopped as "fenced")
    assert log_chunks(log, run_id)[-1]["type"] == "finish"


async def test_a_chunk_log_commit_whose_reply_was_lost_does_not_stop_the_run(moto: None) -> None:
    store_ddb, s3 = aws_clients(max_attempts=5)
    log_ddb, _ = aws_clients(max_attempts=5)
    runner, _, log = aws_runner(store_ddb, log_ddb, s3)
    run_id = runner.create_run(PROMPT).run_id
    # Every other chunk-log write (markers and appends) is applied by DynamoDB, but its answer is
    # lost (500); botocore retries it.
    faults = FaultInjector(every=2, lost_reply=True, operations=frozenset({"PutItem"})).attach(log_ddb)
    state = await LocalOrchestrator(runner, slice_seconds=0, retry_delay=0).drive(run_id)
    faults.armed = False
    assert faults.total >= 1
    assert state is not None and state.status == "finished", state  # today: None (stopped as "fenced")
    assert log_chunks(log, run_id)[-1]["type"] == "finish"


async def test_a_cancel_that_crashed_before_appending_finish_is_completed_when_retried() -> None:
    store, log = MemoryCheckpointStore(), MemoryChunkLog()
    runner = Runner(make_agent(Timeline(), 1), store, log, flush_interval=0)
    run_id = runner.create_run(PROMPT).run_id
    await runner.run_slice(run_id, budget_seconds=0)  # one step done; the run goes on
    orchestrator = LocalOrchestrator(runner, slice_seconds=0)

    # The cancel's calls: load (service), load, claim, open, save (terminal checkpoint), append.
    # The chat function dies right after the terminal checkpoint (point 2*4+1: after call #4).
    plan = CrashPlan({9})
    crashing = Runner(runner.agent, PlannedStore(store, plan), PlannedLog(log, plan), flush_interval=0)
    with pytest.raises(SimulatedCrash):
        await ChatService(crashing, orchestrator).cancel(run_id, None)
    assert plan.calls[4] == "store.save" and runner.load(run_id).status == "cancelled"
    assert log_chunks(log, run_id)[-1]["type"] != "finish"

    # The client retries the cancel (a fresh chat function).
    try:
        await ChatService(runner, orchestrator).cancel(run_id, None)
    except InvalidRequestError as exc:  # 409: "already ended" may be the answer...
        assert exc.status == 409
    # ...but the run's log must end with finish, or every follower waits forever.
    assert log_chunks(log, run_id)[-1] == {"type": "finish", "finishReason": "other"}


async def test_concurrent_cancels_complete_a_crashed_cancel_once_and_all_answer() -> None:
    # Ten chat functions (no shared process) retry a cancel that crashed after its terminal
    # checkpoint: each finds the log short and completes it; the completers fence each other's
    # claims. Before, all but one answered 500 (FencedError); now each looks again and finds it done.
    store, log = MemoryCheckpointStore(), MemoryChunkLog()
    runner = Runner(make_agent(Timeline(), 1), store, log, flush_interval=0)
    run_id = runner.create_run(PROMPT).run_id
    await runner.run_slice(run_id, budget_seconds=0)
    orchestrator = LocalOrchestrator(runner, slice_seconds=0)
    plan = CrashPlan({9})  # as above: the cancel dies right after its terminal checkpoint
    crashing = Runner(runner.agent, PlannedStore(store, plan), PlannedLog(log, plan), flush_interval=0)
    with pytest.raises(SimulatedCrash):
        await ChatService(crashing, orchestrator).cancel(run_id, None)
    services = [ChatService(Runner(runner.agent, store, log, flush_interval=0), orchestrator) for _ in range(10)]
    answers = await asyncio.gather(*(service.cancel(run_id, None) for service in services))
    assert [a.status for a in answers] == ["cancelled"] * 10
    chunks = log_chunks(log, run_id)
    assert [c["type"] for c in chunks].count("finish") == 1
    assert chunks[-1] == {"type": "finish", "finishReason": "other"}
