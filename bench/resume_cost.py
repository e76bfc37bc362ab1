"""Resume cost: time and storage reads to resume at the tail of a 1k-chunk and a 100k-chunk log.

For the file log and for the deployed log (DynamoDB items) under moto, logs of 1,000 and 100,000
chunks are built in appends of ``--segment`` chunks (10: what a 100 ms flush of a 100-token/s model
writes) and then read at the tail, cold (a new log object: empty caches, as a new process or
Lambda container) and warm (the same object again):

* ``read(count-5)``: a client that knows the absolute index (``startIndex = count-5``);
* ``tail(5)``: a negative index (``startIndex=-5``): the count and the last chunks in one read;
* (deployed only) the whole edge: ``server.resume.stream_start`` (the run's summary + the log's tail)
  and the first ``follow`` batch, as ``GET /api/chat/{run}/stream?startIndex=-5`` does for a
  finished run whose record holds a 50-step history (~50 KB).

Storage reads are counted per request (DynamoDB/S3, by operation, hooked on botocore events)
and per file-system read (``os.listdir``, file reads) for the file log. Times are medians.
``deployed_wiring.py`` measures the same resume through the real stack over HTTP.

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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from _common import TABLE, MotoAws, RequestMeter, busy_ms, log_generation, machine, median, table, text_delta, verdict
from durable_harness.messages import AssistantMessage, TextPart, UserMessage
from durable_harness.ports import StoredRun
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState, StreamContext
from durable_harness.server.resume import stream_start
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


def build_deployed_log(aws: MotoAws, run_id: str, n: int, segment: int, bursts: Sequence[int] = ()) -> None:
    """``n`` chunks in ``segment``-chunk items in DynamoChunkLog's layout (straight into moto's
    backend, no HTTP), the last append through the adapter; with ``bursts``, the log ends with
    appends of those sizes through the adapter instead (a log written in bursts)."""
    ddb, s3 = aws.clients(meter=None)
    log = aws.log(ddb, s3)
    # The run record of a finished run with a 50-step history (what the edge loads first); creating
    # it writes the empty log of its incarnation, which the items below fill.
    history: list[Any] = [UserMessage(content=[TextPart(text="Go.")])]
    history += [AssistantMessage(content=[TextPart(text="x" * 1000)]) for _ in range(50)]
    state = RunState(run_id=run_id, session_id="s", message_id="m", principal="bench", status="finished",
                     turn={"messages": [m.model_dump(mode="json") for m in history]},
                     stream=StreamContext(chunk_count=n))  # fmt: skip
    aws.store(ddb, s3).create(
        StoredRun(run_id=run_id, state=state.model_dump_json(by_alias=True), status="finished", principal="bench")
    )
    count = n - sum(bursts) if bursts else (n - 1) // segment * segment
    aws.put_log_direct(run_id, [text_delta(i) for i in range(count)], segment, gen=log_generation(ddb, TABLE, run_id))
    for size in bursts or [n - count]:
        chunks = [text_delta(count + j) for j in range(size)]
        if count + size == n:
            chunks[-1] = FINISH
        assert log.append(run_id, count, chunks, 1) == count + size
        count += size


# --- measuring ---------------------------------------------------------------------------------------


def edge_resume(agent: Any, store: Any, log: Any, run: str) -> list[str]:
    """What ``GET /api/chat/{run}/stream?startIndex=-5`` reads: the run's summary and the log's
    tail (``server.resume.stream_start``), then the first ``follow`` batch."""
    service = ChatService(Runner(agent, store, log), orchestrator=None)  # type: ignore[arg-type]

    async def go() -> list[str]:
        began = await stream_start(service, run, -5, "bench")
        start, first = began.start, began.first
        async for batch in service.follow(run, start, first):
            return batch or []
        return []

    return asyncio.run(go())


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
            ("tail(5)", lambda log, run: log.tail(run, 5)[1]),
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

    # --- the deployed log under moto: one fresh moto per size, so each table holds only its own log ---
    from durable_harness import ToolLoopAgent

    agent_stub = ToolLoopAgent(model="demo")
    query_ms: dict[int, float] = {}
    net_ms: dict[tuple[str, str, int], float] = {}
    edge_rru = 0.0
    aws_rows: list[tuple[str, str, int, float, Counter[str]]] = []
    for n in sizes:
        run = run_id_for(n)
        with MotoAws() as aws:
            build_deployed_log(aws, run, n, args.segment)
            meter = RequestMeter()
            ddb, s3 = aws.clients(meter=meter)
            edge_store = aws.store(ddb, s3)

            def edge(log: Any, run: str, edge_store: Any = edge_store) -> list[str]:
                return edge_resume(agent_stub, edge_store, log, run)

            aws_cases: list[tuple[str, Callable[[Any, str], Any]]] = [
                ("read(count-5)", lambda log, run: log.read(run, log_count[run] - 5)),
                ("tail(5)", lambda log, run: log.tail(run, 5)[1]),
                ("edge: summary + tail (-5)", edge),
            ]

            def querying(meter: RequestMeter = meter) -> float:
                return busy_ms(meter.requests, {"Query"})

            for case, fn in aws_cases:
                for mode in ("cold", "warm"):

                    def aws_op(log: Any, run: str = run, fn: Callable[[Any, str], Any] = fn) -> None:
                        got = fn(log, run)
                        assert got[-1] == FINISH and len(got) == 5, got

                    def make(ddb: Any = ddb, s3: Any = s3, aws: MotoAws = aws) -> Any:
                        return aws.log(ddb, s3)

                    t, net = measure(args.reps, make, aws_op, meter.reset, mode == "cold", querying)
                    aws_rows.append((case, mode, n, t, Counter(meter.counts())))
                    net_ms[(case, mode, n)] = net
                    if case.startswith("edge") and mode == "cold":
                        edge_rru = sum(r.rru for r in meter.requests)
            request = {"TableName": "bench-runs", "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
                       "ExpressionAttributeValues": {":p": {"S": run}, ":a": {"S": "c#"},
                                                     ":b": {"S": "c$"}},
                       "ScanIndexForward": False, "Limit": 6, "ConsistentRead": True}  # fmt: skip
            query_ms[n], _ = measure(
                args.reps, lambda: None, lambda _, ddb=ddb, request=request: ddb.query(**request), meter.reset, False
            )
    order = {c: i for i, c in enumerate(dict.fromkeys(r[0] for r in aws_rows))}
    for case, mode, n, t, counted in sorted(aws_rows, key=lambda r: (order[r[0]], r[1], r[2])):
        record("DynamoDB (moto)", case, mode, n, t, counted)

    print(f"resume_cost: {machine()}")
    print(f"logs of {', '.join(f'{n:,}' for n in sizes)} chunks in {args.segment}-chunk segments; "
          f"median of {args.reps} reads; reads per resume (one repetition)\n")  # fmt: skip
    print(table(["log", "resume", "caches", "chunks", "ms (p50)", "reads", "by operation"], rows))

    small, big = sizes[0], sizes[-1]
    print(f"\nratio {big:,} vs {small:,} chunks (time), target <= 1.2 with <= 2 storage reads:")
    pairs = [("file", "read(count-5)"), ("file", "tail(5)"), ("DynamoDB (moto)", "read(count-5)"),
             ("DynamoDB (moto)", "tail(5)"), ("DynamoDB (moto)", "edge: summary + tail (-5)")]  # fmt: skip
    for store, case in pairs:
        for mode in ("cold", "warm"):
            ratio = ms[(store, case, mode, big)] / ms[(store, case, mode, small)]
            n_reads = reads[(store, case, mode, big)]
            detail = f"x{ratio:.2f}, {n_reads} reads"
            if store != "file":  # judged without moto's own O(items) Query time (see below)
                ratio = net_ms[(case, mode, big)] / net_ms[(case, mode, small)]
                detail = f"x{ratio:.2f} outside moto's Query, x{detail[1:]}"
            print(f"  {store:<15} {case:<26} {mode}: {verdict(ratio <= 1.2 and n_reads <= 2, detail)}")
    print(
        f"\nmoto's Query alone (the tail read: the last 6 items of the run): {query_ms[small]:.2f} ms with "
        f"{small // args.segment:,} items, {query_ms[big]:.2f} ms with {big // args.segment:,}: moto walks and "
        "sorts every item of the table in Python (and compares every item of the partition with the key "
        "range), DynamoDB reads the partition's last items. The resumes without the time spent in Query:"
    )
    for case in dict.fromkeys(c for c, _, _ in net_ms):
        for mode in ("cold", "warm"):
            a, b = net_ms[(case, mode, small)], net_ms[(case, mode, big)]
            print(f"  {case:<26} {mode}: {a:.2f} ms vs {b:.2f} ms: x{b / a:.2f}")
    print(
        f"the edge's cold resume reads {edge_rru:g} RRU: the run record's summary (billed on the whole item, "
        "~50 KB here, though only the status and principal come back) and the log's last items"
    )


if __name__ == "__main__":
    main()
