"""Tool isolation: an unrelated turn's time to first chunk while slow sync tools run.

A "hello" turn (a text reply, no tools) is timed over real HTTP on loopback against the local kit,
first with nothing else running, then while ``--slow`` other runs each have a sync tool sleeping
``--tool-seconds``. Two setups, side by side in one run: the tool pool of its own (``TOOL_THREADS``,
what the kit does) and, for comparison, tools on asyncio's default executor, which storage and
everything else use too (what the kit did before; ``min(32, cpus + 4)`` threads).
Printed: TTFC (request sent -> first text-delta) p50 and max per case, and the target: with
``--slow`` tools running, TTFC on the tool pool within 50 ms of idle (p50).

    .venv/bin/python bench/tool_isolation.py [--slow 6] [--tool-seconds 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from _common import machine, median, serve, table, verdict
from durable_harness import Agent, tool
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, text_step, tool_calls_step
from durable_harness.protocol.sse import SSEParser
from durable_harness.server.local import build_local_kit
from durable_harness.tools import definition as tools_module  # where a sync tool calls run_in_tool_thread
from durable_harness.tools.pool import set_tool_threads, tool_threads
from pydantic import BaseModel


class Empty(BaseModel):
    pass


def make_agent(tool_seconds: float, started: threading.Semaphore) -> Agent:
    @tool
    def crunch(input: Empty) -> str:
        """Work for a while."""
        started.release()
        time.sleep(tool_seconds)
        return "done"

    def script(request: ModelRequest, step: int) -> list[ModelStreamPart]:
        last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        prompt = " ".join(p.text for p in last.content if isinstance(p, TextPart))
        if prompt.startswith("slow") and step == 0:
            return tool_calls_step(("c1", "crunch", {}))
        return text_step(f"Reply to {prompt}.")

    return Agent(model=FunctionModel(script), tools=[crunch])


def ttfc(client: httpx.Client, url: str, text: str) -> float:
    """Seconds from sending the POST to receiving its first text-delta (the stream is read to the end)."""
    body = json.dumps({"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]})
    parser, first = SSEParser(), 0.0
    began = time.perf_counter()
    with client.stream("POST", f"{url}/api/chat", content=body, timeout=120) as response:
        for raw in response.iter_raw():
            for data in parser.feed(raw):
                if not first and data != "[DONE]" and json.loads(data)["type"] == "text-delta":
                    first = time.perf_counter() - began
    return first


@contextmanager
def shared_pool() -> Iterator[None]:
    """Run sync tools on asyncio's default executor, as the kit did before it had a tool pool."""
    original = tools_module.run_in_tool_thread

    async def on_default_executor(function: Any, *args: Any) -> Any:
        return await asyncio.to_thread(function, *args)

    tools_module.run_in_tool_thread = on_default_executor  # type: ignore[assignment]
    try:
        yield
    finally:
        tools_module.run_in_tool_thread = original


def measure(setup: str, slow: int, tool_seconds: float, runs: int) -> dict[str, list[float]]:
    started = threading.Semaphore(0)
    results: dict[str, list[float]] = {"idle": [], "busy": []}
    with tempfile.TemporaryDirectory() as data:
        kit = build_local_kit(make_agent(tool_seconds, started), data, static_dir=None)
        with serve(kit.app) as url, httpx.Client() as client:
            ttfc(client, url, "warm-up")
            for run in range(runs):
                results["idle"].append(ttfc(client, url, f"hello idle {setup} {run}"))
                threads = [
                    threading.Thread(target=ttfc, args=(httpx.Client(), url, f"slow {setup} {run} {i}"))
                    for i in range(slow)
                ]
                for thread in threads:
                    thread.start()
                for _ in range(min(slow, tool_threads() if setup == "tool pool" else slow)):
                    started.acquire(timeout=30)  # the slow tools that can run at once are running
                results["busy"].append(ttfc(client, url, f"hello busy {setup} {run}"))
                for thread in threads:
                    thread.join()
    return results


def main() -> None:
    """Measure both setups and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow", type=int, default=6, help="slow tools running during the timed turn")
    parser.add_argument("--tool-seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    set_tool_threads(max(args.slow, tool_threads()))
    figures = {"tool pool": measure("tool pool", args.slow, args.tool_seconds, args.runs)}
    with shared_pool():
        figures["shared default executor"] = measure("shared", args.slow, args.tool_seconds, args.runs)
    print(f"tool_isolation: {machine()}")
    print(
        f"{args.runs} timed 'hello' turns per case; busy = while {args.slow} other runs each have a sync tool "
        f"sleeping {args.tool_seconds} s; tool pool of {tool_threads()} threads\n"
    )
    rows = []
    for setup, cases in figures.items():
        for case, values in cases.items():
            rows.append([setup, case, median(values) * 1000, max(values) * 1000])
    print(table(["tools run on", "case", "TTFC p50 ms", "TTFC max ms"], rows))
    pool = figures["tool pool"]
    added = (median(pool["busy"]) - median(pool["idle"])) * 1000
    shared = figures["shared default executor"]
    before = (median(shared["busy"]) - median(shared["idle"])) * 1000
    print(
        "\ntarget: TTFC with slow tools within 50 ms of idle (p50), tool pool: "
        + verdict(added <= 50, f"{added:+.1f} ms; on the shared executor {before:+.0f} ms")
    )


if __name__ == "__main__":
    main()
