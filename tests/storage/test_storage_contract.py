"""The port contract, run against every adapter: what the runner may rely on from any store or log."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from durable_harness.errors import FencedError, LogConflictError, RunExistsError, RunNotFoundError
from durable_harness.ports import (
    ChatRuns,
    CheckpointStore,
    ChunkLog,
    RunSummary,
    StoredRun,
    SummaryReader,
    TailReader,
)
from durable_harness.runner.state import RunState, RunStatus, checkpoint_of
from durable_harness.runner.tail import previous_turn_state
from durable_harness.storage import (
    FileChunkLog,
    MemoryCheckpointStore,
    MemoryChunkLog,
    SqliteCheckpointStore,
)

STORES: dict[str, Callable[[Path], CheckpointStore]] = {
    "memory": lambda _: MemoryCheckpointStore(),
    "sqlite": lambda tmp: SqliteCheckpointStore(tmp / "runs.sqlite3"),
}
LOGS: dict[str, Callable[[Path], ChunkLog]] = {
    "memory": lambda _: MemoryChunkLog(),
    "files": lambda tmp: FileChunkLog(tmp / "chunks"),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    made = STORES[request.param](tmp_path)
    yield made
    if isinstance(made, SqliteCheckpointStore):
        made.close()


@pytest.fixture(params=sorted(LOGS))
def log(request: pytest.FixtureRequest, tmp_path: Path) -> ChunkLog:
    return LOGS[request.param](tmp_path)


def record(run_id: str = "run-1", **fields: object) -> StoredRun:
    base: dict[str, object] = {"run_id": run_id, "state": '{"step":0}', "status": "not_started"}
    base.update(fields)
    return StoredRun(**base)  # type: ignore[arg-type]


def chunks(first: int, n: int) -> list[str]:
    return [f'{{"type":"text-delta","id":"t","delta":"{i}"}}' for i in range(first, first + n)]


# --- checkpoint store -----------------------------------------------------------------------------


def test_adapters_satisfy_the_protocols(store: CheckpointStore, log: ChunkLog) -> None:
    assert isinstance(store, CheckpointStore)
    assert isinstance(log, ChunkLog)


def test_create_starts_at_version_1_epoch_0_and_load_returns_it(store: CheckpointStore) -> None:
    given = record(version=7, epoch=3, principal="alice", chat_id="chat-1", meta={"origin": "chat"})
    created = store.create(given)
    assert (created.version, created.epoch) == (1, 0)
    assert created == StoredRun(
        run_id="run-1",
        state='{"step":0}',
        status="not_started",
        version=1,
        epoch=0,
        principal="alice",
        chat_id="chat-1",
        meta={"origin": "chat"},
    )
    assert store.load("run-1") == created


def test_summary_is_the_records_status_and_owner_and_follows_saves(store: CheckpointStore) -> None:
    assert isinstance(store, SummaryReader)
    created = store.create(record(principal="alice", chat_id="chat-1"))
    assert store.summary("run-1") == RunSummary("run-1", "not_started", "alice", "chat-1")
    store.save(record(state='{"step":1}', status="finished", principal="alice", chat_id="chat-1"), created.version)
    assert store.summary("run-1") == RunSummary("run-1", "finished", "alice", "chat-1")
    store.create(record("run-2"))
    assert store.summary("run-2") == RunSummary("run-2", "not_started")
    with pytest.raises(RunNotFoundError):
        store.summary("nope")


def test_the_latest_run_of_a_chat_is_the_one_its_principal_created_last(store: CheckpointStore) -> None:
    assert isinstance(store, ChatRuns)
    assert store.latest_run("chat-1", "alice") is None
    first = store.create(record("run-1", principal="alice", chat_id="chat-1"))
    store.create(record("run-2", principal="bob", chat_id="chat-1"))
    store.create(record("run-3", principal="alice", chat_id="chat-2"))
    assert store.latest_run("chat-1", "alice") == "run-1"
    store.create(record("run-4", principal="alice", chat_id="chat-1"))
    # A later write to an older run does not make it the latest again.
    store.save(record("run-1", status="finished", principal="alice", chat_id="chat-1"), first.version)
    assert store.latest_run("chat-1", "alice") == "run-4"
    assert store.latest_run("chat-1", "bob") == "run-2"  # another principal's chat of the same id
    assert store.latest_run("chat-2", "alice") == "run-3"
    assert store.latest_run("chat-1", "mallory") is None and store.latest_run("chat-1", None) is None
    store.create(record("run-5", chat_id="chat-1"))  # a run without a principal
    assert store.latest_run("chat-1", None) == "run-5" and store.latest_run("chat-1", "alice") == "run-4"


def test_a_turn_starts_from_the_last_checkpoint_of_its_chats_previous_run(store: CheckpointStore) -> None:
    """``sessionState`` (issue 18): the previous turn is found through the chat's latest-run pointer
    (``ChatRuns``), which every store keeps, the deployed one too; never another principal's."""

    def turn(run_id: str, status: RunStatus, said: str) -> None:
        state = RunState(run_id=run_id, session_id="chat-1", chat_id="chat-1", principal="alice", agent="a",
                         message_id=f"msg-{run_id}", status=status, turn={"said": said})  # fmt: skip
        store.create(checkpoint_of(state))

    assert previous_turn_state(store, "chat-1", "alice", "run-1", "a") is None  # a first turn
    turn("run-1", "finished", "one")
    assert previous_turn_state(store, "chat-1", "alice", "run-2", "a") == {"said": "one"}
    assert previous_turn_state(store, "chat-1", "alice", "run-1", "a") is None  # (its own retried creation)
    assert previous_turn_state(store, "chat-1", "bob", "run-2", "a") is None  # bob's chat of the same id
    assert previous_turn_state(store, "chat-1", "alice", "run-2", "b") is None  # another agent's run
    assert previous_turn_state(store, "chat-2", "alice", "run-2", "a") is None and previous_turn_state(
        store, None, "alice", "run-2", "a") is None  # fmt: skip
    turn("run-2", "failed", "two")
    assert previous_turn_state(store, "chat-1", "alice", "run-3", "a") == {"said": "two"}  # its last checkpoint
    turn("run-3", "ready_for_next_step", "three")
    assert previous_turn_state(store, "chat-1", "alice", "run-4", "a") is None  # the previous turn still goes on


def test_create_twice_raises_run_exists(store: CheckpointStore) -> None:
    store.create(record())
    with pytest.raises(RunExistsError):
        store.create(record(state='{"other":true}'))
    assert store.load("run-1").state == '{"step":0}'


def test_unknown_run_raises_not_found(store: CheckpointStore) -> None:
    with pytest.raises(RunNotFoundError):
        store.load("nope")
    with pytest.raises(RunNotFoundError):
        store.claim("nope", 1)
    with pytest.raises(RunNotFoundError):
        store.save(record("nope"), 1)


def test_claim_bumps_epoch_and_version(store: CheckpointStore) -> None:
    store.create(record())
    claimed = store.claim("run-1", 1)
    assert (claimed.version, claimed.epoch) == (2, 1)
    assert store.load("run-1") == claimed
    with pytest.raises(FencedError):
        store.claim("run-1", 1)
    assert store.load("run-1") == claimed


def test_save_bumps_version_keeps_epoch_and_replaces_fields(store: CheckpointStore) -> None:
    store.create(record())
    claimed = store.claim("run-1", 1)
    # The caller's epoch and version are ignored: the store owns both counters.
    update = record(state='{"step":1}', status="ready_for_next_step", epoch=99, version=42, meta={"k": "v"})
    saved = store.save(update, claimed.version)
    assert (saved.version, saved.epoch) == (3, 1)
    assert (saved.state, saved.status, saved.meta) == ('{"step":1}', "ready_for_next_step", {"k": "v"})
    assert store.load("run-1") == saved


def test_save_with_stale_version_raises_fenced_and_writes_nothing(store: CheckpointStore) -> None:
    store.create(record())
    current = store.save(record(state='{"step":1}'), 1)
    with pytest.raises(FencedError):
        store.save(record(state='{"stale":true}'), 1)
    assert store.load("run-1") == current


def test_version_reads_the_heads_version(store: CheckpointStore) -> None:
    with pytest.raises(RunNotFoundError):
        store.version("run-1")
    store.create(record())
    assert store.version("run-1") == 1
    claimed = store.claim("run-1", 1)
    assert store.version("run-1") == claimed.version == 2
    saved = store.save(record(state='{"step":1}'), 2)
    assert store.version("run-1") == saved.version == 3


def test_a_growing_state_round_trips_through_every_save(store: CheckpointStore) -> None:
    """States that grow step by step (kept as records of what each save added) load back whole,
    also the ones a save changed in place, removed from, or replaced with something unlike them."""
    state: dict[str, object] = {"messages": [], "step": 0, "open": {"a": 1}}
    version = store.create(record(state=json.dumps(state, separators=(",", ":")))).version
    for step in range(1, 13):
        messages = state["messages"]
        assert isinstance(messages, list)
        messages.append({"role": "tool", "content": [{"n": step, "text": "x" * 100}]})
        if step % 3 == 0:
            messages[-2]["content"].append({"late": True})  # the last message grew
        if step % 4 == 0:
            state["open"] = {}  # keys removed
        if step == 7:
            state = {"other": ["y" * 600], "step": 7, "messages": messages}  # a different shape
        state["step"] = step
        text = json.dumps(state, separators=(",", ":"))
        version = store.save(record(state=text, status="ready_for_next_step"), version).version
        assert json.loads(store.load("run-1").state) == state, step
    assert store.load("run-1").version == version


def test_loaded_records_do_not_alias_the_store(store: CheckpointStore) -> None:
    store.create(record(meta={"a": "1"}))
    store.load("run-1").meta["a"] = "changed"
    assert store.load("run-1").meta == {"a": "1"}


# --- chunk log ------------------------------------------------------------------------------------


def test_never_written_log_is_empty(log: ChunkLog) -> None:
    assert log.count("run-1") == 0
    assert log.read("run-1", 0) == []
    assert log.read("run-1", 5, limit=3) == []


def test_open_returns_the_count(log: ChunkLog) -> None:
    assert log.open("run-1", 1) == 0
    log.append("run-1", 0, chunks(0, 3), 1)
    assert log.open("run-1", 2) == 3


def test_append_and_read_at_any_start(log: ChunkLog) -> None:
    expected: list[str] = []
    for size in (1, 4, 2, 7, 1, 3):  # segments of varied sizes
        batch = chunks(len(expected), size)
        assert log.append("run-1", len(expected), batch, 0) == len(expected) + size
        expected += batch
    assert log.count("run-1") == len(expected)
    for start in range(len(expected) + 2):
        assert log.read("run-1", start) == expected[start:], start
        for limit in (0, 1, 2, 5, 100):
            assert log.read("run-1", start, limit) == expected[start : start + limit], (start, limit)


def test_tail_is_the_count_and_the_last_chunks(log: ChunkLog) -> None:
    assert isinstance(log, TailReader)
    assert log.tail("run-1", 3) == (0, [])
    expected: list[str] = []
    for size in (1, 4, 2, 7):
        log.append("run-1", len(expected), chunks(len(expected), size), 0)
        expected += chunks(len(expected), size)
    for n in (0, 1, 2, 3, 6, 7, 13, 14, 100):
        assert log.tail("run-1", n) == (14, expected[14 - n :] if n else []), n
    with pytest.raises(ValueError):
        log.tail("run-1", -1)


def test_runs_are_independent(log: ChunkLog) -> None:
    log.append("run-a", 0, ["a0", "a1"], 0)
    log.append("run-b", 0, ["b0"], 0)
    assert log.read("run-a", 0) == ["a0", "a1"]
    assert log.read("run-b", 0) == ["b0"]


def test_append_at_wrong_start_raises_conflict_and_writes_nothing(log: ChunkLog) -> None:
    log.append("run-1", 0, chunks(0, 3), 0)
    for start in (0, 2, 4, -1):
        with pytest.raises(LogConflictError):
            log.append("run-1", start, ["x"], 0)
    assert log.count("run-1") == 3
    assert log.read("run-1", 0) == chunks(0, 3)


def test_append_is_atomic(log: ChunkLog) -> None:
    # A chunk the log cannot store fails the whole append, not just its own line.
    log.append("run-1", 0, ["a"], 0)
    with pytest.raises(ValueError):
        log.append("run-1", 1, ["b", "c\nd", "e"], 0)
    assert log.read("run-1", 0) == ["a"]
    assert log.append("run-1", 1, ["b", "c"], 0) == 3


def test_empty_append_changes_nothing(log: ChunkLog) -> None:
    log.append("run-1", 0, ["a"], 0)
    assert log.append("run-1", 1, [], 0) == 1
    assert log.append("run-1", 1, ["b"], 0) == 2
    assert log.read("run-1", 0) == ["a", "b"]


def test_chunks_round_trip_exactly(log: ChunkLog) -> None:
    odd = ['{"t":"caf\u00e9 \u2028 \u2029 \r \\n"}', "{}", '{"emoji":"\U0001f600"}', " spaced "]
    log.append("run-1", 0, odd, 0)
    assert log.read("run-1", 0) == odd


def test_negative_read_arguments_are_rejected(log: ChunkLog) -> None:
    with pytest.raises(ValueError):
        log.read("run-1", -1)
    with pytest.raises(ValueError):
        log.read("run-1", 0, -1)


def test_log_fence(log: ChunkLog) -> None:
    log.open("run-1", 2)
    with pytest.raises(FencedError):
        log.open("run-1", 1)
    # A newer epoch may append without open(); it then holds the fence.
    log.append("run-1", 0, ["a"], 3)
    with pytest.raises(FencedError):
        log.append("run-1", 1, ["b"], 2)
    assert log.open("run-1", 3) == 1


# --- fencing across both ports --------------------------------------------------------------------


def test_a_writer_with_a_stale_version_can_write_neither_checkpoint_nor_chunks(
    store: CheckpointStore, log: ChunkLog
) -> None:
    store.create(record())
    # Slice A claims the run and starts writing.
    a = store.claim("run-1", 1)
    assert a.epoch == 1
    count = log.open("run-1", a.epoch)
    log.append("run-1", count, ["a0", "a1"], a.epoch)
    a = store.save(record(state='{"by":"A"}'), a.version)

    # Slice B (a retry overlapping a slow A) claims later and opens the log.
    b = store.claim("run-1", store.load("run-1").version)
    assert b.epoch == 2
    assert log.open("run-1", b.epoch) == 2
    before = store.load("run-1")

    with pytest.raises(FencedError):
        store.save(record(state='{"by":"A, stale"}'), a.version)
    assert store.load("run-1") == before

    # A appends exactly where the log ends: only the fence can stop it, so it must be FencedError
    # itself and not the LogConflictError subclass.
    with pytest.raises(FencedError) as info:
        log.append("run-1", 2, ["a2"], a.epoch)
    assert type(info.value) is FencedError
    assert log.count("run-1") == 2
    assert log.read("run-1", 0) == ["a0", "a1"]

    assert log.append("run-1", 2, ["b0"], b.epoch) == 3
    saved = store.save(record(state='{"by":"B"}'), b.version)
    assert (saved.state, saved.epoch) == ('{"by":"B"}', 2)
    assert log.read("run-1", 0) == ["a0", "a1", "b0"]


def test_a_writers_value_is_used_for_its_save_only_and_never_handed_back(store: CheckpointStore) -> None:
    big = {"history": ["x" * 100] * 20, "step": 1}
    cp = store.claim("run-1", store.create(record()).version)
    saved = store.save(record(state=json.dumps(big, separators=(",", ":")), value=big, version=cp.version), cp.version)
    assert saved.value is None and store.load("run-1").value is None
    # A record handed out, saved again with another state: the store diffs that state, not a stale value.
    grown = {"history": ["x" * 100] * 21, "step": 2}
    again = store.save(replace(saved, state=json.dumps(grown, separators=(",", ":"))), saved.version)
    assert json.loads(store.load("run-1").state) == grown and again.value is None


# --- the contract the bases hold once (checkpoints/base.py, chunks/base.py) -----------------------


def test_a_created_record_is_handed_out_without_the_writers_value(store: CheckpointStore) -> None:
    state = {"step": 0}
    created = store.create(record(state=json.dumps(state, separators=(",", ":")), value=state))
    assert created.value is None


def test_a_fenced_claim_or_save_says_which_write_expected_which_version(store: CheckpointStore) -> None:
    store.create(record())
    store.claim("run-1", 1)
    with pytest.raises(FencedError, match=r"claim expected version 1, found 2"):
        store.claim("run-1", 1)
    with pytest.raises(FencedError, match=r"save expected version 1, found 2"):
        store.save(record(state='{"stale":true}'), 1)


def test_every_log_refuses_what_some_log_could_not_store(log: ChunkLog) -> None:
    """A run id that could not be a folder name or part of an S3 key, or a negative epoch, is refused
    by every log alike (the in-memory fake too), before anything is written."""
    calls: list[Callable[[str, int], object]] = [
        lambda run_id, epoch: log.open(run_id, epoch),
        lambda run_id, epoch: log.append(run_id, 0, ["a"], epoch),
    ]
    reads: list[Callable[[str], object]] = [
        lambda run_id: log.read(run_id, 0),
        lambda run_id: log.count(run_id),
        lambda run_id: log.tail(run_id, 1),
    ]
    for bad in ("", "../run-1", "run/1", "-run"):
        for call in calls:
            with pytest.raises(ValueError, match="invalid run id"):
                call(bad, 0)
        for read in reads:
            with pytest.raises(ValueError, match="invalid run id"):
                read(bad)
    for call in calls:
        with pytest.raises(ValueError, match="epoch must be"):
            call("run-1", -1)
    with pytest.raises(ValueError):
        log.tail("run-1", -1)
    assert log.count("run-1") == 0
