"""Relay overhead: the durable path (runner, chunk log, chat app, HTTP) against a bare SSE endpoint.

The same model (N text deltas at a fixed interval) is streamed once through the local kit and once
through a minimal ASGI endpoint that writes each chunk straight to the response, side by side in
one run, over real HTTP on loopback. Printed: time to first chunk (request sent -> first
text-delta received) and per-chunk added latency (delta received - delta emitted by the model),
p50 and p99, and the ratios.

    .venv/bin/python bench/relay_latency.py [--deltas 200] [--interval-ms 5] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from durable_harness.agent.loop import ToolLoopAgent
from durable_harness.models.base import ModelRequest, finish
from durable_harness.models.scripted import FunctionModel
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.sse import SSE_DONE, UI_MESSAGE_STREAM_HEADERS, SSEParser
from durable_harness.protocol.translate import StreamTranslator
from durable_harness.protocol.ui_chunks import encode_ui_chunk
from durable_harness.server.local import build_local_kit

from tests.support import serve

EMITTED: dict[str, float] = {}


def paced_model(deltas: int, interval: float) -> FunctionModel:
    """A model that emits ``deltas`` text deltas, one every ``interval`` seconds, noting when."""

    async def steps(request: ModelRequest, index: int) -> AsyncIterator[Any]:
        tag = request.messages[-1].content[0].text  # type: ignore[union-attr]
        yield hp.TextStartPart(id="t")
        for i in range(deltas):
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


def measure(url: str, tag: str) -> tuple[float, list[float]]:
    """One turn: (time to first text-delta, per-delta latency list), in milliseconds."""
    body = json.dumps({"messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": tag}]}]})
    parser, first, added = SSEParser(), None, []
    sent = time.perf_counter()
    with httpx.stream("POST", f"{url}/api/chat", content=body, timeout=60) as response:
        for raw in response.iter_raw():
            now = time.perf_counter()
            for data in parser.feed(raw):
                chunk = json.loads(data)
                if chunk["type"] == "text-delta":
                    first = first if first is not None else now - sent
                    added.append(now - EMITTED[chunk["delta"][1:-1]])
    assert first is not None
    return first * 1000, [a * 1000 for a in added]


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    """Run both paths and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deltas", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    model = paced_model(args.deltas, args.interval_ms / 1000)
    results: dict[str, tuple[list[float], list[float]]] = {"durable": ([], []), "direct": ([], [])}
    with tempfile.TemporaryDirectory() as data:
        kit = build_local_kit(ToolLoopAgent(model=model), data)
        with serve(kit.app) as durable_url, serve(bare_sse_app(model)) as direct_url:  # type: ignore[arg-type]
            for run in range(args.runs + 1):  # the first run of each warms up
                for name, url in (("durable", durable_url), ("direct", direct_url)):
                    ttfc, added = measure(url, f"{name}{run}")
                    if run:
                        results[name][0].append(ttfc)
                        results[name][1].extend(added)
    print(f"{args.runs} turns per path, {args.deltas} deltas every {args.interval_ms} ms, loopback HTTP")
    print(f"{'path':<8} {'TTFC p50 ms':>12} {'added p50 ms':>13} {'added p99 ms':>13}")
    rows = {}
    for name, (ttfcs, added) in results.items():
        rows[name] = (statistics.median(ttfcs), pct(added, 0.5), pct(added, 0.99))
        print(f"{name:<8} {rows[name][0]:>12.2f} {rows[name][1]:>13.2f} {rows[name][2]:>13.2f}")
    d, b = rows["durable"], rows["direct"]
    print(
        f"durable - direct: TTFC {d[0] - b[0]:+.2f} ms, per-chunk p50 {d[1] - b[1]:+.2f} ms, p99 {d[2] - b[2]:+.2f} ms"
    )
    print(f"durable / direct: TTFC x{d[0] / b[0]:.2f}, per-chunk p50 x{d[1] / max(b[1], 1e-9):.2f}")


if __name__ == "__main__":
    main()
