"""Throughput: the most chunks per second the chunk log and the SSE edge sustain (target >= 5,000/s).

Measured, one after the other in one run:

1. producer alone: the benchmark's own loop (one ``await asyncio.sleep(0)`` per chunk, as a
   streaming model yields to the loop once per token), with no writer: the ceiling of 2-4;
2. ``ChunkWriter`` -> ``FileChunkLog`` (the local log), at the local 10 ms and the deployed
   100 ms flush interval;
3. ``ChunkWriter`` -> ``DynamoChunkLog`` under moto (one DynamoDB item per flush) at 100 ms, for reference:
   moto answers in ~1-2 ms per request, real DynamoDB writes take a few ms (group commit absorbs it:
   the batch grows with the latency, see the batch column);
4. the whole durable write path: a model streaming text deltas as fast as it can through the
   agent, the translator, the runner and the writer into the file log;
5. the SSE edge: the chat app (uvicorn, loopback) streaming a long finished log
   (``GET /api/chat/{run}/stream?startIndex=0``) to ``curl`` in another process (so the client
   does not share the server's GIL); the log has the segment size a 100 ms flush of a
   100-token/s model gives (10 chunks);
6. the deployed read path for reference: ``ChatService.follow`` over ``DynamoChunkLog`` under moto
   (no HTTP), reading a finished log of 10-chunk items.

    .venv/bin/python bench/throughput.py [--chunks 100000] [--s3-chunks 10000] [--segment 10]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from _common import MotoAws, machine, median, serve, table, text_delta, verdict
from durable_harness.agent.loop import ToolLoopAgent
from durable_harness.chunks.writer import ChunkWriter
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, finish
from durable_harness.models.scripted import FunctionModel
from durable_harness.ports import ChunkLog
from durable_harness.protocol import harness_parts as hp
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState, StreamContext
from durable_harness.server.local import build_local_kit
from durable_harness.server.service import ChatService
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.memory import MemoryCheckpointStore

TARGET = 5000.0
RUN = "wrun_0123456789abcdefghjkmnpqrs"


class CountingLog:
    """Counts the appends (flushes) that reach the wrapped log."""

    def __init__(self, inner: ChunkLog) -> None:
        self.inner = inner
        self.appends = 0

    def open(self, run_id: str, epoch: int) -> int:
        return self.inner.open(run_id, epoch)

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self.appends += 1
        return self.inner.append(run_id, start, chunks, epoch)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.inner.read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        return self.inner.count(run_id)


async def producer_alone(n: int) -> float:
    """Seconds the benchmark loop takes with no writer at all."""
    t0 = time.perf_counter()
    sink = []
    for i in range(n):
        sink.append(text_delta(i))
        await asyncio.sleep(0)
    return time.perf_counter() - t0


async def through_writer(log: CountingLog, run_id: str, n: int, flush_interval: float) -> float:
    """Seconds to write ``n`` chunks through a ChunkWriter until all are durable."""
    start = await asyncio.to_thread(log.open, run_id, 1)
    writer = ChunkWriter(log, run_id, epoch=1, start=start, flush_interval=flush_interval)
    t0 = time.perf_counter()
    for i in range(n):
        writer.write(text_delta(i))
        await asyncio.sleep(0)
    await writer.close()
    return time.perf_counter() - t0


def append_capacity(log: ChunkLog, run_id: str, batch: int, appends: int) -> tuple[float, float]:
    """Appends of ``batch`` chunks, one after the other: (p50 latency in ms, chunks/s)."""
    count = log.open(run_id, 1)
    latencies = []
    t0 = time.perf_counter()
    for _ in range(appends):
        chunks = [text_delta(count + j) for j in range(batch)]
        a = time.perf_counter()
        count = log.append(run_id, count, chunks, 1)
        latencies.append(time.perf_counter() - a)
    elapsed = time.perf_counter() - t0
    return median(latencies) * 1000, batch * appends / elapsed


def fast_model(n: int) -> FunctionModel:
    """A model that streams ``n`` text deltas as fast as the loop lets it."""

    async def step(request: ModelRequest, index: int) -> AsyncIterator[Any]:
        yield hp.TextStartPart(id="t")
        for i in range(n):
            yield hp.TextDeltaPart(id="t", delta=f" word{i}")
            await asyncio.sleep(0)
        yield hp.TextEndPart(id="t")
        yield finish("stop", input_tokens=1, output_tokens=n)

    return FunctionModel(step)


async def runner_end_to_end(root: Path, n: int) -> tuple[float, int, int]:
    """The durable write path: model -> agent -> translator -> runner -> writer -> file log."""
    log = CountingLog(FileChunkLog(root / "e2e"))
    runner = Runner(ToolLoopAgent(model=fast_model(n)), MemoryCheckpointStore(), log, flush_interval=0.01)
    state = runner.create_run([UserMessage(content=[TextPart(text="go")])])
    t0 = time.perf_counter()
    await runner.run(state.run_id)
    elapsed = time.perf_counter() - t0
    return elapsed, log.count(state.run_id), log.appends


def fill_log(log: FileChunkLog, run_id: str, n: int, segment: int) -> None:
    """A finished log of ``n`` chunks in segments of ``segment`` chunks, ending with ``finish``.

    The segments go straight to disk in the log's documented layout (``<start>.jsonl`` files and
    the ``tail`` hint), which takes a second instead of ``n / segment`` locked appends; the last
    segment goes through ``append``, which checks the layout.
    """
    log.open(run_id, 1)
    run_dir = log.root / run_id
    count = 0
    while count < n - segment:
        lines = "".join(text_delta(count + j) + "\n" for j in range(segment))
        (run_dir / f"{count:012d}.jsonl").write_text(lines)
        count += segment
    (run_dir / "tail").write_text(f"{count}\n")
    chunks = [text_delta(count + j) for j in range(n - count)]
    chunks[-1] = '{"type":"finish","finishReason":"stop"}'
    log.append(run_id, count, chunks, 1)


def sse_edge(root: Path, n: int, segment: int) -> tuple[float, int, int, str]:
    """Seconds for the chat app to stream a finished ``n``-chunk log to a client; (s, events, bytes, client)."""
    kit = build_local_kit(ToolLoopAgent(model="demo"), root / "edge")
    state = kit.runner.create_run([UserMessage(content=[TextPart(text="go")])])
    fill_log(kit.log, state.run_id, n, segment)
    cp = kit.store.load(state.run_id)
    done = RunState.model_validate_json(cp.state)
    done.status = "finished"
    done.stream = StreamContext(chunk_count=n)
    kit.store.save(replace(cp, state=done.model_dump_json(by_alias=True), status="finished"), cp.version)
    with serve(kit.app) as url:
        target = f"{url}/api/chat/{state.run_id}/stream?startIndex=0"
        httpx.get(f"{url}/health")  # warm the server
        curl = shutil.which("curl")
        if curl:
            with tempfile.NamedTemporaryFile() as out:
                t0 = time.perf_counter()
                subprocess.run([curl, "-sS", "-N", "-o", out.name, target], check=True)
                elapsed = time.perf_counter() - t0
                body = Path(out.name).read_bytes()
            client = "curl (separate process)"
        else:
            t0 = time.perf_counter()
            body = httpx.get(target, timeout=120).content
            elapsed = time.perf_counter() - t0
            client = "httpx (same process)"
    events = body.count(b"data: ") - (1 if body.endswith(b"data: [DONE]\n\n") else 0)
    return elapsed, events, len(body), client


async def s3_follow(aws: MotoAws, n: int, segment: int) -> tuple[float, int, dict[str, int]]:
    """Seconds for ChatService.follow to read a finished ``n``-chunk deployed log (cold reader)."""
    ddb, s3 = aws.clients(meter=None)
    writer_log = aws.log(ddb, s3)
    # Items straight into moto's backend (DynamoChunkLog's layout), the last one through the adapter.
    count = (n - 1) // segment * segment
    aws.put_log_direct(RUN, [text_delta(i) for i in range(count)], segment)
    tail = [text_delta(count + j) for j in range(n - count)]
    tail[-1] = '{"type":"finish","finishReason":"stop"}'
    writer_log.append(RUN, count, tail, 1)
    aws.meter.reset()
    reader = aws.log(*aws.clients())
    service = ChatService(Runner(ToolLoopAgent(model="demo"), MemoryCheckpointStore(), reader), orchestrator=None)  # type: ignore[arg-type]
    got = 0
    t0 = time.perf_counter()
    async for batch in service.follow(RUN, 0):
        got += len(batch or [])
    elapsed = time.perf_counter() - t0
    reader.close()
    assert got == n, (got, n)
    return elapsed, got, dict(aws.meter.counts())


async def main_async(args: argparse.Namespace) -> None:
    rows: list[list[Any]] = []
    capacity: list[list[Any]] = []
    file_rates: list[float] = []
    n = args.chunks
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        t = await producer_alone(n)
        rows.append(["1. producer loop alone (no writer)", n, "-", "-", n / t])

        for interval in (0.01, 0.1):
            log = CountingLog(FileChunkLog(root / f"file{interval}"))
            t = await through_writer(log, RUN, n, interval)
            assert log.count(RUN) == n
            rate = n / t
            rows.append([f"2. ChunkWriter -> FileChunkLog, flush {interval * 1000:g} ms", n, log.appends,
                         n / log.appends, rate])  # fmt: skip
            file_rates.append(rate)
        for batch in (1, 10, 100):
            p50, rate = append_capacity(FileChunkLog(root / f"cap{batch}"), RUN, batch, 1000 // batch * 3)
            capacity.append(["FileChunkLog", batch, p50, rate])

        with MotoAws() as aws:
            ddb, s3 = aws.clients()
            log = CountingLog(aws.log(ddb, s3))
            t = await through_writer(log, RUN, args.s3_chunks, 0.1)
            rate = args.s3_chunks / t
            rows.append(["3. ChunkWriter -> DynamoChunkLog (moto), flush 100 ms", args.s3_chunks, log.appends,
                         args.s3_chunks / log.appends, rate])  # fmt: skip
            s3_writer_rate = rate
            for batch in (1, 10, 100):
                p50, rate = append_capacity(aws.log(ddb, s3), f"{RUN[:-3]}b{batch:02d}", batch, 300 // batch * 2)
                capacity.append(["DynamoChunkLog (moto)", batch, p50, rate])

        t, count, appends = await runner_end_to_end(root, n)
        rows.append(["4. model -> agent -> runner -> writer -> file log", count, appends, count / appends, count / t])
        e2e_rate = count / t

        t, events, size, client = await asyncio.to_thread(sse_edge, root, n, args.segment)
        assert events == n, (events, n)
        edge_rate = n / t
        rows.append([f"5. SSE edge, finished file log -> {client}", n, "-", "-", edge_rate])

        with MotoAws() as aws:
            t, got, requests = await s3_follow(aws, args.s3_chunks, args.segment)
            rows.append(["6. ChatService.follow over DynamoChunkLog (moto), finished log", got, "-", "-", got / t])
            s3_read_rate = got / t
            s3_reads = requests

    file_rate = min(file_rates)
    print(f"throughput: {machine()}")
    print(f"chunks: ~50-byte text-delta JSON; SSE edge log in {args.segment}-chunk segments, {size:,} bytes of SSE\n")
    print(table(["path", "chunks", "appends", "chunks/append", "chunks/s"], rows))
    print("\nappend capacity without group commit (one append at a time, no ChunkWriter):\n")
    print(table(["log", "chunks per append", "append p50 ms", "chunks/s"], capacity))
    print(
        f"\ndeployed read path requests for {args.s3_chunks:,} chunks: {s3_reads}: each read of 512 chunks is one "
        "Query of up to 513 items (its extra items are cached for the next read)"
    )
    print(f"\ntarget >= {TARGET:,.0f} chunks/s:")
    for name, rate in (
        ("chunk log (file, ChunkWriter)", file_rate),
        ("deployed log under moto (ref.)", s3_writer_rate),
        ("whole durable write path", e2e_rate),
        ("SSE edge (finished file log)", edge_rate),
        ("deployed read path, moto (ref.)", s3_read_rate),
    ):
        print(f"  {name:<31} {verdict(rate >= TARGET, f'{rate:,.0f}/s, x{rate / TARGET:.1f} the target')}")


def main() -> None:
    """Parse the options and run every measurement."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks for the file log, runner and SSE edge")
    parser.add_argument("--s3-chunks", type=int, default=10_000, help="chunks for the deployed log under moto")
    parser.add_argument("--segment", type=int, default=10, help="chunks per segment of the pre-built logs")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
