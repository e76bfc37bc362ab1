"""Resume cost: time and storage reads to resume at the tail of a 1k-chunk and a 100k-chunk log.

For the file log and for the S3 log under moto, logs of 1,000 and 100,000 chunks are built in
segments of ``--segment`` chunks (10: what a 100 ms flush of a 100-token/s model writes) and then
read at the tail, cold (a new log object: empty caches, as a new process or Lambda container)
and warm (the same object again):

* ``read(count-5)``: a client that knows the absolute index (``startIndex = count-5``);
* ``count() + read(count-5)``: a negative index (``startIndex=-5``), resolved by the log's count
  as ``GET /api/chat/{run}/stream`` does;
* (S3 only) the whole edge: ``ChatService`` ``load`` (the run record) + ``count`` + the first
  ``follow`` batch, as ``GET /api/chat/{run}/stream?startIndex=-5`` does for a finished run
  whose record holds a 50-step history (~50 KB).

Storage reads are counted per request (S3/DynamoDB, by operation, hooked on botocore events)
and per file-system read (``os.listdir``, file reads) for the file log. Times are medians.

    .venv/bin/python bench/resume_cost.py [--sizes 1000,100000] [--segment 10] [--reps 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import MotoAws, RequestMeter, machine, median, table, text_delta, verdict
from durable_harness.aws._segments import list_start_after, segment_name
from durable_harness.messages import AssistantMessage, TextPart, UserMessage
from durable_harness.ports import Checkpoint
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState, StreamContext
from durable_harness.server.service import ChatService
from durable_harness.storage.files import FileChunkLog

FINISH = '{"type":"finish","finishReason":"stop"}'


def run_id_for(n: int) -> str:
    return f"wrun_{n:026d}"


# --- file system read counting --------------------------------------------------------------------


class FsReads:
    """Counts directory listings and file reads while active (patches os and pathlib)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @contextmanager
    def active(self) -> Iterator[None]:
        originals = (os.listdir, pathlib.Path.read_bytes, pathlib.Path.read_text)

        def listdir(path: Any = ".") -> list[str]:
            self.counts["listdir"] += 1
            return originals[0](path)

        def read_bytes(path: pathlib.Path) -> bytes:
            self.counts["read file"] += 1
            return originals[1](path)

        def read_text(path: pathlib.Path, *args: Any, **kwargs: Any) -> str:
            self.counts["read file"] += 1
            return originals[2](path, *args, **kwargs)

        os.listdir = listdir  # type: ignore[assignment]
        pathlib.Path.read_bytes = read_bytes  # type: ignore[method-assign]
        pathlib.Path.read_text = read_text  # type: ignore[method-assign]
        try:
            yield
        finally:
            os.listdir = originals[0]
            pathlib.Path.read_bytes = originals[1]  # type: ignore[method-assign]
            pathlib.Path.read_text = originals[2]  # type: ignore[method-assign]


# --- building logs ----------------------------------------------------------------------------------


def build_file_log(root: pathlib.Path, run_id: str, n: int, segment: int) -> None:
    """``n`` chunks in ``segment``-chunk segment files (documented layout), the last via ``append``."""
    log = FileChunkLog(root)
    log.open(run_id, 1)
    run_dir = root / run_id
    count = 0
    while count < n - segment:
        (run_dir / f"{count:012d}.jsonl").write_text("".join(text_delta(count + j) + "\n" for j in range(segment)))
        count += segment
    (run_dir / "tail").write_text(f"{count}\n")
    chunks = [text_delta(count + j) for j in range(n - count)]
    chunks[-1] = FINISH
    assert log.append(run_id, count, chunks, 1) == n


def build_s3_log(aws: MotoAws, run_id: str, n: int, segment: int) -> None:
    """``n`` chunks in ``segment``-chunk objects under S3ChunkLog's keys (straight into moto's
    backend, no HTTP), the head and the last segment through the adapter."""
    ddb, s3 = aws.clients(meter=None)
    log = aws.log(ddb, s3)
    log.open(run_id, 1)
    count = 0
    while count < n - segment:
        data = "".join(text_delta(count + j) + "\n" for j in range(segment)).encode()
        aws.put_segment_direct(f"runs/{run_id}/seg/" + segment_name(count, 1), data)
        count += segment
    ddb.update_item(
        TableName="bench-runs",
        Key={"pk": {"S": run_id}, "sk": {"S": "log"}},
        UpdateExpression="SET #c = :c, #w = :w, #wf = :z",
        ExpressionAttributeNames={"#c": "count", "#w": "writer", "#wf": "writer_from"},
        ExpressionAttributeValues={":c": {"N": str(count)}, ":w": {"N": "1"}, ":z": {"N": "0"}},
    )
    chunks = [text_delta(count + j) for j in range(n - count)]
    chunks[-1] = FINISH
    assert log.append(run_id, count, chunks, 1) == n
    # The run record of a finished run with a 50-step history (what the edge loads first).
    history: list[Any] = [UserMessage(content=[TextPart(text="Go.")])]
    history += [AssistantMessage(content=[TextPart(text="x" * 1000)]) for _ in range(50)]
    state = RunState(run_id=run_id, session_id="s", message_id="m", principal="bench", status="finished",
                     turn={"messages": [m.model_dump(mode="json") for m in history]},
                     stream=StreamContext(chunk_count=n))  # fmt: skip
    aws.store(ddb, s3).create(
        Checkpoint(run_id=run_id, state=state.model_dump_json(by_alias=True), status="finished", principal="bench")
    )


# --- measuring ---------------------------------------------------------------------------------------


def measure(reps: int, make: Callable[[], Any], op: Callable[[Any], Any], reset: Callable[[], None],
            cold: bool, excluded: Callable[[], float] = lambda: 0.0) -> tuple[float, float]:  # fmt: skip
    """Median ms of ``op``, and of ``op`` minus ``excluded()`` ms; ``cold`` makes a new object for
    every repetition. The counters are reset before each repetition, so they hold the last one's
    reads afterwards."""
    times, net = [], []
    warm_obj = make()
    if not cold:
        op(warm_obj)
    for _ in range(reps):
        obj = make() if cold else warm_obj
        reset()
        t0 = time.perf_counter()
        op(obj)
        times.append((time.perf_counter() - t0) * 1000)
        net.append(times[-1] - excluded())
    return median(times), median(net)


def main() -> None:
    """Build the logs, read their tails, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--segment", type=int, default=10)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[list[Any]] = []
    ms: dict[tuple[str, str, str, int], float] = {}
    reads: dict[tuple[str, str, str, int], int] = {}

    def record(store: str, case: str, mode: str, n: int, t: float, counted: Counter[str]) -> None:
        ms[(store, case, mode, n)] = t
        reads[(store, case, mode, n)] = sum(counted.values())
        rows.append([store, case, mode, f"{n:,}", t, sum(counted.values()),
                     ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))])  # fmt: skip

    # --- the file log ---
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for n in sizes:
            build_file_log(root, run_id_for(n), n, args.segment)
        fs = FsReads()
        cases: list[tuple[str, Callable[[Any, str], Any]]] = [
            ("read(count-5)", lambda log, run: log.read(run, log_count[run] - 5)),
            ("count + read (-5)", lambda log, run: log.read(run, log.count(run) - 5)),
        ]
        log_count = {run_id_for(n): n for n in sizes}
        for case, fn in cases:
            for mode in ("cold", "warm"):
                for n in sizes:
                    run = run_id_for(n)

                    def op(log: Any, run: str = run, fn: Callable[[Any, str], Any] = fn) -> None:
                        with fs.active():
                            got = fn(log, run)
                        assert got[-1] == FINISH and len(got) == 5

                    t, _ = measure(args.reps, lambda: FileChunkLog(root), op, fs.counts.clear, mode == "cold")
                    record("file", case, mode, n, t, Counter(fs.counts))

    # --- the S3 log under moto: one fresh moto per size, so each bucket holds only its own log ---
    from durable_harness import ToolLoopAgent

    agent_stub = ToolLoopAgent(model="demo")
    list_ms: dict[int, float] = {}
    net_ms: dict[tuple[str, str, int], float] = {}
    edge_rru = 0.0
    s3_rows: list[tuple[str, str, int, float, Counter[str]]] = []
    for n in sizes:
        run = run_id_for(n)
        with MotoAws() as aws:
            build_s3_log(aws, run, n, args.segment)
            meter = RequestMeter()
            ddb, s3 = aws.clients(meter=meter)
            edge_store = aws.store(ddb, s3)

            def edge(log: Any, run: str, edge_store: Any = edge_store) -> list[str]:
                service = ChatService(Runner(agent_stub, edge_store, log), orchestrator=None)  # type: ignore[arg-type]

                async def go() -> list[str]:
                    state = await service.load(run, "bench")
                    count = await service.count(run)
                    assert state.terminal
                    async for batch in service.follow(run, count - 5):
                        return batch or []
                    return []

                return asyncio.run(go())

            s3_cases: list[tuple[str, Callable[[Any, str], Any]]] = [
                ("read(count-5)", lambda log, run: log.read(run, log_count[run] - 5)),
                ("count + read (-5)", lambda log, run: log.read(run, log.count(run) - 5)),
                ("edge: load + count + read (-5)", edge),
            ]

            def listing(meter: RequestMeter = meter) -> float:
                return sum(r.ms for r in meter.requests if r.op == "ListObjectsV2")

            for case, fn in s3_cases:
                for mode in ("cold", "warm"):

                    def s3op(log: Any, run: str = run, fn: Callable[[Any, str], Any] = fn) -> None:
                        got = fn(log, run)
                        assert got[-1] == FINISH and len(got) == 5, got

                    def make(ddb: Any = ddb, s3: Any = s3, aws: MotoAws = aws) -> Any:
                        return aws.log(ddb, s3)

                    t, net = measure(args.reps, make, s3op, meter.reset, mode == "cold", listing)
                    s3_rows.append((case, mode, n, t, Counter(meter.counts())))
                    net_ms[(case, mode, n)] = net
                    if case.startswith("edge") and mode == "cold":
                        edge_rru = sum(r.rru for r in meter.requests)
            prefix = f"runs/{run}/seg/"
            request = {"Bucket": "bench-chunks", "Prefix": prefix, "MaxKeys": 13,
                       "StartAfter": prefix + list_start_after(n - 1)}  # fmt: skip
            list_ms[n], _ = measure(
                args.reps, lambda: None, lambda _, s3=s3, request=request: s3.list_objects_v2(**request),
                meter.reset, False,
            )  # fmt: skip
    order = {c: i for i, c in enumerate(dict.fromkeys(r[0] for r in s3_rows))}
    for case, mode, n, t, counted in sorted(s3_rows, key=lambda r: (order[r[0]], r[1], r[2])):
        record("S3 (moto)", case, mode, n, t, counted)

    print(f"resume_cost: {machine()}")
    print(f"logs of {', '.join(f'{n:,}' for n in sizes)} chunks in {args.segment}-chunk segments; "
          f"median of {args.reps} reads; reads per resume (one repetition)\n")  # fmt: skip
    print(table(["log", "resume", "caches", "chunks", "ms (p50)", "reads", "by operation"], rows))

    small, big = sizes[0], sizes[-1]
    print(f"\nratio {big:,} vs {small:,} chunks (time), target <= 1.5 with <= 2 storage reads:")
    pairs = [("file", "read(count-5)"), ("file", "count + read (-5)"), ("S3 (moto)", "read(count-5)"),
             ("S3 (moto)", "count + read (-5)"), ("S3 (moto)", "edge: load + count + read (-5)")]  # fmt: skip
    for store, case in pairs:
        for mode in ("cold", "warm"):
            ratio = ms[(store, case, mode, big)] / ms[(store, case, mode, small)]
            n_reads = reads[(store, case, mode, big)]
            detail = f"x{ratio:.2f}, {n_reads} reads"
            print(f"  {store:<9} {case:<31} {mode}: {verdict(ratio <= 1.5 and n_reads <= 2, detail)}")
    print(
        f"\nmoto's ListObjectsV2 alone (the adapter's request: Prefix, StartAfter, MaxKeys 13): "
        f"{list_ms[small]:.2f} ms with {small // args.segment:,} objects, {list_ms[big]:.2f} ms with "
        f"{big // args.segment:,}: moto walks every key of the bucket in Python, S3 starts the listing at "
        "StartAfter. The S3 cold resumes without the time spent in ListObjectsV2:"
    )
    for case in dict.fromkeys(c for c, _, _ in net_ms):
        a, b = net_ms[(case, "cold", small)], net_ms[(case, "cold", big)]
        print(f"  {case:<31} {a:.2f} ms vs {b:.2f} ms: x{b / a:.2f}")
    print(
        f"the edge's cold resume reads {edge_rru:g} RRU, most of it the whole ~50 KB run record (strongly "
        "consistent, billed on the full item size), which it also parses, only to check the principal and status"
    )


if __name__ == "__main__":
    main()
