"""FileChunkLog specifics: the on-disk layout, crash leftovers, caching, and two racing processes."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from durable_harness.errors import FencedError, LogConflictError, StorageError
from durable_harness.storage import FileChunkLog
from durable_harness.storage.files import _HINT_EVERY


def segment_names(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.suffix == ".jsonl")


def test_one_segment_file_per_append_named_by_start(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    log.append("run-1", 0, ["a", "b", "c"], 0)
    log.append("run-1", 3, ["d"], 0)
    log.append("run-1", 4, ["e", "f"], 0)
    run_dir = tmp_path / "run-1"
    assert segment_names(run_dir) == ["000000000000.jsonl", "000000000003.jsonl", "000000000004.jsonl"]
    assert (run_dir / "000000000000.jsonl").read_text() == "a\nb\nc\n"
    # No temporary files are left behind.
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".tmp")]


def test_the_tail_hint_is_written_every_few_segments_and_a_fresh_reader_walks_the_rest(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    hint = tmp_path / "run-1" / "tail"
    for i in range(_HINT_EVERY - 1):
        log.append("run-1", i, [f"c{i}"], 0)
    assert not hint.exists()  # a hint only: the segments alone say how long the log is
    assert FileChunkLog(tmp_path).count("run-1") == _HINT_EVERY - 1
    log.append("run-1", _HINT_EVERY - 1, ["last"], 0)
    assert hint.read_text().strip() == str(_HINT_EVERY)
    log.append("run-1", _HINT_EVERY, ["more"], 0)
    fresh = FileChunkLog(tmp_path)
    assert fresh.count("run-1") == _HINT_EVERY + 1
    assert fresh.read("run-1", _HINT_EVERY - 1) == ["last", "more"]
    assert fresh.append("run-1", _HINT_EVERY + 1, ["x"], 0) == _HINT_EVERY + 2
    assert log.count("run-1") == _HINT_EVERY + 2  # the first object walks past what it knows
    assert log.read("run-1", _HINT_EVERY + 1) == ["x"]


def test_reading_does_not_create_anything(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    assert log.count("run-1") == 0
    assert log.read("run-1", 0) == []
    assert not (tmp_path / "run-1").exists()


def test_fence_survives_a_new_instance(tmp_path: Path) -> None:
    FileChunkLog(tmp_path).open("run-1", 5)
    assert (tmp_path / "run-1" / "fence").read_text().strip() == "5"
    with pytest.raises(FencedError):
        FileChunkLog(tmp_path).append("run-1", 0, ["x"], 4)


def test_count_walks_past_a_stale_tail(tmp_path: Path) -> None:
    # A writer that died after publishing a segment but before updating the tail hint.
    log = FileChunkLog(tmp_path)
    log.append("run-1", 0, ["a", "b"], 0)
    log.append("run-1", 2, ["c"], 0)
    (tmp_path / "run-1" / "tail").write_text("0\n")
    fresh = FileChunkLog(tmp_path)
    assert fresh.count("run-1") == 3
    with pytest.raises(LogConflictError):
        fresh.append("run-1", 2, ["x"], 0)
    assert fresh.append("run-1", 3, ["d"], 0) == 4
    assert fresh.read("run-1", 1) == ["b", "c", "d"]
    (tmp_path / "run-1" / "tail").unlink()
    assert FileChunkLog(tmp_path).count("run-1") == 4


def test_temp_file_leftovers_are_ignored(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    log.append("run-1", 0, ["a"], 0)
    (tmp_path / "run-1" / ".tmp-crashed").write_text("half a segm")
    assert log.append("run-1", 1, ["b"], 0) == 2
    assert FileChunkLog(tmp_path).read("run-1", 0) == ["a", "b"]


def test_a_reader_sees_appends_made_by_another_instance(tmp_path: Path) -> None:
    writer, reader = FileChunkLog(tmp_path), FileChunkLog(tmp_path)
    writer.append("run-1", 0, ["a", "b"], 0)
    assert reader.read("run-1", 1) == ["b"]  # fills the reader's segment cache
    writer.append("run-1", 2, ["c"], 0)
    writer.append("run-1", 3, ["d", "e"], 0)
    assert reader.count("run-1") == 5
    assert reader.read("run-1", 1) == ["b", "c", "d", "e"]
    assert reader.read("run-1", 4) == ["e"]


def test_read_opens_only_the_segments_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = FileChunkLog(tmp_path)
    for i in range(200):
        log.append("run-1", i * 2, [f"c{i * 2}", f"c{i * 2 + 1}"], 0)
    opened: list[int] = []
    real = FileChunkLog._read_segment

    def spy(self: FileChunkLog, run_dir: Path, start: int) -> list[str]:
        opened.append(start)
        return real(self, run_dir, start)

    monkeypatch.setattr(FileChunkLog, "_read_segment", spy)
    fresh = FileChunkLog(tmp_path)
    assert fresh.read("run-1", 301, limit=3) == ["c301", "c302", "c303"]
    assert opened == [300, 302]


def test_invalid_run_ids_are_rejected(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path / "chunks")
    for bad in ("", "..", "../escape", "a/b", ".hidden", "x" * 300):
        with pytest.raises(ValueError):
            log.count(bad)
        with pytest.raises(ValueError):
            log.append(bad, 0, ["x"], 0)


def test_io_failures_become_storage_errors(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    (tmp_path / "run-1").write_text("a file where the run directory should be")
    with pytest.raises(StorageError):
        log.append("run-1", 0, ["a"], 0)
    with pytest.raises(StorageError):
        log.count("run-1")


def test_corrupt_segment_is_a_storage_error(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    log.append("run-1", 0, ["a", "b"], 0)
    (tmp_path / "run-1" / "000000000002.jsonl").write_bytes(b"")  # not written by this log
    with pytest.raises(StorageError):
        log.count("run-1")


def test_threads_racing_on_one_start_have_one_winner(tmp_path: Path) -> None:
    log = FileChunkLog(tmp_path)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def attempt(n: int) -> None:
        barrier.wait()
        try:
            log.append("run-1", 0, [f"t{n}"] * 3, 0)
            outcomes.append("won")
        except LogConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["won"]
    assert log.count("run-1") == 3
    assert len(set(log.read("run-1", 0))) == 1


# --- two processes --------------------------------------------------------------------------------

ROUNDS = 25


def race(root: str, name: str, barrier: Any, results: Any) -> None:
    """Child process: in each round, race the other process to append at the round's start."""
    log = FileChunkLog(root)
    wins = 0
    for round_no in range(ROUNDS):
        barrier.wait(timeout=20)
        start = round_no * 3
        try:
            log.append("run-1", start, [f'{{"by":"{name}","round":{round_no},"i":{i}}}' for i in range(3)], 1)
            wins += 1
            outcome = "won"
        except LogConflictError:
            outcome = "conflict"
        results.put((name, round_no, outcome))
        # Both must be done with this round before either starts the next one.
        barrier.wait(timeout=20)
    results.put((name, -1, str(wins)))


def test_two_processes_racing_on_the_same_start(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [ctx.Process(target=race, args=(str(tmp_path), name, barrier, results)) for name in ("p", "q")]
    for p in procs:
        p.start()
    got = [results.get(timeout=30) for _ in range(2 * (ROUNDS + 1))]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0

    per_round: dict[int, list[str]] = {}
    winners: dict[int, str] = {}
    for name, round_no, outcome in got:
        if round_no >= 0:
            per_round.setdefault(round_no, []).append(outcome)
            if outcome == "won":
                winners[round_no] = name
    assert all(sorted(v) == ["conflict", "won"] for v in per_round.values()), per_round
    assert len(per_round) == ROUNDS

    log = FileChunkLog(tmp_path)
    assert log.count("run-1") == 3 * ROUNDS
    chunks = log.read("run-1", 0)
    assert len(chunks) == 3 * ROUNDS
    for round_no in range(ROUNDS):
        expected = [f'{{"by":"{winners[round_no]}","round":{round_no},"i":{i}}}' for i in range(3)]
        assert chunks[round_no * 3 : round_no * 3 + 3] == expected
    names = os.listdir(tmp_path / "run-1")
    assert len(segment_names(tmp_path / "run-1")) == ROUNDS
    # Nothing else but the lock, the fence and the tail hint (no temporary file left behind).
    assert {n for n in names if not n.endswith(".jsonl")} <= {"lock", "fence", "tail"}


class GrowingLog(FileChunkLog):
    """A log another writer appends to right after each count is read (a live run's log)."""

    def count(self, run_id: str) -> int:
        n = super().count(run_id)
        FileChunkLog.append(self, run_id, super().count(run_id), ["late-1", "late-2"], 0)
        return n


class Wrapped:
    """A chunk log without ``tail`` (like the test suites' wrappers): read_tail falls back."""

    def __init__(self, inner: FileChunkLog) -> None:
        self.inner = inner

    def open(self, run_id: str, epoch: int) -> int:
        return self.inner.open(run_id, epoch)

    def append(self, run_id: str, start: int, chunks: Any, epoch: int) -> int:
        return self.inner.append(run_id, start, chunks, epoch)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.inner.read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        return self.inner.count(run_id)


def test_a_tail_matches_its_count_while_the_log_grows(tmp_path: Path) -> None:
    from durable_harness.ports import read_tail

    log = GrowingLog(tmp_path)
    FileChunkLog.append(log, "run-1", 0, ["a", "b", "c"], 0)
    # The chunks returned are the last ones *of the count returned*: a resume lines them up by it.
    assert log.tail("run-1", 64) == (3, ["a", "b", "c"])
    assert log.tail("run-1", 2) == (5, ["late-1", "late-2"])
    assert read_tail(Wrapped(log), "run-1", 64) == (7, ["a", "b", "c", "late-1", "late-2", "late-1", "late-2"])
