"""Relay overhead: the durable path (runner, chunk log, chat app, HTTP) against a bare SSE endpoint.

The same model (N text deltas at a fixed interval) is streamed once through the local kit and once
through a minimal ASGI endpoint that writes each chunk straight to the response, side by side in
one run, over real HTTP on loopback. Printed: time to the first body byte and to the first
chunk (request sent -> first text-delta received), per-chunk added latency (delta received -
delta emitted by the model), p50 and p99, the differences and ratios, and the targets (TTFC
within 30 ms of direct at p50; added per-chunk latency p50 <= 20 ms, p99 <= 80 ms).

Each path gets one keep-alive client (as a browser has), and one warm-up turn that is not counted.
The servers set TCP_NODELAY like ``uvicorn --host --port`` does (see ``_common.serve``). The paths
take turns (durable, direct, durable, ...), so a slow moment of the shared machine hits both alike.
After the full turns come ``--ttfc-runs`` short turns (a few deltas each) on the two local paths:
the first chunk does not depend on the rest of the turn, and that many turns keep the TTFC p50
within a few tenths of a millisecond from one run of the script to the next.

Where the first chunk's time goes is printed stage by stage (``_stages.py``: POST received, run
created, lease taken, slice claimed and log opened, the model's first delta, its append, the
commit signal, the follower's read, the ASGI send, the client), for the durable and the direct path.

Two more paths, for reference (no target), are the adapters of the deployed wiring under moto:
DynamoDB checkpoints and chunk log, 100 ms group commit, and a reader that polls every 250 ms (the
ServiceConfig default), then every 50 ms (``--no-deployed`` skips them). ``deployed_wiring.py``
measures the real deployed wiring (template, handlers, Step Functions, its flush and poll).

    .venv/bin/python bench/relay_latency.py [--deltas 200] [--interval-ms 5] [--runs 10] [--ttfc-runs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from typing import Any

import httpx
from _common import MotoAws, machine, median, pct, serve, table, verdict
from _stages import StageProbe
from _targets import LOCAL_ADDED_CHUNK_P50_MS, LOCAL_ADDED_TTFC_MS, report
from durable_harness.agent.loop import ToolLoopAgent
from durable_harness.models.base import ModelRequest, finish
from durable_harness.models.scripted import FunctionModel
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.sse import SSE_DONE, UI_MESSAGE_STREAM_HEADERS, SSEParser
from durable_harness.protocol.translate import StreamTranslator
from durable_harness.protocol.ui_chunks import encode_ui_chunk
from durable_harness.runner.local import LocalOrchestrator
from durable_harness.runner.runner import Runner
from durable_harness.server.app import ChatApp
from durable_harness.server.local import build_local_kit
from durable_harness.server.service import ChatService, ServiceConfig

EMITTED: dict[str, float] = {}
DEPLOYED = "deployed wiring (moto)"
DEPLOYED_50 = "deployed wiring, 50 ms poll"
SHORT = 5
"""Text deltas of a short turn (it times the first chunk: the rest of a turn does not change that)."""


def paced_model(deltas: int, interval: float) -> FunctionModel:
    """A model that emits ``deltas`` text deltas, one every ``interval`` seconds, noting when.

    A prompt ending in ``#N`` gets N deltas instead (the short turns that time the first chunk)."""

    async def steps(request: ModelRequest, index: int) -> AsyncIterator[Any]:
        tag = request.messages[-1].content[0].text  # type: ignore[union-attr]
        count = int(tag.rpartition("#")[2]) if "#" in tag else deltas
        yield hp.TextStartPart(id="t")
        for i in range(count):
            await asyncio.sleep(interval)
            key = f"{tag}:{i}"
            EMITTED[key] = time.perf_counter()
            yield hp.TextDeltaPart(id="t", delta=f"[{key}]")
        yield hp.TextEndPart(id="t")
        yield finish("stop")

    return FunctionModel(steps)


def bare_sse_app(model: FunctionModel) -> Any:
    """The direct path: the model's parts translated and written straight to the response."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (message := await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        from durable_harness.protocol.ui_messages import convert_to_model_messages, parse_ui_messages

        messages = convert_to_model_messages(parse_ui_messages(json.loads(body)["messages"]))
        await send({"type": "http.response.start", "status": 200, "headers": list(UI_MESSAGE_STREAM_HEADERS)})
        translator = StreamTranslator()
        for chunk in translator.start("msg"):
            await send({"type": "http.response.body", "body": _sse(encode_ui_chunk(chunk)), "more_body": True})
        async for part in model.stream(ModelRequest(messages=messages)):
            parts: list[Any] = [part]
            if isinstance(part, hp.FinishPart):  # a model call is one step: close it first
                parts.insert(0, hp.FinishStepPart(finish_reason=part.finish_reason, usage=part.total_usage))
            for chunk in (c for p in parts for c in translator.translate(p)):
                await send({"type": "http.response.body", "body": _sse(encode_ui_chunk(chunk)), "more_body": True})
        await send({"type": "http.response.body", "body": SSE_DONE, "more_body": False})

    return app


def _sse(text: str) -> bytes:
    return b"data: " + text.encode() + b"\n\n"


def deployed_app(model: FunctionModel, aws: MotoAws, poll_seconds: float = 0.25) -> ChatApp:
    """The chat app on the deployed adapters under moto: DynamoDB checkpoints and chunk log, 100 ms
    group commit, no in-process commit signal (the reader polls every ``poll_seconds``), and the
    slices on their own clients (another Lambda)."""
    agent = ToolLoopAgent(model=model)
    chat_ddb, chat_s3 = aws.clients(meter=None)
    slice_ddb, slice_s3 = aws.clients(meter=None)
    chat = Runner(agent, aws.store(chat_ddb, chat_s3), aws.log(chat_ddb, chat_s3), flush_interval=0.1)
    slices = Runner(agent, aws.store(slice_ddb, slice_s3), aws.log(slice_ddb, slice_s3), flush_interval=0.1)
    orchestrator = LocalOrchestrator(slices, slice_seconds=600)
    service = ChatService(chat, orchestrator, config=ServiceConfig(poll_seconds=poll_seconds))
    return ChatApp(service, on_shutdown=orchestrator.aclose)


def measure(
    client: httpx.Client, url: str, tag: str, probe: StageProbe | None = None
) -> tuple[float, float, list[float]]:
    """One turn: (time to the first byte of the body, time to the first text-delta, per-delta
    latency list), in milliseconds. ``probe`` hears when the turn was sent and its first delta came."""
    body = json.dumps({"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": tag}]}]})
    parser, first_byte, first, added = SSEParser(), None, None, []
    sent = time.perf_counter()
    if probe is not None:
        probe.begin(sent)
    with client.stream("POST", f"{url}/api/chat", content=body, timeout=60) as response:
        for raw in response.iter_raw():
            now = time.perf_counter()
            first_byte = first_byte if first_byte is not None else now - sent
            for data in parser.feed(raw):
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if chunk["type"] == "text-delta":
                    if first is None and probe is not None:
                        probe.end(now, EMITTED[chunk["delta"][1:-1]])
                    first = first if first is not None else now - sent
                    added.append(now - EMITTED[chunk["delta"][1:-1]])
    assert first is not None and first_byte is not None
    return first_byte * 1000, first * 1000, [a * 1000 for a in added]


def main() -> None:
    """Run both paths and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=10, help="full turns per path (per-chunk latency, TTFC)")
    parser.add_argument(
        "--ttfc-runs", type=int, default=100,
        help=f"short turns ({SHORT} deltas) per local path, for a steady TTFC p50 (0: none)",
    )  # fmt: skip
    parser.add_argument("--no-deployed", action="store_true", help="skip the deployed wiring under moto")
    parser.add_argument(
        "--data-dir", default=None,
        help="where the local kit's data folder goes (default: the system's temporary folder; /dev/shm shows "
        "what the disk's file creation costs)",
    )  # fmt: skip
    args = parser.parse_args()
    model = paced_model(args.deltas, args.interval_ms / 1000)
    names = ["durable", "direct"] + ([] if args.no_deployed else [DEPLOYED, DEPLOYED_50])
    results: dict[str, tuple[list[float], list[float], list[float]]] = {n: ([], [], []) for n in names}
    probes = {"durable": StageProbe(), "direct": StageProbe()}
    with tempfile.TemporaryDirectory(dir=args.data_dir) as data, MotoAws() as aws, ExitStack() as stack:
        kit = build_local_kit(ToolLoopAgent(model=model), data)
        apps = {
            "durable": probes["durable"].attach(kit),
            "direct": probes["direct"].wrap(bare_sse_app(model)),
            DEPLOYED: deployed_app(model, aws),
            DEPLOYED_50: deployed_app(model, aws, poll_seconds=0.05),
        }
        paths = [(n, stack.enter_context(serve(apps[n])), stack.enter_context(httpx.Client())) for n in names]
        # Full turns, then short ones, each path in turn (interleaved: a slow moment of this shared
        # machine hits both paths alike). The first of each path warms up (connections, imports).
        turns = [(run, "") for run in range(args.runs + 1)] + [(run, f"#{SHORT}") for run in range(args.ttfc_runs)]
        for run, suffix in turns:
            for name, url, client in paths:
                if suffix and name not in probes:
                    continue
                probe = probes.get(name) if run or suffix else None
                first_byte, ttfc, added = measure(client, url, f"{name}{run}{suffix}", probe)
                if run or suffix:
                    results[name][0].append(first_byte)
                    results[name][1].append(ttfc)
                    if not suffix:
                        results[name][2].extend(added)
    print(f"relay_latency: {machine()}")
    print(
        f"{args.runs} turns per path (after one warm-up turn), {args.deltas} text deltas every {args.interval_ms} ms, "
        f"then {args.ttfc_runs} turns of {SHORT} deltas per local path (first byte and TTFC are over all turns), "
        "keep-alive HTTP/1.1 on loopback, local kit (SQLite + file log, 10 ms group commit, burst 2)\n"
    )
    rows = {}
    for name, (bytes_, ttfcs, added) in results.items():
        rows[name] = (median(bytes_), median(ttfcs), pct(added, 0.5), pct(added, 0.99), max(added))
    print(
        table(
            ["path", "first byte p50 ms", "TTFC p50 ms", "per-chunk p50 ms", "per-chunk p99 ms", "max ms"],
            [[name, *row] for name, row in rows.items()],
        )
    )
    d, b = rows["durable"], rows["direct"]
    ttfc_gap, p50_gap, p99_gap = d[1] - b[1], d[2] - b[2], d[3] - b[3]
    print(f"\ndurable - direct: TTFC {ttfc_gap:+.2f} ms, per-chunk p50 {p50_gap:+.2f} ms, p99 {p99_gap:+.2f} ms")
    print(
        f"durable / direct: TTFC x{d[1] / b[1]:.2f}, per-chunk p50 x{d[2] / max(b[2], 1e-9):.1f}, "
        f"p99 x{d[3] / max(b[3], 1e-9):.1f}"
    )
    print(
        "\nwhere the first chunk's time goes (p50 over the turns, ms since the request was sent / since the stage "
        "before; the durable path's model starts later, so its first delta comes later too):"
    )
    for name, probe in probes.items():
        print(f"\n{name}:\n" + table(["stage", "at", "step"], probe.table_rows(median)))
    if DEPLOYED in rows:
        print(
            f"\n{DEPLOYED}: reference, no target. The reader polls the log every 250 ms (ServiceConfig default) "
            "or when the next flush is due, and the writer flushes every 100 ms; the last row is the same with "
            "ServiceConfig(poll_seconds=0.05). moto answers in a few ms, as DynamoDB does, so on AWS add the "
            "Function URL's, Step Functions' and the slice's start (bench/deployed_wiring.py measures those)."
        )
    print("\ntargets (local, p50):")
    print(f"  TTFC within 30 ms of direct: {verdict(ttfc_gap <= 30, f'{ttfc_gap:+.1f} ms')}")
    print(f"  added per-chunk latency p50 <= 20 ms: {verdict(p50_gap <= 20, f'{p50_gap:.1f} ms')}")
    print(f"  added per-chunk latency p99 <= 80 ms: {verdict(p99_gap <= 80, f'{p99_gap:.1f} ms')}")
    stages = ", ".join(f"{label} +{step:.1f}" for label, _, step in probes["durable"].table_rows(median))
    report("local.ttfc", f"{ttfc_gap:+.1f} ms (durable {d[1]:.1f}, direct {b[1]:.1f})", ttfc_gap <= LOCAL_ADDED_TTFC_MS,
           f"the durable first chunk's stages, ms p50 since the stage before: {stages}")  # fmt: skip
    report("local.chunk_latency.p50", f"{p50_gap:+.1f} ms (durable {d[2]:.2f}, direct {b[2]:.3f})",
           p50_gap <= LOCAL_ADDED_CHUNK_P50_MS,
           f"a chunk after the first waits for its group commit (the local writer's pace) and the follower's "
           f"wake-up; per-chunk p99 durable {d[3]:.2f} against direct {b[3]:.3f} ms; first chunk's stages: "
           f"{stages}")  # fmt: skip


if __name__ == "__main__":
    main()
